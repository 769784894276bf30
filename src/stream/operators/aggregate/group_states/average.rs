//! AVG(x) over floats (and over whole numbers DataFusion reads as floats):
//! per group the sum and how many non-NULL values, added row by row. State:
//! the count (UInt64), then the sum (Float64), as DataFusion's.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, UInt64Type};

use super::slots::Slots;
use super::{sign, Counted, GroupStates};
use crate::error::Result;

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let shape = result == &DataType::Float64 && state == [DataType::UInt64, DataType::Float64];
    shape.then(|| Box::new(AverageStates::default()) as Box<dyn GroupStates>)
}

#[derive(Default)]
struct AverageStates {
    /// Per group the sum and how many non-NULL values it holds.
    sums: Slots<(f64, u64)>,
}

impl GroupStates for AverageStates {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups);
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
            let (sum, count) = self.sums.get_mut(group);
            if sign(diffs, row) > 0 {
                *sum += values.value(row);
                *count += 1;
            } else {
                *sum -= values.value(row);
                *count = count.saturating_sub(1);
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| {
            let (sum, count) = self.sums.get(group as usize);
            (count > 0).then(|| sum / count as f64)
        });
        Ok(Arc::new(values.collect::<Float64Array>()))
    }

    fn save(&mut self, group: usize) {
        self.sums.save(group);
    }

    fn undo(&mut self) {
        self.sums.undo();
    }

    fn forget(&mut self) {
        self.sums.forget();
    }

    fn reset(&mut self, group: usize) {
        self.sums.reset(group);
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let counts = groups.iter().map(|&group| self.sums.get(group as usize).1);
        // The sum as it is, even of no value left: what a float sum holds
        // after rows were taken back goes on into the next ones, restored
        // or not.
        let sums = groups.iter().map(|&group| self.sums.get(group as usize).0);
        Ok(vec![
            Arc::new(UInt64Array::from_iter_values(counts)),
            Arc::new(Float64Array::from_iter_values(sums)),
        ])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let counts = states[0].as_primitive::<UInt64Type>();
        let sums = states[1].as_primitive::<Float64Type>();
        for (row, &group) in groups.iter().enumerate() {
            let (sum, count) = self.sums.get_mut(group);
            if counts.is_valid(row) {
                *count += counts.value(row);
            }
            if sums.is_valid(row) {
                *sum += sums.value(row);
            }
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.sums.size()
    }

    fn undo_bytes(&self) -> usize {
        self.sums.undo_bytes()
    }
}
