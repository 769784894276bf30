//! `to_timestamp(seconds)` with Postgres's range check. DataFusion turns
//! a double's seconds into nanoseconds with a saturating cast, so
//! `to_timestamp(1e20)` was 2262-04-11 (and `-1e11` 1677-09-21); Postgres
//! answers 22008 "timestamp out of range". weir's timestamps end where
//! 64 bits of nanoseconds do, so seconds outside ±9,223,372,036.854775
//! (or NaN, or infinite; integers too, which were 22P02) are that error
//! here. The text forms
//! (`to_timestamp(text[, format])`) pass through unchanged. A double's
//! seconds round to the microsecond, as Postgres rounds them.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// The seconds a 64-bit count of nanoseconds reaches, either way.
const LIMIT_SECONDS: f64 = i64::MAX as f64 / 1e9;

/// `to_timestamp`, checking numeric seconds before DataFusion's.
pub fn function(inner: Arc<ScalarUDF>) -> ScalarUDF {
    ScalarUDF::new_from_impl(CheckedSeconds { inner })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSeconds {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for CheckedSeconds {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arguments)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let [seconds] = args.args.as_slice() {
            check_seconds(seconds)?;
            if matches!(seconds.data_type(), DataType::Float32 | DataType::Float64) {
                let zone = match args.return_field.data_type() {
                    DataType::Timestamp(_, zone) => zone.clone(),
                    _ => None,
                };
                return microsecond_timestamps(seconds, zone);
            }
        }
        self.inner.invoke_with_args(args)
    }
}

/// Seconds as Postgres takes them: rounded to the microsecond (to even on
/// a tie, as `rint`). DataFusion truncated the nanoseconds, so
/// `to_timestamp(pi())` printed `…03.141592`, Postgres `…03.141593`.
fn microsecond_timestamps(
    seconds: &ColumnarValue,
    zone: Option<Arc<str>>,
) -> Result<ColumnarValue> {
    let scalar = matches!(seconds, ColumnarValue::Scalar(_));
    let values = cast(&seconds.to_array(1)?, &DataType::Float64)?;
    let nanoseconds: TimestampNanosecondArray = values
        .as_primitive::<Float64Type>()
        .unary(|value| (value * 1e6).round_ties_even() as i64 * 1000);
    let timestamps: ArrayRef = Arc::new(nanoseconds.with_timezone_opt(zone));
    Ok(match scalar {
        true => ColumnarValue::Scalar(ScalarValue::try_from_array(&timestamps, 0)?),
        false => ColumnarValue::Array(timestamps),
    })
}

/// Fails on the first number of seconds no timestamp holds.
fn check_seconds(seconds: &ColumnarValue) -> Result<()> {
    if !seconds.data_type().is_numeric() {
        return Ok(());
    }
    let values = seconds.to_array(1)?;
    let values = cast(&values, &DataType::Float64)?;
    let values = values.as_primitive::<Float64Type>();
    for row in 0..values.len() {
        if values.is_null(row) {
            continue;
        }
        let value = values.value(row);
        if value.is_nan() {
            return Err(DataFusionError::Execution(
                "timestamp out of range: timestamp cannot be NaN".to_string(),
            ));
        }
        if !(-LIMIT_SECONDS..=LIMIT_SECONDS).contains(&value) {
            return Err(DataFusionError::Execution(format!(
                "timestamp out of range: \"{value:e}\""
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(value: ScalarValue) -> Result<()> {
        check_seconds(&ColumnarValue::Scalar(value))
    }

    #[test]
    fn seconds_past_the_nanosecond_range_are_out_of_range() {
        assert!(checked(ScalarValue::Float64(Some(1e20))).is_err());
        assert!(checked(ScalarValue::Float64(Some(-1e11))).is_err());
        assert!(checked(ScalarValue::Float64(Some(f64::NAN))).is_err());
        assert!(checked(ScalarValue::Float64(Some(f64::INFINITY))).is_err());
        assert!(checked(ScalarValue::Decimal128(Some(10i128.pow(20)), 21, 0)).is_err());
        assert!(checked(ScalarValue::Int64(Some(100_000_000_000))).is_err());
    }

    #[test]
    fn seconds_round_to_the_microsecond() {
        let rounded = |value: f64| {
            let seconds = ColumnarValue::Scalar(ScalarValue::Float64(Some(value)));
            match microsecond_timestamps(&seconds, None).unwrap() {
                ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(n), None)) => n,
                other => unreachable!("{other:?}"),
            }
        };
        assert_eq!(rounded(std::f64::consts::PI), 3_141_593_000);
        assert_eq!(rounded(-1.0000004), -1_000_000_000);
        assert_eq!(rounded(1.5), 1_500_000_000);
    }

    #[test]
    fn seconds_in_range_and_other_arguments_pass() {
        assert!(checked(ScalarValue::Float64(Some(1.7e9))).is_ok());
        assert!(checked(ScalarValue::Float64(Some(-9.2e9))).is_ok());
        assert!(checked(ScalarValue::Float64(None)).is_ok());
        assert!(checked(ScalarValue::Decimal128(Some(15), 2, 1)).is_ok());
        assert!(checked(ScalarValue::Utf8(Some("2024-01-01".into()))).is_ok());
    }
}
