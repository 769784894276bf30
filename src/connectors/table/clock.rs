//! Processing time for a table: a PROCTIME() column stamped with the wall
//! clock as rows arrive, and a watermark raised between rows — to the wall
//! clock for a PROCTIME() stream, or, after `watermark_idle_timeout` without
//! rows, by the time that has passed since the last row. Every raise is
//! logged with the rows (`ticks/<table>/<row offset>`) and committed with the
//! views' changes, so replay after a crash sees the same watermarks; a
//! PROCTIME() table's raises a checkpoint covers are trimmed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::record_batch::RecordBatch;

use super::between_rows::TICKS;
use super::TableLog;
use crate::catalog::StreamDefinition;
use crate::error::{Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::checkpoint::{decode_i64, encode_i64};
use crate::stream::Message;

/// How long the clock waits for a table's writes to be free before it
/// leaves the table for its next tick.
pub const CLOCK_WAIT: Duration = Duration::from_millis(100);

/// How a table's watermark moves without rows.
#[derive(Debug)]
pub struct Clock {
    /// The watermark is the wall clock (a PROCTIME() stream).
    processing_time: bool,
    idle_timeout: Option<Duration>,
    /// When rows last arrived (or the table opened), and the watermark then.
    last_rows: (Instant, Option<i64>),
}

impl Clock {
    pub fn new(stream: Option<&StreamDefinition>, watermark_ns: Option<i64>) -> Option<Self> {
        let watermark = stream?.watermark.as_ref()?;
        let idle_timeout = watermark
            .idle_timeout_ms
            .map(|ms| Duration::from_millis(ms.max(0) as u64));
        (watermark.processing_time || idle_timeout.is_some()).then(|| Clock {
            processing_time: watermark.processing_time,
            idle_timeout,
            last_rows: (Instant::now(), watermark_ns),
        })
    }

    /// The watermark the table should have now.
    fn due(&self, now: Instant, unix_ns: i64) -> Option<i64> {
        if self.processing_time {
            return Some(unix_ns);
        }
        let (at, watermark) = self.last_rows;
        let idle = now.saturating_duration_since(at);
        if idle < self.idle_timeout? {
            return None;
        }
        Some(watermark?.saturating_add(idle.as_nanos().min(i64::MAX as u128) as i64))
    }
}

pub fn ticks_prefix(table_id: u64) -> Vec<u8> {
    TICKS.prefix(table_id)
}

/// Raised watermarks by the row count they were raised at.
pub fn load_ticks(store: &dyn StateStore, table_id: u64) -> Result<BTreeMap<u64, i64>> {
    let mut ticks = BTreeMap::new();
    for (row, value) in TICKS.load(store, table_id)? {
        let watermark = decode_i64(&value).ok_or_else(|| {
            WeirError::new(
                crate::error::sqlstate::DATA_CORRUPTED,
                "a table's logged watermark is malformed",
            )
        })?;
        ticks.insert(row, watermark);
    }
    Ok(ticks)
}

pub fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos().min(i64::MAX as u128) as i64)
}

impl TableLog {
    /// The watermark this table should be raised to now, if it is ahead of
    /// the current one.
    pub fn due_watermark(&self) -> Option<i64> {
        let clock = self.clock.as_ref()?;
        let due = lock(clock).due(Instant::now(), unix_now_ns())?;
        (Some(due) > self.watermark_ns()).then_some(due)
    }

    /// Raises the watermark to `watermark_ns` (if still ahead), logs it, and
    /// pushes it through the views reading this table. Like a write, it
    /// completes in its own task once started. A table whose writes are
    /// held longer than `CLOCK_WAIT` (a COPY waiting for its client) is
    /// left for the next tick, so it does not hold back other tables'.
    pub async fn raise_watermark(self: &Arc<Self>, watermark_ns: i64) -> Result<()> {
        let Some(writer) = self.writer_within(CLOCK_WAIT).await else {
            return Ok(());
        };
        // Ticks are logged at the row count: the table's writes must be in.
        self.quiesce().await;
        if self.dropped.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let log = self.clone();
        tokio::task::spawn_blocking(move || {
            let Some(current) = &log.watermark else {
                return Ok(());
            };
            let mut tracker = lock(current).clone();
            if tracker.current_ns() >= Some(watermark_ns) {
                return Ok(());
            }
            tracker.raise_to(watermark_ns);
            let offset = log.row_count();
            let mut write = WriteBatch::new();
            write.put(TICKS.key(log.id, offset), encode_i64(watermark_ns));
            let messages = vec![Message::Watermark(watermark_ns)];
            let mut raised = Some(tracker);
            let mut publish = || {
                if let Some(tracker) = raised.take() {
                    *lock(current) = tracker;
                    lock(&log.ticks).insert(offset, watermark_ns);
                }
            };
            let outcome = log.commit_between_rows(write, messages, &mut publish);
            drop(writer);
            outcome
        })
        .await
        .map_err(|error| WeirError::internal(format!("watermark task failed: {error}")))?
    }

    /// Forgets the raises of a PROCTIME() table before row `covered` (the
    /// row count the last checkpoint has seen) but the last of them: its
    /// rows are stamped on arrival, never behind the watermark, so earlier
    /// raises only closed windows sooner, and a replay from the checkpoint
    /// needs only the highest. Without this such a table logs a raise every
    /// clock tick that follows rows, for good. An event-time table keeps
    /// its raises: an idle raise decides which later rows are late, also
    /// for a view created later.
    pub fn trim_ticks(&self, covered: u64) -> Result<()> {
        let processing_time = self
            .clock
            .as_ref()
            .is_some_and(|clock| lock(clock).processing_time);
        if !processing_time {
            return Ok(());
        }
        let stale: Vec<u64> = {
            let ticks = lock(&self.ticks);
            let mut below: Vec<u64> = ticks.range(..covered).map(|(&row, _)| row).collect();
            below.pop();
            below
        };
        TICKS.forget(&*self.store, self.id, &self.ticks, stale)
    }

    /// The table's writer lock, if it is free within `wait`.
    pub(super) async fn writer_within(
        &self,
        wait: Duration,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        tokio::time::timeout(wait, self.writer.clone().lock_owned())
            .await
            .ok()
    }

    /// The name of the PROCTIME() column, if the table has one.
    pub fn proctime_column(&self) -> Option<String> {
        self.proctime
            .map(|column| self.schema.field(column).name().clone())
    }

    /// Notes that rows arrived: the idle clock starts again.
    pub(super) fn rows_arrived(&self) {
        if let Some(clock) = &self.clock {
            lock(clock).last_rows = (Instant::now(), self.watermark_ns());
        }
    }

    /// Sets the PROCTIME() column of `batch` to the arrival time, never
    /// behind the watermark (so no row is late on processing time).
    pub(super) fn stamp_arrival(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(column) = self.proctime else {
            return Ok(batch);
        };
        let now = unix_now_ns().max(self.watermark_ns().unwrap_or(i64::MIN));
        let stamps: ArrayRef =
            Arc::new(TimestampNanosecondArray::from(vec![now; batch.num_rows()]));
        let data_type = self.schema.field(column).data_type();
        let stamps = match data_type {
            datafusion::arrow::datatypes::DataType::Timestamp(_, Some(zone)) => {
                let zoned: ArrayRef = Arc::new(
                    TimestampNanosecondArray::from(vec![now; batch.num_rows()])
                        .with_timezone(zone.clone()),
                );
                cast(&zoned, data_type)?
            }
            _ => cast(&stamps, data_type)?,
        };
        let mut columns = batch.columns().to_vec();
        columns[column] = stamps;
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
