//! `DurableTable`: a table whose rows are an append-only log in the state
//! store (`entries`), read back as a stream for queries, backfills and
//! recovery; memory holds the head (row count, watermark), not the rows.
//!
//! A write is acknowledged only after the commit that moves the head past
//! its rows (fsync). Row offsets in the log are the table's offsets for
//! checkpoints.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session as DataFusionSession;
use datafusion::common::{Constraints, DataFusionError};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

mod append;
mod between_rows;
mod changes;
mod character_limits;
mod clock;
mod commit_gate;
mod entries;
mod firings;
mod group_commit;
mod group_messages;
mod history;
mod keyless;
mod legacy;
mod locations;
mod lookup;
mod not_null;
mod placement;
mod retention;
mod scan;
mod streaming;
mod transaction;
mod unique;

pub use append::{BulkWrite, Streamed};
pub use changes::TableChanges;
pub use clock::{ticks_prefix, unix_now_ns, CLOCK_WAIT};
pub use commit_gate::CommitGate;
pub use entries::{entries_prefix, head_key, legacy_rows_prefix};
pub use firings::{firings_prefix, Firing};
pub use group_commit::GroupCommitter;
pub use history::History;
pub use streaming::Delivery;
pub use transaction::{PendingWrites, MAX_TRANSACTION_BYTES};

use crate::catalog::{SourceDefinition, StreamDefinition};
use crate::error::{Result, WeirError};
use crate::state::StateStore;
use crate::stream::WatermarkTracker;
use clock::{load_ticks, Clock};
use entries::{EntryReader, LogHead};
use locations::RowLocations;
pub use unique::KeyConstraint;
use unique::{KeyChanges, UniqueIndex};

/// Rows per stored log entry; bigger writes are split so no value is big.
/// Small entries matter for memory: sled's page cache has 256 shards that
/// each keep at least their newest page, so entries of megabytes would pin
/// hundreds of megabytes whatever the cache size (~128 KB each here).
const ROWS_PER_ENTRY: usize = 4 * 1024;

const NO_RETENTION: i64 = i64::MIN;

fn retention_ns(retention_ms: Option<i64>) -> i64 {
    retention_ms.map_or(NO_RETENTION, |ms| ms.saturating_mul(1_000_000))
}

/// The DataFusion face of a table: schema, constraints, defaults, and the log.
#[derive(Debug)]
pub struct DurableTable {
    log: Arc<TableLog>,
    constraints: Constraints,
    column_defaults: HashMap<String, Expr>,
}

/// A table's log: where its rows are and what is known about them.
pub struct TableLog {
    id: u64,
    name: String,
    committer: Arc<GroupCommitter>,
    schema: SchemaRef,
    store: Arc<dyn StateStore>,
    /// The lock serialises writers until they are queued to commit, so log
    /// order equals queue order, and key checks see every earlier write.
    writer: Arc<tokio::sync::Mutex<()>>,
    /// The unique-key indexes, with the keys of queued writes.
    unique: Mutex<Vec<UniqueIndex>>,
    /// A table with a primary key and no watermark takes UPDATE and
    /// DELETE: where its live rows are. None for an append-only table.
    locations: Option<Arc<Mutex<RowLocations>>>,
    /// DROP TABLE ran: a write that was waiting for the writer lock fails
    /// instead of writing rows nobody can read.
    dropped: AtomicBool,
    /// Writes queued or committing, and a wake-up when none are left.
    in_flight: AtomicU64,
    drained: tokio::sync::Notify,
    /// Rows committed and visible to queries (the head's row count).
    visible_rows: AtomicU64,
    /// For a table with WATERMARK FOR: its event-time watermark.
    watermark: Option<Mutex<WatermarkTracker>>,
    /// How the watermark moves without rows (PROCTIME, idle timeout).
    clock: Option<Mutex<Clock>>,
    /// The PROCTIME() column, stamped on arrival.
    proctime: Option<usize>,
    /// Watermarks raised between rows, by the row count at the time.
    ticks: Mutex<BTreeMap<u64, i64>>,
    /// `EMIT EVERY` firings of the views reading it, by the row count.
    firings: Mutex<BTreeMap<u64, Firing>>,
    /// `WITH (retention = ...)`: rows this far behind the watermark go.
    /// `NO_RETENTION` when rows are kept; ALTER TABLE changes it.
    retention_ns: AtomicI64,
    /// A source: its connector alone writes it.
    source: bool,
    /// A source's connector position after the committed rows.
    source_position: Mutex<Option<String>>,
    /// COPYs whose rows went through the views as they came, and those
    /// let go of part way (`streaming`), since the start.
    copies_streamed: AtomicU64,
    copies_detached: AtomicU64,
}

