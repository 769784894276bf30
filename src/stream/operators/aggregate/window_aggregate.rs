//! GROUP BY over TUMBLE, HOP or CUMULATE windows with EMIT ON WINDOW CLOSE
//! and no allowed lateness: each window's groups live in a vectorised
//! `WindowBin` keyed by window end, one per key partition
//! (`window_partitions`, each on its own worker thread). The operator
//! evaluates a batch's keys and arguments, sorts out late rows (counted,
//! and kept in the side output if the view has one) and hands the rest to
//! the partitions, which add them while it goes on. When the watermark
//! reaches a window's end the partitions close it; their answers go out in
//! close order (`window_closes`), each window's rows before the watermark
//! that follows its close. The operator waits for its partitions only at
//! checkpoints and when the runtime flushes it at the end of a write group.
//! A write group's rows go into bins of their own until it commits, so a
//! failed one is undone in proportion to what it did (`window_staging`).
//!
//! Windows that are corrected after they close (`late_data = 'update'`),
//! and views that show partial windows (EMIT ON UPDATE), need a group's
//! value without giving up its state, which a `GroupsAccumulator` cannot
//! give; they use `AggregateOperator`.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{evaluate_arguments, AggregateCall};
use super::late::LateRow;
use super::state::{checkpointed_bins, BinChanges};
use super::window_bin::BinShape;
use super::window_closes::PendingCloses;
use super::window_partitions::{BatchColumns, Outcome, WindowPartitions};
use super::{late_row, window_ends, LateHandling, WindowGroup};
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};

pub struct WindowAggregateOperator {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    window: WindowGroup,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    shape: Arc<BinShape>,
    /// Window end -> its groups, per key partition.
    bins: WindowPartitions,
    /// No window the partitions hold or are adding to ends before this:
    /// until the watermark reaches it, nothing closes.
    earliest_end: Option<i64>,
    /// The earliest window end added since the last close was sent.
    added_since_close: Option<i64>,
    /// Closes sent to the partitions, and watermarks behind them.
    closes: PendingCloses,
    /// Messages made ready while waiting for a checkpoint; they go out
    /// before the barrier.
    ready_output: Output,
    late: LateHandling,
    /// Bins changed and closed since the last checkpoint.
    bin_changes: BinChanges,
    /// Set once the running write group changed the operator: what it
    /// changed outside the partitions, as it was (see `window_staging`
    /// for the partitions' part).
    before: Option<Before>,
}

struct Before {
    earliest_end: Option<i64>,
    added_since_close: Option<i64>,
    ready_output: usize,
}

impl WindowAggregateOperator {
    /// `partitions`: how many key partitions are updated in parallel.
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        window: WindowGroup,
        schema: SchemaRef,
        late: LateHandling,
        partitions: usize,
    ) -> Result<Self> {
        let group_fields = schema.project(&(0..groups.len()).collect::<Vec<_>>())?;
        let fields = group_fields
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        // A bin interns the group columns but the window's bounds; at
        // least one column stays a key.
        let mut bound_columns = window.bound_columns();
        if bound_columns.len() == groups.len() {
            bound_columns.remove(0);
        }
        let keys: Vec<usize> = (0..groups.len())
            .filter(|position| !bound_columns.contains(position))
            .collect();
        let shape = Arc::new(BinShape {
            key_schema: Arc::new(group_fields.project(&keys)?),
            bound_columns,
            converter: RowConverter::new(fields)?,
            calls,
        });
        Ok(WindowAggregateOperator {
            groups,
            window,
            schema,
            shape,
            bins: WindowPartitions::new(partitions),
            earliest_end: None,
            added_since_close: None,
            closes: PendingCloses::default(),
            ready_output: Vec::new(),
            late,
            bin_changes: BinChanges::default(),
            before: None,
        })
    }

    /// One output batch of a closed window's groups.
    fn emit_window(
        &self,
        mut columns: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        output: &mut Output,
    ) -> Result<()> {
        if columns.first().is_none_or(|column| column.is_empty()) {
            return Ok(());
        }
        let value_fields = &self.schema.fields()[self.groups.len()..];
        for (value, field) in values.into_iter().zip(value_fields) {
            columns.push(if value.data_type() == field.data_type() {
                value
            } else {
                cast(&value, field.data_type())?
            });
        }
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        output.push(Message::batch(Chunk::inserts(rows)));
        Ok(())
    }
}

/// Each row's window end with late rows left out (None), the late rows,
/// and the earliest end of an on-time row.
type SortedOut = (Vec<Option<i64>>, Vec<LateRow>, Option<i64>);

fn sort_out_late(
    window: &WindowGroup,
    watermark: Option<i64>,
    chunk: &Chunk,
    mut ends: Vec<Option<i64>>,
) -> Result<SortedOut> {
    if let Some(diffs) = &chunk.diffs {
        if diffs.values().iter().any(|&diff| diff != 1) {
            return Err(WeirError::internal("an aggregate received a retraction"));
        }
    }
    let mut late = Vec::new();
    let mut earliest: Option<i64> = None;
    for (row, slot) in ends.iter_mut().enumerate() {
        let Some(end) = *slot else {
            continue;
        };
        if let Some(late_row) = late_row(window, chunk, watermark, row, end, 0) {
            late.push(late_row);
            *slot = None;
            continue;
        }
        earliest = Some(earliest.map_or(end, |earliest| earliest.min(end)));
    }
    Ok((ends, late, earliest))
}

impl Operator for WindowAggregateOperator {
    fn memory_bytes(&self) -> usize {
        self.bins.memory_bytes()
    }

