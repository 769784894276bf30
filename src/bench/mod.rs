//! `weir bench`: measures how many events per second the real engine
//! appends to a table and pushes through a materialized view, in-process
//! (no server, no SQL text per row), so the cost of each view is visible
//! against a baseline table with no view; optionally with periodic
//! checkpoints running, to see what they cost. The `recovery` scenario
//! measures how long a restarted engine takes to be ready, replaying from a
//! checkpoint or the whole history.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::record_batch::RecordBatch;
use futures::TryStreamExt;

mod generator;
mod kafka;
mod scenarios;
pub mod sources;

pub use generator::{BidGenerator, EventGenerator};
pub use scenarios::Scenario;
use scenarios::{Input, Window};

use crate::connectors::table::TableLog;
use crate::engine::Engine;
use crate::error::{sqlstate, Result, WeirError};
use crate::session::{Outcome, Session};

/// Every column BIGINT, so one reader serves both system tables.
const CHECKPOINTS_SQL: &str = "SELECT count(*), CAST(avg(duration_us) AS BIGINT), max(bytes) \
     FROM weir_catalog.checkpoints";
const RECOVERY_SQL: &str =
    "SELECT from_epoch, duration_us, rows_replayed FROM weir_catalog.recovery";

const SEED: u64 = 2024;

/// A periodic checkpoint in flight holds the engine until it commits, and
/// sled lets go of its lock a moment after the engine is dropped; both take
/// milliseconds, so a minute means something never let go.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(60);
const CLOSE_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The sizes and scenarios of one `weir bench` run.
#[derive(Debug, Clone)]
pub struct Workload {
    pub rows: u64,
    pub batch_rows: usize,
    pub scenarios: Vec<Scenario>,
    /// How often the events/s scenarios checkpoint in the background while
    /// appending; `None` means never. The recovery scenario ignores it: it
    /// checkpoints exactly once, by hand, so the replay is known.
    pub checkpoint_interval: Option<Duration>,
    /// Where each scenario's database goes; `None` means a fresh directory
    /// under the system temp dir, removed afterwards.
    pub data_directory: Option<PathBuf>,
    /// The window views emit on update (what a view does by default)
    /// instead of once on window close.
    pub emit_on_update: bool,
}

/// Everything a run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub measurements: Vec<Measurement>,
    pub restarts: Vec<Restart>,
}

/// A view's row count and late-row counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewCounts {
    pub rows: i64,
    pub late_rows: u64,
}

/// What `weir_catalog.checkpoints` says about the checkpoints taken so far
/// (it keeps the last 100). The checkpoint each CREATE MATERIALIZED VIEW
/// commits is not in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointSummary {
    pub count: u64,
    pub mean_duration: Option<Duration>,
    pub max_bytes: Option<u64>,
}

impl CheckpointSummary {
    /// From the row of `CHECKPOINTS_SQL`: count, mean µs, max bytes.
    fn from_row(row: &[Option<i64>]) -> Result<Self> {
        let [count, mean_duration_us, max_bytes] = row else {
            return Err(WeirError::internal(format!(
                "weir_catalog.checkpoints summary has {} columns, not 3",
                row.len()
            )));
        };
        Ok(CheckpointSummary {
            count: count.unwrap_or(0) as u64,
            mean_duration: mean_duration_us.map(|us| Duration::from_micros(us as u64)),
            max_bytes: max_bytes.map(|bytes| bytes as u64),
        })
    }
}

/// The figures of one events/s scenario.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub scenario: Scenario,
    pub rows: u64,
    pub batches: u64,
    /// Wall-clock time of the appends; every batch is generated before the
    /// clock starts, so this is time inside `TableLog::append`, including
    /// any wait for a background checkpoint holding the dataflow.
    pub elapsed: Duration,
    /// The view's counts; `None` for the baseline, which has no view.
    pub view: Option<ViewCounts>,
    pub checkpoints: CheckpointSummary,
}

