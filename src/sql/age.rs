//! `age(a, b)` and `age(a)`, as Postgres computes them (its
//! `timestamp_age`): the difference in years, months, days and time of
//! the two timestamps' calendar fields, borrowing from the next field up
//! (a month borrowed is as long as the month it is borrowed from), never
//! mixing signs. `age(a)` is `age(current_date, a)`. A timestamp with a
//! time zone is taken in UTC (weir's sessions are UTC unless set).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit, TimestampNanosecondType,
};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

const TIMESTAMP: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(Age {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Age {
    signature: Signature,
}

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        match arguments.len() {
            1 | 2 => Ok(vec![TIMESTAMP; arguments.len()]),
            _ => Err(DataFusionError::Plan(
                "age takes one or two timestamps".to_string(),
            )),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    /// `age(a)` becomes `age(<today's midnight>, a)`, today being the
    /// statement's (as `current_date` is).
    fn simplify(&self, mut args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let Some(start) = info.query_execution_start_time() else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        if args.len() != 1 {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let midnight = start
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .and_then(|t| t.and_utc().timestamp_nanos_opt());
        let today = lit(ScalarValue::TimestampNanosecond(midnight, None));
        args.insert(0, today);
        Ok(ExprSimplifyResult::Simplified(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(Arc::new(function()), args),
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [later, earlier] = arrays.as_slice() else {
            return Err(DataFusionError::Execution(
                "age of one timestamp is computed from today's date".to_string(),
            ));
        };
        let (later, earlier) = (cast(later, &TIMESTAMP)?, cast(earlier, &TIMESTAMP)?);
        let later = later.as_primitive::<TimestampNanosecondType>();
        let earlier = earlier.as_primitive::<TimestampNanosecondType>();
        let ages: IntervalMonthDayNanoArray = (0..later.len())
            .map(|row| {
                (later.is_valid(row) && earlier.is_valid(row))
                    .then(|| age(later.value(row), earlier.value(row)))
                    .flatten()
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(ages) as ArrayRef))
    }
}

/// Calendar fields of a timestamp: year, month (1-12), day, and the time
/// of day in nanoseconds.
fn fields(nanoseconds: i64) -> Option<(i64, i64, i64, i64)> {
    use chrono::Datelike;
    let time = chrono::DateTime::from_timestamp_nanos(nanoseconds).naive_utc();
    let day_start = time
        .date()
        .and_hms_opt(0, 0, 0)?
        .and_utc()
        .timestamp_nanos_opt()?;
    Some((
        i64::from(time.year()),
        i64::from(time.month()),
        i64::from(time.day()),
        nanoseconds - day_start,
    ))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;

fn age(later: i64, earlier: i64) -> Option<IntervalMonthDayNano> {
    let (year1, month1, day1, time1) = fields(later)?;
    let (year2, month2, day2, time2) = fields(earlier)?;
    let negative = later < earlier;
    let flip = |value: i64| if negative { -value } else { value };
    let (mut years, mut months) = (flip(year1 - year2), flip(month1 - month2));
    let (mut days, mut time) = (flip(day1 - day2), flip(time1 - time2));
    // Borrow from the next field up; a borrowed month is the length of
    // the month before the later (or, flipped, the earlier) date's month.
    if time < 0 {
        time += NANOS_PER_DAY;
        days -= 1;
    }
    while days < 0 {
        let (year, month) = if negative {
            (year1, month1)
        } else {
            (year2, month2)
        };
        days += days_in_month(year, month);
        months -= 1;
    }
    while months < 0 {
        months += 12;
        years -= 1;
    }
    let months = i32::try_from(flip(years * 12 + months)).ok()?;
    let days = i32::try_from(flip(days)).ok()?;
    Some(IntervalMonthDayNano::new(months, days, flip(time)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp_nanos_opt()
            .unwrap()
    }

    const HOUR: i64 = 3_600_000_000_000;

    #[test]
    fn as_postgres_computes_ages() {
        // Values from Postgres 15.
        // age('2001-04-10', '1957-06-13') = 43 years 9 mons 27 days
        assert_eq!(
            age(at("2001-04-10 00:00:00"), at("1957-06-13 00:00:00")),
            Some(IntervalMonthDayNano::new(43 * 12 + 9, 27, 0))
        );
        // age('1957-06-13', '2001-04-10') = -43 years -9 mons -27 days
        assert_eq!(
            age(at("1957-06-13 00:00:00"), at("2001-04-10 00:00:00")),
            Some(IntervalMonthDayNano::new(-(43 * 12 + 9), -27, 0))
        );
        // age('2024-01-31 03:00', '2024-03-01 01:00') = -1 mons -22:00:00
        assert_eq!(
            age(at("2024-01-31 03:00:00"), at("2024-03-01 01:00:00")),
            Some(IntervalMonthDayNano::new(-1, 0, -22 * HOUR))
        );
        // age('2024-03-01 01:00', '2024-01-31 03:00') = 1 mon 22:00:00
        assert_eq!(
            age(at("2024-03-01 01:00:00"), at("2024-01-31 03:00:00")),
            Some(IntervalMonthDayNano::new(1, 0, 22 * HOUR))
        );
    }
}
