//! Aggregate state per group in typed vectors indexed by group, for the
//! GROUP BY views that emit on update (`updating_aggregate`). DataFusion's
//! `GroupsAccumulator` reports its groups only by handing them over
//! (`evaluate` and `state` take what they report); a view that shows
//! partial results needs the value of the groups a batch touched before and
//! after it, and then goes on. These evaluate any set of groups without
//! changing them, keep what a failed write group must put back per group,
//! and write their checkpoint state in the layout of DataFusion's
//! accumulator for the same call (its `state_fields`), so a view's
//! checkpoint reads back whichever operator wrote it.
//!
//! The common calls have one: COUNT, SUM, AVG over floats, MIN and MAX over
//! whole numbers, decimals and times, COUNT(DISTINCT) over whole numbers
//! and times (the last three over rows that are never taken back). A view
//! with any other call keeps the row-level `AggregateOperator`.

mod average;
mod count;
mod distinct_count;
mod extreme;
mod slots;
mod sum;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::DataType;

use super::calls::AggregateCall;
use super::retraction::Retraction;
use crate::error::Result;

/// One aggregate call's state of every group of a bin.
pub trait GroupStates: Send {
    /// Makes room for `groups` groups (new ones empty).
    fn resize(&mut self, groups: usize);

    /// Adds each row's argument to its group (`groups[row]`), or takes it
    /// back where its diff is -1; rows the FILTER `mask` leaves out, and
    /// NULL arguments, do not count.
    fn update(
        &mut self,
        arguments: &[ArrayRef],
        groups: &[usize],
        diffs: Option<&[i64]>,
        mask: Option<&BooleanArray>,
    ) -> Result<()>;

    /// The value of each of `groups`, leaving them as they are.
    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef>;

    /// Keeps group `group` as it is now, for `undo`.
    fn save(&mut self, group: usize);

    /// Puts every group saved since the last `forget` back as it was.
    fn undo(&mut self);

    /// What was saved is no longer needed (the write group committed).
    fn forget(&mut self);

    /// Empties group `group` (its rows are all gone).
    fn reset(&mut self, group: usize);

    /// The state columns of `groups`, in the layout of DataFusion's
    /// accumulator for the call.
    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>>;

    /// Merges state columns (`state`'s layout), row `i` into `groups[i]`;
    /// nothing merged is logged for `undo`.
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()>;

    /// Bytes held.
    fn size(&self) -> usize;

    /// Bytes of what `undo` would put back.
    fn undo_bytes(&self) -> usize;
}

/// Typed group state for `call`, or None when it has none (the view then
/// uses the row-level aggregate).
pub fn group_states(call: &AggregateCall) -> Result<Option<Box<dyn GroupStates>>> {
    let function = &call.function;
    if function.expressions().len() != 1 || !function.order_bys().is_empty() {
        return Ok(None);
    }
    let name = function.fun().name().to_ascii_lowercase();
    let result = function.field().data_type().clone();
    let state_types: Vec<DataType> = match &call.retraction {
        Retraction::None => function
            .state_fields()?
            .iter()
            .map(|field| field.data_type().clone())
            .collect(),
        Retraction::Sliding => call
            .accumulator()?
            .state()?
            .iter()
            .map(|value| value.data_type())
            .collect(),
        Retraction::Multiset(_) => return Ok(None),
    };
    let retracts = call.retraction != Retraction::None;
    Ok(match (name.as_str(), function.is_distinct()) {
        ("count", false) => count::states(&result, &state_types),
        ("sum", false) => sum::states(&result, &state_types),
        ("avg", false) => average::states(&result, &state_types),
        ("min" | "max", false) if !retracts => {
            extreme::states(name == "max", &result, &state_types)
        }
        ("count", true) if !retracts => distinct_count::states(&result, &state_types),
        _ => None,
    })
}

/// Whether every call has typed group state.
pub fn all_supported(calls: &[AggregateCall]) -> Result<bool> {
    for call in calls {
        if group_states(call)?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Which rows count: a non-NULL argument the FILTER keeps.
pub(super) struct Counted<'a> {
    nulls: Option<NullBuffer>,
    mask: Option<&'a BooleanArray>,
}

impl<'a> Counted<'a> {
    pub fn new(values: &dyn Array, mask: Option<&'a BooleanArray>) -> Self {
        Counted {
            // Logical: a NULL literal is an array of type Null.
            nulls: values.logical_nulls(),
            mask,
        }
    }

    pub fn row(&self, row: usize) -> bool {
        self.nulls.as_ref().is_none_or(|nulls| nulls.is_valid(row))
            && self.mask.is_none_or(|mask| mask.value(row))
    }
}

/// A row's diff: 1 (added) or -1 (taken back).
pub(super) fn sign(diffs: Option<&[i64]>, row: usize) -> i64 {
    diffs.map_or(1, |diffs| diffs[row])
}