impl Measurement {
    pub fn events_per_second(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    pub fn table_row(&self) -> String {
        table_line(
            &MEASUREMENT_COLUMNS,
            &[
                self.scenario.name().to_string(),
                self.rows.to_string(),
                self.batches.to_string(),
                format!("{:.3}", self.elapsed.as_secs_f64()),
                format!("{:.0}", self.events_per_second()),
                optional(self.view.map(|view| view.rows)),
                optional(self.view.map(|view| view.late_rows)),
                self.checkpoints.count.to_string(),
                optional(self.checkpoints.mean_duration.map(milliseconds)),
                optional(self.checkpoints.max_bytes),
            ],
        )
    }
}

/// The events/s table: each column's name and width.
const MEASUREMENT_COLUMNS: [(&str, usize); 10] = [
    ("scenario", 13),
    ("rows", 12),
    ("batches", 8),
    ("elapsed_s", 10),
    ("events/s", 12),
    ("view_rows", 10),
    ("late_rows", 10),
    ("checkpoints", 12),
    ("checkpoint_mean_ms", 19),
    ("checkpoint_max_bytes", 21),
];

/// What `weir_catalog.recovery` says about the last start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryFigures {
    /// The checkpoint the views were restored from.
    pub from_epoch: Option<u64>,
    /// Restoring operator state and replaying rows; a part of `Engine::open`.
    pub duration: Duration,
    pub rows_replayed: u64,
}

impl RecoveryFigures {
    /// From the row of `RECOVERY_SQL`: from_epoch, duration µs, rows replayed.
    fn from_row(row: &[Option<i64>]) -> Result<Self> {
        let [from_epoch, duration_us, rows_replayed] = row else {
            return Err(WeirError::internal(format!(
                "weir_catalog.recovery has {} columns, not 3",
                row.len()
            )));
        };
        Ok(RecoveryFigures {
            from_epoch: from_epoch.map(|epoch| epoch as u64),
            duration: Duration::from_micros(duration_us.unwrap_or(0) as u64),
            rows_replayed: rows_replayed.unwrap_or(0) as u64,
        })
    }
}

/// How one database came back after its engine was dropped.
#[derive(Debug, Clone)]
pub struct Restart {
    /// Whether a checkpoint was taken after the bulk load; without one the
    /// last checkpoint is the one the second CREATE MATERIALIZED VIEW
    /// committed, before any row, so every row is replayed.
    pub checkpointed: bool,
    /// The checkpoint taken after the bulk load, if any.
    pub checkpoint: Option<CheckpointSummary>,
    /// Rows in the table after the restart: the bulk load plus the tail.
    pub table_rows: u64,
    /// Wall-clock time of `Engine::open`: opening sled, loading every table
    /// row into memory, re-planning, restoring operators, replaying.
    pub open_elapsed: Duration,
    pub recovery: RecoveryFigures,
    /// Each view's counts before the engine was dropped and after the
    /// restart, in `Scenario::Recovery.windows()` order; they should match.
    pub views_before: Vec<ViewCounts>,
    pub views_after: Vec<ViewCounts>,
}

impl Restart {
    pub fn name(&self) -> &'static str {
        restart_name(self.checkpointed)
    }

    pub fn table_row(&self) -> String {
        let view_rows: Vec<String> = self
            .views_after
            .iter()
            .map(|view| view.rows.to_string())
            .collect();
        let unchanged = if self.views_before == self.views_after {
            "yes"
        } else {
            "NO"
        };
        let checkpoint = self.checkpoint.unwrap_or_default();
        table_line(
            &RESTART_COLUMNS,
            &[
                self.name().to_string(),
                self.table_rows.to_string(),
                self.recovery.rows_replayed.to_string(),
                optional(self.recovery.from_epoch),
                format!("{:.3}", self.open_elapsed.as_secs_f64()),
                format!("{:.3}", self.recovery.duration.as_secs_f64()),
                optional(checkpoint.mean_duration.map(milliseconds)),
                optional(checkpoint.max_bytes),
                view_rows.join("/"),
                unchanged.to_string(),
            ],
        )
    }
}

