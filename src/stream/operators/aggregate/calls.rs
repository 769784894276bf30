//! The aggregate calls of a GROUP BY, shared by the aggregate operators:
//! their arguments over a chunk, the same arguments in group order
//! (`GroupedArguments`), DataFusion accumulators for a new group, and the
//! columns of emitted rows.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, filter, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::retraction::{MultisetAccumulator, Retraction};
use crate::error::Result;
use crate::stream::message::{without_nulls, Chunk, Message};
use crate::stream::operator::Output;

/// One aggregate call and its optional FILTER (WHERE ...).
pub struct AggregateCall {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// How its accumulator takes rows back (when its input retracts).
    pub retraction: Retraction,
    /// Whether DataFusion's accumulator reports a copy of its state
    /// (`state_is_kept`), decided once.
    copies_state: bool,
}

impl AggregateCall {
    /// A call over rows that are never taken back.
    pub fn new(
        function: Arc<AggregateFunctionExpr>,
        filter: Option<Arc<dyn PhysicalExpr>>,
    ) -> Self {
        let copies_state = copies_state(&function);
        AggregateCall {
            function,
            filter,
            retraction: Retraction::None,
            copies_state,
        }
    }

    /// A fresh accumulator for a new group.
    pub fn accumulator(&self) -> Result<Box<dyn Accumulator>> {
        Ok(match &self.retraction {
            Retraction::None => self.function.create_accumulator()?,
            Retraction::Sliding => self.function.create_sliding_accumulator()?,
            Retraction::Multiset(shape) => Box::new(MultisetAccumulator::new((**shape).clone())?),
        })
    }

    /// Whether its accumulator's `state()` leaves it as it was, so that
    /// a copy of its state need not rebuild it (`state::snapshot`):
    /// DataFusion's COUNT, SUM, MIN, MAX and AVG (plain or sliding), and
    /// COUNT(DISTINCT) over integers and times, report a copy of what
    /// they hold, and so do weir's multisets. Others may hand their state
    /// over (COUNT(DISTINCT) over strings takes its set).
    pub fn state_is_kept(&self) -> bool {
        self.copies_state || matches!(self.retraction, Retraction::Multiset(_))
    }

    /// How many state columns its accumulator has.
    pub fn state_width(&self) -> Result<usize> {
        Ok(match &self.retraction {
            Retraction::None => self.function.state_fields()?.len(),
            // A fresh accumulator's state is its shape (sliding SUM keeps
            // a count besides the sum the plain one keeps).
            Retraction::Sliding => self.accumulator()?.state()?.len(),
            Retraction::Multiset(shape) => shape.state_width(),
        })
    }
}

/// See `AggregateCall::state_is_kept`.
fn copies_state(function: &AggregateFunctionExpr) -> bool {
    let name = function.fun().name();
    if !function.is_distinct() {
        return matches!(name, "count" | "sum" | "min" | "max" | "avg");
    }
    // DataFusion's native distinct sets copy their values into the state.
    let fields = function.state_fields().unwrap_or_default();
    let native = |data_type: &DataType| data_type.is_integer() || data_type.is_temporal();
    name == "count"
        && matches!(fields.first().map(|field| field.data_type()),
            Some(DataType::List(item)) if native(item.data_type()))
}

/// The aggregate value columns (after the first `groups` columns of
/// `schema`) of emitted rows, each row's values taken (not copied).
pub fn value_columns(
    schema: &SchemaRef,
    groups: usize,
    rows: impl ExactSizeIterator<Item = Vec<ScalarValue>>,
) -> Result<Vec<ArrayRef>> {
    let fields = &schema.fields()[groups..];
    let length = rows.len();
    let mut columns: Vec<Vec<ScalarValue>> =
        fields.iter().map(|_| Vec::with_capacity(length)).collect();
    for row in rows {
        for (column, value) in columns.iter_mut().zip(row) {
            column.push(value);
        }
    }
    fields
        .iter()
        .zip(columns)
        .map(|(field, values)| {
            if values.is_empty() {
                return Ok(datafusion::arrow::array::new_empty_array(field.data_type()));
            }
            let column = ScalarValue::iter_to_array(values)?;
            Ok(if column.data_type() == field.data_type() {
                column
            } else {
                cast(&column, field.data_type())?
            })
        })
        .collect()
}

