//! The append-only layout of a view's rows: a view that never retracts a
//! row (EMIT ON WINDOW CLOSE without `late_data = 'update'`, filters and
//! projections of append-only inputs, side outputs) stores each applied
//! chunk as one Arrow batch under the next sequence number. A change costs
//! one encode per chunk instead of a read and a write per row, and a query
//! reads whole batches in the order the rows were emitted.
//!
//! Small chunks (a single-row INSERT's) would make many tiny entries, each
//! with its own schema message: while the last entry has fewer than
//! `SMALL_ENTRY_ROWS` rows, the next chunk is appended to it and the entry
//! rewritten under the same number. So committed entries never change
//! except the last one, which only grows at its end; a reader needs the
//! count of entries and the committed rows of the last one at its start.
//! Entries past the count, or rows past the last entry's committed rows,
//! may be garbage left by a statement that spilled and then failed; the
//! next commit overwrites them and nobody reads them before that.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;

use super::{encode_head, view_head_key, view_rows_prefix, RowLayout, ViewHead, ViewResult};
use crate::error::{Result, WeirError};
use crate::state::batch_codec::{decode_batches_projected, encode_batch};
use crate::state::{Entries, StateStore, WriteBatch};
use crate::stream::message::Chunk;

/// An entry with fewer rows takes the next chunk's rows too.
const SMALL_ENTRY_ROWS: usize = 128;

/// What a log reader needs: the committed entries, and how many rows of
/// the last one are committed (None: all).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogPosition {
    pub entries: u64,
    pub last_entry_rows: Option<u64>,
}

/// The key of entry `sequence` of the view's log.
pub(super) fn entry_key(view_id: u64, sequence: u64) -> Vec<u8> {
    let mut key = view_rows_prefix(view_id);
    key.extend_from_slice(&sequence.to_be_bytes());
    key
}

impl ViewResult {
    /// Stages `chunk` as the log's next entry; returns the entry and the
    /// head that commits it.
    pub(super) fn apply_log(&self, chunk: &Chunk) -> Result<WriteBatch> {
        if let Some(diffs) = &chunk.diffs {
            if diffs.values().iter().any(|&diff| diff != 1) {
                return Err(WeirError::internal(format!(
                    "append-only materialized view {} received a retraction",
                    self.id
                )));
            }
        }
        let rows = RecordBatch::try_new(self.schema.clone(), chunk.rows.columns().to_vec())?;
        let position = self.log_position();
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let next = position.entries + staged.entries;
        // The entry to append to: this statement's last, or the committed
        // last one while it is small.
        let tail = staged.tail.take().or_else(|| {
            let committed = self.log_tail.lock().unwrap_or_else(|p| p.into_inner());
            committed.clone().map(|rows| (next - 1, rows))
        });
        let (sequence, entry) = match tail {
            Some((sequence, tail)) if tail.num_rows() < SMALL_ENTRY_ROWS => {
                (sequence, concat_batches(&self.schema, [&tail, &rows])?)
            }
            _ => {
                staged.entries += 1;
                (next, rows)
            }
        };
        staged.total += chunk.num_rows() as i64;
        staged.changed = true;
        let mut writes = WriteBatch::new();
        let value = encode_batch(&entry)?;
        if entry.num_rows() < SMALL_ENTRY_ROWS {
            // Rewritten as it grows: kept in the tree, not the value log.
            writes.put(entry_key(self.id, sequence), value);
        } else {
            writes.put_log(entry_key(self.id, sequence), value);
        }
        let head = ViewHead {
            rows: self.total_rows.load(Ordering::Acquire) + staged.total,
            layout: RowLayout::Log,
            entries: position.entries + staged.entries,
            last_entry_rows: Some(entry.num_rows() as u64),
            ..ViewHead::default()
        };
        staged.tail = Some((sequence, entry));
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(writes)
    }

    pub(super) fn log_position(&self) -> LogPosition {
        *lock(&self.log_position)
    }

