//! Runs each source's connector: one task per source reads rows (on a
//! blocking thread, since generating or decoding them is CPU work) and
//! appends them to the source's log together with the connector's
//! position, so a restart resumes right after the last committed rows.
//! A failed append (a view's expression failed on the rows) is retried
//! with the same rows after the views are repaired; the failure is shown
//! in `weir_catalog.sources`. FLUSH waits until every source has
//! committed what it had read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use super::system_tables::ComputedTable;
use super::Engine;
use crate::catalog::{rejected_name, SourceDefinition, WatermarkDefinition, REJECTED_CONNECTOR};
use crate::connectors::source::{open_reader, Read, Rejected, SourceReader};
use crate::connectors::table::TableLog;
use crate::error::{sqlstate, Result, WeirError};

/// Rows a source commits at most at once (one fsync).
const ROWS_PER_COMMIT: usize = 64 * 1024;
/// Arrow memory a commit's rows take at most: wide rows (a 1 MB text
/// column) must not make one commit gigabytes.
const BYTES_PER_COMMIT: usize = 16 * 1024 * 1024;
/// The longest a waiting reader sleeps before it is asked again.
const LONGEST_WAIT: Duration = Duration::from_millis(100);
/// How long a source waits before retrying rows that failed to commit.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Every running source of the engine.
#[derive(Default)]
pub struct SourceRuns {
    /// Set by `start_sources`: new sources start as they are created.
    engine: std::sync::OnceLock<Weak<Engine>>,
    runs: Mutex<HashMap<String, Arc<SourceRun>>>,
}

/// One source's runner, as the catalog and FLUSH see it.
pub struct SourceRun {
    connector: String,
    stop: AtomicBool,
    status: Mutex<Status>,
    progress: tokio::sync::Notify,
}

#[derive(Default, Clone)]
struct Status {
    state: &'static str,
    rows_read: u64,
    rows_committed: u64,
    /// Records the connector could not decode (skipped), and the last.
    rejected: u64,
    last_rejected: Option<String>,
    errors: u64,
    last_error: Option<String>,
    /// Why the connector gets no records now (a broker down), if so.
    trouble: Option<String>,
    /// Records the outside holds that the connector has not read.
    lag: Option<u64>,
}

impl SourceRun {
    fn update(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
        self.progress.notify_waiters();
    }

    fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Waits until the rows read by now are committed, or the source
    /// stopped reading.
    async fn caught_up(&self) {
        let target = self.status().rows_read;
        loop {
            let waiting = self.progress.notified();
            let status = self.status();
            let running = matches!(status.state, "running" | "waiting");
            let failing = status.last_error.is_some() || status.trouble.is_some();
            if status.rows_committed >= target || !running || failing || self.stopped() {
                return;
            }
            waiting.await;
        }
    }
}

impl Engine {
    /// Starts every source's connector; later CREATE SOURCEs start theirs.
    pub fn start_sources(self: &Arc<Self>) {
        let _ = self.sources.engine.set(Arc::downgrade(self));
        for definition in self.catalog.definitions() {
            let Some(stream) = definition.stream else {
                continue;
            };
            if let Some(source) = stream.source {
                if source.connector != REJECTED_CONNECTOR {
                    self.start_source(&definition.name, source, stream.watermark);
                }
            }
        }
    }

    /// Starts source `name`'s connector if sources run in this engine.
    pub(super) fn start_source(
        &self,
        name: &str,
        definition: SourceDefinition,
        watermark: Option<WatermarkDefinition>,
    ) {
        let Some(engine) = self.sources.engine.get().cloned() else {
            return;
        };
        let Some(log) = self.catalog.table(name) else {
            return;
        };
        let rejected = self
            .catalog
            .table(&rejected_name(name))
            .filter(|log| log.is_source());
        let run = Arc::new(SourceRun {
            connector: definition.connector.clone(),
            stop: AtomicBool::new(false),
            status: Mutex::new(Status {
                state: "running",
                rows_committed: log.row_count(),
                rows_read: log.row_count(),
                ..Status::default()
            }),
            progress: tokio::sync::Notify::new(),
        });
        let previous = lock(&self.sources.runs).insert(name.to_string(), run.clone());
        if let Some(previous) = previous {
            previous.stop.store(true, Ordering::Release);
        }
        let logs = SourceLogs {
            rows: log,
            rejected,
        };
        tokio::spawn(run_source(engine, logs, run, (definition, watermark)));
    }

    /// Stops source `name`'s connector (DROP SOURCE).
    pub(super) fn stop_source(&self, name: &str) {
        if let Some(run) = lock(&self.sources.runs).remove(name) {
            run.stop.store(true, Ordering::Release);
            run.progress.notify_waiters();
        }
    }

