//! A query's scan of a table: the rows committed when it was planned,
//! streamed from the store entry by entry (only the projected columns are
//! decoded), so a query over any amount of history holds a few entries.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::PartitionStream;

use super::entries::EntryReader;
use super::locations::RowLocations;
use super::lock;
use crate::error::WeirError;
use crate::state::StateStore;

/// Entries decoded ahead of the consumer.
const BATCHES_AHEAD: usize = 2;

pub struct TableScan {
    pub(super) store: Arc<dyn StateStore>,
    pub(super) table_id: u64,
    /// The projected schema.
    pub(super) schema: SchemaRef,
    pub(super) projection: Option<Vec<usize>>,
    pub(super) from: u64,
    pub(super) to: u64,
    /// For a table with retractions: which rows are live.
    pub(super) locations: Option<Arc<Mutex<RowLocations>>>,
}

impl fmt::Debug for TableScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableScan")
            .field("table_id", &self.table_id)
            .field("rows", &(self.from..self.to))
            .finish()
    }
}

impl PartitionStream for TableScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), BATCHES_AHEAD);
        let sender = builder.tx();
        let store = self.store.clone();
        let (table_id, schema) = (self.table_id, self.schema.clone());
        let (projection, from, to) = (self.projection.clone(), self.from, self.to);
        let locations = self.locations.clone();
        let external = |error: WeirError| DataFusionError::External(Box::new(error));
        builder.spawn_blocking(move || {
            let reader = EntryReader::new(&*store, table_id, schema, projection, from, to)
                .map_err(external)?;
            for entry in reader {
                let entry = entry.map_err(external)?;
                let start = from.max(entry.first_row);
                let changes = entry.changes_from(from);
                let rows = match &locations {
                    Some(locations) => {
                        let shown = lock(locations).visible(&changes, start, to);
                        filter_record_batch(&changes.rows, &shown)?
                    }
                    None => changes.rows,
                };
                if rows.num_rows() > 0 && sender.blocking_send(Ok(rows)).is_err() {
                    // The query stopped reading (LIMIT, cancel): stop too.
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}
