//! GROUP BY over TUMBLE, HOP or CUMULATE windows with EMIT ON WINDOW CLOSE
//! and no allowed lateness: each window's groups live in a vectorised
//! `WindowBin` keyed by window end. A batch's rows are split by window end
//! (a batch touches few windows) and each part goes to its bin in one call
//! per aggregate; when the watermark reaches a window's end its bin becomes
//! one output batch and is dropped. Rows arriving under a watermark at or
//! past their window's end are late: counted, and kept in the side output
//! if the view has one.
//!
//! Windows that are corrected after they close (`late_data = 'update'`),
//! and views that show partial windows (EMIT ON UPDATE), need a group's
//! value without giving up its state, which a `GroupsAccumulator` cannot
//! give; they use `AggregateOperator`.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::aggregate::{late_row, window_ends, LateHandling, WindowGroup};
use super::aggregate_calls::{evaluate_arguments, AggregateCall, Arguments};
use super::aggregate_state::{checkpointed_bins, BinChanges};
use super::window_bin::{BinRows, BinShape, WindowBin};
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{advance_watermark, Operator, Output};

pub struct WindowAggregateOperator {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    window: WindowGroup,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    shape: BinShape,
    /// Window end -> its groups.
    bins: BTreeMap<i64, WindowBin>,
    watermark: Option<i64>,
    late: LateHandling,
    /// Bins changed and closed since the last checkpoint.
    bin_changes: BinChanges,
}

impl WindowAggregateOperator {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        window: WindowGroup,
        schema: SchemaRef,
        late: LateHandling,
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
            bins: BTreeMap::new(),
            watermark: None,
            late,
            bin_changes: BinChanges::default(),
        })
    }

    /// The on-time rows of `chunk` by window end; late rows are reported.
    fn rows_by_window(&self, chunk: &Chunk, keys: &[ArrayRef]) -> Result<BTreeMap<i64, Vec<u32>>> {
        let mut by_end: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        let mut late = Vec::new();
        for (row, end) in window_ends(&self.window, keys)?.into_iter().enumerate() {
            let Some(end) = end else { continue };
            if chunk.diff(row) != 1 {
                return Err(WeirError::internal("an aggregate received a retraction"));
            }
            if let Some(row) = late_row(&self.window, chunk, self.watermark, row, end, 0) {
                late.push(row);
                continue;
            }
            by_end.entry(end).or_default().push(row as u32);
        }
        self.late.report(chunk, &late)?;
        Ok(by_end)
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

/// Argument columns and FILTER masks of the rows at `indices`.
fn arguments_at(arguments: &[Arguments], indices: &UInt32Array) -> Result<Vec<Arguments>> {
    arguments
        .iter()
        .map(|(columns, mask)| {
            let columns = take_all(columns, indices)?;
            let mask = match mask {
                Some(mask) => Some(take(mask, indices, None)?.as_boolean().clone()),
                None => None,
            };
            Ok((columns, mask))
        })
        .collect()
}

fn take_all(columns: &[ArrayRef], indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    columns
        .iter()
        .map(|column| Ok(take(column.as_ref(), indices, None)?))
        .collect()
}

impl Operator for WindowAggregateOperator {
    fn memory_bytes(&self) -> usize {
        self.bins.values().map(WindowBin::memory_bytes).sum()
    }

    fn name(&self) -> &'static str {
        "WindowAggregate"
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        let shape = &self.shape;
        let (bins, watermark) = (&mut self.bins, self.watermark);
        self.bin_changes
            .checkpoint(state, bins, watermark, |bin| bin.checkpoint(shape))
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        let (watermark, bins) = checkpointed_bins(state)?;
        self.watermark = watermark;
        for (end, value) in bins {
            self.bins
                .insert(end, WindowBin::restore(&self.shape, value)?);
        }
        Ok(())
    }

    fn on_batch(&mut self, chunk: Chunk, _output: &mut Output) -> Result<()> {
        let rows = chunk.num_rows();
        let keys = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let arguments = evaluate_arguments(&self.shape.calls, &chunk)?;
        for (end, members) in self.rows_by_window(&chunk, &keys)? {
            let taken;
            let (bin_keys, bin_arguments) = if members.len() == rows {
                // Every row, in order: no copy.
                (keys.as_slice(), arguments.as_slice())
            } else {
                let indices = UInt32Array::from(members);
                taken = (
                    take_all(&keys, &indices)?,
                    arguments_at(&arguments, &indices)?,
                );
                (taken.0.as_slice(), taken.1.as_slice())
            };
            let bin = match self.bins.entry(end) {
                std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(WindowBin::new(&self.shape)?)
                }
            };
            bin.update(BinRows {
                keys: bin_keys,
                arguments: bin_arguments,
            })?;
            self.bin_changes.changed.insert(end);
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ns: i64, output: &mut Output) -> Result<()> {
        if !advance_watermark(&mut self.watermark, watermark_ns) {
            return Ok(());
        }
        // Without allowed lateness a window is complete, and takes no more
        // rows, once the watermark reaches its end.
        let open = self.bins.split_off(&watermark_ns.saturating_add(1));
        for (end, bin) in std::mem::replace(&mut self.bins, open) {
            self.bin_changes.changed.remove(&end);
            self.bin_changes.closed.insert(end);
            self.emit_bin(bin, output)?;
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
