//! COUNT(DISTINCT x) over rows that are never taken back, for whole
//! numbers and times (read as i64): one set of (group, value) for the bin
//! and a count per group. A write group logs the pairs it added, so undo
//! removes them. State: the group's values as a list, as DataFusion's.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::HashSet;

use super::slots::Slots;
use super::{Counted, GroupStates};
use crate::error::{Result, WeirError};

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let [DataType::List(item)] = state else {
        return None;
    };
    let whole = matches!(
        item.data_type(),
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Time32(_)
            | DataType::Time64(_)
    );
    (whole && result == &DataType::Int64).then(|| {
        Box::new(DistinctCountStates {
            item: Arc::clone(item),
            pairs: HashSet::default(),
            counts: Slots::default(),
            added: Vec::new(),
        }) as Box<dyn GroupStates>
    })
}

struct DistinctCountStates {
    /// The list item of the state (the argument's type).
    item: FieldRef,
    /// Every (group, value) the bin holds.
    pairs: HashSet<(u32, i64)>,
    counts: Slots<i64>,
    /// Pairs added since the last `forget`.
    added: Vec<(u32, i64)>,
}

impl DistinctCountStates {
    fn add_all(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        mask: Option<&BooleanArray>,
        logs: bool,
    ) -> Result<()> {
        let values = cast(values, &DataType::Int64)?;
        let values = values.as_primitive::<Int64Type>();
        let counted = Counted::new(values, mask);
        for (row, &group) in groups.iter().enumerate() {
            if !counted.row(row) {
                continue;
            }
            let pair = (group as u32, values.value(row));
            if self.pairs.insert(pair) {
                *self.counts.get_mut(group) += 1;
                if logs {
                    self.added.push(pair);
                }
            }
        }
        Ok(())
    }
}

impl GroupStates for DistinctCountStates {
    fn resize(&mut self, groups: usize) {
        self.counts.resize(groups);
    }

    fn update(
        &mut self,
        arguments: &[ArrayRef],
        groups: &[usize],
        diffs: Option<&[i64]>,
        mask: Option<&BooleanArray>,
    ) -> Result<()> {
        if diffs.is_some_and(|diffs| diffs.iter().any(|diff| *diff < 0)) {
            return Err(WeirError::internal(
                "COUNT(DISTINCT) state got a retraction",
            ));
        }
        self.add_all(&arguments[0], groups, mask, true)
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| self.counts.get(group as usize));
        Ok(Arc::new(Int64Array::from_iter_values(values)))
    }

    fn save(&mut self, group: usize) {
        self.counts.save(group);
    }

    fn undo(&mut self) {
        for pair in self.added.drain(..) {
            self.pairs.remove(&pair);
        }
        self.counts.undo();
    }

    fn forget(&mut self) {
        self.counts.forget();
        self.added.clear();
    }

    fn reset(&mut self, group: usize) {
        self.pairs.retain(|(owner, _)| *owner as usize != group);
        self.counts.reset(group);
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        // Each group's values, in one pass over the set.
        let most = groups
            .iter()
            .map(|&group| group as usize + 1)
            .max()
            .unwrap_or(0);
        let mut position = vec![u32::MAX; most];
        for (index, &group) in groups.iter().enumerate() {
            position[group as usize] = index as u32;
        }
        let mut lists: Vec<Vec<i64>> = vec![Vec::new(); groups.len()];
        for &(group, value) in &self.pairs {
            let at = position.get(group as usize).copied().unwrap_or(u32::MAX);
            if let Some(list) = lists.get_mut(at as usize) {
                list.push(value);
            }
        }
        let offsets = OffsetBuffer::from_lengths(lists.iter().map(Vec::len));
        let values = Int64Array::from_iter_values(lists.into_iter().flatten());
        let values = cast(&values, self.item.data_type())?;
        let list = ListArray::try_new(Arc::clone(&self.item), offsets, values, None)?;
        Ok(vec![Arc::new(list)])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let lists = states[0]
            .as_list_opt::<i32>()
            .ok_or_else(|| WeirError::internal("a COUNT(DISTINCT) state is not a list"))?;
        for (row, &group) in groups.iter().enumerate() {
            if lists.is_null(row) {
                continue;
            }
            let values = lists.value(row);
            let rows = vec![group; values.len()];
            // Merged state is not the write group's to undo (a spilled
            // group read back in the middle of one).
            self.add_all(&values, &rows, None, false)?;
        }
        Ok(())
    }

    fn size(&self) -> usize {
        // A hash set's entry and its control byte.
        self.pairs.capacity() * (size_of::<(u32, i64)>() + 1)
            + self.counts.size()
            + self.added.capacity() * size_of::<(u32, i64)>()
    }

    fn undo_bytes(&self) -> usize {
        self.counts.undo_bytes() + self.added.len() * size_of::<(u32, i64)>()
    }
}
