//! Timestamp columns as nanoseconds since the epoch and back, whatever
//! their unit and zone: the window, aggregate, session and emit-on-close
//! operators (and the planner's window grid) compute on i64 nanoseconds.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};

use crate::error::{Result, WeirError};

/// The wall clock (UTC, as `now()`), in nanoseconds since 1970: the
/// processing time of join TTLs and temporal filters.
pub fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos().min(i64::MAX as u128) as i64)
}

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

/// `text` with `:00` seconds added when it is a date and a time of day
/// written to the minute (`2026-01-01 10:00`, `2026-01-01T10:00+02:00`),
/// which Postgres accepts and Arrow's timestamp parser does not; None when
/// it needs nothing added (or is no such timestamp).
pub fn with_seconds(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    let bytes = trimmed.as_bytes();
    let separator = bytes.iter().position(|b| *b == b' ' || *b == b'T')?;
    let date = &bytes[..separator];
    let is_date = date.len() >= 8
        && date.iter().all(|b| b.is_ascii_digit() || *b == b'-')
        && date.iter().filter(|b| **b == b'-').count() == 2;
    if !is_date {
        return None;
    }
    let time_start = separator
        + 1
        + bytes[separator + 1..]
            .iter()
            .take_while(|b| **b == b' ')
            .count();
    let hours = bytes[time_start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let colon = time_start + hours;
    let minutes_end = colon + 3;
    let minutes = bytes.get(colon + 1..minutes_end)?;
    let ends = match bytes.get(minutes_end) {
        None => true,
        Some(next) => matches!(next, b'+' | b'-' | b'Z' | b'z' | b' '),
    };
    let shaped = (1..=2).contains(&hours)
        && bytes.get(colon) == Some(&b':')
        && minutes.iter().all(u8::is_ascii_digit);
    (shaped && ends).then(|| {
        let (head, tail) = trimmed.split_at(minutes_end);
        format!("{head}:00{tail}")
    })
}

#[cfg(test)]
mod tests {
    use super::with_seconds;

    #[test]
    fn times_to_the_minute_gain_seconds() {
        let cases = [
            ("2026-01-01 10:00", Some("2026-01-01 10:00:00")),
            ("2026-01-01T9:05", Some("2026-01-01T9:05:00")),
            ("2026-01-01 10:00+02:00", Some("2026-01-01 10:00:00+02:00")),
            ("2026-01-01 10:00Z", Some("2026-01-01 10:00:00Z")),
            ("2026-01-01 10:00:30", None),
            ("2026-01-01 10:00.5", None),
            ("2026-01-01", None),
            ("10:00", None),
            ("2026-01-01 100:00", None),
            ("abc 10:00", None),
        ];
        for (text, expected) in cases {
            assert_eq!(with_seconds(text).as_deref(), expected, "{text}");
        }
    }
}
