//! Timestamp columns as nanoseconds since the epoch and back, whatever
//! their unit and zone: the window, aggregate, session and emit-on-close
//! operators (and the planner's window grid) compute on i64 nanoseconds.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};

use crate::error::{Result, WeirError};

/// A timestamp column as nanoseconds since the epoch.
pub fn nanoseconds(column: &ArrayRef) -> Result<Int64Array> {
    let DataType::Timestamp(_, zone) = column.data_type() else {
        return Err(WeirError::internal(format!(
            "window time column has type {}, not a timestamp",
            column.data_type()
        )));
    };
    let converted = cast(
        column,
        &DataType::Timestamp(TimeUnit::Nanosecond, zone.clone()),
    )?;
    Ok(cast(&converted, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// Nanosecond values as a column of `data_type` (the time column's type).
pub fn timestamps(values: Vec<i64>, data_type: &DataType) -> Result<ArrayRef> {
    let zone = match data_type {
        DataType::Timestamp(_, zone) => zone.clone(),
        _ => None,
    };
    let array: ArrayRef = Arc::new(TimestampNanosecondArray::from(values).with_timezone_opt(zone));
    Ok(cast(&array, data_type)?)
}