    /// FLUSH: waits until every source's rows read so far are committed
    /// (and so in every view).
    pub async fn flush_sources(&self) {
        let runs: Vec<Arc<SourceRun>> = lock(&self.sources.runs).values().cloned().collect();
        for run in runs {
            run.caught_up().await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Rows read in one go, the position after them and what came next.
struct Gathered {
    rows: Option<RecordBatch>,
    position: String,
    then: Option<Read>,
    rejected: Vec<Rejected>,
    /// The connector's own watermark (merged over its partitions).
    watermark: Option<i64>,
    trouble: Option<String>,
    lag: Option<u64>,
}

/// Reads until `ROWS_PER_COMMIT` rows, or the reader waits or ends.
fn gather(reader: &mut dyn SourceReader, schema: &SchemaRef) -> Result<Gathered> {
    let mut batches = Vec::new();
    let (mut rows, mut bytes) = (0, 0);
    let then = loop {
        match reader.read(ROWS_PER_COMMIT - rows)? {
            Read::Rows(batch) => {
                rows += batch.num_rows();
                bytes += batch.get_array_memory_size();
                batches.push(batch);
                if rows >= ROWS_PER_COMMIT || bytes >= BYTES_PER_COMMIT {
                    break None;
                }
            }
            other => break Some(other),
        }
    };
    let rows = match batches.len() {
        0 => None,
        1 => batches.pop(),
        _ => Some(concat_batches(schema, &batches)?),
    };
    Ok(Gathered {
        rows: rows.filter(|rows| rows.num_rows() > 0),
        position: reader.position(),
        then,
        rejected: reader.take_rejected(),
        watermark: reader.watermark(),
        trouble: reader.trouble(),
        lag: reader.lag(),
    })
}

/// Where a source's runner writes: its rows, and the records rejected.
struct SourceLogs {
    rows: Arc<TableLog>,
    rejected: Option<Arc<TableLog>>,
}

async fn run_source(
    engine: Weak<Engine>,
    logs: SourceLogs,
    run: Arc<SourceRun>,
    (definition, watermark): (SourceDefinition, Option<WatermarkDefinition>),
) {
    let log = logs.rows.clone();
    let schema = log.schema();
    let mut committed = log.source_position();
    let mut reader = match open_reader(
        &definition,
        &schema,
        watermark.as_ref(),
        committed.as_deref(),
    ) {
        Ok(reader) => reader,
        Err(error) => return failed(&run, error),
    };
    while !run.stopped() && engine.strong_count() > 0 {
        let read_schema = schema.clone();
        let gathered = tokio::task::spawn_blocking(move || {
            let gathered = gather(reader.as_mut(), &read_schema);
            (reader, gathered)
        })
        .await;
        let gathered = match gathered {
            Ok((back, Ok(gathered))) => {
                reader = back;
                gathered
            }
            Ok((_, Err(error))) => return failed(&run, error),
            Err(_) => return failed(&run, WeirError::internal("a source's reader panicked")),
        };
        if let Some(last) = gathered.rejected.last() {
            tracing::warn!(source = log.name(), rejected = gathered.rejected.len(), reason = %last.reason, "records did not decode");
            run.update(|status| {
                status.rejected += gathered.rejected.len() as u64;
                status.last_rejected = Some(format!("{:?}: {}", last.record, last.reason));
            });
        }
        let rejected = match (&logs.rejected, gathered.rejected.is_empty()) {
            (Some(errors), false) => {
                match rejected_batch(errors, &gathered.rejected, &gathered.position) {
                    Ok(batch) => Some(batch),
                    Err(error) => return failed(&run, error),
                }
            }
            _ => None,
        };
        let status = run.status();
        if gathered.trouble != status.trouble || gathered.lag != status.lag {
            run.update(|status| {
                status.trouble = gathered.trouble.clone();
                status.lag = gathered.lag;
            });
        }
        let moved = committed.as_deref() != Some(gathered.position.as_str());
        if gathered.rows.is_some() || rejected.is_some() || moved {
            committed = Some(gathered.position.clone());
            let read = gathered.rows.as_ref().map_or(0, RecordBatch::num_rows);
            run.update(|status| status.rows_read += read as u64);
            let write = Write {
                rows: gathered.rows,
                position: gathered.position,
                rejected,
            };
            if !commit(&engine, &logs, &run, write).await {
                return;
            }
        }
        if let Some(watermark) = gathered.watermark {
            raise_watermark(&log, &run, watermark).await;
        }
        match gathered.then {
            Some(Read::Wait(wait)) => {
                run.update(|status| status.state = "waiting");
                tokio::time::sleep(wait.min(LONGEST_WAIT)).await;
                run.update(|status| status.state = "running");
            }
            Some(Read::Finished) => {
                run.update(|status| status.state = "finished");
                return;
            }
            Some(Read::Rows(_)) | None => {}
        }
    }
}

/// One commit of a source: rows, the position after them, rejected records.
struct Write {
    rows: Option<RecordBatch>,
    position: String,
    rejected: Option<RecordBatch>,
}

/// The rejected records as rows of the source's `_errors` relation.
fn rejected_batch(log: &TableLog, rejected: &[Rejected], position: &str) -> Result<RecordBatch> {
    let schema = log.schema();
    let texts = [
        StringArray::from_iter_values(rejected.iter().map(|r| r.record.as_str())),
        StringArray::from_iter_values(rejected.iter().map(|r| r.reason.as_str())),
        StringArray::from_iter_values(rejected.iter().map(|_| position)),
    ];
    let columns = texts
        .into_iter()
        .zip(schema.fields())
        .map(|(text, field)| cast(&(Arc::new(text) as ArrayRef), field.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Appends a write until it commits; false when the source is gone.
async fn commit(engine: &Weak<Engine>, logs: &SourceLogs, run: &SourceRun, write: Write) -> bool {
    let log = &logs.rows;
    loop {
        if run.stopped() {
            return false;
        }
        let rejected = match (&logs.rejected, &write.rejected) {
            (Some(errors), Some(records)) => Some((errors, records.clone())),
            _ => None,
        };
        let appended = log
            .append_from_source(write.rows.clone(), write.position.clone(), rejected)
            .await;
        match appended {
            Ok(committed) => {
                run.update(|status| {
                    status.rows_committed += committed;
                    status.last_error = None;
                });
                return true;
            }
            Err(error) if error.code == sqlstate::UNDEFINED_TABLE => return false,
            Err(error) => {
                tracing::warn!(source = log.name(), %error.message, "a source's rows did not commit; retrying");
                run.update(|status| {
                    status.errors += 1;
                    status.last_error = Some(format!("{}: {}", error.code, error.message));
                });
                if let Some(engine) = engine.upgrade() {
                    engine.repair_views().await;
                }
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// Raises the source's watermark to its connector's (after the rows that
/// moved it are committed); a failure is shown and tried again next time.
async fn raise_watermark(log: &Arc<TableLog>, run: &SourceRun, watermark: i64) {
    if log.watermark_ns() >= Some(watermark) {
        return;
    }
    if let Err(error) = log.raise_watermark(watermark).await {
        tracing::warn!(source = log.name(), %error.message, "a source's watermark did not move");
        run.update(|status| {
            status.errors += 1;
            status.last_error = Some(format!("{}: {}", error.code, error.message));
        });
    }
}

fn failed(run: &SourceRun, error: WeirError) {
    tracing::error!(%error.message, "a source stopped");
    run.update(|status| {
        status.state = "failed";
        status.errors += 1;
        status.last_error = Some(format!("{}: {}", error.code, error.message));
    });
}

/// `weir_catalog.sources`: each source, its connector, what its runner is
/// doing, rows committed, the stored position, its watermark, its lag
/// (records not read yet, where the connector can tell), records rejected
/// and the last error.
pub fn sources_table(
    runs: &Arc<SourceRuns>,
    relations: &Arc<super::relations::Relations>,
) -> ComputedTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("source_name", DataType::Utf8, false),
        Field::new("connector", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("position", DataType::Utf8, true),
        Field::new(
            "watermark",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
        Field::new("lag", DataType::Int64, true),
        Field::new("rejected", DataType::Int64, false),
        Field::new("errors", DataType::Int64, false),
        Field::new("last_error", DataType::Utf8, true),
        Field::new("last_rejected", DataType::Utf8, true),
    ]));
    let runs = Arc::downgrade(runs);
    let relations = Arc::downgrade(relations);
    ComputedTable::new(schema, move |schema| {
        let (Some(runs), Some(relations)) = (runs.upgrade(), relations.upgrade()) else {
            return Ok(RecordBatch::new_empty(schema.clone()));
        };
        let runs = lock(&runs.runs);
        let mut names: Vec<&String> = runs.keys().collect();
        names.sort();
        let statuses: Vec<(Status, &SourceRun)> = names
            .iter()
            .map(|name| (runs[*name].status(), runs[*name].as_ref()))
            .collect();
        let logs: Vec<Option<Arc<TableLog>>> =
            names.iter().map(|name| relations.table(name)).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                names.iter().map(|n| n.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                statuses.iter().map(|(_, run)| run.connector.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                statuses.iter().map(|(status, _)| status.state),
            )),
            Arc::new(Int64Array::from_iter_values(
                logs.iter()
                    .map(|log| log.as_ref().map_or(0, |log| log.row_count() as i64)),
            )),
            Arc::new(StringArray::from_iter(
                logs.iter()
                    .map(|log| log.as_ref().and_then(|log| log.source_position())),
            )),
            Arc::new(TimestampNanosecondArray::from_iter(
                logs.iter()
                    .map(|log| log.as_ref().and_then(|log| log.watermark_ns())),
            )),
            Arc::new(Int64Array::from_iter(
                statuses
                    .iter()
                    .map(|(status, _)| status.lag.map(|lag| lag as i64)),
            )),
            Arc::new(Int64Array::from_iter_values(
                statuses.iter().map(|(status, _)| status.rejected as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                statuses.iter().map(|(status, _)| status.errors as i64),
            )),
            Arc::new(StringArray::from_iter(statuses.iter().map(
                |(status, _)| status.last_error.clone().or_else(|| status.trouble.clone()),
            ))),
            Arc::new(StringArray::from_iter(
                statuses
                    .iter()
                    .map(|(status, _)| status.last_rejected.clone()),
            )),
        ];
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })
}
