//! GROUP BY over a stream, with DataFusion's accumulators per group. A
//! windowed aggregate keeps its state as bins keyed by window end; a bin is
//! complete when the watermark reaches its end. Then its rows are emitted
//! (EMIT ON WINDOW CLOSE) and, once the allowed lateness has passed too,
//! its state dropped. Rows arriving under a watermark at or past their
//! window's end plus the allowed lateness are late: counted, and kept in
//! the side output if the view has one. Rows within the allowed lateness
//! correct their window (a retraction and the new row).
//! Without a window there is one bin that never closes.
//!
//! This folder is the aggregate family: `AggregateOperator` here (row-level
//! accumulators, any emit mode), `WindowAggregateOperator` (vectorised,
//! windows emitted on close, key-partitioned), `SessionAggregateOperator`,
//! and what they share — aggregate calls (`calls`), late rows (`late`),
//! checkpointed state (`state`).

pub mod calls;
mod firing;
mod group_states;
pub mod late;
pub mod retraction;
pub mod session_aggregate;
mod session_keys;
mod session_partition;
mod session_state;
mod session_steps;
mod session_undo;
mod state;
mod undo;
pub mod updating_aggregate;
mod updating_bin;
mod updating_spill;
pub mod window_aggregate;
mod window_bin;
mod window_closes;
mod window_partitions;
mod window_staging;

pub use group_states::all_supported as has_typed_states;
pub use session_aggregate::SessionAggregateOperator;
pub use updating_aggregate::UpdatingAggregateOperator;
pub use window_aggregate::WindowAggregateOperator;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::hash_map::EntryRef;
use datafusion::common::{HashMap, ScalarValue};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::window::WindowSpec;
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::time_columns::nanoseconds;
use crate::stream::EmitMode;
use calls::{
    evaluate, evaluate_arguments, new_accumulators, push_changes, value_columns, AggregateCall,
    GroupedArguments,
};
pub use late::{late_row, LateHandling};
use state::{checkpointed_bins, decode_bin, encode_bin, BinChanges};

/// Which group column is the window (its start or its end) and its shape.
#[derive(Debug, Clone, Copy)]
pub struct WindowGroup {
    pub column: usize,
    pub is_end: bool,
    pub spec: WindowSpec,
    /// The group column holding the window's other bound, when the query
    /// groups by both window_start and window_end.
    pub other: Option<usize>,
}

impl WindowGroup {
    /// The group columns holding the window's bounds, in order: the same
    /// for every row of one window.
    pub fn bound_columns(&self) -> Vec<usize> {
        let mut columns: Vec<usize> = std::iter::once(self.column).chain(self.other).collect();
        columns.sort_unstable();
        columns
    }
}

/// One window's groups: group key (row format) -> accumulators.
pub type Bin = HashMap<Vec<u8>, Vec<Box<dyn Accumulator>>>;

/// A hash map entry, its key's and vector's headers: per group, beyond
/// what the key and the accumulators report.
pub const GROUP_OVERHEAD_BYTES: usize = 64;

/// A window bin's key when the aggregate has no window.
const UNWINDOWED: i64 = i64::MAX;

pub struct AggregateOperator {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    window: Option<WindowGroup>,
    emit: EmitMode,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    converter: RowConverter,
    /// Window end -> group key (row format) -> accumulators.
    bins: BTreeMap<i64, Bin>,
    late: LateHandling,
    /// Bins changed and closed since the last checkpoint.
    bin_changes: BinChanges,
    /// A global aggregate (no GROUP BY, no window) owes its row over no
    /// input: COUNT(*) 0, SUM NULL — as the same query run as a batch.
    /// Paid when a write group ends with no row for it yet; rows that come
    /// first make its first row, so a value that cannot be computed over
    /// no rows (`count(*) / count(DISTINCT a)`) is never asked for while
    /// rows exist, as in the same query run as a batch.
    owes_empty_row: bool,
    /// Its input retracts rows: accumulators take them back, and the last
    /// call (not shown) counts a group's rows, so a group whose rows are
    /// all gone leaves the view.
    retracting: bool,
    /// Under `EMIT EVERY`: the groups changed since the last firing.
    pending: Option<firing::PendingGroups>,
    /// What the write group running now changed.
    undo: undo::AggregateUndo,
    /// Emitting on update, it still puts out a watermark (for a join that
    /// forgets rows by it): see `change_watermark`.
    forwards_watermark: bool,
}

