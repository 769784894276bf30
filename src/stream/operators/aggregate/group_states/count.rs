//! COUNT(x) (and COUNT(*), a count of a literal): per group how many rows
//! with x not NULL. State: the count (Int64), plain or sliding alike.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Int64Type};

use super::slots::Slots;
use super::{sign, Counted, GroupStates};
use crate::error::Result;

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let shape = result == &DataType::Int64 && state == [DataType::Int64];
    shape.then(|| Box::new(CountStates::default()) as Box<dyn GroupStates>)
}

#[derive(Default)]
struct CountStates {
    counts: Slots<i64>,
}

impl GroupStates for CountStates {
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
        let counted = Counted::new(arguments[0].as_ref(), mask);
        for (row, &group) in groups.iter().enumerate() {
            if counted.row(row) {
                *self.counts.get_mut(group) += sign(diffs, row);
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| self.counts.get(group as usize));
        Ok(Arc::new(Int64Array::from_iter_values(values)))
    }

    fn save(&mut self, group: usize) {
        self.counts.save(group);
    }

    fn undo(&mut self) {
        self.counts.undo();
    }

    fn forget(&mut self) {
        self.counts.forget();
    }

    fn reset(&mut self, group: usize) {
        self.counts.reset(group);
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let counts = states[0].as_primitive::<Int64Type>();
        for (row, &group) in groups.iter().enumerate() {
            if counts.is_valid(row) {
                *self.counts.get_mut(group) += counts.value(row);
            }
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.counts.size()
    }

    fn undo_bytes(&self) -> usize {
        self.counts.undo_bytes()
    }
}
