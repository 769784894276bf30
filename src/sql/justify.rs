//! `justify_hours`, `justify_days` and `justify_interval`, as Postgres
//! computes them (its `interval_justify_*`): whole days out of the time
//! part, whole 30-day months out of the days, with the parts' signs made
//! to agree. Past the interval's range: 22008 "interval out of range".

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::datatypes::{
    DataType, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit,
};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;
const DAYS_PER_MONTH: i32 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Justify {
    Hours,
    Days,
    Interval,
}

/// The three functions, to register.
pub fn functions() -> Vec<ScalarUDF> {
    [Justify::Hours, Justify::Days, Justify::Interval]
        .into_iter()
        .map(function)
        .collect()
}

/// `justify_hours` alone (a difference of timestamps is planned with it).
pub fn justify_hours() -> ScalarUDF {
    function(Justify::Hours)
}

fn function(justify: Justify) -> ScalarUDF {
    ScalarUDF::new_from_impl(JustifyFunction {
        justify,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JustifyFunction {
    justify: Justify,
    signature: Signature,
}

impl ScalarUDFImpl for JustifyFunction {
    fn name(&self) -> &str {
        match self.justify {
            Justify::Hours => "justify_hours",
            Justify::Days => "justify_days",
            Justify::Interval => "justify_interval",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// An interval, or what becomes one: a difference of timestamps
    /// (a duration in weir; an interval in Postgres) or text.
    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        match arguments {
            [DataType::Interval(_) | DataType::Duration(_) | DataType::Utf8 | DataType::Null] => {
                Ok(vec![DataType::Interval(IntervalUnit::MonthDayNano)])
            }
            _ => Err(DataFusionError::Plan(format!(
                "{} takes an interval",
                self.name()
            ))),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(input) = arrays.first() else {
            return Err(DataFusionError::Plan(format!(
                "{} takes an interval",
                self.name()
            )));
        };
        let justified = input
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|value| value.map(|value| justify(self.justify, value)).transpose())
            .collect::<Result<IntervalMonthDayNanoArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(justified) as ArrayRef))
    }
}

fn justify(kind: Justify, value: IntervalMonthDayNano) -> Result<IntervalMonthDayNano> {
    let IntervalMonthDayNano {
        mut months,
        mut days,
        mut nanoseconds,
    } = value;
    match kind {
        Justify::Hours => {
            (days, nanoseconds) = whole_days(days, nanoseconds)?;
            (days, nanoseconds) = agree_days_and_time(days, nanoseconds);
        }
        Justify::Days => {
            (months, days) = whole_months(months, days)?;
            if months > 0 && days < 0 {
                (months, days) = (months - 1, days + DAYS_PER_MONTH);
            } else if months < 0 && days > 0 {
                (months, days) = (months + 1, days - DAYS_PER_MONTH);
            }
        }
        Justify::Interval => {
            // Months first when days and time agree in sign, so adding
            // the time's days cannot overflow (as Postgres does).
            if (days > 0 && nanoseconds > 0) || (days < 0 && nanoseconds < 0) {
                (months, days) = whole_months(months, days)?;
            }
            (days, nanoseconds) = whole_days(days, nanoseconds)?;
            (months, days) = whole_months(months, days)?;
            if months > 0 && (days < 0 || (days == 0 && nanoseconds < 0)) {
                (months, days) = (months - 1, days + DAYS_PER_MONTH);
            } else if months < 0 && (days > 0 || (days == 0 && nanoseconds > 0)) {
                (months, days) = (months + 1, days - DAYS_PER_MONTH);
            }
            (days, nanoseconds) = agree_days_and_time(days, nanoseconds);
        }
    }
    Ok(IntervalMonthDayNano::new(months, days, nanoseconds))
}

/// Whole days out of the time part into the days.
fn whole_days(days: i32, nanoseconds: i64) -> Result<(i32, i64)> {
    let whole = nanoseconds / NANOS_PER_DAY;
    let days = i32::try_from(whole)
        .ok()
        .and_then(|whole| days.checked_add(whole))
        .ok_or_else(out_of_range)?;
    Ok((days, nanoseconds - whole * NANOS_PER_DAY))
}

/// Whole 30-day months out of the days into the months.
fn whole_months(months: i32, days: i32) -> Result<(i32, i32)> {
    let whole = days / DAYS_PER_MONTH;
    let months = months.checked_add(whole).ok_or_else(out_of_range)?;
    Ok((months, days - whole * DAYS_PER_MONTH))
}

fn agree_days_and_time(days: i32, nanoseconds: i64) -> (i32, i64) {
    if days > 0 && nanoseconds < 0 {
        (days - 1, nanoseconds + NANOS_PER_DAY)
    } else if days < 0 && nanoseconds > 0 {
        (days + 1, nanoseconds - NANOS_PER_DAY)
    } else {
        (days, nanoseconds)
    }
}

fn out_of_range() -> DataFusionError {
    DataFusionError::Execution("interval out of range".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600 * 1_000_000_000;

    fn interval(months: i32, days: i32, hours: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, hours * HOUR)
    }

    #[test]
    fn as_postgres_justifies() {
        // Values from Postgres 15.
        assert_eq!(
            justify(Justify::Hours, interval(0, 0, 27)).unwrap(),
            interval(0, 1, 3)
        );
        assert_eq!(
            justify(Justify::Hours, interval(0, 1, -3)).unwrap(),
            interval(0, 0, 21)
        );
        assert_eq!(
            justify(Justify::Days, interval(0, 35, 0)).unwrap(),
            interval(1, 5, 0)
        );
        assert_eq!(
            justify(Justify::Days, interval(1, -35, 0)).unwrap(),
            interval(0, -5, 0)
        );
        // justify_interval('1 mon -1 hour') = '29 days 23:00:00'
        assert_eq!(
            justify(Justify::Interval, interval(1, 0, -1)).unwrap(),
            interval(0, 29, 23)
        );
        // justify_interval('-1 mon 50 hours') = '-27 days -22:00:00'
        assert_eq!(
            justify(Justify::Interval, interval(-1, 0, 50)).unwrap(),
            interval(0, -27, -22)
        );
    }
}
