//! A source's watermark: after row i it is `max(ts of rows 1..i) - delay`,
//! and it never goes back. A source whose watermark follows processing time
//! (PROCTIME, or idle for its `watermark_idle_timeout`) is also raised
//! between rows to a floor, logged with the rows so replay sees it too. Row i is judged against the watermark *before* it
//! arrived, so results do not depend on how rows were grouped into batches.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkTracker {
    column: usize,
    delay_ns: i64,
    /// Largest event time seen so far (nanoseconds since the epoch).
    max_event_ns: Option<i64>,
    /// The watermark it was raised to between rows, if any.
    floor_ns: Option<i64>,
    /// Rows do not move the watermark: only raises do (a source whose
    /// connector merges per-partition watermarks).
    raised_only: bool,
}

impl WatermarkTracker {
    pub fn new(column: usize, delay_ms: i64) -> Self {
        WatermarkTracker::new_ns(column, delay_ms.saturating_mul(1_000_000))
    }

    /// A watermark moved only by `raise_to`, never by the rows' times.
    pub fn raised_only(column: usize) -> Self {
        WatermarkTracker {
            raised_only: true,
            ..WatermarkTracker::new_ns(column, 0)
        }
    }

    /// The same watermark definition with no rows seen yet.
    pub fn restarted(&self) -> Self {
        WatermarkTracker {
            raised_only: self.raised_only,
            ..WatermarkTracker::new_ns(self.column, self.delay_ns)
        }
    }

    fn new_ns(column: usize, delay_ns: i64) -> Self {
        WatermarkTracker {
            column,
            delay_ns,
            max_event_ns: None,
            floor_ns: None,
            raised_only: false,
        }
    }

    /// The current watermark in nanoseconds; None before the first row.
    pub fn current_ns(&self) -> Option<i64> {
        self.rows_watermark(self.max_event_ns).max(self.floor_ns)
    }

    /// The watermark the rows alone give, after events up to `max_event_ns`.
    fn rows_watermark(&self, max_event_ns: Option<i64>) -> Option<i64> {
        match self.raised_only {
            true => None,
            false => max_event_ns.map(|max| max.saturating_sub(self.delay_ns)),
        }
    }

    /// The largest event time seen so far.
    pub fn max_event_ns(&self) -> Option<i64> {
        self.max_event_ns
    }

    /// Notes that rows up to event time `max_event_ns` were seen (a table
    /// reopened from its stored head, or read from the middle of its log).
    pub fn seen_up_to(&mut self, max_event_ns: Option<i64>) {
        self.max_event_ns = self.max_event_ns.max(max_event_ns);
    }

    /// Raises the watermark to at least `watermark_ns` (never lowers it).
    pub fn raise_to(&mut self, watermark_ns: i64) {
        self.floor_ns = Some(self.floor_ns.map_or(watermark_ns, |f| f.max(watermark_ns)));
    }

    /// Moves the watermark past `batch` (one vectorised max).
    pub fn advance(&mut self, batch: &RecordBatch) -> Result<()> {
        let times = event_times(batch.column(self.column))?;
        if let Some(batch_max) = max(&times) {
            self.max_event_ns = Some(self.max_event_ns.map_or(batch_max, |m| m.max(batch_max)));
        }
        Ok(())
    }

    /// For each row, the watermark in effect just before it arrived (NULL
    /// while no row has been seen); then moves past the batch. Rows with a
    /// NULL event time do not move the watermark.
    pub fn watermarks_before(&mut self, batch: &RecordBatch) -> Result<Int64Array> {
        let times = event_times(batch.column(self.column))?;
        let mut running = self.max_event_ns;
        let before: Int64Array = times
            .iter()
            .map(|time| {
                let watermark = self.rows_watermark(running).max(self.floor_ns);
                if let Some(time) = time {
                    running = Some(running.map_or(time, |m| m.max(time)));
                }
                watermark
            })
            .collect();
        self.max_event_ns = running;
        Ok(before)
    }
}