/// The watermark on an aggregate's window column (or, without a window,
/// its group column that is the input's watermark column) once its input's
/// watermark is `watermark_ns`: every later change has that column at or
/// above it, as a window changes only while open (up to `horizon`, the
/// watermark less the allowed lateness).
pub(super) fn change_watermark(
    window: Option<&WindowGroup>,
    watermark_ns: i64,
    horizon: i64,
) -> i64 {
    match window {
        Some(window) if window.is_end => window.spec.earliest_open_end(horizon),
        Some(window) => window.spec.earliest_open_start(horizon),
        None => watermark_ns,
    }
}

/// Rows to emit: group key, aggregate values, diff.
type Emitted = Vec<(Vec<u8>, Vec<ScalarValue>, i64)>;

/// A group's rows in one chunk.
struct GroupRows<'a> {
    end: i64,
    key: &'a [u8],
    inserted: usize,
    retracted: usize,
}

impl AggregateOperator {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        window: Option<WindowGroup>,
        emit: EmitMode,
        schema: SchemaRef,
        late: LateHandling,
        retracting: bool,
    ) -> Result<Self> {
        let fields = schema.fields()[..groups.len()]
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        let global = groups.is_empty() && window.is_none();
        let mut operator = AggregateOperator {
            groups,
            calls,
            window,
            emit,
            schema,
            converter: RowConverter::new(fields)?,
            bins: BTreeMap::new(),
            late,
            bin_changes: BinChanges::default(),
            owes_empty_row: global,
            retracting,
            pending: None,
            undo: undo::AggregateUndo::default(),
            forwards_watermark: false,
        };
        if global {
            // The one group exists from the start (and is checkpointed with
            // the view's creation), so a restore knows its row is shown.
            let accumulators = new_accumulators(&operator.calls)?;
            let bin = Bin::from([(Vec::new(), accumulators)]);
            operator.bins.insert(UNWINDOWED, bin);
            operator.bin_changes.changed.insert(UNWINDOWED);
        }
        Ok(operator)
    }

    /// Shows a global aggregate's row over no input, once.
    fn pay_empty_row(&mut self, output: &mut Output) -> Result<()> {
        if !std::mem::take(&mut self.owes_empty_row) {
            return Ok(());
        }
        self.undo.owed_empty_row.get_or_insert(true);
        let accumulators = self
            .bins
            .get_mut(&UNWINDOWED)
            .and_then(|bin| bin.get_mut(&Vec::new()))
            .ok_or_else(|| WeirError::internal("a global aggregate lost its group"))?;
        let values = evaluate(accumulators)?;
        self.emit_rows(vec![(Vec::new(), values, 1)], output)
    }

    fn emit_rows(&self, emitted: Emitted, output: &mut Output) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let parser = self.converter.parser();
        let keys = emitted.iter().map(|(key, _, _)| parser.parse(key));
        // Without GROUP BY there is one group and no key columns.
        let mut columns = if self.groups.is_empty() {
            Vec::new()
        } else {
            self.converter.convert_rows(keys)?
        };
        let diffs: Vec<i64> = emitted.iter().map(|(_, _, diff)| *diff).collect();
        let values = emitted.into_iter().map(|(_, values, _)| values);
        columns.extend(value_columns(&self.schema, self.groups.len(), values)?);
        push_changes(&self.schema, columns, diffs.into_iter(), output)
    }
}

