//! A top-N partitioned by a watermarked window (`PARTITION BY window_end`
//! or `window_start` of TUMBLE / HOP): each partition ends with its window,
//! so once the watermark passes the window's end the partition is done —
//! its state is dropped (and, under EMIT ON WINDOW CLOSE, its ranked rows
//! are emitted then, once). Rows arriving for a window already ended are
//! late and dropped, as a windowed aggregate drops them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, Int64Array};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::Result;
use crate::stream::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use crate::stream::time_columns::nanoseconds;

/// Which column ends a row's partition: `window_end`, or `window_start`
/// plus the window's size.
#[derive(Clone)]
pub struct PartitionWindow {
    pub column: Arc<dyn PhysicalExpr>,
    pub plus_ns: i64,
}

/// The partitions still open, by the end of their window.
pub struct PartitionEnds {
    window: PartitionWindow,
    by_end: BTreeMap<i64, Vec<Box<[u8]>>>,
    ends: HashMap<Box<[u8]>, i64>,
    /// Partitions whose end was noted or dropped since the last checkpoint.
    changed: HashMap<Box<[u8]>, Option<i64>>,
    /// What the write group running now did: ends it noted, and the
    /// partitions it ended with their ends.
    noted: Vec<Box<[u8]>>,
    ended: Vec<(Box<[u8]>, i64)>,
}

const END_PREFIX: &[u8] = b"end/";

impl PartitionEnds {
    pub fn new(window: PartitionWindow) -> Self {
        PartitionEnds {
            window,
            by_end: BTreeMap::new(),
            ends: HashMap::new(),
            changed: HashMap::new(),
            noted: Vec::new(),
            ended: Vec::new(),
        }
    }

    /// The end of each row's window (NULL: never ends).
    pub fn row_ends(&self, batch: &RecordBatch) -> Result<Int64Array> {
        let column = self
            .window
            .column
            .evaluate(batch)?
            .into_array(batch.num_rows())?;
        let nanoseconds = nanoseconds(&column)?;
        Ok(nanoseconds
            .iter()
            .map(|time| time.map(|time| time.saturating_add(self.window.plus_ns)))
            .collect())
    }

    /// Rows whose window ended before they came (at `watermark`): late.
    pub fn on_time(ends: &Int64Array, watermarks: impl Fn(usize) -> Option<i64>) -> BooleanArray {
        (0..ends.len())
            .map(|row| {
                let late = ends.is_valid(row)
                    && watermarks(row).is_some_and(|watermark| ends.value(row) <= watermark);
                Some(!late)
            })
            .collect()
    }

    /// Notes that partition `key` ends at `end`.
    pub fn note(&mut self, key: &[u8], end: i64) {
        if self.ends.contains_key(key) {
            return;
        }
        self.ends.insert(key.into(), end);
        self.by_end.entry(end).or_default().push(key.into());
        self.changed.insert(key.into(), Some(end));
        self.noted.push(key.into());
    }

    /// The write group committed.
    pub fn commit(&mut self) {
        self.noted.clear();
        self.ended.clear();
    }

    /// The write group failed: the ends it noted go, those it took out
    /// come back.
    pub fn rollback(&mut self) {
        for key in std::mem::take(&mut self.noted) {
            if let Some(end) = self.ends.remove(&key) {
                if let Some(keys) = self.by_end.get_mut(&end) {
                    keys.retain(|noted| *noted != key);
                    if keys.is_empty() {
                        self.by_end.remove(&end);
                    }
                }
            }
            self.changed.insert(key, None);
        }
        for (key, end) in std::mem::take(&mut self.ended) {
            self.ends.insert(key.clone(), end);
            self.by_end.entry(end).or_default().push(key.clone());
            self.changed.insert(key, Some(end));
        }
    }

    /// Takes out the partitions whose window the watermark has passed.
    pub fn ended(&mut self, watermark: i64) -> Vec<Box<[u8]>> {
        let open = self.by_end.split_off(&watermark.saturating_add(1));
        let ended: Vec<Box<[u8]>> = std::mem::replace(&mut self.by_end, open)
            .into_values()
            .flatten()
            .collect();
        for key in &ended {
            if let Some(end) = self.ends.remove(key) {
                self.ended.push((key.clone(), end));
            }
            self.changed.insert(key.clone(), None);
        }
        ended
    }

    pub fn checkpoint(&mut self, state: &mut StateWriter) {
        for (key, end) in self.changed.drain() {
            let name = [END_PREFIX, &key].concat();
            match end {
                Some(end) => state.put(&name, encode_i64(end)),
                None => state.delete(&name),
            }
        }
    }

    pub fn restore(&mut self, state: &StateReader) {
        for (name, value) in state.with_prefix(END_PREFIX) {
            if let Some(end) = decode_i64(value) {
                self.note(&name[END_PREFIX.len()..], end);
            }
        }
        self.changed.clear();
        self.noted.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_state, stored_state};
    use datafusion::physical_expr::expressions::Column;

    fn ends() -> PartitionEnds {
        PartitionEnds::new(PartitionWindow {
            column: Arc::new(Column::new("window_start", 0)),
            plus_ns: 10,
        })
    }

    #[test]
    fn partitions_end_with_their_window_and_come_back_from_a_checkpoint() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut partitions = ends();
        partitions.note(b"a", 10);
        partitions.note(b"b", 20);
        partitions.note(b"a", 99);
        commit_state(&store, |state| partitions.checkpoint(state));
        assert_eq!(partitions.ended(9), Vec::<Box<[u8]>>::new());
        assert_eq!(
            partitions.ended(10),
            vec![Box::from(&b"a"[..])],
            "the first end noted counts"
        );
        commit_state(&store, |state| partitions.checkpoint(state));
        let mut restored = ends();
        restored.restore(&stored_state(&store));
        assert_eq!(restored.ended(i64::MAX), vec![Box::from(&b"b"[..])]);
        let late =
            PartitionEnds::on_time(&Int64Array::from(vec![Some(10), Some(11), None]), |_| {
                Some(10)
            });
        assert_eq!(late, BooleanArray::from(vec![false, true, true]));
    }

    #[test]
    fn a_rolled_back_group_takes_its_ends_back_and_puts_the_ended_back() {
        let mut partitions = ends();
        partitions.note(b"a", 10);
        partitions.commit();
        partitions.note(b"b", 20);
        assert_eq!(partitions.ended(15), vec![Box::from(&b"a"[..])]);
        partitions.rollback();
        assert_eq!(partitions.ends.len(), 1);
        assert_eq!(partitions.ended(i64::MAX), vec![Box::from(&b"a"[..])]);
    }
}