    /// A statement's log entries are committed.
    pub(super) fn publish_log(&self, entries: u64, tail: Option<(u64, RecordBatch)>) {
        let mut position = lock(&self.log_position);
        position.entries += entries;
        if let Some((_, rows)) = &tail {
            position.last_entry_rows = Some(rows.num_rows() as u64);
        }
        let small = tail.filter(|(_, rows)| rows.num_rows() < SMALL_ENTRY_ROWS);
        *lock(&self.log_tail) = small.map(|(_, rows)| rows);
    }
}

/// The committed rows of the last entry when it is small enough to take
/// more: read on open, so that the next chunk rewrites it (dropping rows a
/// failed statement may have left after the committed ones) instead of
/// leaving it behind a new entry, where readers would read it whole.
pub(super) fn load_tail(
    store: &dyn StateStore,
    view_id: u64,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    position: LogPosition,
) -> Result<Option<RecordBatch>> {
    let Some(rows) = position
        .last_entry_rows
        .filter(|&r| (r as usize) < SMALL_ENTRY_ROWS)
    else {
        return Ok(None);
    };
    if position.entries == 0 {
        return Ok(None);
    }
    let Some(value) = store.get(&entry_key(view_id, position.entries - 1))? else {
        return Err(WeirError::new(
            crate::error::sqlstate::DATA_CORRUPTED,
            format!("materialized view {view_id}: its last stored rows are missing"),
        ));
    };
    let batches = decode_batches_projected(&value, "a materialized view's stored rows", None)?;
    let kept = first_rows(batches, rows as usize);
    Ok(Some(concat_batches(schema, &kept)?))
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The committed entries of a view's log, decoded one entry at a time.
pub struct LogBatches {
    entries: Entries,
    projection: Option<Vec<usize>>,
    decoded: std::vec::IntoIter<RecordBatch>,
    last_key: Vec<u8>,
    last_entry_rows: Option<u64>,
}

impl LogBatches {
    pub(super) fn new(
        store: &Arc<dyn StateStore>,
        view_id: u64,
        position: LogPosition,
        projection: Option<Vec<usize>>,
    ) -> Self {
        LogBatches {
            entries: store.scan_range(
                &entry_key(view_id, 0),
                &entry_key(view_id, position.entries),
            ),
            projection,
            decoded: Vec::new().into_iter(),
            last_key: entry_key(view_id, position.entries.saturating_sub(1)),
            last_entry_rows: position.last_entry_rows,
        }
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.decoded.next() {
                return Ok(Some(batch));
            }
            let Some(entry) = self.entries.next() else {
                return Ok(None);
            };
            let (key, value) = entry?;
            let mut batches = decode_batches_projected(
                &value,
                "a materialized view's stored rows",
                self.projection.as_deref(),
            )?;
            if key == self.last_key {
                if let Some(rows) = self.last_entry_rows {
                    batches = first_rows(batches, rows as usize);
                }
            }
            self.decoded = batches.into_iter();
        }
    }
}

/// The first `rows` rows of `batches`.
fn first_rows(batches: Vec<RecordBatch>, mut rows: usize) -> Vec<RecordBatch> {
    let mut kept = Vec::new();
    for batch in batches {
        if rows == 0 {
            break;
        }
        let take = batch.num_rows().min(rows);
        rows -= take;
        kept.push(batch.slice(0, take));
    }
    kept
}