/// What `TableLog::storage` reports (`weir_catalog.tables`).
pub struct TableStorage {
    pub kept_rows: u64,
    pub entries: u64,
    pub disk_bytes: u64,
}

/// Holds a table's writes off while a new view reads its history.
pub struct WritesPaused<'a>(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>);

impl fmt::Debug for TableLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLog").field("id", &self.id).finish()
    }
}

impl DurableTable {
    pub fn new(
        log: Arc<TableLog>,
        constraints: Constraints,
        column_defaults: HashMap<String, Expr>,
    ) -> Self {
        DurableTable {
            log,
            constraints,
            column_defaults,
        }
    }

    pub fn log(&self) -> &Arc<TableLog> {
        &self.log
    }
}

impl TableLog {
    /// Opens a table's log: its head, ticks and (for a table with unique
    /// keys) its key index; rows stay in the store.
    pub fn open(
        id: u64,
        name: &str,
        schema: SchemaRef,
        constraints: &Constraints,
        stream: Option<&StreamDefinition>,
        committer: Arc<GroupCommitter>,
        keyless_updates: bool,
    ) -> Result<Self> {
        let store = committer.store().clone();
        let mut tracker = watermark_tracker(stream, &schema)?;
        let head = match entries::load_head(&*store, id)? {
            Some(head) => head,
            None => legacy::migrate(&*store, id, &schema, tracker.clone())?,
        };
        // Rows a statement spilled before a crash or failure are not the table's.
        entries::delete_from(&*store, id, head.rows)?;
        let ticks = load_ticks(&*store, id)?;
        let firings = firings::load_firings(&*store, id)?;
        if let Some(tracker) = tracker.as_mut() {
            tracker.seen_up_to(head.max_event_ns);
            if let Some(highest) = ticks.values().max() {
                tracker.raise_to(*highest);
            }
        }
        let proctime = match stream.and_then(|stream| stream.proctime.as_ref()) {
            Some(column) => Some(schema.index_of(column).map_err(|_| {
                WeirError::internal(format!("PROCTIME() column {column} is missing"))
            })?),
            None => None,
        };
        let clock = Clock::new(stream, tracker.as_ref().and_then(|t| t.current_ns()));
        let mut unique = UniqueIndex::for_constraints(name, &schema, constraints)?;
        let mut locations = match updatable_key(constraints, stream) {
            Some(columns) => Some(RowLocations::new(&schema, columns)?),
            None if keyless_updates && !is_append_only(stream) => Some(RowLocations::keyless()?),
            None => None,
        };
        let keyless = locations.as_ref().is_some_and(RowLocations::is_keyless);
        if !unique.is_empty() || keyless {
            for entry in EntryReader::new(&*store, id, schema.clone(), None, 0, head.rows)? {
                let entry = entry?;
                let changes = entry.changes_from(entry.first_row);
                KeyChanges::check(&unique, &changes)?.reserve(&mut unique);
                if let Some(locations) = locations.as_mut() {
                    let mut placed = locations::LocationChanges::default();
                    locations.place(&changes, entry.first_row, &mut placed)?;
                    locations.apply(placed);
                }
            }
        }
        Ok(TableLog {
            id,
            name: name.to_string(),
            committer,
            schema,
            store,
            writer: Arc::new(tokio::sync::Mutex::new(())),
            unique: Mutex::new(unique),
            locations: locations.map(|locations| Arc::new(Mutex::new(locations))),
            dropped: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            drained: tokio::sync::Notify::new(),
            visible_rows: AtomicU64::new(head.rows),
            watermark: tracker.map(Mutex::new),
            clock: clock.map(Mutex::new),
            proctime,
            ticks: Mutex::new(ticks),
            firings: Mutex::new(firings),
            retention_ns: AtomicI64::new(retention_ns(
                stream.and_then(|stream| stream.retention_ms),
            )),
            source: stream.is_some_and(|stream| stream.source.is_some()),
            source_position: Mutex::new(head.position),
            copies_streamed: AtomicU64::new(0),
            copies_detached: AtomicU64::new(0),
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The current event-time watermark (ns since the epoch), if the table
    /// has one and has rows.
    pub fn watermark_ns(&self) -> Option<i64> {
        let tracker = self.watermark.as_ref()?;
        tracker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .current_ns()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table was dropped (call with its writes paused): later writes
    /// fail with 42P01.
    pub fn mark_dropped(&self) {
        self.dropped.store(true, Ordering::Release);
    }

    /// The table's PRIMARY KEY and UNIQUE constraints.
    pub fn key_constraints(&self) -> Vec<KeyConstraint> {
        let unique = self.unique.lock().unwrap_or_else(|p| p.into_inner());
        unique.iter().map(UniqueIndex::describe).collect()
    }

    /// What `changes` would do to each unique index, checked against the
    /// table (and within `changes`) but not reserved.
    fn check_keys(&self, changes: &TableChanges) -> Result<KeyChanges> {
        let unique = self.unique.lock().unwrap_or_else(|p| p.into_inner());
        KeyChanges::check(&unique, changes)
    }

    /// The positions of the NOT NULL columns.
    pub fn not_null_columns(&self) -> Vec<usize> {
        let fields = self.schema.fields().iter().enumerate();
        fields
            .filter(|(_, field)| !field.is_nullable())
            .map(|(index, _)| index)
            .collect()
    }

    /// Whether the table takes UPDATE and DELETE (no watermark, not APPEND
    /// ONLY; a primary key, or created by SQL edition 3 or later).
    pub fn accepts_updates(&self) -> bool {
        self.locations.is_some()
    }

    /// The primary key's columns, when the table takes updates.
    pub fn primary_key(&self) -> Option<Vec<usize>> {
        let unique = self.unique.lock().unwrap_or_else(|p| p.into_inner());
        unique
            .iter()
            .map(UniqueIndex::describe)
            .find(|constraint| constraint.primary)
            .map(|constraint| constraint.columns)
    }

    /// The offsets of the live rows with the primary keys of `rows`
    /// (None where no row has the key). Empty when the table takes no
    /// updates.
    pub fn live_offsets(&self, rows: &RecordBatch) -> Result<Vec<Option<u64>>> {
        match &self.locations {
            Some(locations) => lock(locations).live_offsets(rows),
            None => Ok(Vec::new()),
        }
    }

    /// The error of a write repeating a key of unique index `index`.
    fn duplicate_key(&self, index: usize) -> WeirError {
        let unique = self.unique.lock().unwrap_or_else(|p| p.into_inner());
        match unique.get(index) {
            Some(index) => index.duplicate(),
            None => WeirError::internal("a unique index vanished"),
        }
    }

    fn check_not_dropped(&self) -> Result<()> {
        match self.dropped.load(Ordering::Acquire) {
            true => Err(WeirError::undefined_table(&self.name)),
            false => Ok(()),
        }
    }

    /// Waits for the table's writes to finish and blocks new ones until
    /// the guard is dropped.
    pub async fn pause_writes(&self) -> WritesPaused<'_> {
        let writer = self.writer.lock().await;
        self.quiesce().await;
        WritesPaused(writer)
    }

    /// Every stored row as the messages a live append would have produced
    /// (same watermark per row), for backfilling a new view or rebuilding
    /// views on start.
    pub fn history(&self) -> Result<History> {
        self.history_from(0)
    }

    /// What a new view starts from: for a table whose rows are updated
    /// and deleted (and that has no watermark, whose rows' order would
    /// matter), only its live rows, as a query of it sees them — a view
    /// over a SELECT must not fail on a row deleted before it existed;
    /// otherwise its whole history.
    pub fn backfill_history(&self) -> Result<History> {
        let mut history = self.history()?;
        if let (Some(locations), None) = (&self.locations, &self.watermark) {
            history.only_live(locations.clone());
        }
        Ok(history)
    }

    /// The history after the first `offset` rows (recovery from a
    /// checkpoint); the skipped rows still move the watermark. Watermarks
    /// raised between rows come back where they were raised.
    pub fn history_from(&self, offset: u64) -> Result<History> {
        let to = self.row_count();
        let tracker = self.watermark.as_ref().map(|tracker| {
            tracker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .restarted()
        });
        let ticks = lock(&self.ticks).clone();
        let firings = lock(&self.firings)
            .range(offset..)
            .map(|(&row, firing)| (row, firing.views.clone()))
            .collect();
        let entries =
            EntryReader::new(&*self.store, self.id, self.schema.clone(), None, offset, to)?;
        Ok(History::new(entries, tracker, (ticks, firings), offset, to))
    }

    /// Rows still kept (retention deletes the oldest), log entries and the
    /// bytes they take on disk.
    pub fn storage(&self) -> Result<TableStorage> {
        let (size, first_row) = entries::stored_size(&*self.store, self.id)?;
        let rows = self.row_count();
        Ok(TableStorage {
            kept_rows: rows.saturating_sub(first_row.unwrap_or(rows)),
            entries: size.entries,
            disk_bytes: size.bytes,
        })
    }

    /// Rows committed so far.
    pub fn row_count(&self) -> u64 {
        self.visible_rows.load(Ordering::Acquire)
    }

    /// The head a commit writes: `rows` in all, events seen up to the
    /// tracker, a source's connector at `position`.
    fn head_after(
        &self,
        rows: u64,
        tracker: Option<&WatermarkTracker>,
        position: Option<String>,
    ) -> LogHead {
        LogHead {
            rows,
            max_event_ns: tracker.and_then(WatermarkTracker::max_event_ns),
            position,
        }
    }

    /// A scan of the rows committed now, with only `projection`'s columns.
    pub fn scan(&self, projection: Option<&Vec<usize>>) -> Result<scan::TableScan> {
        let schema = match projection {
            Some(columns) => Arc::new(self.schema.project(columns)?),
            None => self.schema.clone(),
        };
        Ok(scan::TableScan {
            store: self.store.clone(),
            table_id: self.id,
            schema,
            projection: projection.cloned(),
            from: 0,
            to: self.row_count(),
            locations: self.locations.clone(),
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The primary key of a table that takes updates: one with a primary key,
/// no watermark (its views would need retractions in windows) and not
/// declared APPEND ONLY.
fn updatable_key(
    constraints: &Constraints,
    stream: Option<&StreamDefinition>,
) -> Option<Vec<usize>> {
    if is_append_only(stream) {
        return None;
    }
    constraints.iter().find_map(|constraint| match constraint {
        datafusion::common::Constraint::PrimaryKey(columns) => Some(columns.clone()),
        datafusion::common::Constraint::Unique(_) => None,
    })
}

/// A table with a watermark (its views would need retractions in
/// windows) or declared APPEND ONLY takes inserts only.
fn is_append_only(stream: Option<&StreamDefinition>) -> bool {
    stream.is_some_and(|stream| stream.watermark.is_some() || stream.append_only)
}

fn watermark_tracker(
    stream: Option<&StreamDefinition>,
    schema: &SchemaRef,
) -> Result<Option<WatermarkTracker>> {
    let Some(definition) = stream.and_then(|stream| stream.watermark.as_ref()) else {
        return Ok(None);
    };
    let column = schema.index_of(&definition.column).map_err(|_| {
        WeirError::internal(format!("watermark column {} is missing", definition.column))
    })?;
    let from_connector = stream
        .and_then(|stream| stream.source.as_ref())
        .is_some_and(SourceDefinition::watermark_from_connector);
    Ok(Some(match from_connector {
        true => WatermarkTracker::raised_only(column),
        false => WatermarkTracker::new(column, definition.delay_ms),
    }))
}

#[async_trait]
impl TableProvider for DurableTable {
    fn schema(&self) -> SchemaRef {
        self.log.schema.clone()
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.column_defaults.get(column)
    }

    async fn scan(
        &self,
        _state: &dyn DataFusionSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let scan = self
            .log
            .scan(projection)
            .map_err(|error| DataFusionError::External(Box::new(error)))?;
        let schema = scan.schema.clone();
        let exec =
            StreamingTableExec::try_new(schema, vec![Arc::new(scan)], None, [], false, None)?;
        Ok(Arc::new(exec))
    }

    async fn insert_into(
        &self,
        _state: &dyn DataFusionSession,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::External(Box::new(WeirError::unsupported(
                format!("{insert_op} is not supported; use INSERT INTO"),
            ))));
        }
        let sink = TableSink {
            log: self.log.clone(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// Writes an INSERT's rows into a table log.
#[derive(Debug)]
struct TableSink {
    log: Arc<TableLog>,
}

impl DisplayAs for TableSink {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableSink: table_id={}", self.log.id)
    }
}

#[async_trait]
impl DataSink for TableSink {
    fn schema(&self) -> &SchemaRef {
        &self.log.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> datafusion::error::Result<u64> {
        // A statement is all or nothing: spill as rows come, commit once.
        let external = |error: WeirError| DataFusionError::External(Box::new(error));
        let pending = context.session_config().get_extension::<PendingWrites>();
        if let Some(pending) = pending.filter(|pending| pending.is_active()) {
            return keep_in_block(&pending, &self.log, data)
                .await
                .map_err(external);
        }
        let mut write = BulkWrite::begin(self.log.clone()).await;
        while let Some(batch) = data.next().await {
            let batch = batch.map_err(|error| not_null::name_the_column(error, &self.log))?;
            write.add(batch).map_err(external)?;
        }
        let gate = context.session_config().get_extension::<CommitGate>();
        write.commit(gate.as_deref()).await.map_err(external)
    }
}

/// An INSERT … SELECT inside a transaction block: its rows wait for COMMIT
/// (none of them if the statement fails).
async fn keep_in_block(
    pending: &PendingWrites,
    log: &Arc<TableLog>,
    mut data: SendableRecordBatchStream,
) -> Result<u64> {
    let mark = pending.mark();
    let mut rows = 0;
    while let Some(batch) = data.next().await {
        let batch = batch.map_err(|error| not_null::name_the_column(error, log));
        let kept = batch.map_err(WeirError::from).and_then(|batch| {
            rows += batch.num_rows() as u64;
            pending.keep(log, batch)
        });
        if let Err(error) = kept {
            pending.truncate(mark);
            return Err(error);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests;
