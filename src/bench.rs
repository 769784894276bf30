//! `weir bench`: measures how many events per second the real engine
//! appends to a table and pushes through a materialized view, in-process
//! (no server, no SQL text per row), so the cost of each view is visible
//! against a baseline table with no view.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::table::TableLog;
use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::session::Session;

const TABLE_SQL: &str = "CREATE TABLE events (auction BIGINT, price BIGINT, ts TIMESTAMP, \
     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY";

/// Every view groups by window and auction bucket with the same aggregates,
/// so the scenarios differ only in the window function.
const VIEW_SELECT: &str = "SELECT window_start, auction % 100 AS bucket, \
     COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top";
const VIEW_GROUP_BY: &str = "GROUP BY window_start, auction % 100 EMIT ON WINDOW CLOSE";

/// 2024-01-01T00:00:00Z: a fixed start keeps runs comparable.
const START_NS: i64 = 1_704_067_200_000_000_000;
const NANOS_PER_MILLI: i64 = 1_000_000;
/// 1000 events per simulated second: one event per simulated millisecond.
const EVENT_SPACING_NS: i64 = NANOS_PER_MILLI;
/// Every event arrives up to this much behind its slot, so neighbours are
/// out of order but within the 5 s watermark delay.
const JITTER_MS: u64 = 500;
/// One event in this many is a straggler, behind by more than the watermark
/// delay, so the late-row path is exercised too.
const STRAGGLER_EVERY: u64 = 1_000;
const STRAGGLER_DELAY_MS: i64 = 8_000;
const AUCTIONS: u64 = 10_000;
const MAX_PRICE: u64 = 1_000_000;
const SEED: u64 = 2024;

/// What a benchmark run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The table alone: append, fsync, in-memory copy; no view.
    Baseline,
    /// A TUMBLE view (10 s windows): each event lands in one window.
    Tumble,
    /// A HOP view (10 s windows every 2 s): each event lands in five.
    Hop,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Baseline, Scenario::Tumble, Scenario::Hop];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::Tumble => "tumble",
            Scenario::Hop => "hop",
        }
    }

    fn view_name(self) -> Option<String> {
        match self {
            Scenario::Baseline => None,
            Scenario::Tumble | Scenario::Hop => Some(format!("bench_{}", self.name())),
        }
    }

    fn view_sql(self) -> Option<String> {
        let window = match self {
            Scenario::Baseline => return None,
            Scenario::Tumble => "TUMBLE(events, ts, INTERVAL '10' SECOND)",
            Scenario::Hop => "HOP(events, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
        };
        let view_name = self.view_name()?;
        Some(format!(
            "CREATE MATERIALIZED VIEW {view_name} AS {VIEW_SELECT} FROM {window} {VIEW_GROUP_BY}"
        ))
    }
}

/// The sizes and scenarios of one `weir bench` run.
#[derive(Debug, Clone)]
pub struct Workload {
    pub rows: u64,
    pub batch_rows: usize,
    pub scenarios: Vec<Scenario>,
    /// Where each scenario's database goes; `None` means a fresh directory
    /// under the system temp dir, removed afterwards.
    pub data_directory: Option<PathBuf>,
}

/// The figures of one scenario.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub scenario: Scenario,
    pub rows: u64,
    pub batches: u64,
    /// Time spent inside `TableLog::append` only; generating rows is excluded.
    pub elapsed: Duration,
    pub view_rows: Option<i64>,
    pub late_rows: Option<u64>,
}

