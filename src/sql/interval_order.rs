//! Intervals compared as Postgres compares them: on one line of time, a
//! month as 30 days and a day as 24 hours, so `INTERVAL '24 hours' =
//! INTERVAL '1 day'` and `'1 mon' > '29 days'`. Arrow compares the month,
//! day and nanosecond fields in turn. A comparison of two intervals becomes
//! a comparison of `interval_span(a)` and `interval_span(b)`, their
//! nanoseconds on that line as a numeric (wide enough for any interval).
//! GROUP BY, DISTINCT and joins over intervals still group field by field.
//! Also here, the other place Arrow's interval arithmetic differs:
//! `date ± interval` is a timestamp, as in Postgres.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Decimal128Builder};
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNanoType, TimeUnit};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};

use super::text_function::array_function;

const NANOSECONDS_PER_DAY: i128 = 86_400_000_000_000;
const SPAN_TYPE: DataType = DataType::Decimal128(38, 0);

/// One expression rewritten (`literal_types::postgres_types` walks the plan).
pub fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return Ok(Transformed::no(expr));
    };
    let is_interval =
        |operand: &Expr| matches!(operand.get_type(schema), Ok(DataType::Interval(_)));
    // `date ± interval` is a timestamp in Postgres (Arrow keeps a date and
    // drops the time: `DATE '2024-01-01' + INTERVAL '1 hour'` was the day).
    let is_date = |operand: &Expr| matches!(operand.get_type(schema), Ok(DataType::Date32));
    if matches!(op, Operator::Plus | Operator::Minus) && is_date(&left) && is_interval(&right) {
        let timestamp = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let left = Box::new(left.cast_to(&timestamp, schema)?);
        return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            left, op, right,
        ))));
    }
    if !is_comparison(op) || !is_interval(&left) || !is_interval(&right) {
        return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr::new(
            left, op, right,
        ))));
    }
    let function = Arc::new(array_function("interval_span", SPAN_TYPE, spans));
    let span = |operand: Box<Expr>| {
        let call = ScalarFunction::new_udf(function.clone(), vec![*operand]);
        Box::new(Expr::ScalarFunction(call))
    };
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
        span(left),
        op,
        span(right),
    ))))
}

/// `NULLIF(a, b)` of intervals as `CASE WHEN a = b THEN NULL ELSE a END`,
/// so that `rewrite` compares them as Postgres does (NULLIF compared the
/// fields: `NULLIF(INTERVAL '24 hours', INTERVAL '1 day')` was not NULL).
pub fn nullif(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarFunction(call) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let is_interval =
        |operand: &Expr| matches!(operand.get_type(schema), Ok(DataType::Interval(_)));
    let [value, other] = call.args.as_slice() else {
        return Ok(Transformed::no(expr));
    };
    if call.name() != "nullif" || !is_interval(value) || !is_interval(other) {
        return Ok(Transformed::no(expr));
    }
    // Built already compared on the line of time: the walk does not come
    // back to the new comparison.
    let equal = rewrite(
        Expr::BinaryExpr(BinaryExpr::new(
            Box::new(value.clone()),
            Operator::Eq,
            Box::new(other.clone()),
        )),
        schema,
    )?
    .data;
    let data_type = value.get_type(schema)?;
    let null = Expr::Literal(datafusion::common::ScalarValue::try_from(&data_type)?, None);
    let case = datafusion::logical_expr::when(equal, null).otherwise(value.clone())?;
    Ok(Transformed::yes(case))
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// Each interval's nanoseconds, a month as 30 days.
fn spans(values: &ArrayRef) -> Result<ArrayRef> {
    let cast = datafusion::arrow::compute::cast(
        values,
        &DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
    )?;
    let intervals = cast
        .as_any()
        .downcast_ref::<datafusion::arrow::array::IntervalMonthDayNanoArray>()
        .ok_or_else(|| DataFusionError::Internal("interval_span takes an interval".to_string()))?;
    let mut builder = Decimal128Builder::with_capacity(intervals.len());
    for row in 0..intervals.len() {
        if intervals.is_null(row) {
            builder.append_null();
            continue;
        }
        let (months, days, nanoseconds) = IntervalMonthDayNanoType::to_parts(intervals.value(row));
        let days = i128::from(months) * 30 + i128::from(days);
        builder.append_value(days * NANOSECONDS_PER_DAY + i128::from(nanoseconds));
    }
    Ok(Arc::new(builder.finish().with_data_type(SPAN_TYPE)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, IntervalMonthDayNanoArray};
    use datafusion::arrow::datatypes::{Decimal128Type, IntervalMonthDayNano};

    #[test]
    fn a_day_is_24_hours_and_a_month_30_days() {
        let hour = 3_600_000_000_000;
        let intervals: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
            Some(IntervalMonthDayNano::new(0, 1, 0)),
            Some(IntervalMonthDayNano::new(0, 0, 24 * hour)),
            Some(IntervalMonthDayNano::new(1, 0, 0)),
            Some(IntervalMonthDayNano::new(0, 30, 0)),
            None,
        ]));
        let spans = spans(&intervals).unwrap();
        let spans = spans.as_primitive::<Decimal128Type>();
        assert_eq!(spans.value(0), spans.value(1));
        assert_eq!(spans.value(2), spans.value(3));
        assert!(spans.is_null(4));
    }
}