/// The restart table: each column's name and width. The view rows are
/// TUMBLE's and HOP's, after the restart; `unchanged` says whether both
/// views' rows and late-row counts are what they were before it.
const RESTART_COLUMNS: [(&str, usize); 10] = [
    ("restart", 15),
    ("table_rows", 11),
    ("rows_replayed", 14),
    ("from_epoch", 11),
    ("open_s", 8),
    ("recovery_s", 11),
    ("checkpoint_ms", 14),
    ("checkpoint_bytes", 17),
    ("tumble/hop_rows", 16),
    ("unchanged", 10),
];

/// The names of `columns`, laid out like the rows under them.
fn table_header(columns: &[(&str, usize)]) -> String {
    let names: Vec<String> = columns.iter().map(|(name, _)| name.to_string()).collect();
    table_line(columns, &names)
}

/// One line of a results table: the first cell left-aligned, the others
/// right-aligned, each padded to its column's width.
fn table_line(columns: &[(&str, usize)], cells: &[String]) -> String {
    let mut line = String::new();
    for (index, ((_, width), cell)) in columns.iter().zip(cells).enumerate() {
        if index == 0 {
            line.push_str(&format!("{cell:<width$}"));
        } else {
            line.push_str(&format!(" {cell:>width$}"));
        }
    }
    line
}

fn optional(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_string(), |value| value.to_string())
}

fn milliseconds(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1000.0)
}

/// Runs every scenario of `workload` against a fresh database each,
/// printing a table row as each finishes.
pub async fn run(workload: &Workload) -> Result<Report> {
    if workload.rows == 0 || workload.batch_rows == 0 {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "--rows and --batch-rows must be positive",
        ));
    }
    let temporary = workload.data_directory.is_none();
    let root = workload
        .data_directory
        .clone()
        .unwrap_or_else(temporary_directory);
    let report = run_in(workload, &root).await;
    if temporary {
        // Best effort: a leftover directory in the temp dir harms no one.
        let _ = std::fs::remove_dir_all(&root);
    }
    report
}

async fn run_in(workload: &Workload, root: &Path) -> Result<Report> {
    let mut report = Report::default();
    let throughput: Vec<Scenario> = workload
        .scenarios
        .iter()
        .copied()
        .filter(|scenario| *scenario != Scenario::Recovery)
        .collect();
    if !throughput.is_empty() {
        match workload.checkpoint_interval {
            Some(interval) => println!("periodic checkpoints: every {} ms", interval.as_millis()),
            None => println!("periodic checkpoints: off"),
        }
        println!("{}", table_header(&MEASUREMENT_COLUMNS));
    }
    for scenario in throughput {
        let measurement = measure(scenario, workload, &root.join(scenario.name())).await?;
        println!("{}", measurement.table_row());
        report.measurements.push(measurement);
    }
    if workload.scenarios.contains(&Scenario::Recovery) {
        report.restarts = measure_restarts(workload, &root.join(Scenario::Recovery.name())).await?;
    }
    Ok(report)
}

fn temporary_directory() -> PathBuf {
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    std::env::temp_dir().join(format!("weir-bench-{}-{started_ns}", std::process::id()))
}

/// One events/s scenario: a fresh database, the table, the view, then every
/// batch, with periodic checkpoints if asked for.
async fn measure(scenario: Scenario, workload: &Workload, directory: &Path) -> Result<Measurement> {
    refuse_existing_database(directory)?;
    let engine = Engine::open(directory).await?;
    let measurement = measure_with(scenario, workload, &engine).await;
    close(engine).await?;
    measurement
}

