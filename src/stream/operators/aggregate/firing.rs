//! `EMIT EVERY`: an aggregate whose changes wait for the next firing. Each
//! group changed since the last firing is remembered once, with the row it
//! showed then (none if it showed nothing); a firing publishes, per such
//! group, the retraction of that row and the group's row now — so however
//! many rows a group took between firings, readers see one change, and a
//! group that ended where it started shows nothing.
//!
//! The row shown at the last firing is the group's value when it is first
//! touched after that firing: nothing changed it in between. The pending
//! groups are operator state: they are checkpointed (one Arrow batch) so a
//! restore publishes at the next firing exactly what a run without the
//! restart would have.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_empty_array, ArrayRef, AsArray, BinaryArray, BooleanArray, Int64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;

use super::calls::evaluate;
use super::{AggregateOperator, Emitted};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::batch_codec::{decode_batches, encode_batch};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::operator::Output;

/// The checkpoint entry of an aggregate's pending groups.
const PENDING_ENTRY: &[u8] = b"pending";

/// A pending group's map entry and bookkeeping besides its key and row.
const PENDING_OVERHEAD_BYTES: usize = 64;

/// A group: its window end and key (row format).
pub type GroupId = (i64, Vec<u8>);

/// Groups changed since the last firing, each with the row it showed then.
#[derive(Debug, Default)]
pub struct PendingGroups {
    shown: BTreeMap<GroupId, Option<Vec<ScalarValue>>>,
    /// Whether `shown` changed since the last checkpoint.
    dirty: bool,
    /// What the write group running now did to `shown`, in order.
    undo: Vec<PendingChange>,
}

/// A change to the pending groups, to undo a failed write group.
#[derive(Debug)]
enum PendingChange {
    Noted(GroupId),
    Taken(Vec<(GroupId, Option<Vec<ScalarValue>>)>),
}

impl PendingGroups {
    pub fn contains(&self, end: i64, key: &[u8]) -> bool {
        self.shown.contains_key(&(end, key.to_vec()))
    }

    /// Notes that a group is about to change; `shown` is its row now (what
    /// the last firing published), asked only the first time.
    pub fn note(
        &mut self,
        end: i64,
        key: &[u8],
        shown: impl FnOnce() -> Result<Option<Vec<ScalarValue>>>,
    ) -> Result<()> {
        if self.contains(end, key) {
            return Ok(());
        }
        self.shown.insert((end, key.to_vec()), shown()?);
        self.undo.push(PendingChange::Noted((end, key.to_vec())));
        self.dirty = true;
        Ok(())
    }

    /// The write group committed.
    pub fn commit(&mut self) {
        self.undo.clear();
    }

    /// The write group failed: groups it noted go, those its firings or
    /// closing windows took come back, last change first.
    pub fn rollback(&mut self) {
        for change in std::mem::take(&mut self.undo).into_iter().rev() {
            match change {
                PendingChange::Noted(group) => {
                    self.shown.remove(&group);
                }
                PendingChange::Taken(groups) => self.shown.extend(groups),
            }
        }
        self.dirty = true;
    }

    /// What the pending groups take in memory, roughly.
    pub fn memory_bytes(&self) -> usize {
        self.shown
            .iter()
            .map(|((_, key), row)| {
                let values: usize = row.iter().flatten().map(ScalarValue::size).sum();
                key.capacity() + values + PENDING_OVERHEAD_BYTES
            })
            .sum()
    }

    /// Takes every pending group, in (window end, key) order.
    pub fn take_all(&mut self) -> Vec<(GroupId, Option<Vec<ScalarValue>>)> {
        self.dirty |= !self.shown.is_empty();
        let taken: Vec<_> = std::mem::take(&mut self.shown).into_iter().collect();
        self.undo.push(PendingChange::Taken(taken.clone()));
        taken
    }

    /// Takes the pending groups of windows ending at or before `end`.
    pub fn take_ending_by(&mut self, end: i64) -> Vec<(GroupId, Option<Vec<ScalarValue>>)> {
        self.take_ending_between(i64::MIN, end)
    }

    /// Takes the pending groups of windows ending after `after`, up to
    /// and including `end`; the others stay.
    pub fn take_ending_between(
        &mut self,
        after: i64,
        end: i64,
    ) -> Vec<(GroupId, Option<Vec<ScalarValue>>)> {
        if after >= end {
            return Vec::new();
        }
        let mut taken = self.shown.split_off(&(after.saturating_add(1), Vec::new()));
        let mut later = taken.split_off(&(end.saturating_add(1), Vec::new()));
        self.shown.append(&mut later);
        self.dirty |= !taken.is_empty();
        let taken: Vec<_> = taken.into_iter().collect();
        if !taken.is_empty() {
            self.undo.push(PendingChange::Taken(taken.clone()));
        }
        taken
    }

