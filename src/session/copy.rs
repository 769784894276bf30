//! COPY FROM STDIN as it streams: data is decoded chunk by chunk into a
//! `BulkWrite` (which spills to the table's log past a bound, and hands
//! what it spilled to the views as it goes), and the whole statement
//! commits at CopyDone — all or nothing, like every write, with memory
//! bounded by a chunk rather than the payload. Inside a transaction
//! block the rows wait for COMMIT with the block's other writes instead.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};

use super::{CopyIn, Outcome, Session};
use crate::connectors::pg_copy::CopyOptions;
use crate::connectors::pg_copy::{self, CopyDecoder};
use crate::connectors::table::{BulkWrite, Delivery, PendingWrites, Streamed, TableLog};
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};

/// A COPY FROM STDIN receiving data.
pub struct CopyInProgress {
    decoder: CopyDecoder,
    table: Arc<TableLog>,
    table_schema: SchemaRef,
    /// None once the COPY has failed (the first error is kept).
    write: Option<CopyTarget>,
    failed: Option<WeirError>,
}

/// Where a COPY's rows go.
enum CopyTarget {
    Table(Box<BulkWrite>),
    /// A transaction block's pending writes, from position `mark` on.
    Block {
        pending: Arc<PendingWrites>,
        mark: usize,
        rows: u64,
    },
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
        match write {
            CopyTarget::Table(write) => write.add(batch),
            CopyTarget::Block { pending, rows, .. } => {
                *rows += batch.num_rows() as u64;
                pending.keep(&self.table, batch).map(|_| ())
            }
        }
    }

    /// Ends the COPY with `error` now: its rows go and the table's
    /// writes are free again; CopyDone reports the error.
    pub fn fail(&mut self, error: WeirError) {
        // Dropping the write forgets what it spilled and lets writers on;
        // in a block the rows kept so far go.
        if let Some(CopyTarget::Block { pending, mark, .. }) = self.write.take() {
            pending.truncate(mark);
        }
        self.failed.get_or_insert(error);
    }

    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Rows for the views of a COPY they take as it comes (`streaming`):
    /// to be sent without holding any lock, as sending waits for room.
    pub fn delivery(&mut self) -> Option<Delivery> {
        match self.write.as_mut()? {
            CopyTarget::Table(write) => write.delivery(),
            CopyTarget::Block { .. } => None,
        }
    }
}

impl Session {
    /// COPY … FROM STDIN: the table and the columns its data holds.
    pub(super) fn copy_in(
        &self,
        table: &str,
        columns: &[String],
        options: &CopyOptions,
    ) -> Result<Outcome> {
        let log = self
            .engine
            .relations()
            .table(table)
            .ok_or_else(|| WeirError::undefined_table(table))?;
        log.check_writable()?;
        let table_schema = log.schema();
        let columns = if columns.is_empty() {
            table_schema.clone()
        } else {
            let fields = columns
                .iter()
                .map(|column| {
                    table_schema.field_with_name(column).cloned().map_err(|_| {
                        WeirError::new(
                            crate::error::sqlstate::UNDEFINED_COLUMN,
                            format!("column \"{column}\" of relation \"{table}\" does not exist"),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Arc::new(Schema::new(fields))
        };
        Ok(Outcome::CopyIn(CopyIn {
            table: log,
            columns,
            options: options.clone(),
        }))
    }

    /// Starts taking a COPY's data: waits for the table's earlier writes
    /// and holds later ones off until the COPY ends.
    pub async fn start_copy(&self, copy: CopyIn) -> CopyInProgress {
        let write = if self.pending.is_active() {
            CopyTarget::Block {
                pending: self.pending.clone(),
                mark: self.pending.mark(),
                rows: 0,
            }
        } else {
            CopyTarget::Table(Box::new(
                BulkWrite::begin_streaming(copy.table.clone()).await,
            ))
        };
        CopyInProgress {
            decoder: CopyDecoder::new(copy.options, copy.columns),
            table_schema: copy.table.schema(),
            table: copy.table,
            write: Some(write),
            failed: None,
        }
    }

    /// How long a COPY FROM STDIN may take before it fails (the session's
    /// statement_timeout; None without one). The table's writes are held
    /// until it ends, so a client that stops sending holds them until then.
    pub fn copy_timeout(&self) -> Option<std::time::Duration> {
        self.settings().statement_timeout().ok().flatten()
    }

    /// The error a COPY that took longer than `copy_timeout` ends with.
    pub fn copy_timed_out() -> WeirError {
        super::writes::timed_out()
    }

    /// Decodes the rest of the data and durably appends the whole COPY; an
    /// error aborts an open transaction block.
    pub async fn finish_copy(&self, copy: CopyInProgress) -> Result<CommandDone> {
        let done = self.finish_copy_rows(copy).await;
        if done.is_err() {
            self.statement_failed();
        }
        done
    }

    async fn finish_copy_rows(&self, mut copy: CopyInProgress) -> Result<CommandDone> {
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
        let write = match write {
            CopyTarget::Table(write) => write,
            CopyTarget::Block { rows, .. } => return Ok(CommandDone::new("COPY").with_rows(rows)),
        };
        let write = match write.finish_streaming(Some(&self.gate)).await {
            Ok(Streamed::Committed(rows)) => return Ok(CommandDone::new("COPY").with_rows(rows)),
            Ok(Streamed::Ordinary(write)) => write,
            Err(error) => {
                self.engine.repair_views().await;
                return Err(error);
            }
        };
        if write.was_detached() {
            // The views let go of its rows; they may have been left to
            // rebuild (a big undo), which must happen before they take
            // the rows again.
            self.engine.repair_views().await;
        }
        let rows = match write.commit(Some(&self.gate)).await {
            Ok(rows) => rows,
            Err(error) => {
                self.engine.repair_views().await;
                return Err(error);
            }
        };
        Ok(CommandDone::new("COPY").with_rows(rows))
    }
}
