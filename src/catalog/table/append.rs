//! A table's write path: key checks, log entries, the views' changes and
//! one atomic, durable commit. Once its commit starts, a write runs to the
//! end in a task of its own, so a cancelled or abandoned statement can
//! never leave the store, the views and the in-memory table disagreeing.
//! Rows become visible to queries only once they are durable.

use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::OwnedRow;
use datafusion::common::DataFusionError;
use tokio::sync::OwnedMutexGuard;

use super::{entry_key, AppendObserver, CommitGate, TableLog, Writer, ROWS_PER_ENTRY};
use crate::error::{Result, WeirError};
use crate::state::batch_codec::encode_batch;
use crate::state::{StateStore, WriteBatch};
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};

/// A write checked and encoded, ready to commit.
struct PreparedWrite {
    rows: RecordBatch,
    entries: WriteBatch,
    next_sequence: u64,
    new_keys: Vec<Vec<OwnedRow>>,
    tracker: Option<WatermarkTracker>,
    messages: Vec<Message>,
}

impl TableLog {
    /// Durably appends `batches` and makes them visible; returns the row
    /// count. With a `gate`, a cancel before the commit starts stops the
    /// write (57014) and one after it is ignored.
    pub async fn append(
        self: &Arc<Self>,
        batches: Vec<RecordBatch>,
        gate: Option<&CommitGate>,
    ) -> Result<u64> {
        let batches = self.conform(batches)?;
        let row_count: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if row_count == 0 {
            return Ok(0);
        }
        let writer = self.writer.clone().lock_owned().await;
        let prepared = self.prepare(&writer, batches)?;
        if let Some(gate) = gate {
            gate.begin_commit()?;
        }
        let log = self.clone();
        let committed = tokio::spawn(async move { log.commit(writer, prepared).await }).await;
        if let Some(gate) = gate {
            gate.end_commit();
        }
        committed
            .map_err(|error| WeirError::internal(format!("commit task failed: {error}")))??;
        Ok(row_count as u64)
    }

    fn prepare(&self, writer: &Writer, batches: Vec<RecordBatch>) -> Result<PreparedWrite> {
        let batches = batches
            .into_iter()
            .map(|batch| self.stamp_arrival(batch))
            .collect::<Result<Vec<_>>>()?;
        let rows = concat_batches(&self.schema, &batches).map_err(DataFusionError::from)?;
        let new_keys = writer
            .unique
            .iter()
            .map(|index| index.check(&rows))
            .collect::<Result<Vec<_>>>()?;
        let mut entries = WriteBatch::new();
        let mut sequence = writer.next_sequence;
        let mut offset = 0;
        while offset < rows.num_rows() {
            let length = ROWS_PER_ENTRY.min(rows.num_rows() - offset);
            entries.put(
                entry_key(self.id, sequence),
                encode_batch(&rows.slice(offset, length))?,
            );
            sequence += 1;
            offset += length;
        }
        let mut tracker = self
            .watermark
            .as_ref()
            .map(|tracker| tracker.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let messages = source_messages(rows.clone(), tracker.as_mut())?;
        Ok(PreparedWrite {
            rows,
            entries,
            next_sequence: sequence,
            new_keys,
            tracker,
            messages,
        })
    }

    /// Commits the write with the views' changes; once it is durable,
    /// makes it visible (before the views' lock is released).
    async fn commit(
        self: Arc<Self>,
        mut writer: OwnedMutexGuard<Writer>,
        write: PreparedWrite,
    ) -> Result<()> {
        tokio::task::spawn_blocking(move || {
            let PreparedWrite {
                rows,
                entries,
                next_sequence,
                new_keys,
                tracker,
                messages,
            } = write;
            let mut visible = Some((rows, new_keys, tracker));
            let log = self.clone();
            let mut publish = || {
                if let Some((rows, new_keys, tracker)) = visible.take() {
                    writer.next_sequence = next_sequence;
                    for (index, keys) in writer.unique.iter_mut().zip(new_keys) {
                        index.insert(keys);
                    }
                    log.publish(rows, tracker);
                }
            };
            commit_with_views(
                &*self.store,
                entries,
                self.observer.clone(),
                &self.name,
                messages,
                &mut publish,
            )
        })
        .await
        .map_err(|error| WeirError::internal(format!("commit task failed: {error}")))?
    }

    /// Committed rows become visible to queries.
    fn publish(&self, rows: RecordBatch, tracker: Option<WatermarkTracker>) {
        if let (Some(current), Some(next)) = (&self.watermark, tracker) {
            *current.lock().unwrap_or_else(|p| p.into_inner()) = next;
        }
        if let Ok(mut visible) = self.rows.write() {
            visible.push(rows);
        }
        self.rows_arrived();
    }

    /// Re-labels batches with the table's own schema (names, nullability).
    fn conform(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        batches
            .into_iter()
            .map(|batch| {
                RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())
                    .map_err(|error| WeirError::from(DataFusionError::from(error)))
            })
            .collect()
    }
}

/// Runs the write through the views reading the table, then commits rows
/// and view changes in one atomic, durable batch; `published` runs once it
/// is durable, while the views' lock is still held.
pub(super) fn commit_with_views(
    store: &dyn StateStore,
    mut write: WriteBatch,
    observer: Option<Arc<dyn AppendObserver>>,
    table: &str,
    messages: Vec<Message>,
    published: &mut dyn FnMut(),
) -> Result<()> {
    let Some(observer) = observer else {
        store.commit(write)?;
        published();
        return Ok(());
    };
    let mut commit = |views: WriteBatch| {
        let mut all = std::mem::take(&mut write);
        all.extend(views);
        store.commit(all)?;
        published();
        Ok(())
    };
    // A bug in an operator must not leave views half-updated unnoticed.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        observer.append_and_commit(table, messages, &mut commit)
    }))
    .unwrap_or_else(|_| {
        Err(WeirError::internal(
            "a materialized view failed on this write; views are rebuilt",
        ))
    })
    .inspect_err(|_| observer.on_commit_failed())
}