/// Window end of every row (None for a NULL window column).
pub fn window_ends(window: &WindowGroup, keys: &[ArrayRef]) -> Result<Vec<Option<i64>>> {
    let column = nanoseconds(&keys[window.column])?;
    let shift = if window.is_end {
        0
    } else {
        window.spec.size_ns
    };
    // The window operator made these starts from windows whose end
    // fits, so the sum does too; checked so a bug cannot wrap.
    column
        .iter()
        .map(|value| {
            value
                .map(|v| {
                    v.checked_add(shift)
                        .ok_or_else(|| WeirError::internal("a window ends past the last timestamp"))
                })
                .transpose()
        })
        .collect()
}

impl Operator for AggregateOperator {
    fn memory_bytes(&self) -> usize {
        let groups = self.bins.values().flat_map(|bin| bin.iter());
        groups
            .map(|(key, accumulators)| {
                let sizes: usize = accumulators.iter().map(|a| a.size()).sum();
                key.capacity() + sizes + GROUP_OVERHEAD_BYTES
            })
            .sum::<usize>()
            + self
                .pending
                .as_ref()
                .map_or(0, |pending| pending.memory_bytes())
    }

    fn name(&self) -> &'static str {
        "Aggregate"
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        let calls = &self.calls;
        self.bin_changes
            .checkpoint(state, &mut self.bins, |bin| encode_bin(bin, calls))?;
        self.checkpoint_pending(state)
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        self.restore_pending(state)?;
        for (end, value) in checkpointed_bins(state)? {
            self.bins.insert(end, decode_bin(&self.calls, value)?);
            // A checkpointed global group has had its row shown.
            self.owes_empty_row &= end != UNWINDOWED;
        }
        Ok(())
    }

    fn on_fire(&mut self, view: u64, output: &mut Output) -> Result<()> {
        self.fire(output)?;
        output.push(Message::Fire(view));
        Ok(())
    }

    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        self.pay_empty_row(output)?;
        output.push(Message::Barrier(epoch));
        Ok(())
    }

    fn flush(&mut self, output: &mut Output) -> Result<()> {
        self.pay_empty_row(output)
    }

    fn commit(&mut self) {
        self.undo.clear();
        if let Some(pending) = self.pending.as_mut() {
            pending.commit();
        }
    }

    fn rollback(&mut self) -> Result<bool> {
        self.roll_back()
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        // A global group not shown yet: its first row is the one after
        // this batch (nothing to retract).
        let unshown = std::mem::take(&mut self.owes_empty_row);
        if unshown {
            self.undo.owed_empty_row.get_or_insert(true);
        }
        let rows = chunk.num_rows();
        let keys = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let key_rows = self.converter.convert_columns(&keys)?;
        let ends = match &self.window {
            Some(window) => window_ends(window, &keys)?,
            None => vec![Some(UNWINDOWED); rows],
        };
        let arguments = evaluate_arguments(&self.calls, &chunk)?;
        let lateness = self.late.policy.allowed_lateness_ns();

        // Rows of this chunk per (window end, group key), groups in
        // first-seen order: each row's group, then each group's rows made
        // contiguous by one permutation.
        let mut positions: HashMap<(i64, &[u8]), usize> = HashMap::new();
        let mut groups: Vec<GroupRows> = Vec::new();
        let mut row_groups: Vec<(u32, usize, bool)> = Vec::with_capacity(rows);
        let mut late = Vec::new();
        for (row, end) in ends.iter().enumerate() {
            let Some(end) = *end else { continue };
            let retracted = match chunk.diff(row) {
                1 => false,
                -1 if self.retracting => true,
                _ => return Err(WeirError::internal("an aggregate received a retraction")),
            };
            let window = self.window.as_ref();
            if let Some(row) =
                window.and_then(|w| late_row(w, &chunk, context.watermark, row, end, lateness))
            {
                late.push(row);
                continue;
            }
            let key = if self.groups.is_empty() {
                &[][..]
            } else {
                key_rows.row(row).data()
            };
            let position = *positions.entry((end, key)).or_insert_with(|| {
                groups.push(GroupRows {
                    end,
                    key,
                    inserted: 0,
                    retracted: 0,
                });
                groups.len() - 1
            });
            match retracted {
                false => groups[position].inserted += 1,
                true => groups[position].retracted += 1,
            }
            row_groups.push((row as u32, position, retracted));
        }
        self.late.report(&chunk, &late)?;

        // Each group's rows contiguous, its inserted rows before its
        // retracted ones.
        let mut starts = Vec::with_capacity(groups.len());
        let mut next = 0;
        for group in &groups {
            starts.push(next);
            next += group.inserted + group.retracted;
        }
        let mut filled: Vec<[usize; 2]> = groups
            .iter()
            .zip(&starts)
            .map(|(group, start)| [*start, start + group.inserted])
            .collect();
        let mut order = vec![0u32; next];
        for (row, group, retracted) in row_groups {
            let slot = &mut filled[group][usize::from(retracted)];
            order[*slot] = row;
            *slot += 1;
        }
        let grouped = GroupedArguments::new(&arguments, &UInt32Array::from(order))?;
        let mut emitted = Vec::new();
        for (group, start) in groups.into_iter().zip(starts) {
            let middle = start + group.inserted;
            let rows = [start..middle, middle..middle + group.retracted];
            self.update_group(
                (group.end, group.key),
                rows,
                &grouped,
                (context, unshown),
                &mut emitted,
            )?;
        }
        self.emit_rows(emitted, output)
    }

    fn on_watermark(
        &mut self,
        watermark_ns: i64,
        context: Context,
        output: &mut Output,
    ) -> Result<()> {
        self.pay_empty_row(output)?;
        let horizon = watermark_ns.saturating_sub(self.late.policy.allowed_lateness_ns());
        let Some(window) = self.window else {
            if self.forwards_watermark {
                output.push(Message::Watermark(watermark_ns));
            }
            return Ok(());
        };
        if self.pending.is_some() {
            self.publish_closing(context.watermark, watermark_ns, horizon, output)?;
            self.drop_expired(horizon);
            return Ok(());
        }
        if self.emit == EmitMode::OnWindowClose {
            self.emit_completed(context.watermark, watermark_ns, output)?;
        }
        // Results are final (up to the allowed lateness), so the output
        // has a watermark: every later row's window starts at or after
        // the earliest window still taking rows.
        if self.emit == EmitMode::OnWindowClose || self.forwards_watermark {
            let watermark = change_watermark(Some(&window), watermark_ns, horizon);
            output.push(Message::Watermark(watermark));
        }
        self.drop_expired(horizon);
        Ok(())
    }
}