impl Measurement {
    pub fn events_per_second(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    pub fn table_row(&self) -> String {
        let optional = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
        format!(
            "{:<10} {:>12} {:>8} {:>10.3} {:>12.0} {:>10} {:>10}",
            self.scenario.name(),
            self.rows,
            self.batches,
            self.elapsed.as_secs_f64(),
            self.events_per_second(),
            optional(self.view_rows.map(|rows| rows.to_string())),
            optional(self.late_rows.map(|rows| rows.to_string())),
        )
    }
}

pub const TABLE_HEADER: &str =
    "scenario           rows  batches  elapsed_s     events/s  view_rows  late_rows";

/// Runs every scenario of `workload` against a fresh database each,
/// printing a table row as each finishes.
pub async fn run(workload: &Workload) -> Result<Vec<Measurement>> {
    if workload.rows == 0 || workload.batch_rows == 0 {
        return Err(WeirError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            "--rows and --batch-rows must be positive",
        ));
    }
    let temporary = workload.data_directory.is_none();
    let root = workload
        .data_directory
        .clone()
        .unwrap_or_else(temporary_directory);
    println!("{TABLE_HEADER}");
    let mut measurements = Vec::new();
    for scenario in &workload.scenarios {
        let measurement = measure(*scenario, workload, &root.join(scenario.name())).await;
        match measurement {
            Ok(measurement) => {
                println!("{}", measurement.table_row());
                measurements.push(measurement);
            }
            Err(error) => {
                remove_if_temporary(temporary, &root);
                return Err(error);
            }
        }
    }
    remove_if_temporary(temporary, &root);
    Ok(measurements)
}

fn temporary_directory() -> PathBuf {
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    std::env::temp_dir().join(format!("weir-bench-{}-{started_ns}", std::process::id()))
}

fn remove_if_temporary(temporary: bool, root: &Path) {
    if temporary {
        // Best effort: a leftover directory in the temp dir harms no one.
        let _ = std::fs::remove_dir_all(root);
    }
}

/// One scenario: a fresh database, the table, the view, then every batch.
async fn measure(scenario: Scenario, workload: &Workload, directory: &Path) -> Result<Measurement> {
    refuse_existing_database(directory)?;
    let engine = Engine::open(directory).await?;
    let session = Session::new(engine.clone());
    run_sql(&session, TABLE_SQL).await?;
    if let Some(view_sql) = scenario.view_sql() {
        run_sql(&session, &view_sql).await?;
    }
    let log = engine
        .catalog()
        .table("events")
        .ok_or_else(|| WeirError::undefined_table("events"))?;
    let (batches, elapsed) = append_all(&log, workload).await?;
    let view = scenario
        .view_name()
        .and_then(|name| engine.catalog().view_result(&name));
    Ok(Measurement {
        scenario,
        rows: workload.rows,
        batches,
        elapsed,
        view_rows: view.as_ref().map(|view| view.row_count()),
        late_rows: view.map(|view| view.late_rows.load(Ordering::Relaxed)),
    })
}

/// A reused directory would already hold `events`, and its rows would skew
/// the figures; better to say so than to measure something else.
fn refuse_existing_database(directory: &Path) -> Result<()> {
    let occupied = std::fs::read_dir(directory).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(WeirError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            format!("{} is not empty", directory.display()),
        )
        .with_hint("Give --data-dir a new directory, or leave it out to use a temporary one."));
    }
    Ok(())
}

async fn run_sql(session: &Session, sql: &str) -> Result<()> {
    for statement in session.parse(sql)? {
        let prepared = session.prepare(statement).await?;
        session.execute(&prepared, None).await?;
    }
    Ok(())
}

/// Appends `workload.rows` events in batches; returns the batch count and
/// the time spent appending.
async fn append_all(log: &Arc<TableLog>, workload: &Workload) -> Result<(u64, Duration)> {
    let mut generator = EventGenerator::new(SEED);
    let mut remaining = workload.rows;
    let mut batches = 0;
    let mut elapsed = Duration::ZERO;
    while remaining > 0 {
        let batch_rows = remaining.min(workload.batch_rows as u64) as usize;
        let batch = generator.batch(log.schema(), batch_rows)?;
        let started = Instant::now();
        log.append(vec![batch]).await?;
        elapsed += started.elapsed();
        remaining -= batch_rows as u64;
        batches += 1;
    }
    Ok((batches, elapsed))
}