    /// The pending groups as a checkpoint entry, when they changed since
    /// the last one. `value_types` are the aggregate's output value types.
    pub fn checkpoint(&mut self, value_types: &[DataType]) -> Result<Option<Vec<u8>>> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(None);
        }
        let ends = Int64Array::from_iter_values(self.shown.keys().map(|(end, _)| *end));
        let keys = BinaryArray::from_iter_values(self.shown.keys().map(|(_, key)| key));
        let shown = BooleanArray::from_iter(self.shown.values().map(|row| Some(row.is_some())));
        let mut fields = vec![
            Field::new("end", DataType::Int64, false),
            Field::new("key", DataType::Binary, false),
            Field::new("shown", DataType::Boolean, false),
        ];
        let mut columns: Vec<ArrayRef> = vec![Arc::new(ends), Arc::new(keys), Arc::new(shown)];
        for (index, data_type) in value_types.iter().enumerate() {
            let null = ScalarValue::try_from(data_type)?;
            let values = self.shown.values().map(|row| match row {
                Some(row) => row[index].cast_to(data_type),
                None => Ok(null.clone()),
            });
            let values = values.collect::<datafusion::error::Result<Vec<_>>>()?;
            // Taken by a firing since the last checkpoint: none left.
            let column = match values.is_empty() {
                true => new_empty_array(data_type),
                false => ScalarValue::iter_to_array(values)?,
            };
            fields.push(Field::new(
                format!("value_{index}"),
                data_type.clone(),
                true,
            ));
            columns.push(column);
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        Ok(Some(encode_batch(&batch)?))
    }

    /// The pending groups a checkpoint entry holds.
    pub fn restore(value: &[u8], value_types: &[DataType]) -> Result<Self> {
        let mut pending = PendingGroups::default();
        for batch in decode_batches(value, "an aggregate's pending firing")? {
            let damaged = || {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    "an aggregate's pending firing does not match the view",
                )
            };
            if batch.num_columns() != 3 + value_types.len() {
                return Err(damaged());
            }
            let ends = batch
                .column(0)
                .as_primitive_opt::<datafusion::arrow::datatypes::Int64Type>();
            let keys = batch.column(1).as_binary_opt::<i32>();
            let shown = batch.column(2).as_boolean_opt();
            let (Some(ends), Some(keys), Some(shown)) = (ends, keys, shown) else {
                return Err(damaged());
            };
            for row in 0..batch.num_rows() {
                let values = shown
                    .value(row)
                    .then(|| {
                        (3..batch.num_columns())
                            .map(|column| ScalarValue::try_from_array(batch.column(column), row))
                            .collect::<datafusion::error::Result<Vec<_>>>()
                    })
                    .transpose()?;
                let group = (ends.value(row), keys.value(row).to_vec());
                pending.shown.insert(group, values);
            }
        }
        Ok(pending)
    }
}

impl AggregateOperator {
    /// Publishes changes at firings (`EMIT EVERY`) instead of as they
    /// come; set before the first row.
    pub fn publish_at_firings(&mut self) {
        self.pending = Some(PendingGroups::default());
    }

    /// Emitting on update, it puts out a watermark all the same: a join
    /// over it forgets rows by it (`change_watermark`).
    pub fn forwarding_watermark(mut self, forwards: bool) -> Self {
        self.forwards_watermark = forwards;
        self
    }

    /// A firing: publishes every group changed since the last one.
    pub fn fire(&mut self, output: &mut Output) -> Result<()> {
        let groups = match &mut self.pending {
            Some(pending) => pending.take_all(),
            None => return Ok(()),
        };
        self.publish(groups, output)
    }

    /// At a watermark: windows that close now (ending after `previous`, up
    /// to `watermark_ns`) publish their final rows at once, and windows
    /// whose state goes (ending by `horizon`) their last corrections.
    /// Corrections of windows closed earlier wait for the next firing.
    pub(super) fn publish_closing(
        &mut self,
        previous: Option<i64>,
        watermark_ns: i64,
        horizon: i64,
        output: &mut Output,
    ) -> Result<()> {
        let Some(pending) = &mut self.pending else {
            return Ok(());
        };
        // The windows whose state goes, then those closing now; windows
        // closed before `previous` keep their corrections for the firing.
        let mut groups = pending.take_ending_by(horizon);
        let closing_after = previous.map_or(i64::MIN, |previous| previous.max(horizon));
        groups.extend(pending.take_ending_between(closing_after, watermark_ns));
        self.publish(groups, output)
    }

    fn publish(
        &mut self,
        groups: Vec<(GroupId, Option<Vec<ScalarValue>>)>,
        output: &mut Output,
    ) -> Result<()> {
        let value_types = self.value_types();
        let mut emitted: Emitted = Vec::new();
        for ((end, key), before) in groups {
            let accumulators = self.bins.get_mut(&end).and_then(|bin| bin.get_mut(&key));
            let after = accumulators.map(|a| evaluate(a)).transpose()?;
            if same_row(&before, &after, &value_types) {
                continue;
            }
            if let Some(before) = before {
                emitted.push((key.clone(), before, -1));
            }
            if let Some(after) = after {
                emitted.push((key, after, 1));
            }
        }
        self.emit_rows(emitted, output)
    }