impl AggregateOperator {
    /// Adds a group's `inserted` rows (of the grouped arguments) to it,
    /// takes its `retracted` rows back, and emits what changed for it.
    fn update_group(
        &mut self,
        (end, key): (i64, &[u8]),
        [inserted, retracted]: [Range<usize>; 2],
        grouped: &GroupedArguments,
        (context, unshown): (Context, bool),
        emitted: &mut Emitted,
    ) -> Result<()> {
        self.bin_changes.changed.insert(end);
        // Under EMIT ON WINDOW CLOSE a window already emitted (a row within
        // the allowed lateness) is corrected like an update; under EMIT
        // EVERY changes wait for the next firing.
        let emits = self.pending.is_none()
            && (self.emit == EmitMode::OnUpdate || context.watermark.is_some_and(|w| w >= end));
        let bin = self.bins.entry(end).or_default();
        // One lookup of the group: what it was goes to the undo (and under
        // EMIT EVERY to the pending firing) before it changes.
        let (undo, pending, calls) = (&mut self.undo, &mut self.pending, &self.calls);
        let (accumulators, existed) = match bin.entry_ref(key) {
            EntryRef::Occupied(entry) => {
                let accumulators = entry.into_mut();
                undo.before_change((end, key), Some(&mut *accumulators), calls)?;
                if let Some(pending) = pending {
                    // A global group is there from the start but shown
                    // only once paid for.
                    pending.note(end, key, || match unshown {
                        false => evaluate(accumulators).map(Some),
                        true => Ok(None),
                    })?;
                }
                (accumulators, true)
            }
            EntryRef::Vacant(entry) => {
                undo.before_change((end, key), None, calls)?;
                if let Some(pending) = pending {
                    pending.note(end, key, || Ok(None))?;
                }
                (entry.insert(new_accumulators(calls)?), false)
            }
        };
        // Whether the group's row is shown.
        let shown = existed && !unshown;
        let before = match emits && shown {
            true => Some(evaluate(accumulators)?),
            false => None,
        };
        for (call, accumulator) in accumulators.iter_mut().enumerate() {
            if !inserted.is_empty() {
                accumulator.update_batch(&grouped.group(call, &inserted)?)?;
            }
            if !retracted.is_empty() {
                accumulator.retract_batch(&grouped.group(call, &retracted)?)?;
            }
        }
        // A window not yet shown (EMIT ON WINDOW CLOSE) is evaluated when it
        // closes, not per batch; a retracting aggregate always emits (or,
        // under EMIT EVERY, drops its emptied groups for the firing to see).
        let drops_emptied = self.pending.is_some() && self.retracting;
        if !emits && !drops_emptied {
            return Ok(());
        }
        let after = evaluate(accumulators)?;
        // The hidden row count (last call) of a group whose rows are gone.
        let emptied = self.retracting
            && !self.groups.is_empty()
            && after.last() == Some(&ScalarValue::Int64(Some(0)));
        if !emits {
            if emptied {
                bin.remove(key);
            }
            return Ok(());
        }
        if emptied {
            bin.remove(key);
        }
        if before.as_ref() == Some(&after) && !emptied {
            return Ok(());
        }
        if let Some(before) = before {
            emitted.push((key.to_vec(), before, -1));
        }
        if !emptied {
            emitted.push((key.to_vec(), after, 1));
        }
        Ok(())
    }

