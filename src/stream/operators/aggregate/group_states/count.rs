//! COUNT(x) (and COUNT(*), a count of a literal): per group how many rows
//! with x not NULL. State: the count (Int64), plain or sliding alike.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Int64Type};

use super::{sign, Counted, GroupStates};
use crate::error::Result;

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let shape = result == &DataType::Int64 && state == [DataType::Int64];
    shape.then(|| Box::new(CountStates::default()) as Box<dyn GroupStates>)
}

#[derive(Default)]
struct CountStates {
    counts: Vec<i64>,
    saved: Vec<(usize, i64)>,
}

impl GroupStates for CountStates {
    fn resize(&mut self, groups: usize) {
        self.counts.resize(groups, 0);
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
                self.counts[group] += sign(diffs, row);
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| self.counts[group as usize]);
        Ok(Arc::new(Int64Array::from_iter_values(values)))
    }

    fn save(&mut self, group: usize) {
        self.saved.push((group, self.counts[group]));
    }

    fn undo(&mut self) {
        for (group, count) in self.saved.drain(..).rev() {
            self.counts[group] = count;
        }
    }

    fn forget(&mut self) {
        self.saved.clear();
    }

    fn reset(&mut self, group: usize) {
        self.counts[group] = 0;
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let counts = states[0].as_primitive::<Int64Type>();
        for (row, &group) in groups.iter().enumerate() {
            if counts.is_valid(row) {
                self.counts[group] += counts.value(row);
            }
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.counts.capacity() * size_of::<i64>()
            + self.saved.capacity() * size_of::<(usize, i64)>()
    }

    fn undo_bytes(&self) -> usize {
        self.saved.len() * size_of::<(usize, i64)>()
    }
}
