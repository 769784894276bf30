//! GROUP BY for views that emit on update (the default), vectorised: a
//! batch's rows are split by window (one bin for an aggregate without a
//! window), and each bin works out, for the groups the batch touched, their
//! values before and after it in typed columns (`updating_bin`) — no
//! accumulator, `ScalarValue` or owned key per group or row. Planned when
//! every call has typed state (`group_states`); other views, and those
//! under EMIT EVERY or emitting on window close, use `AggregateOperator`,
//! whose checkpoint format this one shares.
//!
//! A failed write group is undone bin by bin: each bin keeps its groups as
//! they were before the group first changed them; bins the group made are
//! removed and bins it closed put back. What is kept is bounded
//! (`UNDO_BYTES`): a write group past it (a COPY of millions of rows)
//! keeps nothing more, and if it fails the view is rebuilt from its
//! checkpoint instead — memory follows the state, not the statement.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{evaluate_arguments, push_changes, AggregateCall, Arguments};
use super::state::{checkpointed_bins, BinChanges};
use super::updating_bin::{BinBatch, UpdatingBin, UpdatingShape};
use super::updating_spill::BinSpill;
use super::{change_watermark, late_row, window_ends, LateHandling, WindowGroup, UNWINDOWED};
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::spill::SpillSpace;

/// The most a write group's undo may hold (bins it closed, groups as they
/// were) before the operator stops keeping it.
const UNDO_BYTES: usize = 64 << 20;

pub struct UpdatingAggregateOperator {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    window: Option<WindowGroup>,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    shape: UpdatingShape,
    /// Window end -> its groups.
    bins: BTreeMap<i64, UpdatingBin>,
    late: LateHandling,
    /// Bins changed and closed since the last checkpoint.
    bin_changes: BinChanges,
    undo: Undo,
    undo_limit_bytes: usize,
    /// Puts out a watermark its changes keep to (for a join that forgets
    /// rows by it): see `change_watermark`.
    forwards_watermark: bool,
    /// Without a window: where its bin spills past the memory budget.
    spill: Option<BinSpill>,
}

/// What the write group running now did to the bins.
#[derive(Default)]
struct Undo {
    changed: BTreeSet<i64>,
    created: BTreeSet<i64>,
    dropped: BTreeMap<i64, UpdatingBin>,
    /// Bytes of the bins in `dropped`.
    dropped_bytes: usize,
    /// The group outgrew the undo bound: nothing is kept, and a failure
    /// rebuilds the view.
    given_up: bool,
}