    /// Emits the windows completed since the `previous` watermark.
    fn emit_completed(
        &mut self,
        previous: Option<i64>,
        watermark_ns: i64,
        output: &mut Output,
    ) -> Result<()> {
        use std::ops::Bound;
        let lower = previous.map_or(Bound::Unbounded, Bound::Excluded);
        let mut emitted = Vec::new();
        for (_, bin) in self.bins.range_mut((lower, Bound::Included(watermark_ns))) {
            let mut groups: Vec<_> = bin.iter_mut().collect();
            groups.sort_by(|a, b| a.0.cmp(b.0));
            for (key, accumulators) in groups {
                emitted.push((key.clone(), evaluate(accumulators)?, 1));
            }
        }
        self.emit_rows(emitted, output)
    }

    /// Drops the bins that take no more rows: end <= `horizon`.
    fn drop_expired(&mut self, horizon: i64) {
        let open = self.bins.split_off(&horizon.saturating_add(1));
        let expired = std::mem::replace(&mut self.bins, open);
        for (end, bin) in expired {
            self.bin_changes.changed.remove(&end);
            self.bin_changes.closed.insert(end);
            // Kept until the write group commits, to undo it.
            self.undo.dropped(end, bin);
        }
    }

    /// Puts the bins back as they were at the last commit (see `undo.rs`),
    /// and under EMIT EVERY the groups held for the next firing.
    fn roll_back(&mut self) -> Result<bool> {
        let undo = std::mem::take(&mut self.undo);
        if let Some(pending) = self.pending.as_mut() {
            pending.rollback();
        }
        if let Some(owed) = undo.owed_empty_row {
            self.owes_empty_row = owed;
        }
        for end in undo.undo(&mut self.bins, &self.calls)? {
            self.bin_changes.closed.remove(&end);
            self.bin_changes.changed.insert(end);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod firing_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod updating_aggregate_tests;
