//! `DurableTable`: a table whose rows are an append-only log in the state
//! store, one entry per write, and a copy in memory for queries.
//!
//! A write is acknowledged only after its log entry is committed (fsync). The
//! log is also what later streaming issues replay from: entry sequence numbers
//! are the table's offsets.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session as DataFusionSession;
use datafusion::common::{Constraints, DataFusionError};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

mod append;
mod clock;
mod commit_gate;

pub use clock::{ticks_prefix, unix_now_ns};
pub use commit_gate::CommitGate;

use super::unique::UniqueIndex;
use super::StreamDefinition;
use crate::error::{Result, WeirError};
use crate::state::batch_codec::decode_batches;
use crate::state::{key, StateStore, WriteBatch};
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};
use append::commit_with_views;
use clock::{load_ticks, Clock};

/// Rows per stored log entry; bigger writes are split so no value is huge.
const ROWS_PER_ENTRY: usize = 64 * 1024;

/// The DataFusion face of a table: schema, constraints, defaults, and the log.
#[derive(Debug)]
pub struct DurableTable {
    log: Arc<TableLog>,
    constraints: Constraints,
    column_defaults: HashMap<String, Expr>,
}

/// Told about every write before it commits, under the table's writer
/// lock; returns writes (e.g. view changes) to commit atomically with it.
pub trait AppendObserver: Send + Sync {
    /// Pushes the write through what observes it and calls `commit` with
    /// the combined writes while still holding its lock, so a checkpoint
    /// never sees state or offsets the store does not have.
    fn append_and_commit(
        &self,
        table: &str,
        messages: Vec<Message>,
        commit: &mut dyn FnMut(WriteBatch) -> Result<()>,
    ) -> Result<()>;
    /// Something failed part-way: observed state is ahead.
    fn on_commit_failed(&self);
}

/// The rows of one table: durable log plus in-memory copy.
pub struct TableLog {
    id: u64,
    name: String,
    observer: Option<Arc<dyn AppendObserver>>,
    schema: SchemaRef,
    store: Arc<dyn StateStore>,
    /// The lock serialises writers so log order equals the order in which
    /// rows become visible, and key checks see every earlier write.
    writer: Arc<tokio::sync::Mutex<Writer>>,
    rows: RwLock<Vec<RecordBatch>>,
    /// For a table with WATERMARK FOR: its event-time watermark.
    watermark: Option<Mutex<WatermarkTracker>>,
    /// How the watermark moves without rows (PROCTIME, idle timeout).
    clock: Option<Mutex<Clock>>,
    /// The PROCTIME() column, stamped on arrival.
    proctime: Option<usize>,
    /// Watermarks raised between rows, by the row count at the time.
    ticks: Mutex<BTreeMap<u64, i64>>,
}

/// Holds a table's writes off while a new view reads its history.
pub struct WritesPaused<'a>(#[allow(dead_code)] tokio::sync::MutexGuard<'a, Writer>);

pub struct Writer {
    next_sequence: u64,
    unique: Vec<UniqueIndex>,
}

impl fmt::Debug for TableLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLog").field("id", &self.id).finish()
    }
}

