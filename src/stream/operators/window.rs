//! Assigns each row to its TUMBLE, HOP or CUMULATE windows, appending
//! `window_start` and `window_end`. A row is repeated once per window it
//! falls in. Windows align to 1970-01-01 plus the offset.

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
    /// Windows that all start at the start of a `size`-long period and end
    /// every `slide` (the step) within it.
    Cumulate,
    /// Each row opens `[ts, ts + size)` (size = the gap); the session
    /// aggregate merges those that overlap or touch.
    Session,
}

/// The shape of a window: `size` long, a new one every `slide` (equal to
/// `size` for TUMBLE; the step for CUMULATE), starting at `offset` past
/// the epoch grid.
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

    /// The windows `(start, end)` containing `time_ns`, by ascending end.
    pub fn windows(&self, time_ns: i64) -> impl Iterator<Item = (i64, i64)> {
        let slide = self.slide_ns;
        let (first, last, cumulative_start) = match self.kind {
            WindowKind::Session => (time_ns, time_ns, None),
            WindowKind::Cumulate => {
                let start = self.floor(time_ns, self.size_ns);
                (
                    self.floor(time_ns, slide) + slide,
                    start + self.size_ns,
                    Some(start),
                )
            }
            _ => (
                self.floor(time_ns.saturating_sub(self.size_ns), slide) + slide,
                self.floor(time_ns, slide),
                None,
            ),
        };
        let size = self.size_ns;
        (0..)
            .map(move |step| first + step * slide)
            .take_while(move |value| *value <= last)
            .map(move |value| match cumulative_start {
                Some(start) => (start, value),
                None => (value, value + size),
            })
    }

    /// The start of the window ending at `end_ns`.
    pub fn start_of(&self, end_ns: i64) -> i64 {
        match self.kind {
            WindowKind::Cumulate => self.floor(end_ns - 1, self.size_ns),
            _ => end_ns - self.size_ns,
        }
    }

    /// The start of the earliest window still open at `watermark_ns` (its
    /// end is past the watermark): every later result row starts here or later.
    pub fn earliest_open_start(&self, watermark_ns: i64) -> i64 {
        match self.kind {
            WindowKind::Cumulate => self.floor(watermark_ns, self.size_ns),
            _ => {
                self.floor(watermark_ns.saturating_sub(self.size_ns), self.slide_ns) + self.slide_ns
            }
        }
    }

    /// The end of the earliest window still open at `watermark_ns`.
    pub fn earliest_open_end(&self, watermark_ns: i64) -> i64 {
        match self.kind {
            WindowKind::Cumulate => self.floor(watermark_ns, self.slide_ns) + self.slide_ns,
            _ => self.earliest_open_start(watermark_ns) + self.size_ns,
        }
    }

    pub fn describe(&self) -> String {
        let size = describe_duration(self.size_ns);
        let slide = describe_duration(self.slide_ns);
        match self.kind {
            WindowKind::Tumble => format!("TUMBLE(size={size})"),
            WindowKind::Hop => format!("HOP(slide={slide}, size={size})"),
            WindowKind::Cumulate => format!("CUMULATE(step={slide}, size={size})"),
            WindowKind::Session => format!("SESSION(gap={size})"),
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
        let mut ends = Vec::with_capacity(times.len());
        for (row, time) in times.iter().enumerate() {
            // A row without an event time belongs to no window.
            let Some(time) = time else { continue };
            for (start, end) in self.spec.windows(time) {
                indices.push(row as u32);
                starts.push(start);
                ends.push(end);
            }
        }
        let windowed = chunk.take(&UInt32Array::from(indices))?;
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

    fn starts(spec: &WindowSpec, time: i64) -> Vec<i64> {
        spec.windows(time).map(|(start, _)| start).collect()
    }

    #[test]
    fn cumulate_windows_share_a_start_and_end_every_step() {
        let spec = WindowSpec {
            kind: WindowKind::Cumulate,
            size_ns: 30 * MINUTE,
            slide_ns: 10 * MINUTE,
            offset_ns: 0,
        };
        let windows: Vec<_> = spec.windows(37 * MINUTE).collect();
        assert_eq!(
            windows,
            vec![
                (30 * MINUTE, 40 * MINUTE),
                (30 * MINUTE, 50 * MINUTE),
                (30 * MINUTE, 60 * MINUTE)
            ]
        );
        // A row on a step boundary is not in the window ending there.
        assert_eq!(spec.windows(50 * MINUTE).count(), 1);
        assert_eq!(spec.start_of(50 * MINUTE), 30 * MINUTE);
        assert_eq!(spec.start_of(60 * MINUTE), 30 * MINUTE);
        assert_eq!(spec.earliest_open_end(50 * MINUTE), 60 * MINUTE);
        assert_eq!(spec.earliest_open_start(50 * MINUTE), 30 * MINUTE);
    }

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
        assert_eq!(starts(&spec, 7 * MINUTE), vec![6 * MINUTE]);
        assert_eq!(starts(&spec, 6 * MINUTE), vec![6 * MINUTE]);
        assert_eq!(starts(&spec, -MINUTE), vec![-4 * MINUTE]);
    }

    #[test]
    fn hop_rows_fall_in_size_over_slide_windows() {
        let spec = hop(MINUTE, 5 * MINUTE);
        let first = starts(&spec, 7 * MINUTE + 1);
        assert_eq!(first, (3..=7).map(|m| m * MINUTE).collect::<Vec<_>>());
        // A size that is not a multiple of the slide.
        let spec = hop(2 * MINUTE, 5 * MINUTE);
        let second = starts(&spec, 7 * MINUTE);
        assert_eq!(second, vec![4 * MINUTE, 6 * MINUTE]);
        for start in second {
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
