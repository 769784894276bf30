//! GROUP BY over TUMBLE, HOP or CUMULATE windows with EMIT ON WINDOW CLOSE
//! and no allowed lateness: each window's groups live in a vectorised
//! `WindowBin` keyed by window end, one per key partition
//! (`window_partitions`, updated in parallel). A batch's rows are split by
//! window end (a batch touches few windows) and partition, and each part
//! goes to its bin in one call per aggregate; when the watermark reaches a
//! window's end its bins become output batches and are dropped. Rows arriving under a watermark at or
//! past their window's end are late: counted, and kept in the side output
//! if the view has one.
//!
//! Windows that are corrected after they close (`late_data = 'update'`),
//! and views that show partial windows (EMIT ON UPDATE), need a group's
//! value without giving up its state, which a `GroupsAccumulator` cannot
//! give; they use `AggregateOperator`.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{evaluate_arguments, AggregateCall};
use super::state::{checkpointed_bins, BinChanges};
use super::window_bin::{BinShape, WindowBin};
use super::window_partitions::{Assigned, WindowPartitions};
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
    shape: BinShape,
    /// Window end -> its groups, per key partition.
    bins: WindowPartitions,
    late: LateHandling,
    /// Bins changed and closed since the last checkpoint.
    bin_changes: BinChanges,
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
        let key_schema = Arc::new(schema.project(&(0..groups.len()).collect::<Vec<_>>())?);
        let fields = key_schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        let shape = BinShape {
            key_schema,
            converter: RowConverter::new(fields)?,
            calls,
        };
        Ok(WindowAggregateOperator {
            groups,
            window,
            schema,
            shape,
            bins: WindowPartitions::new(partitions),
            late,
            bin_changes: BinChanges::default(),
        })
    }

    /// One output batch of a closed window's groups.
    fn emit_bin(&self, bin: WindowBin, output: &mut Output) -> Result<()> {
        let (mut columns, values) = bin.finish()?;
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

/// `rows` of `chunk` (their window `ends`) sorted into on-time rows by
/// window end and rows late under `watermark`.
fn assign_rows(
    window: &WindowGroup,
    watermark: Option<i64>,
    chunk: &Chunk,
    ends: &[Option<i64>],
    rows: &[u32],
) -> Result<Assigned> {
    let mut by_end: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    let mut late = Vec::new();
    for &row in rows {
        let Some(end) = ends[row as usize] else {
            continue;
        };
        if chunk.diff(row as usize) != 1 {
            return Err(WeirError::internal("an aggregate received a retraction"));
        }
        if let Some(late_row) = late_row(window, chunk, watermark, row as usize, end, 0) {
            late.push(late_row);
            continue;
        }
        by_end.entry(end).or_default().push(row);
    }
    Ok((by_end, late))
}

impl Operator for WindowAggregateOperator {
    fn memory_bytes(&self) -> usize {
        self.bins.memory_bytes()
    }

    fn name(&self) -> &'static str {
        "WindowAggregate"
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        let (shape, bins) = (&self.shape, &mut self.bins);
        self.bin_changes
            .checkpoint_each(state, |end| bins.checkpoint(shape, end))
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        for (end, value) in checkpointed_bins(state)? {
            self.bins.restore(&self.shape, end, value)?;
        }
        Ok(())
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, _output: &mut Output) -> Result<()> {
        let rows = chunk.num_rows();
        let keys: Vec<ArrayRef> = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let arguments = evaluate_arguments(&self.shape.calls, &chunk)?;
        let ends = window_ends(&self.window, &keys)?;
        let (window, watermark) = (&self.window, context.watermark);
        let assign = |rows: &[u32]| assign_rows(window, watermark, &chunk, &ends, rows);
        let (late, changed) = self.bins.update(&self.shape, &keys, &arguments, &assign)?;
        self.bin_changes.changed.extend(changed);
        self.late.report(&chunk, &late)
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        // Without allowed lateness a window is complete, and takes no more
        // rows, once the watermark reaches its end.
        for (end, bins) in self.bins.close(watermark_ns) {
            self.bin_changes.changed.remove(&end);
            self.bin_changes.closed.insert(end);
            for bin in bins {
                self.emit_bin(bin, output)?;
            }
        }
        // Results are final, so the output has a watermark: every later
        // row's window starts at or after the earliest window still open.
        output.push(Message::Watermark(if self.window.is_end {
            self.window.spec.earliest_open_end(watermark_ns)
        } else {
            self.window.spec.earliest_open_start(watermark_ns)
        }));
        Ok(())
    }
}

#[cfg(test)]
#[path = "window_aggregate_tests.rs"]
mod tests;
