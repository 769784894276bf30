//! Float `+`, `-`, `*`, `/` with Postgres's checks (float.c): a result
//! that is infinite from finite operands is 22003 "value out of range:
//! overflow"; a product or quotient that is 0 from non-zero operands (and
//! a finite divisor) is 22003 "underflow"; dividing anything but NaN by
//! zero is 22012. ±Infinity and NaN operands give what IEEE gives.
//! The kernel runs first, vectorized; the checks are one pass over the
//! operands and the result, without allocating per row.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::numeric::{add, div, mul, sub};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr_common::datum::apply;

use super::function::Arithmetic;
use crate::error::{sqlstate, WeirError};

pub fn checked(
    arithmetic: Arithmetic,
    left: &ColumnarValue,
    right: &ColumnarValue,
) -> Result<ColumnarValue> {
    let result = match arithmetic {
        Arithmetic::Add => apply(left, right, add)?,
        Arithmetic::Subtract => apply(left, right, sub)?,
        Arithmetic::Multiply => apply(left, right, mul)?,
        Arithmetic::Divide => apply(left, right, div)?,
        Arithmetic::Negate => return Ok(left.clone()),
    };
    let rows = match &result {
        ColumnarValue::Array(array) => array.len(),
        ColumnarValue::Scalar(_) => 1,
    };
    let [left, right, out] = [left, right, &result].map(|value| as_doubles(value, rows));
    let (left, right, out) = (left?, right?, out?);
    let (left, right, out) = (
        left.as_primitive::<Float64Type>(),
        right.as_primitive::<Float64Type>(),
        out.as_primitive::<Float64Type>(),
    );
    for row in 0..rows {
        if out.is_null(row) {
            continue;
        }
        let (a, b, c) = (left.value(row), right.value(row), out.value(row));
        if let Some(error) = failure(arithmetic, a, b, c) {
            return Err(DataFusionError::External(Box::new(error)));
        }
    }
    Ok(result)
}

/// Postgres's error for `a op b = c`, if any.
fn failure(arithmetic: Arithmetic, a: f64, b: f64, c: f64) -> Option<WeirError> {
    if arithmetic == Arithmetic::Divide && b == 0.0 && !a.is_nan() {
        return Some(WeirError::new(
            sqlstate::DIVISION_BY_ZERO,
            "division by zero",
        ));
    }
    let divisor_finite = arithmetic != Arithmetic::Divide || b.is_finite();
    let underflow = matches!(arithmetic, Arithmetic::Multiply | Arithmetic::Divide)
        && c == 0.0
        && a != 0.0
        && b != 0.0
        && divisor_finite;
    if c.is_infinite() && a.is_finite() && b.is_finite() {
        return Some(out_of_range("overflow"));
    }
    underflow.then(|| out_of_range("underflow"))
}

fn out_of_range(what: &str) -> WeirError {
    WeirError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("value out of range: {what}"),
    )
    .with_hint("Cast the operands to NUMERIC for exact arithmetic over a wider range.")
}

fn as_doubles(value: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    let array = value.to_array(rows)?;
    match array.data_type() {
        DataType::Float64 => Ok(array),
        _ => Ok(cast(&array, &DataType::Float64)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_s_float_errors() {
        let code = |arithmetic, a, b, c| failure(arithmetic, a, b, c).map(|error| error.code);
        use Arithmetic::*;
        assert_eq!(
            code(Divide, 1.0, 0.0, f64::INFINITY),
            Some(sqlstate::DIVISION_BY_ZERO)
        );
        assert_eq!(
            code(Divide, 0.0, 0.0, f64::NAN),
            Some(sqlstate::DIVISION_BY_ZERO)
        );
        assert_eq!(code(Divide, f64::NAN, 0.0, f64::NAN), None);
        assert_eq!(
            code(Multiply, 1e308, 10.0, f64::INFINITY),
            Some(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE)
        );
        assert_eq!(
            code(Multiply, 1e-308, 1e-308, 0.0),
            Some(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE)
        );
        assert_eq!(code(Divide, 1.0, f64::INFINITY, 0.0), None);
        assert_eq!(code(Add, f64::INFINITY, 1.0, f64::INFINITY), None);
        assert_eq!(code(Subtract, 1.5, 0.5, 1.0), None);
    }
}
