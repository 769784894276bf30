//! One window's groups, vectorised: DataFusion's `GroupValues` interns the
//! group keys and one `GroupsAccumulator` per aggregate call holds the state
//! of every group, indexed by group — no allocation, `ScalarValue` or
//! owned key per group or per row.
//!
//! Both hand their contents over only by taking them (`emit`, `evaluate`
//! and `state` reset what they report), so a bin is read once, when its
//! window closes; a checkpoint takes its state and rebuilds the bin from
//! exactly what it wrote, as a restore would (the contract issue 10 was
//! about for `Accumulator::state`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BinaryArray, BooleanArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::RowConverter;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::GroupsAccumulatorAdapter;
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use super::calls::AggregateCall;
use super::state::state_widths;
use crate::error::{Result, WeirError};

/// What every bin of one operator shares: the schema of the keys a bin
/// interns (the group columns but the window's bounds, which are the same
/// for every row of a window), where the bounds sit among the group
/// columns, the converter of all group columns to the checkpoint's row
/// format, and the calls.
pub struct BinShape {
    pub key_schema: SchemaRef,
    pub bound_columns: Vec<usize>,
    pub converter: RowConverter,
    pub calls: Vec<AggregateCall>,
}

impl BinShape {
    /// Splits group columns into the keys a bin interns and the window's
    /// bounds.
    pub fn split_keys(&self, columns: Vec<ArrayRef>) -> (Vec<ArrayRef>, Vec<ArrayRef>) {
        let (mut keys, mut bounds) = (Vec::new(), Vec::new());
        for (position, column) in columns.into_iter().enumerate() {
            if self.bound_columns.contains(&position) {
                bounds.push(column);
            } else {
                keys.push(column);
            }
        }
        (keys, bounds)
    }

    /// The group columns of `keys` rows of a window whose bounds are the
    /// one-row `bounds`.
    pub fn join_keys(&self, keys: Vec<ArrayRef>, bounds: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        let rows = keys.first().map_or(0, |column| column.len());
        let repeat = UInt32Array::from(vec![0u32; rows]);
        let (mut keys, mut bounds) = (keys.into_iter(), bounds.iter());
        let total = self.key_schema.fields().len() + self.bound_columns.len();
        (0..total)
            .map(|position| {
                if self.bound_columns.contains(&position) {
                    let bound = bounds.next().ok_or_else(missing_bound)?;
                    Ok(take(bound.as_ref(), &repeat, None)?)
                } else {
                    keys.next().ok_or_else(missing_bound)
                }
            })
            .collect()
    }
}

fn missing_bound() -> WeirError {
    WeirError::internal("a window bin lacks a group column")
}

/// The rows added to a bin: key columns, per call its argument columns and
/// FILTER mask (no nulls), and the window's bounds (one row each).
pub struct BinRows<'a> {
    pub keys: &'a [ArrayRef],
    pub arguments: &'a [(Vec<ArrayRef>, Option<BooleanArray>)],
    pub bounds: Vec<ArrayRef>,
}

/// A bin's contents as columns: the interned keys, the window's one-row
/// bounds and each call's state columns — what a checkpoint writes, and
/// what a failed write group's undo keeps of a window it closed.
pub struct BinState {
    pub keys: Vec<ArrayRef>,
    pub bounds: Vec<ArrayRef>,
    pub states: Vec<ArrayRef>,
}

impl BinState {
    pub fn memory_bytes(&self) -> usize {
        let columns = self.keys.iter().chain(&self.bounds).chain(&self.states);
        columns.map(|column| column.get_array_memory_size()).sum()
    }
}

pub struct WindowBin {
    keys: Box<dyn GroupValues>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// The window's bounds as one-row columns, once a row came.
    bounds: Option<Vec<ArrayRef>>,
    /// Scratch: the group of each row being added.
    group_indices: Vec<usize>,
}

/// A call's groups accumulator; DataFusion's adapter over row accumulators
/// for the functions that have none (median, string_agg, ...).
fn groups_accumulator(call: &AggregateCall) -> Result<Box<dyn GroupsAccumulator>> {
    if call.function.groups_accumulator_supported() {
        return Ok(call.function.create_groups_accumulator()?);
    }
    let function = Arc::clone(&call.function);
    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
        function.create_accumulator()
    })))
}