async fn measure_with(
    scenario: Scenario,
    workload: &Workload,
    engine: &Arc<Engine>,
) -> Result<Measurement> {
    let session = Session::new(engine.clone());
    let input = scenario.input();
    create_relations(&session, input, scenario.windows(), workload.emit_on_update).await?;
    if let Some(interval) = workload.checkpoint_interval {
        engine.start_checkpoints(interval);
    }
    let log = table(engine, input)?;
    let batches = match input {
        Input::Events => {
            EventGenerator::new(SEED).batches(log.schema(), workload.rows, workload.batch_rows)?
        }
        Input::Bids => {
            BidGenerator::new(SEED).batches(log.schema(), workload.rows, workload.batch_rows)?
        }
    };
    let batch_count = batches.len() as u64;
    let elapsed = append_all(&log, batches).await?;
    Ok(Measurement {
        scenario,
        rows: workload.rows,
        batches: batch_count,
        elapsed,
        view: view_counts(engine, scenario.windows())?.first().copied(),
        checkpoints: checkpoint_summary(&session).await?,
    })
}

/// The recovery scenario: the same history restarted once from a checkpoint
/// taken after the bulk load and once without one.
async fn measure_restarts(workload: &Workload, directory: &Path) -> Result<Vec<Restart>> {
    println!("{}", table_header(&RESTART_COLUMNS));
    let mut restarts = Vec::new();
    for checkpointed in [true, false] {
        let directory = directory.join(restart_name(checkpointed));
        let restart = measure_restart(checkpointed, workload, &directory).await?;
        println!("{}", restart.table_row());
        restarts.push(restart);
    }
    Ok(restarts)
}

fn restart_name(checkpointed: bool) -> &'static str {
    if checkpointed {
        "from_checkpoint"
    } else {
        "full_history"
    }
}

async fn measure_restart(
    checkpointed: bool,
    workload: &Workload,
    directory: &Path,
) -> Result<Restart> {
    refuse_existing_database(directory)?;
    let engine = Engine::open(directory).await?;
    let loaded = load_before_restart(checkpointed, workload, &engine).await;
    // The restart must find sled closed, as after a process exit.
    close(engine).await?;
    let (checkpoint, views_before) = loaded?;
    let (engine, open_elapsed) = reopen(directory).await?;
    let restarted = inspect_after_restart(&engine).await;
    close(engine).await?;
    let (recovery, table_rows, views_after) = restarted?;
    Ok(Restart {
        checkpointed,
        checkpoint,
        table_rows,
        open_elapsed,
        recovery,
        views_before,
        views_after,
    })
}

/// The life before the restart: both views, the bulk load, the checkpoint
/// if asked for, then one batch more so the checkpoint has a tail to replay.
async fn load_before_restart(
    checkpointed: bool,
    workload: &Workload,
    engine: &Arc<Engine>,
) -> Result<(Option<CheckpointSummary>, Vec<ViewCounts>)> {
    let windows = Scenario::Recovery.windows();
    let session = Session::new(engine.clone());
    create_relations(&session, Input::Events, windows, false).await?;
    let log = table(engine, Input::Events)?;
    let mut generator = EventGenerator::new(SEED);
    let bulk = generator.batches(log.schema(), workload.rows, workload.batch_rows)?;
    append_all(&log, bulk).await?;
    let checkpoint = if checkpointed {
        if engine.checkpoint()?.is_none() {
            return Err(WeirError::internal(
                "the checkpoint after the bulk load found nothing to write",
            ));
        }
        Some(checkpoint_summary(&session).await?)
    } else {
        None
    };
    let tail = generator.batches(
        log.schema(),
        workload.batch_rows as u64,
        workload.batch_rows,
    )?;
    append_all(&log, tail).await?;
    Ok((checkpoint, view_counts(engine, windows)?))
}

async fn inspect_after_restart(
    engine: &Arc<Engine>,
) -> Result<(RecoveryFigures, u64, Vec<ViewCounts>)> {
    let session = Session::new(engine.clone());
    let recovery = RecoveryFigures::from_row(&first_row(&session, RECOVERY_SQL).await?)?;
    let table_rows = table(engine, Input::Events)?.row_count() as u64;
    let views = view_counts(engine, Scenario::Recovery.windows())?;
    Ok((recovery, table_rows, views))
}

