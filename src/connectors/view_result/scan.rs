//! Reading a view's committed rows from the store: for a multiset one
//! epoch, in row order, decoded in batches, each row repeated by its count;
//! for a log the entries committed when the read starts, in emit order.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::PartitionStream;

use super::keyed::KeyedRuns;
use super::log::{LogBatches, LogPosition};
use super::versions::Versions;
use super::{view_rows_end, view_rows_prefix, ReadGuard, Readers, RowLayout, ViewResult};
use crate::error::Result;
use crate::state::runs::{decode_count, Combine, Merge, RunCursor, Source};
use crate::state::StateStore;

/// Rows per decoded batch.
const BATCH_ROWS: usize = 8192;

/// A view's rows, to read once or to stream to a query (at the epoch
/// committed when it starts).
pub struct ViewRows {
    store: Arc<dyn StateStore>,
    readers: Arc<Readers>,
    layout: RowLayout,
    log_position: Arc<Mutex<LogPosition>>,
    runs: Arc<Mutex<KeyedRuns>>,
    view_id: u64,
    /// The view's full schema (what the stored rows decode to).
    stored_schema: SchemaRef,
    projection: Option<Vec<usize>>,
    projected: SchemaRef,
}

impl fmt::Debug for ViewRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewRows")
            .field("view_id", &self.view_id)
            .finish()
    }
}

impl ViewRows {
    pub(super) fn new(result: &ViewResult, projection: Option<Vec<usize>>) -> Result<Self> {
        let projected = match &projection {
            Some(columns) => Arc::new(result.schema.project(columns)?),
            None => result.schema.clone(),
        };
        Ok(ViewRows {
            store: result.store.clone(),
            readers: result.readers.clone(),
            layout: result.layout.clone(),
            log_position: result.log_position.clone(),
            runs: result.runs.clone(),
            view_id: result.id,
            stored_schema: result.schema.clone(),
            projection,
            projected,
        })
    }

    /// Reads the rows committed now, batch by batch.
    pub fn read(&self) -> Result<RowBatches> {
        Ok(match self.layout {
            RowLayout::Multiset => RowBatches::Multiset(self.read_multiset()?),
            RowLayout::Keyed(_) | RowLayout::Counted => RowBatches::Multiset(self.read_runs()?),
            RowLayout::Log => RowBatches::Log(LogBatches::new(
                &self.store,
                self.view_id,
                *self.log_position.lock().unwrap_or_else(|p| p.into_inner()),
                self.projection.clone(),
            )),
        })
    }

    /// A keyed or counted view's rows: its committed runs merged, in key
    /// (row) order.
    fn read_runs(&self) -> Result<MultisetBatches> {
        let guard = self.readers.begin();
        let list = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .committed
            .clone();
        let sources = list
            .iter()
            .rev()
            .map(|run| {
                let space = view_rows_prefix(self.view_id);
                Source::Run(RunCursor::new(self.store.clone(), &space, run.clone()))
            })
            .collect();
        // Each cursor holds its run, so its pages stay while it reads.
        if self.layout == RowLayout::Counted {
            let rows = Merge::new(sources, true, Combine::Sum).map(|entry| {
                let (row, count) = entry?;
                Ok((row, 0, decode_count(count.as_deref())?.max(0) as usize))
            });
            return self.batches(guard, Box::new(rows));
        }
        let rows = Merge::new(sources, true, Combine::Newest).map(|entry| {
            let (_, row) = entry?;
            Ok((row.unwrap_or_default(), 0, 1))
        });
        self.batches(guard, Box::new(rows))
    }

    fn read_multiset(&self) -> Result<MultisetBatches> {
        let prefix_length = view_rows_prefix(self.view_id).len();
        let entries = self.store.scan_range(
            &view_rows_prefix(self.view_id),
            &view_rows_end(self.view_id),
        );
        let guard = self.readers.begin();
        let (epoch, aborted) = (guard.epoch, guard.aborted.clone());
        let rows = entries.filter_map(move |entry| {
            let count = entry.and_then(|(key, value)| {
                let count = Versions::decode(&value)?.count_at(epoch, &aborted);
                Ok((key, count))
            });
            match count {
                Ok((key, count)) if count > 0 => Some(Ok((key, prefix_length, count as usize))),
                Ok(_) => None,
                Err(error) => Some(Err(error)),
            }
        });
        self.batches(guard, Box::new(rows))
    }

    fn batches(&self, guard: ReadGuard, rows: StoredRows) -> Result<MultisetBatches> {
        let fields = self
            .stored_schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(MultisetBatches {
            _guard: guard,
            rows,
            converter: RowConverter::new(fields)?,
            schema: self.stored_schema.clone(),
            projection: self.projection.clone(),
        })
    }
}

/// A view's committed rows, batch by batch.
pub enum RowBatches {
    Multiset(MultisetBatches),
    Log(LogBatches),
}

impl Iterator for RowBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        match self {
            RowBatches::Multiset(batches) => batches.next_batch().transpose(),
            RowBatches::Log(batches) => batches.next(),
        }
    }
}

/// The rows of one epoch, in batches of up to `BATCH_ROWS`.
/// Stored rows: each in Arrow's row format (from where it starts in the
/// bytes) and its count.
type StoredRows = Box<dyn Iterator<Item = Result<(Vec<u8>, usize, usize)>> + Send>;

pub struct MultisetBatches {
    /// Keeps the epoch's versions while the rows are read.
    _guard: ReadGuard,
    rows: StoredRows,
    converter: RowConverter,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
}

impl MultisetBatches {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        // Each row in Arrow's row format, where it starts, and its count.
        let mut found: Vec<(Vec<u8>, usize, usize)> = Vec::new();
        let mut rows = 0;
        while rows < BATCH_ROWS {
            let Some(row) = self.rows.next() else {
                break;
            };
            let row = row?;
            rows += row.2;
            found.push(row);
        }
        if found.is_empty() {
            return Ok(None);
        }
        let parser = self.converter.parser();
        let parsed = found
            .iter()
            .flat_map(|(bytes, start, count)| std::iter::repeat_n(&bytes[*start..], *count))
            .map(|bytes| parser.parse(bytes));
        let columns = self.converter.convert_rows(parsed)?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        Ok(Some(match &self.projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        }))
    }
}

impl PartitionStream for ViewRows {
    fn schema(&self) -> &SchemaRef {
        &self.projected
    }

    fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.projected.clone(), 2);
        let sender = builder.tx();
        // The epoch is fixed now, before the blocking task runs.
        let batches = self.read();
        builder.spawn_blocking(move || {
            let external = |error| datafusion::error::DataFusionError::External(Box::new(error));
            for batch in batches.map_err(external)? {
                if sender.blocking_send(batch.map_err(external)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}
