//! COPY FROM STDIN as it streams: data is decoded chunk by chunk into a
//! `BulkWrite` (which spills to the table's log past a bound), and the whole
//! statement commits at CopyDone — all or nothing, like every write, with
//! memory bounded by a chunk rather than the payload.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;

use super::{CopyIn, Session};
use crate::connectors::pg_copy::{self, CopyDecoder};
use crate::connectors::table::{BulkWrite, TableLog};
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};

/// A COPY FROM STDIN receiving data.
pub struct CopyInProgress {
    decoder: CopyDecoder,
    table: Arc<TableLog>,
    table_schema: SchemaRef,
    /// None once the COPY has failed (the first error is kept).
    write: Option<BulkWrite>,
    failed: Option<WeirError>,
}

impl CopyInProgress {
    /// Takes a CopyData message. An error ends the COPY; later data is
    /// ignored and CopyDone reports the error (nothing is written).
    pub fn data(&mut self, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let added = self.decoder.push(data).and_then(|batch| self.add(batch));
        if let Err(error) = added {
            self.fail(error);
        }
    }

    fn add(&mut self, batch: Option<datafusion::arrow::record_batch::RecordBatch>) -> Result<()> {
        let (Some(batch), Some(write)) = (batch, self.write.as_mut()) else {
            return Ok(());
        };
        let batch = pg_copy::widen(&batch, &self.table_schema)?;
        write.add(batch)
    }

    fn fail(&mut self, error: WeirError) {
        // Dropping the write forgets what it spilled and lets writers on.
        self.write = None;
        self.failed = Some(error);
    }

    pub fn table(&self) -> &str {
        self.table.name()
    }
}

impl Session {
    /// Starts taking a COPY's data: waits for the table's earlier writes
    /// and holds later ones off until the COPY ends.
    pub async fn start_copy(&self, copy: CopyIn) -> CopyInProgress {
        let write = BulkWrite::begin(copy.table.clone()).await;
        CopyInProgress {
            decoder: CopyDecoder::new(copy.options, copy.columns),
            table_schema: copy.table.schema(),
            table: copy.table,
            write: Some(write),
            failed: None,
        }
    }

    /// Decodes the rest of the data and durably appends the whole COPY.
    pub async fn finish_copy(&self, mut copy: CopyInProgress) -> Result<CommandDone> {
        let rest = copy.decoder.finish();
        if let Err(error) = rest.and_then(|batch| copy.add(batch)) {
            copy.fail(error);
        }
        if let Some(error) = copy.failed.take() {
            return Err(error);
        }
        let write = copy
            .write
            .take()
            .ok_or_else(|| WeirError::internal("COPY finished twice"))?;
        let rows = match write.commit(Some(&self.gate)).await {
            Ok(rows) => rows,
            Err(error) => {
                self.engine.repair_views().await;
                return Err(error);
            }
        };
        self.note_write(rows);
        Ok(CommandDone::new("COPY").with_rows(rows))
    }
}
