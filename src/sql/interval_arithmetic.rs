//! `interval * number`, `number * interval` and `interval / number`, which
//! Postgres has and DataFusion's type coercion refuses. An expression
//! planner sees the operator before coercion and, when one side is an
//! interval and the other a number, plans a call of `interval_multiply` /
//! `interval_divide` instead.
//!
//! Postgres' rules: an integer factor multiplies each field (months, days,
//! time) exactly; a fractional one spills fractions down — a fraction of a
//! month becomes days at 30 days a month, a fraction of a day becomes time
//! at 24 hours a day — and time is rounded to the microsecond. A field that
//! leaves its range is 22008 "interval out of range"; dividing by zero is
//! 22012.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::datatypes::{
    DataType, Field, Float64Type, Int64Type, IntervalMonthDayNano, IntervalUnit,
};
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::expr::{Placeholder, ScalarFunction};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    cast, ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::error::{sqlstate, WeirError};

const DAYS_PER_MONTH: f64 = 30.0;
const NANOSECONDS_PER_DAY: f64 = 86_400e9;
const NANOSECONDS_PER_MICROSECOND: f64 = 1_000.0;
const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// Plans interval-by-number products and quotients.
#[derive(Debug)]
pub struct IntervalArithmeticPlanner {
    multiply: Arc<ScalarUDF>,
    divide: Arc<ScalarUDF>,
}

impl Default for IntervalArithmeticPlanner {
    fn default() -> Self {
        let function = |divide| Arc::new(ScalarUDF::new_from_impl(IntervalScale::new(divide)));
        IntervalArithmeticPlanner {
            multiply: function(false),
            divide: function(true),
        }
    }
}

impl ExprPlanner for IntervalArithmeticPlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let is_interval = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Interval(_)));
        let number_type = |e: &Expr| factor_type(e.get_type(schema).ok()?);
        let (function, interval, factor) = match expr.op {
            BinaryOperator::Multiply if is_interval(&expr.left) => {
                (&self.multiply, &expr.left, &expr.right)
            }
            BinaryOperator::Multiply if is_interval(&expr.right) => {
                (&self.multiply, &expr.right, &expr.left)
            }
            BinaryOperator::Divide if is_interval(&expr.left) => {
                (&self.divide, &expr.left, &expr.right)
            }
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let factor = match factor {
            // An untyped parameter is a double, as Postgres resolves it.
            Expr::Placeholder(Placeholder { id, field: None }) => {
                Expr::Placeholder(Placeholder::new_with_field(
                    id.clone(),
                    Some(Arc::new(Field::new("", DataType::Float64, true))),
                ))
            }
            typed => match number_type(typed) {
                Some(factor_type) => cast(typed.clone(), factor_type),
                None => return Ok(PlannerResult::Original(expr)),
            },
        };
        let arguments = vec![cast(interval.clone(), INTERVAL), factor];
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(function.clone(), arguments),
        )))
    }
}

/// Integers stay exact; other numbers are scaled as doubles.
fn factor_type(data_type: DataType) -> Option<DataType> {
    if data_type.is_integer() {
        Some(DataType::Int64)
    } else if data_type.is_numeric() {
        Some(DataType::Float64)
    } else {
        None
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalScale {
    divide: bool,
    signature: Signature,
}

impl IntervalScale {
    fn new(divide: bool) -> Self {
        IntervalScale {
            divide,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        if self.divide {
            "interval_divide"
        } else {
            "interval_multiply"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(INTERVAL)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [intervals, factors] = arrays.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes 2 arguments",
                self.name()
            )));
        };
        let intervals =
            intervals.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let factor = |row: usize| -> Factor {
            match factors.data_type() {
                DataType::Int64 => Factor::Integer(factors.as_primitive::<Int64Type>().value(row)),
                _ => Factor::Real(factors.as_primitive::<Float64Type>().value(row)),
            }
        };
        let mut values = Vec::with_capacity(intervals.len());
        for row in 0..intervals.len() {
            if intervals.is_null(row) || factors.is_null(row) {
                values.push(None);
                continue;
            }
            let scaled = match (factor(row), self.divide) {
                (Factor::Integer(n), false) => multiply_exactly(intervals.value(row), n),
                (Factor::Integer(n), true) => divide(intervals.value(row), n as f64),
                (Factor::Real(x), false) => scale(intervals.value(row), x),
                (Factor::Real(x), true) => divide(intervals.value(row), x),
            };
            values.push(Some(
                scaled.map_err(|e| DataFusionError::External(Box::new(e)))?,
            ));
        }
        let array: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(values));
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&array, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(array))
    }
}