pub fn rows_prefix(table_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"rows", &table_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

fn entry_key(table_id: u64, sequence: u64) -> Vec<u8> {
    let mut entry = rows_prefix(table_id);
    entry.extend_from_slice(&sequence.to_be_bytes());
    entry
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
    /// Opens a table's log, loading every stored entry.
    pub fn open(
        id: u64,
        name: &str,
        schema: SchemaRef,
        constraints: &Constraints,
        stream: Option<&StreamDefinition>,
        store: Arc<dyn StateStore>,
        observer: Option<Arc<dyn AppendObserver>>,
    ) -> Result<Self> {
        let watermark = stream.and_then(|stream| stream.watermark.as_ref());
        let mut rows = Vec::new();
        let mut next_sequence = 0;
        for (stored_key, value) in store.scan_prefix(&rows_prefix(id))? {
            rows.extend(decode_entry(&stored_key, &value, &schema)?);
            next_sequence = sequence_of(&stored_key) + 1;
        }
        let mut tracker = match watermark {
            Some(definition) => {
                let column = schema.index_of(&definition.column).map_err(|_| {
                    WeirError::internal(format!(
                        "watermark column {} is missing",
                        definition.column
                    ))
                })?;
                Some(WatermarkTracker::new(column, definition.delay_ms))
            }
            None => None,
        };
        let ticks = load_ticks(&*store, id)?;
        if let Some(tracker) = tracker.as_mut() {
            for batch in &rows {
                tracker.advance(batch)?;
            }
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
        for index in &mut unique {
            for batch in &rows {
                let keys = index.check(batch)?;
                index.insert(keys);
            }
        }
        Ok(TableLog {
            id,
            name: name.to_string(),
            observer,
            schema,
            store,
            writer: Arc::new(tokio::sync::Mutex::new(Writer {
                next_sequence,
                unique,
            })),
            rows: RwLock::new(rows),
            watermark: tracker.map(Mutex::new),
            clock: clock.map(Mutex::new),
            proctime,
            ticks: Mutex::new(ticks),
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

    /// Waits for the current write to finish and blocks new ones until the
    /// guard is dropped.
    pub async fn pause_writes(&self) -> WritesPaused<'_> {
        WritesPaused(self.writer.lock().await)
    }

    /// Every stored row as the messages a live append would have produced
    /// (same watermark per row), for backfilling a new view or rebuilding
    /// views on start.
    pub fn history(&self) -> Result<Vec<Message>> {
        self.history_from(0)
    }

    /// The history after the first `offset` rows (recovery from a
    /// checkpoint); the skipped rows still move the watermark. Watermarks
    /// raised between rows come back where they were raised.
    pub fn history_from(&self, offset: u64) -> Result<Vec<Message>> {
        let mut tracker = self.watermark.as_ref().map(|tracker| {
            tracker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .restarted()
        });
        let ticks = self.ticks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut position = 0u64;
        let mut messages = Vec::new();
        let raise =
            |at: u64, tracker: &mut Option<WatermarkTracker>, messages: &mut Vec<Message>| {
                if let (Some(watermark), Some(tracker)) = (ticks.get(&at), tracker.as_mut()) {
                    tracker.raise_to(*watermark);
                    if at >= offset {
                        messages.push(Message::Watermark(*watermark));
                    }
                }
            };
        for batch in self.snapshot() {
            raise(position, &mut tracker, &mut messages);
            let skipped = (offset.saturating_sub(position) as usize).min(batch.num_rows());
            if let Some(tracker) = tracker.as_mut() {
                tracker.advance(&batch.slice(0, skipped))?;
            }
            if skipped < batch.num_rows() {
                let tail = batch.slice(skipped, batch.num_rows() - skipped);
                messages.extend(source_messages(tail, tracker.as_mut())?);
            }
            position += batch.num_rows() as u64;
        }
        raise(position, &mut tracker, &mut messages);
        Ok(messages)
    }

    pub fn row_count(&self) -> usize {
        self.snapshot().iter().map(RecordBatch::num_rows).sum()
    }

    /// The rows visible now; cheap (batches are reference counted).
    pub fn snapshot(&self) -> Vec<RecordBatch> {
        self.rows
            .read()
            .map(|rows| rows.clone())
            .unwrap_or_default()
    }
}

fn sequence_of(stored_key: &[u8]) -> u64 {
    let tail = &stored_key[stored_key.len().saturating_sub(8)..];
    let mut bytes = [0u8; 8];
    bytes[8 - tail.len()..].copy_from_slice(tail);
    u64::from_be_bytes(bytes)
}

fn decode_entry(stored_key: &[u8], value: &[u8], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let what = format!("table rows at {:?}", String::from_utf8_lossy(stored_key));
    decode_batches(value, &what)?
        .into_iter()
        .map(|batch| {
            RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|error| {
                WeirError::new(
                    crate::error::sqlstate::DATA_CORRUPTED,
                    format!("{what} do not match the table: {error}"),
                )
            })
        })
        .collect()
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
        let exec = MemorySourceConfig::try_new_exec(
            &[self.log.snapshot()],
            self.log.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
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
        // A statement is all or nothing: collect, then commit once.
        let mut batches = Vec::new();
        while let Some(batch) = data.next().await {
            batches.push(batch?);
        }
        let gate = context.session_config().get_extension::<CommitGate>();
        self.log
            .append(batches, gate.as_deref())
            .await
            .map_err(|error| DataFusionError::External(Box::new(error)))
    }
}

#[cfg(test)]
mod tests;