    fn value_types(&self) -> Vec<DataType> {
        self.schema.fields()[self.groups.len()..]
            .iter()
            .map(|field| field.data_type().clone())
            .collect()
    }

    pub(super) fn checkpoint_pending(&mut self, state: &mut StateWriter) -> Result<()> {
        let value_types = self.value_types();
        if let Some(pending) = &mut self.pending {
            if let Some(entry) = pending.checkpoint(&value_types)? {
                state.put(PENDING_ENTRY, entry);
            }
        }
        Ok(())
    }

    pub(super) fn restore_pending(&mut self, state: &StateReader) -> Result<()> {
        if self.pending.is_none() {
            return Ok(());
        }
        if let Some(entry) = state.get(PENDING_ENTRY) {
            self.pending = Some(PendingGroups::restore(entry, &self.value_types())?);
        }
        Ok(())
    }
}

/// Whether two rows show the same values, compared as the view's types
/// (an accumulator may answer a wider type than the column it fills).
pub fn same_row(
    before: &Option<Vec<ScalarValue>>,
    after: &Option<Vec<ScalarValue>>,
    value_types: &[DataType],
) -> bool {
    match (before, after) {
        (None, None) => true,
        (Some(before), Some(after)) => {
            before
                .iter()
                .zip(after)
                .zip(value_types)
                .all(|((before, after), data_type)| {
                    match (before.cast_to(data_type), after.cast_to(data_type)) {
                        (Ok(before), Ok(after)) => before == after,
                        _ => before == after,
                    }
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[i64]) -> Option<Vec<ScalarValue>> {
        Some(
            values
                .iter()
                .map(|v| ScalarValue::Int64(Some(*v)))
                .collect(),
        )
    }

    #[test]
    fn a_group_remembers_the_row_of_the_last_firing_only() {
        let mut pending = PendingGroups::default();
        pending.note(10, b"a", || Ok(row(&[1]))).unwrap();
        // Touched again before the firing: the first row stays.
        pending.note(10, b"a", || Ok(row(&[2]))).unwrap();
        pending.note(20, b"b", || Ok(None)).unwrap();
        let taken = pending.take_all();
        assert_eq!(
            taken,
            vec![
                ((10, b"a".to_vec()), row(&[1])),
                ((20, b"b".to_vec()), None)
            ]
        );
        assert!(pending.take_all().is_empty());
    }

    #[test]
    fn closing_windows_take_only_their_groups() {
        let mut pending = PendingGroups::default();
        for end in [10, 20, 30] {
            pending.note(end, b"k", || Ok(None)).unwrap();
        }
        let taken: Vec<i64> = pending
            .take_ending_by(20)
            .iter()
            .map(|(g, _)| g.0)
            .collect();
        assert_eq!(taken, vec![10, 20]);
        assert!(pending.contains(30, b"k"));
        for end in [10, 20, 40] {
            pending.note(end, b"k", || Ok(None)).unwrap();
        }
        let between = pending.take_ending_between(10, 30);
        let taken: Vec<i64> = between.iter().map(|(g, _)| g.0).collect();
        assert_eq!(taken, vec![20, 30]);
        assert!(pending.contains(10, b"k") && pending.contains(40, b"k"));
    }

    #[test]
    fn pending_groups_survive_a_checkpoint() {
        let types = [DataType::Int64, DataType::Utf8];
        let mut pending = PendingGroups::default();
        let text = |v: &str| ScalarValue::Utf8(Some(v.to_string()));
        pending
            .note(10, b"a", || {
                Ok(Some(vec![ScalarValue::Int64(Some(3)), text("x")]))
            })
            .unwrap();
        pending.note(i64::MAX, b"", || Ok(None)).unwrap();
        let entry = pending.checkpoint(&types).unwrap().expect("changed");
        assert!(pending.checkpoint(&types).unwrap().is_none(), "unchanged");
        let mut restored = PendingGroups::restore(&entry, &types).unwrap();
        assert_eq!(restored.take_all(), pending.take_all());
        // A firing took them all: the entry says none are left.
        let emptied = pending.checkpoint(&types).unwrap().expect("changed");
        let mut restored = PendingGroups::restore(&emptied, &types).unwrap();
        assert!(restored.take_all().is_empty());
        assert!(PendingGroups::restore(b"garbage", &types).is_err());
    }

    #[test]
    fn rows_compare_as_the_view_types() {
        let types = [DataType::Int64];
        let wide = Some(vec![ScalarValue::Int64(Some(5))]);
        let narrow = Some(vec![ScalarValue::Int32(Some(5))]);
        assert!(same_row(&wide, &narrow, &types));
        assert!(!same_row(&wide, &None, &types));
        assert!(!same_row(&wide, &row(&[6]), &types));
    }
}