enum Factor {
    Integer(i64),
    Real(f64),
}

fn out_of_range() -> WeirError {
    WeirError::new(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range")
}

fn multiply_exactly(
    value: IntervalMonthDayNano,
    factor: i64,
) -> Result<IntervalMonthDayNano, WeirError> {
    let small = i32::try_from(factor).ok();
    let months = small.and_then(|f| value.months.checked_mul(f));
    let days = small.and_then(|f| value.days.checked_mul(f));
    let nanoseconds = value.nanoseconds.checked_mul(factor);
    match (months, days, nanoseconds) {
        (Some(months), Some(days), Some(nanoseconds)) => {
            Ok(IntervalMonthDayNano::new(months, days, nanoseconds))
        }
        // A zero field stays zero whatever the factor.
        _ if value.months == 0 && value.days == 0 => nanoseconds
            .map(|n| IntervalMonthDayNano::new(0, 0, n))
            .ok_or_else(out_of_range),
        _ => Err(out_of_range()),
    }
}

fn divide(value: IntervalMonthDayNano, divisor: f64) -> Result<IntervalMonthDayNano, WeirError> {
    if divisor == 0.0 {
        return Err(WeirError::new(
            sqlstate::DIVISION_BY_ZERO,
            "division by zero",
        ));
    }
    scale(value, 1.0 / divisor)
}

/// Postgres' fractional scaling: fractions of months spill into days, of
/// days into time; time rounds to the microsecond.
fn scale(value: IntervalMonthDayNano, factor: f64) -> Result<IntervalMonthDayNano, WeirError> {
    if !factor.is_finite() {
        return Err(out_of_range());
    }
    let months = f64::from(value.months) * factor;
    let whole_months = months.trunc();
    let days = f64::from(value.days) * factor + (months - whole_months) * DAYS_PER_MONTH;
    let whole_days = days.trunc();
    let nanoseconds = value.nanoseconds as f64 * factor + (days - whole_days) * NANOSECONDS_PER_DAY;
    let nanoseconds =
        (nanoseconds / NANOSECONDS_PER_MICROSECOND).round() * NANOSECONDS_PER_MICROSECOND;
    let fits_i32 = |x: f64| x >= f64::from(i32::MIN) && x <= f64::from(i32::MAX);
    // i64::MAX as f64 rounds up to 2^63, which does not fit.
    let fits_i64 = |x: f64| x >= i64::MIN as f64 && x < i64::MAX as f64;
    if !(fits_i32(whole_months) && fits_i32(whole_days) && fits_i64(nanoseconds)) {
        return Err(out_of_range());
    }
    Ok(IntervalMonthDayNano::new(
        whole_months as i32,
        whole_days as i32,
        nanoseconds as i64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000_000;

    fn interval(months: i32, days: i32, nanoseconds: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, nanoseconds)
    }

    #[test]
    fn integer_factors_multiply_each_field() {
        assert_eq!(
            multiply_exactly(interval(1, 2, HOUR), 3).unwrap(),
            interval(3, 6, 3 * HOUR)
        );
        assert_eq!(
            multiply_exactly(interval(0, 0, HOUR), -2).unwrap(),
            interval(0, 0, -2 * HOUR)
        );
    }

    #[test]
    fn fractions_spill_into_smaller_fields() {
        // Postgres: interval '1 mon' * 1.5 = 1 mon 15 days; '1 day' * 1.5 = 1 day 12:00:00.
        assert_eq!(scale(interval(1, 0, 0), 1.5).unwrap(), interval(1, 15, 0));
        assert_eq!(
            scale(interval(0, 1, 0), 1.5).unwrap(),
            interval(0, 1, 12 * HOUR)
        );
        // '1 hour' / 7 = 00:08:34.285714
        assert_eq!(
            divide(interval(0, 0, HOUR), 7.0).unwrap(),
            interval(0, 0, 514_285_714_000)
        );
    }

    #[test]
    fn leaving_a_field_range_is_22008_and_zero_is_22012() {
        let error = multiply_exactly(interval(i32::MAX, 0, 0), 2).unwrap_err();
        assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW);
        assert!(multiply_exactly(interval(0, 0, HOUR), i64::MAX).is_err());
        assert!(scale(interval(0, 1, 0), 1e300).is_err());
        assert!(scale(interval(0, 1, 0), f64::NAN).is_err());
        assert_eq!(
            divide(interval(0, 1, 0), 0.0).unwrap_err().code,
            sqlstate::DIVISION_BY_ZERO
        );
    }
}