/// Drops the engine once nothing else holds it, so its sled database is
/// closed (and its file lock released) before the directory is reopened or
/// removed. Sessions, table logs and view results must be gone already; a
/// periodic checkpoint in flight holds the engine until it commits.
async fn close(engine: Arc<Engine>) -> Result<()> {
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    let mut engine = engine;
    loop {
        match Arc::try_unwrap(engine) {
            Ok(unique) => {
                drop(unique);
                return Ok(());
            }
            Err(shared) if Instant::now() < deadline => {
                engine = shared;
                tokio::time::sleep(CLOSE_POLL_INTERVAL).await;
            }
            Err(_) => {
                return Err(WeirError::internal(
                    "the engine is still in use a minute after the benchmark let go of it",
                ))
            }
        }
    }
}

/// Opens `directory` again and times the open that succeeds, as if the
/// restart were a new process (see `Engine::reopen`).
async fn reopen(directory: &Path) -> Result<(Arc<Engine>, Duration)> {
    Engine::reopen(directory, CLOSE_TIMEOUT).await
}

/// A reused directory would already hold `events`, and its rows would skew
/// the figures; better to say so than to measure something else.
fn refuse_existing_database(directory: &Path) -> Result<()> {
    let occupied = std::fs::read_dir(directory).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("{} is not empty", directory.display()),
        )
        .with_hint("Give --data-dir a new directory, or leave it out to use a temporary one."));
    }
    Ok(())
}

async fn create_relations(
    session: &Session,
    input: Input,
    windows: &[Window],
    emit_on_update: bool,
) -> Result<()> {
    query(session, input.table_sql()).await?;
    for window in windows {
        let sql = window.view_sql();
        let sql = match emit_on_update {
            true => sql.replace(" EMIT ON WINDOW CLOSE", ""),
            false => sql,
        };
        query(session, &sql).await?;
    }
    Ok(())
}

fn table(engine: &Engine, input: Input) -> Result<Arc<TableLog>> {
    let name = input.table_name();
    engine
        .relations()
        .table(name)
        .ok_or_else(|| WeirError::undefined_table(name))
}

fn view_counts(engine: &Engine, windows: &[Window]) -> Result<Vec<ViewCounts>> {
    windows
        .iter()
        .map(|window| {
            let view = engine
                .relations()
                .view_result(window.view_name())
                .ok_or_else(|| WeirError::undefined_table(window.view_name()))?;
            Ok(ViewCounts {
                rows: view.row_count(),
                late_rows: view.late_rows.load(Ordering::Relaxed),
            })
        })
        .collect()
}

async fn checkpoint_summary(session: &Session) -> Result<CheckpointSummary> {
    CheckpointSummary::from_row(&first_row(session, CHECKPOINTS_SQL).await?)
}

/// Runs `sql` and returns the rows of every statement that has some.
async fn query(session: &Session, sql: &str) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for statement in session.parse(sql)? {
        let prepared = session.prepare(statement).await?;
        if let Outcome::Rows(stream) = session.execute(&prepared, None).await? {
            batches.extend(stream.try_collect::<Vec<_>>().await?);
        }
    }
    Ok(batches)
}

/// The first row of `sql`, whose columns must all be BIGINT.
async fn first_row(session: &Session, sql: &str) -> Result<Vec<Option<i64>>> {
    let batches = query(session, sql).await?;
    let batch = batches
        .iter()
        .find(|batch| batch.num_rows() > 0)
        .ok_or_else(|| WeirError::internal(format!("no row from {sql}")))?;
    batch
        .columns()
        .iter()
        .map(|column| {
            let integers = column
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| WeirError::internal(format!("a column of {sql} is not BIGINT")))?;
            Ok(integers.is_valid(0).then(|| integers.value(0)))
        })
        .collect()
}

