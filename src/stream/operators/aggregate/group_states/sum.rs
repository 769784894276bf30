//! SUM(x): per group the sum and how many non-NULL values it holds (NULL
//! when none). Whole numbers and decimals wrap as DataFusion's SUM does;
//! floats add row by row, as DataFusion's grouped SUM does. State: the sum
//! (plain), or the sum and the count (sliding, over rows taken back).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Decimal128Type, Float64Type, Int64Type,
    UInt64Type,
};

use super::slots::Slots;
use super::{sign, Counted, GroupStates};
use crate::error::Result;

pub fn states(result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    let with_count = match state {
        [sum] if sum == result => false,
        [sum, DataType::UInt64] if sum == result => true,
        _ => return None,
    };
    let data_type = result.clone();
    Some(match result {
        DataType::Int64 => Box::new(SumStates::<Int64Type>::new(data_type, with_count)),
        DataType::UInt64 => Box::new(SumStates::<UInt64Type>::new(data_type, with_count)),
        DataType::Float64 => Box::new(SumStates::<Float64Type>::new(data_type, with_count)),
        DataType::Decimal128(_, _) => {
            Box::new(SumStates::<Decimal128Type>::new(data_type, with_count))
        }
        _ => return None,
    })
}

struct SumStates<T: ArrowPrimitiveType> {
    data_type: DataType,
    /// The sliding layout: the count is part of the state.
    with_count: bool,
    /// Per group the sum and how many non-NULL values it holds.
    sums: Slots<(T::Native, u64)>,
}

impl<T: ArrowPrimitiveType> SumStates<T> {
    fn new(data_type: DataType, with_count: bool) -> Self {
        SumStates {
            data_type,
            with_count,
            sums: Slots::default(),
        }
    }

    fn add(&mut self, group: usize, value: T::Native, sign: i64) {
        let (sum, count) = self.sums.get_mut(group);
        if sign > 0 {
            *sum = sum.add_wrapping(value);
            *count += 1;
        } else {
            *sum = sum.sub_wrapping(value);
            *count = count.saturating_sub(1);
        }
    }
}

impl<T: ArrowPrimitiveType> GroupStates for SumStates<T> {
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
        // A smaller integer is summed as bigint (sql::widened_sum).
        let values = cast(&arguments[0], &self.data_type)?;
        let values = values.as_primitive::<T>();
        let counted = Counted::new(values, mask);
        for (row, &group) in groups.iter().enumerate() {
            if counted.row(row) {
                self.add(group, values.value(row), sign(diffs, row));
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| {
            let (sum, count) = self.sums.get(group as usize);
            (count > 0).then_some(sum)
        });
        let array: PrimitiveArray<T> = values.collect();
        Ok(Arc::new(array.with_data_type(self.data_type.clone())))
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
        let mut columns = vec![self.evaluate(groups)?];
        if self.with_count {
            let counts = groups.iter().map(|&group| self.sums.get(group as usize).1);
            columns.push(Arc::new(UInt64Array::from_iter_values(counts)));
        }
        Ok(columns)
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let sums = cast(&states[0], &self.data_type)?;
        let sums = sums.as_primitive::<T>();
        let counts = match self.with_count {
            true => Some(cast(&states[1], &DataType::UInt64)?),
            false => None,
        };
        let counts = counts
            .as_ref()
            .map(|counts| counts.as_primitive::<UInt64Type>());
        for (row, &group) in groups.iter().enumerate() {
            // The plain layout keeps no count: a group with a sum has at
            // least one value, which is all the count decides there.
            let count = counts.map_or(u64::from(sums.is_valid(row)), |counts| counts.value(row));
            let (sum, held) = self.sums.get_mut(group);
            if sums.is_valid(row) {
                *sum = sum.add_wrapping(sums.value(row));
            }
            *held += count;
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