/// The group columns of a checkpointed bin's batch (its first column
/// holds them in row format).
pub fn checkpointed_keys(batch: &RecordBatch, shape: &BinShape) -> Result<Vec<ArrayRef>> {
    let parser = shape.converter.parser();
    let encoded = batch.column(0).as_binary::<i32>();
    Ok(shape
        .converter
        .convert_rows(encoded.iter().flatten().map(|key| parser.parse(key)))?)
}

/// The first row of each bound column.
pub fn first_bounds(bounds: &[ArrayRef]) -> Vec<ArrayRef> {
    bounds.iter().map(|column| column.slice(0, 1)).collect()
}

impl WindowBin {
    pub fn new(shape: &BinShape) -> Result<Self> {
        Ok(WindowBin {
            keys: new_group_values(shape.key_schema.clone(), &GroupOrdering::None)?,
            accumulators: shape
                .calls
                .iter()
                .map(groups_accumulator)
                .collect::<Result<_>>()?,
            bounds: None,
            group_indices: Vec::new(),
        })
    }

    pub fn update(&mut self, rows: BinRows<'_>) -> Result<()> {
        if self.bounds.is_none() {
            self.bounds = Some(rows.bounds);
        }
        self.keys.intern(rows.keys, &mut self.group_indices)?;
        let total = self.keys.len();
        for (accumulator, (columns, mask)) in self.accumulators.iter_mut().zip(rows.arguments) {
            accumulator.update_batch(columns, &self.group_indices, mask.as_ref(), total)?;
        }
        Ok(())
    }

    /// The bin's rows, taking its contents: group columns, then each
    /// call's value column.
    pub fn finish(mut self, shape: &BinShape) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let keys = self.keys.emit(EmitTo::All)?;
        let values = self
            .accumulators
            .iter_mut()
            .map(|accumulator| Ok(accumulator.evaluate(EmitTo::All)?))
            .collect::<Result<_>>()?;
        let bounds = self.bounds.take().unwrap_or_default();
        Ok((shape.join_keys(keys, &bounds)?, values))
    }

    /// The bin's checkpoint as columns (all group columns in row format,
    /// then each call's state columns); the bin is rebuilt from them.
    pub fn checkpoint_columns(&mut self, shape: &BinShape) -> Result<(BinaryArray, Vec<ArrayRef>)> {
        let taken = std::mem::replace(self, WindowBin::new(shape)?).into_state()?;
        self.merge_state(&taken, shape)?;
        let rows = shape
            .converter
            .convert_columns(&shape.join_keys(taken.keys, &taken.bounds)?)?;
        let encoded = BinaryArray::from_iter_values(rows.iter().map(|row| row.data().to_vec()));
        Ok((encoded, taken.states))
    }

    /// The bin's contents as columns, taking them.
    pub fn into_state(mut self) -> Result<BinState> {
        let keys = self.keys.emit(EmitTo::All)?;
        let mut states = Vec::new();
        for accumulator in &mut self.accumulators {
            states.extend(accumulator.state(EmitTo::All)?);
        }
        let bounds = self.bounds.take().unwrap_or_default();
        Ok(BinState {
            keys,
            bounds,
            states,
        })
    }

    /// Merges a bin's contents in (`into_state`).
    pub fn merge_state(&mut self, state: &BinState, shape: &BinShape) -> Result<()> {
        self.merge(&state.keys, state.bounds.clone(), &state.states, shape)
    }

    /// Merges other state (key columns, the window's one-row bounds, each
    /// call's state columns) in.
    pub fn merge(
        &mut self,
        keys: &[ArrayRef],
        bounds: Vec<ArrayRef>,
        states: &[ArrayRef],
        shape: &BinShape,
    ) -> Result<()> {
        if keys.first().is_none_or(|column| column.is_empty()) {
            return Ok(());
        }
        if self.bounds.is_none() {
            self.bounds = Some(bounds);
        }
        self.keys.intern(keys, &mut self.group_indices)?;
        let total = self.keys.len();
        let mut column = 0;
        let widths = state_widths(&shape.calls)?;
        for (accumulator, width) in self.accumulators.iter_mut().zip(widths) {
            let state = &states[column..column + width];
            accumulator.merge_batch(state, &self.group_indices, total)?;
            column += width;
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
        let accumulators: usize = self.accumulators.iter().map(|a| a.size()).sum();
        self.keys.size() + accumulators + self.group_indices.capacity() * size_of::<usize>()
    }
}