impl Iterator for LogBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.next_batch().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn schema() -> datafusion::arrow::datatypes::SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("window_end", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
        ]))
    }

    fn inserts(ends: &[i64], counts: &[i64]) -> Chunk {
        let rows = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(ends.to_vec())),
                Arc::new(Int64Array::from(counts.to_vec())),
            ],
        )
        .unwrap();
        Chunk::inserts(rows)
    }

    fn store() -> (tempfile::TempDir, Arc<dyn StateStore>) {
        let directory = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
        (directory, store)
    }

    fn column(result: &ViewResult, projection: Option<Vec<usize>>) -> (usize, Vec<i64>) {
        let mut rows = 0;
        let mut values = Vec::new();
        for batch in result.rows(projection).unwrap().read().unwrap() {
            let batch = batch.unwrap();
            rows += batch.num_rows();
            if batch.num_columns() > 0 {
                values.extend(batch.column(0).as_primitive::<Int64Type>().values());
            }
        }
        (rows, values)
    }

    fn commit(result: &ViewResult, store: &Arc<dyn StateStore>, chunk: &Chunk) {
        store.commit(result.apply(chunk).unwrap()).unwrap();
        result.publish();
    }

    #[test]
    fn entries_read_back_in_emit_order_after_reopening() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        store.commit(result.head_write().unwrap()).unwrap();
        commit(&result, &store, &inserts(&[30, 10], &[1, 2]));
        commit(&result, &store, &inserts(&[20], &[3]));
        assert_eq!(column(&result, None), (3, vec![30, 10, 20]));
        // Asked for a multiset now (as a re-planned view might be), the
        // stored head keeps it a log.
        let reopened = ViewResult::open(7, schema(), RowLayout::Multiset, store.clone()).unwrap();
        assert_eq!(reopened.layout(), &RowLayout::Log);
        assert_eq!(reopened.row_count(), 3);
        assert_eq!(column(&reopened, Some(vec![1])), (3, vec![1, 2, 3]));
        assert_eq!(column(&reopened, Some(vec![])).0, 3, "count(*) reads rows");
    }

    #[test]
    fn a_retraction_is_refused() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store).unwrap();
        let mut chunk = inserts(&[10], &[1]);
        chunk.diffs = Some(Int64Array::from(vec![-1]));
        let error = result.apply(&chunk).unwrap_err();
        assert!(error.message.contains("retraction"), "{}", error.message);
    }

    #[test]
    fn readers_see_committed_entries_only() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        commit(&result, &store, &inserts(&[10], &[1]));
        let reading = result.rows(None).unwrap().read().unwrap();
        // A spilled statement that fails leaves an entry past the count.
        assert_eq!(result.reserve().unwrap().map(|w| w.len()), None);
        let mut spilled = result.apply(&inserts(&[99], &[99])).unwrap();
        store
            .stage(spilled.split_off_prefix(&view_rows_prefix(7)))
            .unwrap();
        result.discard();
        commit(&result, &store, &inserts(&[20], &[2]));
        let seen: usize = reading.map(|batch| batch.unwrap().num_rows()).sum();
        assert_eq!(seen, 1, "the reader started before the second commit");
        assert_eq!(column(&result, None), (2, vec![10, 20]));
        let reopened = ViewResult::open(7, schema(), RowLayout::Log, store).unwrap();
        assert_eq!(column(&reopened, None), (2, vec![10, 20]));
    }

    fn entries_stored(store: &Arc<dyn StateStore>) -> usize {
        store.scan_prefix(&view_rows_prefix(7)).unwrap().len()
    }

    #[test]
    fn small_chunks_share_an_entry_and_readers_see_their_commit() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        for n in 0..300 {
            commit(&result, &store, &inserts(&[n], &[n]));
        }
        assert_eq!(entries_stored(&store), 3, "128 + 128 + 44 rows");
        let reading = result.rows(None).unwrap().read().unwrap();
        commit(&result, &store, &inserts(&[300], &[300]));
        let seen: usize = reading.map(|batch| batch.unwrap().num_rows()).sum();
        assert_eq!(seen, 300, "the tail grew after the read began");
        let expected: Vec<i64> = (0..=300).collect();
        assert_eq!(column(&result, None), (301, expected.clone()));
        let reopened = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        assert_eq!(column(&reopened, Some(vec![1])), (301, expected));
    }

    #[test]
    fn rows_a_failed_statement_added_to_the_tail_are_never_read() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        commit(&result, &store, &inserts(&[1], &[1]));
        // A big statement spills its rewrite of the tail, then fails.
        let mut spilled = result.apply(&inserts(&[99, 98], &[99, 98])).unwrap();
        store
            .stage(spilled.split_off_prefix(&view_rows_prefix(7)))
            .unwrap();
        result.discard();
        assert_eq!(column(&result, None), (1, vec![1]));
        // After a restart the next rows rewrite the tail without them.
        let reopened = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        assert_eq!(column(&reopened, None), (1, vec![1]));
        for n in 2..200 {
            commit(&reopened, &store, &inserts(&[n], &[n]));
        }
        let expected: Vec<i64> = (1..200).collect();
        assert_eq!(column(&reopened, None), (199, expected));
    }
}
