//! Reading a function call's arguments row by row to estimate its output,
//! before the function runs.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, IntervalMonthDayNano};
use datafusion::common::Result;
use datafusion::logical_expr::ColumnarValue;

/// One argument of a call. A scalar is kept as one row, not expanded to the
/// batch's length: it may itself be large.
pub(super) struct Argument {
    values: ArrayRef,
    scalar: bool,
}

impl Argument {
    pub fn new(value: &ColumnarValue) -> Result<Self> {
        Ok(match value {
            ColumnarValue::Scalar(scalar) => Argument {
                values: scalar.to_array_of_size(1)?,
                scalar: true,
            },
            ColumnarValue::Array(array) => Argument {
                values: array.clone(),
                scalar: false,
            },
        })
    }

    /// The argument cast to `data_type` (a count to Int64, a date to days).
    pub fn cast(&self, data_type: &DataType) -> Result<Self> {
        Ok(Argument {
            values: cast(&self.values, data_type)?,
            scalar: self.scalar,
        })
    }

    pub fn data_type(&self) -> &DataType {
        self.values.data_type()
    }

    fn index(&self, row: usize) -> usize {
        if self.scalar {
            0
        } else {
            row
        }
    }

    pub fn is_null(&self, row: usize) -> bool {
        self.values.is_null(self.index(row))
    }

    /// The string at `row`; None for NULL or a non-string argument.
    pub fn text(&self, row: usize) -> Option<&str> {
        if self.is_null(row) {
            return None;
        }
        let index = self.index(row);
        match self.values.data_type() {
            DataType::Utf8 => Some(self.values.as_string::<i32>().value(index)),
            DataType::LargeUtf8 => Some(self.values.as_string::<i64>().value(index)),
            DataType::Utf8View => Some(self.values.as_string_view().value(index)),
            _ => None,
        }
    }

    /// The Int64 at `row` (cast the argument first); None for NULL.
    pub fn integer(&self, row: usize) -> Option<i64> {
        if self.is_null(row) {
            return None;
        }
        self.values
            .as_primitive_opt::<Int64Type>()
            .map(|values| values.value(self.index(row)))
    }

    /// The month-day-nanosecond interval at `row`; None for NULL.
    pub fn interval(&self, row: usize) -> Option<IntervalMonthDayNano> {
        if self.is_null(row) {
            return None;
        }
        self.values
            .as_primitive_opt::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>()
            .map(|values| values.value(self.index(row)))
    }

    /// Bytes of the value at `row` (0 for NULL).
    pub fn value_bytes(&self, row: usize) -> u64 {
        if self.is_null(row) {
            return 0;
        }
        if let Some(text) = self.text(row) {
            return text.len() as u64;
        }
        let index = self.index(row);
        match self.values.data_type() {
            DataType::Binary => self.values.as_binary::<i32>().value(index).len() as u64,
            DataType::LargeBinary => self.values.as_binary::<i64>().value(index).len() as u64,
            DataType::BinaryView => self.values.as_binary_view().value(index).len() as u64,
            data_type => match data_type.primitive_width() {
                Some(width) => width as u64,
                None => slice_bytes(&self.values, index),
            },
        }
    }

    /// Bytes of the argument over `rows` rows (a scalar counts once a row).
    pub fn total_bytes(&self, rows: usize) -> u64 {
        if self.scalar {
            return self.value_bytes(0).saturating_mul(rows as u64);
        }
        if let Some(width) = self.values.data_type().primitive_width() {
            return (width * self.values.len()) as u64;
        }
        (0..self.values.len())
            .map(|row| self.value_bytes(row))
            .sum()
    }

    /// Whether the string at `row` is ASCII (one byte a character).
    pub fn is_ascii(&self, row: usize) -> bool {
        self.text(row).is_none_or(str::is_ascii)
    }
}

/// Bytes of one row of a nested or otherwise variable-width array.
fn slice_bytes(values: &ArrayRef, index: usize) -> u64 {
    values
        .slice(index, 1)
        .to_data()
        .get_slice_memory_size()
        .unwrap_or(0) as u64
}
