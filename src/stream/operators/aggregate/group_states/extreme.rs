//! MIN(x) and MAX(x) over rows that are never taken back, for whole
//! numbers, decimals and times (floats keep DataFusion's accumulator, for
//! its NaN order): per group the extreme so far. State: the value.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use datafusion::arrow::datatypes::*;

use super::slots::Slots;
use super::{Counted, GroupStates};
use crate::error::{Result, WeirError};

pub fn states(max: bool, result: &DataType, state: &[DataType]) -> Option<Box<dyn GroupStates>> {
    if state != std::slice::from_ref(result) {
        return None;
    }
    macro_rules! of {
        ($type:ty) => {
            Box::new(ExtremeStates::<$type>::new(max, result.clone()))
        };
    }
    Some(match result {
        DataType::Int8 => of!(Int8Type),
        DataType::Int16 => of!(Int16Type),
        DataType::Int32 => of!(Int32Type),
        DataType::Int64 => of!(Int64Type),
        DataType::UInt8 => of!(UInt8Type),
        DataType::UInt16 => of!(UInt16Type),
        DataType::UInt32 => of!(UInt32Type),
        DataType::UInt64 => of!(UInt64Type),
        DataType::Decimal128(_, _) => of!(Decimal128Type),
        DataType::Date32 => of!(Date32Type),
        DataType::Date64 => of!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => of!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => of!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => of!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => of!(TimestampNanosecondType),
        DataType::Time32(TimeUnit::Second) => of!(Time32SecondType),
        DataType::Time32(TimeUnit::Millisecond) => of!(Time32MillisecondType),
        DataType::Time64(TimeUnit::Microsecond) => of!(Time64MicrosecondType),
        DataType::Time64(TimeUnit::Nanosecond) => of!(Time64NanosecondType),
        _ => return None,
    })
}

struct ExtremeStates<T: ArrowPrimitiveType> {
    max: bool,
    data_type: DataType,
    /// Per group the extreme so far, and whether there is one.
    values: Slots<(T::Native, bool)>,
}

impl<T: ArrowPrimitiveType> ExtremeStates<T> {
    fn new(max: bool, data_type: DataType) -> Self {
        ExtremeStates {
            max,
            data_type,
            values: Slots::default(),
        }
    }

    fn offer(&mut self, group: usize, value: T::Native) {
        let max = self.max;
        let (current, set) = self.values.get_mut(group);
        let better = match max {
            true => value.is_gt(*current),
            false => value.is_lt(*current),
        };
        if !*set || better {
            *current = value;
            *set = true;
        }
    }

    fn add_all(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        mask: Option<&BooleanArray>,
    ) -> Result<()> {
        let values = values.as_primitive_opt::<T>().ok_or_else(|| {
            WeirError::internal("MIN/MAX got an argument of another type than its result")
        })?;
        let counted = Counted::new(values, mask);
        for (row, &group) in groups.iter().enumerate() {
            if counted.row(row) {
                self.offer(group, values.value(row));
            }
        }
        Ok(())
    }
}

impl<T: ArrowPrimitiveType> GroupStates for ExtremeStates<T> {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups);
    }

    fn update(
        &mut self,
        arguments: &[ArrayRef],
        groups: &[usize],
        diffs: Option<&[i64]>,
        mask: Option<&BooleanArray>,
    ) -> Result<()> {
        if diffs.is_some_and(|diffs| diffs.iter().any(|diff| *diff < 0)) {
            return Err(WeirError::internal("MIN/MAX state got a retraction"));
        }
        self.add_all(&arguments[0], groups, mask)
    }

    fn evaluate(&self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups.iter().map(|&group| {
            let (value, set) = self.values.get(group as usize);
            set.then_some(value)
        });
        let array: PrimitiveArray<T> = values.collect();
        Ok(Arc::new(array.with_data_type(self.data_type.clone())))
    }

    fn save(&mut self, group: usize) {
        self.values.save(group);
    }

    fn undo(&mut self) {
        self.values.undo();
    }

    fn forget(&mut self) {
        self.values.forget();
    }

    fn reset(&mut self, group: usize) {
        self.values.reset(group);
    }

    fn state(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let values = datafusion::arrow::compute::cast(&states[0], &self.data_type)?;
        self.add_all(&values, groups, None)
    }

    fn size(&self) -> usize {
        self.values.size()
    }

    fn undo_bytes(&self) -> usize {
        self.values.undo_bytes()
    }
}
