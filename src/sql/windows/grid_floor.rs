//! `__weir_window_floor(step_ns, ts, origin)`: the latest instant at or
//! before `ts` on the grid of `step_ns` through `origin`, the start of the
//! window (or period) a row falls in. DataFusion's `date_bin` computes the
//! same but turns a result before 1677 into NULL, which would give a row a
//! NULL window in ad-hoc queries; this fails with 22008 as the streaming
//! window operator does.

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{exec_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{sqlstate, WeirError};
use crate::stream::operators::window_spec::show_timestamp;
use crate::stream::time_columns::nanoseconds;

pub const GRID_FLOOR_FUNCTION_NAME: &str = "__weir_window_floor";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GridFloor {
    signature: Signature,
}

impl GridFloor {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::from(GridFloor {
            signature: Signature::any(3, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for GridFloor {
    fn name(&self) -> &str {
        GRID_FLOOR_FUNCTION_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [_, time @ DataType::Timestamp(_, _), _] => Ok(time.clone()),
            // The window's time column (a user's mistake, so said as one).
            [_, other, _] => Err(DataFusionError::External(Box::new(
                WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!(
                        "the window's time column has type {}, not a timestamp",
                        crate::error::postgres_type_name(&other.to_string())
                    ),
                )
                .with_hint("Window over a TIMESTAMP or TIMESTAMPTZ column."),
            ))),
            _ => exec_err!("{GRID_FLOOR_FUNCTION_NAME} needs (step_ns, timestamp, origin)"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (step, time, origin) = match args.args.as_slice() {
            [step, time, origin] => (step, time, origin),
            _ => return exec_err!("{GRID_FLOOR_FUNCTION_NAME} needs three arguments"),
        };
        let (Some(step), Some(origin)) =
            (constant_nanoseconds(step)?, constant_nanoseconds(origin)?)
        else {
            return exec_err!("{GRID_FLOOR_FUNCTION_NAME} needs a constant step and origin");
        };
        if step <= 0 {
            return exec_err!("{GRID_FLOOR_FUNCTION_NAME} needs a positive step");
        }
        let times = nanoseconds(&time.to_array(args.number_rows)?).map_err(external)?;
        let floors = times
            .iter()
            .map(|time| time.map(|time| floor(time, step, origin)).transpose())
            .collect::<std::result::Result<Int64Array, WeirError>>()
            .map_err(external)?;
        let zone = match args.return_field.data_type() {
            DataType::Timestamp(_, zone) => zone.clone(),
            _ => None,
        };
        let floors: ArrayRef = std::sync::Arc::new(floors);
        let floors = cast(&floors, &DataType::Timestamp(TimeUnit::Nanosecond, zone))?;
        Ok(ColumnarValue::Array(cast(
            &floors,
            args.return_field.data_type(),
        )?))
    }
}

/// The grid point at or before `time_ns`; 22008 before the first timestamp.
fn floor(time_ns: i64, step_ns: i64, origin_ns: i64) -> std::result::Result<i64, WeirError> {
    let time = i128::from(time_ns);
    let floor = time - (time - i128::from(origin_ns)).rem_euclid(i128::from(step_ns));
    i64::try_from(floor).map_err(|_| {
        WeirError::new(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp out of range: the window of {} starts before {}",
                show_timestamp(time_ns),
                show_timestamp(i64::MIN)
            ),
        )
        .with_hint("Check the row's time column, or use a smaller window.")
    })
}

/// A constant step (an integer) or origin (a timestamp) in nanoseconds.
fn constant_nanoseconds(value: &ColumnarValue) -> Result<Option<i64>> {
    let ColumnarValue::Scalar(scalar) = value else {
        return Ok(None);
    };
    Ok(match scalar {
        ScalarValue::Int64(value) => *value,
        ScalarValue::Int32(value) => value.map(i64::from),
        timestamp if matches!(timestamp.data_type(), DataType::Timestamp(_, _)) => {
            let times = nanoseconds(&timestamp.to_array()?).map_err(external)?;
            times.is_valid(0).then(|| times.value(0))
        }
        _ => None,
    })
}

fn external(error: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn floors_to_the_grid_through_the_origin() {
        assert_eq!(floor(7 * SECOND, 5 * SECOND, 0).unwrap(), 5 * SECOND);
        assert_eq!(floor(7 * SECOND, 5 * SECOND, SECOND).unwrap(), 6 * SECOND);
        assert_eq!(floor(-SECOND, 5 * SECOND, 0).unwrap(), -5 * SECOND);
        assert_eq!(floor(i64::MAX, SECOND, 0).unwrap(), i64::MAX - 854_775_807);
    }

    #[test]
    fn a_floor_before_the_first_timestamp_is_an_error_not_null() {
        let error = floor(i64::MIN + SECOND / 2, SECOND, 0).unwrap_err();
        assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW);
        assert!(
            error.message.contains("starts before 1677-09-21"),
            "{}",
            error.message
        );
    }
}