/// Sends rows with their diffs (left out when all are inserts).
pub fn push_changes(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    diffs: impl Iterator<Item = i64>,
    output: &mut Output,
) -> Result<()> {
    let diffs = Int64Array::from_iter_values(diffs);
    let all_inserts = diffs.values().iter().all(|diff| *diff == 1);
    output.push(Message::batch(Chunk {
        rows: RecordBatch::try_new(schema.clone(), columns)?,
        diffs: (!all_inserts).then_some(diffs),
        watermarks: None,
    }));
    Ok(())
}

/// Each aggregate call's argument columns and FILTER mask over `chunk`.
/// An ordered call (`string_agg(x, ',' ORDER BY y)`) gets its ORDER BY
/// columns after its arguments, as DataFusion's order-sensitive
/// accumulators expect (they sort what they keep).
pub fn evaluate_arguments(calls: &[AggregateCall], chunk: &Chunk) -> Result<Vec<Arguments>> {
    let rows = chunk.num_rows();
    calls
        .iter()
        .map(|call| {
            let arguments = call
                .function
                .expressions()
                .iter()
                .chain(call.function.order_bys().iter().map(|order| &order.expr))
                .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let mask = match &call.filter {
                Some(predicate) => {
                    let mask = predicate.evaluate(&chunk.rows)?.into_array(rows)?;
                    Some(without_nulls(mask.as_boolean()))
                }
                None => None,
            };
            Ok((arguments, mask))
        })
        .collect()
}

/// One aggregate call's argument columns and its FILTER mask.
pub type Arguments = (Vec<ArrayRef>, Option<BooleanArray>);

/// Fresh accumulators for a new group.
pub fn new_accumulators(calls: &[AggregateCall]) -> Result<Vec<Box<dyn Accumulator>>> {
    calls.iter().map(AggregateCall::accumulator).collect()
}

pub fn evaluate(accumulators: &mut [Box<dyn Accumulator>]) -> Result<Vec<ScalarValue>> {
    accumulators
        .iter_mut()
        .map(|accumulator| Ok(accumulator.evaluate()?))
        .collect()
}

/// Each call's arguments with a batch's rows in group order (each group's
/// rows contiguous): one `take` per column per batch, then a zero-copy
/// slice per group, instead of a `take` (and its allocations) per group.
pub struct GroupedArguments(Vec<Arguments>);

impl GroupedArguments {
    pub fn new(arguments: &[Arguments], order: &UInt32Array) -> Result<Self> {
        let calls = arguments
            .iter()
            .map(|(columns, mask)| {
                let columns = columns
                    .iter()
                    .map(|column| Ok(take(column.as_ref(), order, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let mask = match mask {
                    Some(mask) => Some(take(mask, order, None)?.as_boolean().clone()),
                    None => None,
                };
                Ok((columns, mask))
            })
            .collect::<Result<_>>()?;
        Ok(GroupedArguments(calls))
    }

    /// Call `call`'s argument columns for the group at `rows` of the order
    /// (its FILTER applied).
    pub fn group(&self, call: usize, rows: &Range<usize>) -> Result<Vec<ArrayRef>> {
        let (columns, mask) = &self.0[call];
        let mask = mask.as_ref().map(|mask| mask.slice(rows.start, rows.len()));
        columns
            .iter()
            .map(|column| {
                let part = column.slice(rows.start, rows.len());
                Ok(match &mask {
                    Some(mask) => filter(&part, mask)?,
                    None => part,
                })
            })
            .collect()
    }
}
