//! Assigns each row to its TUMBLE or HOP windows, appending `window_start`
//! and `window_end`. A HOP row is repeated once per window it falls in.
//! Windows align to 1970-01-01 plus the offset.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, TimestampNanosecondArray, UInt32Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Operator, Output};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumble,
    Hop,
}

/// The shape of a window: `size` long, a new one every `slide` (equal to
/// `size` for TUMBLE), starting at `offset` past the epoch grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    pub kind: WindowKind,
    pub size_ns: i64,
    pub slide_ns: i64,
    pub offset_ns: i64,
}

impl WindowSpec {
    fn floor(&self, time_ns: i64, step_ns: i64) -> i64 {
        time_ns - (time_ns - self.offset_ns).rem_euclid(step_ns)
    }

    /// Starts of the windows containing `time_ns`, ascending.
    pub fn starts(&self, time_ns: i64) -> impl Iterator<Item = i64> {
        let last = self.floor(time_ns, self.slide_ns);
        let first = self.floor(time_ns.saturating_sub(self.size_ns), self.slide_ns) + self.slide_ns;
        let slide = self.slide_ns;
        (0..)
            .map(move |step| first + step * slide)
            .take_while(move |start| *start <= last)
    }

    /// The start of the earliest window still open at `watermark_ns` (its
    /// end is past the watermark): every later result row starts here or later.
    pub fn earliest_open_start(&self, watermark_ns: i64) -> i64 {
        self.floor(watermark_ns.saturating_sub(self.size_ns), self.slide_ns) + self.slide_ns
    }

    pub fn describe(&self) -> String {
        let size = describe_duration(self.size_ns);
        match self.kind {
            WindowKind::Tumble => format!("TUMBLE(size={size})"),
            WindowKind::Hop => format!(
                "HOP(slide={}, size={size})",
                describe_duration(self.slide_ns)
            ),
        }
    }
}

/// `300000000000` ns reads as `5m`.
pub fn describe_duration(nanoseconds: i64) -> String {
    const UNITS: &[(i64, &str)] = &[
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    for (unit, suffix) in UNITS {
        if nanoseconds != 0 && nanoseconds % unit == 0 {
            return format!("{}{suffix}", nanoseconds / unit);
        }
    }
    format!("{nanoseconds}ns")
}

pub struct WindowOperator {
    spec: WindowSpec,
    time_column: usize,
    /// Input columns plus window_start and window_end.
    schema: SchemaRef,
}

impl WindowOperator {
    pub fn new(spec: WindowSpec, time_column: usize, schema: SchemaRef) -> Self {
        WindowOperator {
            spec,
            time_column,
            schema,
        }
    }
}

impl Operator for WindowOperator {
    fn name(&self) -> &'static str {
        "Window"
    }

    fn on_batch(&mut self, chunk: Chunk, output: &mut Output) -> Result<()> {
        let times = nanoseconds(chunk.rows.column(self.time_column))?;
        let mut indices = Vec::with_capacity(times.len());
        let mut starts = Vec::with_capacity(times.len());
        for (row, time) in times.iter().enumerate() {
            // A row without an event time belongs to no window.
            let Some(time) = time else { continue };
            for start in self.spec.starts(time) {
                indices.push(row as u32);
                starts.push(start);
            }
        }
        let windowed = chunk.take(&UInt32Array::from(indices))?;
        let ends: Vec<i64> = starts.iter().map(|s| s + self.spec.size_ns).collect();
        let time_type = self
            .schema
            .field(self.schema.fields().len() - 1)
            .data_type();
        let mut columns = windowed.rows.columns().to_vec();
        columns.push(timestamps(starts, time_type)?);
        columns.push(timestamps(ends, time_type)?);
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        output.push(Message::batch(windowed.with_rows(rows)));
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000_000_000;

    fn hop(slide: i64, size: i64) -> WindowSpec {
        WindowSpec {
            kind: WindowKind::Hop,
            size_ns: size,
            slide_ns: slide,
            offset_ns: 0,
        }
    }

    #[test]
    fn tumble_windows_align_to_the_epoch_plus_offset() {
        let spec = WindowSpec {
            kind: WindowKind::Tumble,
            size_ns: 5 * MINUTE,
            slide_ns: 5 * MINUTE,
            offset_ns: MINUTE,
        };
        assert_eq!(
            spec.starts(7 * MINUTE).collect::<Vec<_>>(),
            vec![6 * MINUTE]
        );
        assert_eq!(
            spec.starts(6 * MINUTE).collect::<Vec<_>>(),
            vec![6 * MINUTE]
        );
        assert_eq!(spec.starts(-MINUTE).collect::<Vec<_>>(), vec![-4 * MINUTE]);
    }

    #[test]
    fn hop_rows_fall_in_size_over_slide_windows() {
        let spec = hop(MINUTE, 5 * MINUTE);
        let starts: Vec<i64> = spec.starts(7 * MINUTE + 1).collect();
        assert_eq!(starts, (3..=7).map(|m| m * MINUTE).collect::<Vec<_>>());
        // A size that is not a multiple of the slide.
        let spec = hop(2 * MINUTE, 5 * MINUTE);
        let starts: Vec<i64> = spec.starts(7 * MINUTE).collect();
        assert_eq!(starts, vec![4 * MINUTE, 6 * MINUTE]);
        for start in starts {
            assert!(start <= 7 * MINUTE && 7 * MINUTE < start + 5 * MINUTE);
        }
    }

    #[test]
    fn earliest_open_window_is_the_first_ending_after_the_watermark() {
        let spec = hop(MINUTE, 5 * MINUTE);
        assert_eq!(spec.earliest_open_start(10 * MINUTE), 6 * MINUTE);
        assert_eq!(spec.earliest_open_start(10 * MINUTE + 1), 6 * MINUTE);
        let tumble = WindowSpec {
            kind: WindowKind::Tumble,
            size_ns: 5 * MINUTE,
            slide_ns: 5 * MINUTE,
            offset_ns: 0,
        };
        assert_eq!(tumble.earliest_open_start(10 * MINUTE), 10 * MINUTE);
        assert_eq!(tumble.earliest_open_start(9 * MINUTE), 5 * MINUTE);
        assert_eq!(describe_duration(5 * MINUTE), "5m");
    }
}