/// Auction events with mostly increasing timestamps, the same for the same
/// seed so every scenario and every run sees identical input.
pub struct EventGenerator {
    next_event: u64,
    random: SplitMix64,
}

impl EventGenerator {
    pub fn new(seed: u64) -> Self {
        EventGenerator {
            next_event: 0,
            random: SplitMix64(seed),
        }
    }

    /// The next `rows` events as a batch of `schema` (auction, price, ts).
    pub fn batch(&mut self, schema: SchemaRef, rows: usize) -> Result<RecordBatch> {
        let mut auctions = Vec::with_capacity(rows);
        let mut prices = Vec::with_capacity(rows);
        let mut timestamps = Vec::with_capacity(rows);
        for _ in 0..rows {
            auctions.push(self.random.below(AUCTIONS) as i64);
            prices.push(1 + self.random.below(MAX_PRICE) as i64);
            timestamps.push(self.next_timestamp_ns());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(auctions)),
            Arc::new(Int64Array::from(prices)),
            Arc::new(TimestampNanosecondArray::from(timestamps)),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    fn next_timestamp_ns(&mut self) -> i64 {
        let slot_ns = START_NS + self.next_event as i64 * EVENT_SPACING_NS;
        let jitter_ms = self.random.below(JITTER_MS + 1) as i64;
        let straggler_ms = if self.next_event % STRAGGLER_EVERY == STRAGGLER_EVERY - 1 {
            STRAGGLER_DELAY_MS
        } else {
            0
        };
        self.next_event += 1;
        slot_ns - (jitter_ms + straggler_ms) * NANOS_PER_MILLI
    }
}

/// SplitMix64: a tiny, well-mixed deterministic generator; benchmarks need
/// repeatable input, not cryptographic randomness.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    /// A value in `0..bound`; the modulo bias is negligible for small bounds.
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn events_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]))
    }

    fn timestamps(batch: &RecordBatch) -> Vec<i64> {
        let column = batch.column(2).as_any();
        let array = column.downcast_ref::<TimestampNanosecondArray>().unwrap();
        array.values().to_vec()
    }

    #[test]
    fn generator_is_deterministic_and_sized() {
        let first = EventGenerator::new(7)
            .batch(events_schema(), 2_500)
            .unwrap();
        let second = EventGenerator::new(7)
            .batch(events_schema(), 2_500)
            .unwrap();
        assert_eq!(first.num_rows(), 2_500);
        assert_eq!(first, second);
        let other_seed = EventGenerator::new(8)
            .batch(events_schema(), 2_500)
            .unwrap();
        assert_ne!(first, other_seed);
    }

    #[test]
    fn timestamps_advance_with_a_few_stragglers() {
        let batch = EventGenerator::new(7)
            .batch(events_schema(), 3_000)
            .unwrap();
        let timestamps = timestamps(&batch);
        let out_of_order = timestamps
            .windows(2)
            .filter(|pair| pair[1] < pair[0])
            .count();
        assert!(out_of_order > 0, "jitter puts some neighbours out of order");
        // Events 500 and 2500 are two simulated seconds apart, more than
        // the jitter, and neither is a straggler.
        assert!(
            timestamps[2_500] > timestamps[500],
            "time moves forward overall"
        );
        let stragglers = timestamps
            .iter()
            .enumerate()
            .filter(|(event, &ts)| {
                let slot_ns = START_NS + *event as i64 * EVENT_SPACING_NS;
                slot_ns - ts > JITTER_MS as i64 * NANOS_PER_MILLI
            })
            .count();
        assert_eq!(stragglers, 3);
    }

    #[test]
    fn every_view_scenario_has_a_view() {
        for scenario in Scenario::ALL {
            assert_eq!(
                scenario.view_sql().is_some(),
                scenario != Scenario::Baseline
            );
        }
    }
}