impl UpdatingAggregateOperator {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        window: Option<WindowGroup>,
        schema: SchemaRef,
        late: LateHandling,
        retracting: bool,
    ) -> Result<Self> {
        let key_schema = Arc::new(schema.project(&(0..groups.len()).collect::<Vec<_>>())?);
        let fields = key_schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(UpdatingAggregateOperator {
            groups,
            window,
            schema,
            shape: UpdatingShape {
                key_schema,
                converter: RowConverter::new(fields)?,
                calls,
                retracting,
            },
            bins: BTreeMap::new(),
            late,
            bin_changes: BinChanges::default(),
            undo: Undo::default(),
            undo_limit_bytes: UNDO_BYTES,
            forwards_watermark: false,
            spill: None,
        })
    }

    /// It puts out a watermark on its window column, or on its group
    /// column that is its input's watermark column.
    pub fn forwarding_watermark(mut self, forwards: bool) -> Self {
        self.forwards_watermark = forwards;
        self
    }

    /// Sets how much a write group's undo may hold (tests).
    #[cfg(test)]
    pub fn with_undo_limit(mut self, bytes: usize) -> Self {
        self.undo_limit_bytes = bytes;
        self
    }

    /// Past the undo bound, the write group keeps nothing more to undo.
    fn bound_undo(&mut self) {
        if self.undo.given_up {
            return;
        }
        let kept: usize = (self.undo.changed.iter())
            .filter_map(|end| self.bins.get(end))
            .map(UpdatingBin::undo_bytes)
            .sum();
        let spilled = self.spill.as_ref().map_or(0, BinSpill::undo_bytes);
        if kept + spilled + self.undo.dropped_bytes <= self.undo_limit_bytes {
            return;
        }
        self.forget_undo();
        self.undo.given_up = true;
    }

    /// The write group committed, or its undo was given up.
    fn forget_undo(&mut self) {
        let undo = std::mem::take(&mut self.undo);
        for end in undo.changed {
            if let Some(bin) = self.bins.get_mut(&end) {
                bin.forget();
            }
        }
        if let Some(spill) = self.spill.as_mut() {
            spill.forget();
        }
    }

    /// The rows of the chunk per window end, late rows and rows without a
    /// window left out (late ones reported).
    fn rows_by_end(
        &self,
        chunk: &Chunk,
        keys: &[ArrayRef],
        context: Context,
    ) -> Result<BTreeMap<i64, Vec<u32>>> {
        let rows = chunk.num_rows();
        let ends = match &self.window {
            Some(window) => window_ends(window, keys)?,
            None => vec![Some(UNWINDOWED); rows],
        };
        let lateness = self.late.policy.allowed_lateness_ns();
        let mut by_end: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        let mut late = Vec::new();
        for (row, end) in ends.into_iter().enumerate() {
            let Some(end) = end else { continue };
            if chunk.diff(row) < 0 && !self.shape.retracting {
                return Err(WeirError::internal("an aggregate received a retraction"));
            }
            let window = self.window.as_ref();
            if let Some(late_row) =
                window.and_then(|w| late_row(w, chunk, context.watermark, row, end, lateness))
            {
                late.push(late_row);
                continue;
            }
            by_end.entry(end).or_default().push(row as u32);
        }
        self.late.report(chunk, &late)?;
        Ok(by_end)
    }

    /// Applies the chunk's `rows` of the bin ending at `end`.
    fn apply(
        &mut self,
        end: i64,
        rows: Option<&UInt32Array>,
        (keys, arguments, diffs): (&[ArrayRef], &[Arguments], Option<&[i64]>),
        output: &mut Output,
    ) -> Result<()> {
        let taken = match rows {
            Some(rows) => Some(taken_rows(rows, keys, arguments, diffs)?),
            None => None,
        };
        let (keys, arguments, diffs) = match &taken {
            Some((keys, arguments, diffs)) => {
                (keys.as_slice(), arguments.as_slice(), diffs.as_deref())
            }
            None => (keys, arguments, diffs),
        };
        let bin = match self.bins.entry(end) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                self.undo.created.insert(end);
                entry.insert(UpdatingBin::new(&self.shape)?)
            }
        };
        let keeps_undo = !self.undo.given_up;
        if keeps_undo {
            self.undo.changed.insert(end);
        }
        self.bin_changes.changed.insert(end);
        let batch = BinBatch {
            keys,
            arguments,
            diffs,
        };
        let spill = self.spill.as_ref().filter(|_| end == UNWINDOWED);
        let changes = bin.apply(batch, &self.shape, keeps_undo, spill)?;
        if changes.diffs.is_empty() {
            return Ok(());
        }
        let mut columns = keys
            .iter()
            .map(|column| Ok(take(column.as_ref(), &changes.key_rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        let fields = &self.schema.fields()[keys.len()..];
        for (values, field) in changes.values.into_iter().zip(fields) {
            columns.push(match values.data_type() == field.data_type() {
                true => values,
                false => cast(&values, field.data_type())?,
            });
        }
        push_changes(&self.schema, columns, changes.diffs.into_iter(), output)
    }

    /// Drops the bins that take no more rows: end <= `horizon`.
    fn drop_expired(&mut self, horizon: i64) {
        let open = self.bins.split_off(&horizon.saturating_add(1));
        let expired = std::mem::replace(&mut self.bins, open);
        for (end, bin) in expired {
            self.bin_changes.changed.remove(&end);
            self.bin_changes.closed.insert(end);
            // Kept until the write group commits, to undo it.
            if !self.undo.given_up {
                self.undo.dropped_bytes += bin.memory_bytes();
                self.undo.dropped.insert(end, bin);
            }
        }
        self.bound_undo();
    }
}

/// A chunk's `rows` of keys, arguments and diffs.
type Taken = (Vec<ArrayRef>, Vec<Arguments>, Option<Vec<i64>>);

fn taken_rows(
    rows: &UInt32Array,
    keys: &[ArrayRef],
    arguments: &[Arguments],
    diffs: Option<&[i64]>,
) -> Result<Taken> {
    let column = |column: &ArrayRef| Ok(take(column.as_ref(), rows, None)?);
    let keys = keys.iter().map(column).collect::<Result<Vec<_>>>()?;
    let arguments = arguments
        .iter()
        .map(|(columns, mask)| {
            let columns = columns.iter().map(column).collect::<Result<Vec<_>>>()?;
            let mask = match mask {
                Some(mask) => {
                    let taken = take(mask, rows, None)?;
                    let taken = taken.as_any().downcast_ref::<BooleanArray>().cloned();
                    Some(taken.ok_or_else(|| WeirError::internal("a FILTER mask is not boolean"))?)
                }
                None => None,
            };
            Ok((columns, mask))
        })
        .collect::<Result<Vec<_>>>()?;
    let diffs = diffs.map(|diffs| {
        rows.values()
            .iter()
            .map(|&row| diffs[row as usize])
            .collect()
    });
    Ok((keys, arguments, diffs))
}

impl Operator for UpdatingAggregateOperator {
    fn name(&self) -> &'static str {
        "Aggregate"
    }

    fn memory_bytes(&self) -> usize {
        let spilled = self.spill.as_ref().map_or(0, BinSpill::memory_bytes);
        spilled
            + self
                .bins
                .values()
                .map(UpdatingBin::memory_bytes)
                .sum::<usize>()
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        let rows = chunk.num_rows();
        let keys = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let arguments = evaluate_arguments(&self.shape.calls, &chunk)?;
        let diffs = chunk.diffs.as_ref().map(|diffs| diffs.values().as_ref());
        let by_end = self.rows_by_end(&chunk, &keys, context)?;
        for (end, end_rows) in by_end {
            // Every row in order: no need to take them.
            let rows = (end_rows.len() != rows).then(|| UInt32Array::from(end_rows));
            self.apply(end, rows.as_ref(), (&keys, &arguments, diffs), output)?;
        }
        if let (Some(spill), Some(bin)) = (self.spill.as_mut(), self.bins.get_mut(&UNWINDOWED)) {
            spill.settle(bin, &self.shape, !self.undo.given_up)?;
        }
        self.bound_undo();
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark_ns: i64,
        _context: Context,
        output: &mut Output,
    ) -> Result<()> {
        let horizon = watermark_ns.saturating_sub(self.late.policy.allowed_lateness_ns());
        if self.window.is_some() {
            self.drop_expired(horizon);
        }
        if self.forwards_watermark {
            let watermark = change_watermark(self.window.as_ref(), watermark_ns, horizon);
            output.push(Message::Watermark(watermark));
        }
        Ok(())
    }

    fn attach(&mut self, space: SpillSpace) {
        if self.window.is_some() || self.groups.is_empty() {
            return;
        }
        // A state without a row format keeps the bin in memory.
        self.spill = BinSpill::new(space, &self.shape).ok().flatten();
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if let Some(spill) = self.spill.as_mut() {
            self.bin_changes.changed.remove(&UNWINDOWED);
            spill.checkpoint(self.bins.get_mut(&UNWINDOWED), state)?;
        }
        let (bins, shape) = (&mut self.bins, &self.shape);
        self.bin_changes
            .checkpoint_each(state, |end| match bins.get_mut(&end) {
                Some(bin) => bin.checkpoint(shape).map(Some),
                None => Ok(None),
            })
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        if let Some(spill) = self.spill.as_mut() {
            self.bins
                .insert(UNWINDOWED, spill.restore(state, &self.shape)?);
        }
        for (end, value) in checkpointed_bins(state)? {
            let mut bin = UpdatingBin::restore(value, &self.shape)?;
            if end == UNWINDOWED && self.spill.is_some() {
                // Written before it spilled: the next checkpoint writes
                // its groups as a run instead.
                bin.mark_all_dirty();
                self.bin_changes.closed.insert(UNWINDOWED);
            }
            self.bins.insert(end, bin);
        }
        Ok(())
    }

    fn commit(&mut self) {
        self.forget_undo();
    }

    fn rollback(&mut self) -> Result<bool> {
        let undo = std::mem::take(&mut self.undo);
        if undo.given_up {
            // Rebuilt from its checkpoint.
            return Ok(false);
        }
        for (end, bin) in undo.dropped {
            self.bin_changes.closed.remove(&end);
            self.bin_changes.changed.insert(end);
            self.bins.insert(end, bin);
        }
        for end in &undo.created {
            self.bins.remove(end);
        }
        for end in undo.changed.difference(&undo.created) {
            if let Some(bin) = self.bins.get_mut(end) {
                bin.undo();
            }
        }
        if let Some(spill) = self.spill.as_mut() {
            let bin = match self.bins.entry(UNWINDOWED) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => entry.insert(UpdatingBin::new(&self.shape)?),
            };
            spill.roll_back(bin, &self.shape)?;
        }
        // Whatever the group touched is written again at the next
        // checkpoint (a bin it made and a checkpoint wrote is gone now).
        self.bin_changes.changed.extend(undo.changed);
        Ok(true)
    }
}