    fn name(&self) -> &'static str {
        "WindowAggregate"
    }

    fn flush(&mut self, output: &mut Output) -> Result<()> {
        self.take_finished(true, output)
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        // A barrier comes between write groups, and is not undone.
        self.commit_partitions()?;
        // What this wait makes ready goes out with the barrier.
        let mut ready = Vec::new();
        self.take_finished(true, &mut ready)?;
        self.ready_output.extend(ready);
        let changes = &mut self.bin_changes;
        changes.changed.retain(|end| !changes.closed.contains(end));
        let (shape, bins) = (&self.shape, &mut self.bins);
        self.bin_changes
            .checkpoint_each(state, |end| bins.checkpoint(shape, end))
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        for (end, value) in checkpointed_bins(state)? {
            self.bins.restore(&self.shape, end, value)?;
            self.earliest_end = Some(self.earliest_end.map_or(end, |open| open.min(end)));
        }
        Ok(())
    }

    fn commit(&mut self) {
        if let Err(error) = self.commit_partitions() {
            // The partitions report it again at the next wait.
            tracing::error!(%error.message, "a window aggregate could not commit a write group");
        }
    }

    fn rollback(&mut self) -> Result<bool> {
        let Some(before) = self.before.take() else {
            return Ok(true);
        };
        self.closes.discard();
        self.ready_output.truncate(before.ready_output);
        self.earliest_end = before.earliest_end;
        self.added_since_close = before.added_since_close;
        for end in self.bins.roll_back(&self.shape)? {
            self.bin_changes.closed.remove(&end);
            self.bin_changes.changed.insert(end);
        }
        Ok(true)
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        self.note_change()?;
        let rows = chunk.num_rows();
        let keys: Vec<ArrayRef> = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let arguments = evaluate_arguments(&self.shape.calls, &chunk)?;
        let ends = window_ends(&self.window, &keys)?;
        let (ends, late, earliest) = sort_out_late(&self.window, context.watermark, &chunk, ends)?;
        self.late.report(&chunk, &late)?;
        if let Some(end) = earliest {
            self.earliest_end = Some(self.earliest_end.map_or(end, |open| open.min(end)));
            self.added_since_close = Some(self.added_since_close.map_or(end, |low| low.min(end)));
            let (keys, bounds) = self.shape.split_keys(keys);
            let batch = BatchColumns {
                keys,
                bounds,
                arguments,
                ends: Arc::new(ends),
            };
            self.bins.update(&self.shape, batch)?;
        }
        self.take_finished(false, output)
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        self.note_change()?;
        // Results are final, so the output has a watermark: every later
        // row's window starts at or after the earliest window still open.
        let watermark_out = if self.window.is_end {
            self.window.spec.earliest_open_end(watermark_ns)
        } else {
            self.window.spec.earliest_open_start(watermark_ns)
        };
        // Without allowed lateness a window is complete, and takes no more
        // rows, once the watermark reaches its end.
        if self.earliest_end.is_some_and(|end| end <= watermark_ns) {
            let close = self.closes.open(self.bins.len(), watermark_out);
            self.bins.close(&self.shape, close, watermark_ns)?;
            // Every window left ends after the watermark; the partitions'
            // reports narrow that down.
            self.earliest_end = Some(watermark_ns.saturating_add(1));
            self.added_since_close = None;
        } else {
            self.closes.watermark(watermark_out);
        }
        self.take_finished(false, output)
    }

    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        output.append(&mut self.ready_output);
        output.push(Message::Barrier(epoch));
        Ok(())
    }
}

impl WindowAggregateOperator {
    /// The first change of a write group: keeps what an undo puts back.
    /// What earlier groups left in flight (nothing after a flush) is
    /// finished first, so that only the group's own work is pending.
    fn note_change(&mut self) -> Result<()> {
        if self.before.is_some() {
            return Ok(());
        }
        let mut ready = std::mem::take(&mut self.ready_output);
        self.take_finished(true, &mut ready)?;
        self.ready_output = ready;
        self.before = Some(Before {
            earliest_end: self.earliest_end,
            added_since_close: self.added_since_close,
            ready_output: self.ready_output.len(),
        });
        Ok(())
    }

    fn commit_partitions(&mut self) -> Result<()> {
        if self.before.take().is_some() {
            self.bins.commit(&self.shape)?;
        }
        Ok(())
    }

    /// Takes what the partitions finished (when `block`, everything handed
    /// over) and puts out the closes that are complete, in order.
    fn take_finished(&mut self, block: bool, output: &mut Output) -> Result<()> {
        output.append(&mut self.ready_output);
        for outcome in self.bins.finished(block)? {
            match outcome {
                Outcome::Added(ends) => self.bin_changes.changed.extend(ends),
                Outcome::Closed {
                    close,
                    partition,
                    windows,
                    remaining,
                } => {
                    let ends = windows.iter().map(|window| window.0);
                    self.bin_changes.closed.extend(ends);
                    self.closes.record(close, partition, windows, remaining)?;
                }
                Outcome::Committed => {}
            }
        }
        for ready in self.closes.ready() {
            // The latest close tells the earliest end left exactly.
            if ready
                .close
                .is_some_and(|close| close + 1 == self.closes.next_close())
            {
                let low = ready.remaining.into_iter().chain(self.added_since_close);
                self.earliest_end = low.min();
            }
            for (_, keys, values) in ready.windows {
                self.emit_window(keys, values, output)?;
            }
            output.push(Message::Watermark(ready.watermark_out));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "window_aggregate_tests.rs"]
mod tests;
