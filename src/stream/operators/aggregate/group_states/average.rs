//! AVG(x) over floats (and over whole numbers DataFusion reads as floats):
//! per group the sum and how many non-NULL values, added row by row. State:
//! the count (UInt64), then the sum (Float64), as DataFusion's.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, UInt64Type};

use super::{sign, Counted, GroupStates};
use crate::error::Result;

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let shape = result == &DataType::Float64 && state == [DataType::UInt64, DataType::Float64];
    shape.then(|| Box::new(AverageStates::default()) as Box<dyn GroupStates>)
}

#[derive(Default)]
struct AverageStates {
    sums: Vec<f64>,
    counts: Vec<u64>,
    saved: Vec<(usize, f64, u64)>,
}

impl GroupStates for AverageStates {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups, 0.0);
        self.counts.resize(groups, 0);
    }

    fn update(
        &mut self,
        arguments: &[ArrayRef],
        groups: &[usize],
        diffs: Option<&[i64]>,
        mask: Option<&BooleanArray>,
    ) -> Result<()> {
        let values = cast(&arguments[0], &DataType::Float64)?;
        let values = values.as_primitive::<Float64Type>();
        let counted = Counted::new(values, mask);
        for (row, &group) in groups.iter().enumerate() {
            if !counted.row(row) {
                continue;
            }
            if sign(diffs, row) > 0 {
                self.sums[group] += values.value(row);
                self.counts[group] += 1;
            } else {
                self.sums[group] -= values.value(row);
                self.counts[group] = self.counts[group].saturating_sub(1);
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| {
            let group = group as usize;
            let count = self.counts[group];
            (count > 0).then(|| self.sums[group] / count as f64)
        });
        Ok(Arc::new(values.collect::<Float64Array>()))
    }

    fn save(&mut self, group: usize) {
        self.saved
            .push((group, self.sums[group], self.counts[group]));
    }

    fn undo(&mut self) {
        for (group, sum, count) in self.saved.drain(..).rev() {
            self.sums[group] = sum;
            self.counts[group] = count;
        }
    }

    fn forget(&mut self) {
        self.saved.clear();
    }

    fn reset(&mut self, group: usize) {
        self.sums[group] = 0.0;
        self.counts[group] = 0;
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let counts = groups.iter().map(|&group| self.counts[group as usize]);
        // The sum as it is, even of no value left: what a float sum holds
        // after rows were taken back goes on into the next ones, restored
        // or not.
        let sums = groups.iter().map(|&group| self.sums[group as usize]);
        Ok(vec![
            Arc::new(UInt64Array::from_iter_values(counts)),
            Arc::new(Float64Array::from_iter_values(sums)),
        ])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let counts = states[0].as_primitive::<UInt64Type>();
        let sums = states[1].as_primitive::<Float64Type>();
        for (row, &group) in groups.iter().enumerate() {
            if counts.is_valid(row) {
                self.counts[group] += counts.value(row);
            }
            if sums.is_valid(row) {
                self.sums[group] += sums.value(row);
            }
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<f64>()
            + self.counts.capacity() * size_of::<u64>()
            + self.saved.capacity() * size_of::<(usize, f64, u64)>()
    }

    fn undo_bytes(&self) -> usize {
        self.saved.len() * size_of::<(usize, f64, u64)>()
    }
}