/// Appends every batch, one durable commit each; returns the wall-clock
/// time of the appends.
async fn append_all(log: &Arc<TableLog>, batches: Vec<RecordBatch>) -> Result<Duration> {
    let started = Instant::now();
    for batch in batches {
        log.append(vec![batch], None).await?;
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_but_the_baseline_has_views() {
        for scenario in Scenario::THROUGHPUT.into_iter().chain(Scenario::KEYED) {
            assert_eq!(
                scenario.windows().is_empty(),
                scenario == Scenario::Baseline
            );
        }
        assert_eq!(Scenario::Recovery.windows(), &[Window::Tumble, Window::Hop]);
    }

    #[test]
    fn an_empty_checkpoint_history_has_no_mean() {
        let summary = CheckpointSummary::from_row(&[Some(0), None, None]).unwrap();
        assert_eq!(summary, CheckpointSummary::default());
        let summary = CheckpointSummary::from_row(&[Some(3), Some(1_500), Some(4_096)]).unwrap();
        assert_eq!(summary.count, 3);
        assert_eq!(summary.mean_duration, Some(Duration::from_micros(1_500)));
        assert_eq!(summary.max_bytes, Some(4_096));
    }

    #[test]
    fn table_lines_line_up_with_their_header() {
        let header = table_header(&RESTART_COLUMNS);
        let cells: Vec<String> = RESTART_COLUMNS.iter().map(|_| "1".to_string()).collect();
        let line = table_line(&RESTART_COLUMNS, &cells);
        assert_eq!(line.len(), header.len());
        assert!(header.starts_with("restart "));
        assert!(line.starts_with("1 "));
        assert!(line.ends_with(" 1"));
    }

    fn small_workload(scenarios: Vec<Scenario>, directory: &Path) -> Workload {
        Workload {
            rows: 30_000,
            batch_rows: 10_000,
            scenarios,
            checkpoint_interval: None,
            data_directory: Some(directory.to_path_buf()),
            emit_on_update: false,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_leaves_only_the_tail_to_replay() {
        let directory = tempfile::tempdir().unwrap();
        let workload = small_workload(vec![Scenario::Recovery], directory.path());
        let report = run(&workload).await.unwrap();
        let [from_checkpoint, full_history] = report.restarts.as_slice() else {
            panic!("two restarts expected, got {:?}", report.restarts);
        };
        for restart in [from_checkpoint, full_history] {
            assert_eq!(restart.table_rows, 40_000, "bulk load plus one batch");
            assert_eq!(restart.views_after, restart.views_before);
            assert!(restart.views_after.iter().all(|view| view.rows > 0));
            assert!(restart.recovery.from_epoch.is_some());
        }
        assert_eq!(from_checkpoint.recovery.rows_replayed, 10_000);
        assert_eq!(from_checkpoint.checkpoint.map(|c| c.count), Some(1));
        assert_eq!(full_history.recovery.rows_replayed, 40_000);
        assert_eq!(full_history.checkpoint, None);
    }

    /// On update a view shows the windows still open too; on close only
    /// the closed ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn emit_on_update_shows_open_windows_too() {
        let mut shown = Vec::new();
        for emit_on_update in [false, true] {
            let directory = tempfile::tempdir().unwrap();
            let mut workload = small_workload(vec![Scenario::KeyedHop], directory.path());
            workload.emit_on_update = emit_on_update;
            let report = run(&workload).await.unwrap();
            shown.push(report.measurements[0].view.unwrap().rows);
        }
        assert!(shown[1] > shown[0], "{shown:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn periodic_checkpoints_are_summarised() {
        let directory = tempfile::tempdir().unwrap();
        let mut workload = small_workload(vec![Scenario::Tumble], directory.path());
        workload.checkpoint_interval = Some(Duration::from_millis(1));
        let report = run(&workload).await.unwrap();
        let checkpoints = report.measurements[0].checkpoints;
        // How many ticks land during a few appends depends on the machine.
        assert_eq!(checkpoints.count > 0, checkpoints.mean_duration.is_some());
        assert_eq!(checkpoints.count > 0, checkpoints.max_bytes.is_some());
    }
}