/// The event-time column as nanoseconds since the epoch.
fn event_times(column: &ArrayRef) -> Result<Int64Array> {
    let DataType::Timestamp(_, zone) = column.data_type() else {
        return Err(WeirError::internal(format!(
            "watermark column has type {}, not a timestamp",
            column.data_type()
        )));
    };
    let nanoseconds = cast(
        column,
        &DataType::Timestamp(TimeUnit::Nanosecond, zone.clone()),
    )
    .and_then(|column| cast(&column, &DataType::Int64))
    .map_err(|error| WeirError::internal(error.to_string()))?;
    Ok(nanoseconds.as_primitive::<Int64Type>().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampNanosecondArray;
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    const SECOND: i64 = 1_000_000_000;

    fn batch(seconds: &[Option<i64>]) -> RecordBatch {
        let times: TimestampNanosecondArray =
            seconds.iter().map(|s| s.map(|s| s * SECOND)).collect();
        let schema = Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        )]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(times)]).unwrap()
    }

    #[test]
    fn watermark_is_running_max_minus_delay_and_never_goes_back() {
        let mut tracker = WatermarkTracker::new(0, 5_000);
        assert_eq!(tracker.current_ns(), None);
        tracker.advance(&batch(&[Some(100), Some(90)])).unwrap();
        assert_eq!(tracker.current_ns(), Some(95 * SECOND));
        tracker.advance(&batch(&[Some(50), None])).unwrap();
        assert_eq!(tracker.current_ns(), Some(95 * SECOND));
    }

    #[test]
    fn each_row_sees_the_watermark_before_it() {
        let mut tracker = WatermarkTracker::new(0, 0);
        let before = tracker
            .watermarks_before(&batch(&[Some(10), Some(20), Some(15), None, Some(30)]))
            .unwrap();
        let expected: Int64Array = vec![None, Some(10), Some(20), Some(20), Some(20)]
            .into_iter()
            .map(|s: Option<i64>| s.map(|s| s * SECOND))
            .collect();
        assert_eq!(before, expected);
        assert_eq!(tracker.current_ns(), Some(30 * SECOND));
    }

    #[test]
    fn a_raised_watermark_holds_until_rows_pass_it() {
        let mut tracker = WatermarkTracker::new(0, 0);
        tracker.raise_to(50 * SECOND);
        assert_eq!(tracker.current_ns(), Some(50 * SECOND));
        let before = tracker
            .watermarks_before(&batch(&[Some(10), Some(60), Some(70)]))
            .unwrap();
        let expected: Int64Array = vec![Some(50), Some(50), Some(60)]
            .into_iter()
            .map(|s: Option<i64>| s.map(|s| s * SECOND))
            .collect();
        assert_eq!(before, expected);
        tracker.raise_to(20 * SECOND);
        assert_eq!(tracker.current_ns(), Some(70 * SECOND));
        assert_eq!(tracker.restarted().current_ns(), None);
    }

    #[test]
    fn a_raised_only_watermark_ignores_the_rows_times() {
        let mut tracker = WatermarkTracker::raised_only(0);
        let before = tracker
            .watermarks_before(&batch(&[Some(10), Some(60)]))
            .unwrap();
        assert_eq!(before.null_count(), 2);
        assert_eq!(tracker.current_ns(), None);
        assert_eq!(tracker.max_event_ns(), Some(60 * SECOND));
        tracker.raise_to(20 * SECOND);
        let before = tracker.watermarks_before(&batch(&[Some(70)])).unwrap();
        assert_eq!(before.value(0), 20 * SECOND);
        let restarted = tracker.restarted();
        assert_eq!(restarted.current_ns(), None);
        assert!(restarted.raised_only);
    }

    #[test]
    fn batch_grouping_does_not_change_what_rows_see() {
        let rows = [Some(3), Some(1), Some(7), Some(2), Some(9), Some(4)];
        let mut whole = WatermarkTracker::new(0, 1_000);
        let all = whole.watermarks_before(&batch(&rows)).unwrap();
        for split in 1..rows.len() {
            let mut parts = WatermarkTracker::new(0, 1_000);
            let mut seen: Vec<Option<i64>> = parts
                .watermarks_before(&batch(&rows[..split]))
                .unwrap()
                .iter()
                .collect();
            seen.extend(
                parts
                    .watermarks_before(&batch(&rows[split..]))
                    .unwrap()
                    .iter(),
            );
            assert_eq!(seen, all.iter().collect::<Vec<_>>(), "split at {split}");
            assert_eq!(parts, whole);
        }
    }
}
