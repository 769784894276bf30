//! A table's write path. A `BulkWrite` holds the table's writer lock, checks
//! keys and takes rows as they come; past one entry's worth it spills them
//! to the log beyond the committed head, where no reader looks. Its commit
//! feeds the rows (read back from the store, one entry at a time) through
//! the views and commits the new head with the views' changes in one
//! atomic, durable batch. So a statement of any size is all or nothing and
//! its memory is bounded by an entry, not by its rows.
//!
//! Once its commit starts, a write runs to the end in a task of its own, so
//! a cancelled or abandoned statement can never leave the store and the
//! views disagreeing. Rows become visible to queries only once durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::OwnedRow;
use datafusion::common::DataFusionError;
use tokio::sync::OwnedMutexGuard;

use super::entries::{self, encode_entry, encode_head, entry_key, head_key, EntryReader};
use super::{AppendObserver, CommitGate, MessageChunks, TableLog, Writer, ROWS_PER_ENTRY};

/// Rows a write keeps in memory before spilling them to the log.
pub(super) const SPILL_ROWS: usize = 256 * 1024;
use crate::error::{Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};

/// One statement's rows on their way into a table.
pub struct BulkWrite {
    log: Arc<TableLog>,
    writer: Option<OwnedMutexGuard<Writer>>,
    /// The committed row count when the write began: its first row.
    first_row: u64,
    /// Rows already written to the log (not yet committed).
    spilled_rows: u64,
    /// Rows not spilled yet.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Event times seen, committed rows included (entry headers, head).
    events: Option<WatermarkTracker>,
    /// Keys added to the unique indexes, taken out again if not committed.
    new_keys: Vec<Vec<OwnedRow>>,
    committed: bool,
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
        let mut write = BulkWrite::begin(self.clone()).await;
        for batch in batches {
            write.add(batch)?;
        }
        write.commit(gate).await
    }
}

impl BulkWrite {
    /// Waits for the table's earlier writes; holds later ones off until
    /// this write commits or is dropped.
    pub async fn begin(log: Arc<TableLog>) -> Self {
        let writer = log.writer.clone().lock_owned().await;
        let events = log
            .watermark
            .as_ref()
            .map(|tracker| tracker.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let new_keys = writer.unique.iter().map(|_| Vec::new()).collect();
        BulkWrite {
            first_row: log.row_count(),
            log,
            writer: Some(writer),
            spilled_rows: 0,
            pending: Vec::new(),
            pending_rows: 0,
            events,
            new_keys,
            committed: false,
        }
    }

    /// Takes more rows: key checks now, spilled once enough wait.
    pub fn add(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = RecordBatch::try_new(self.log.schema.clone(), batch.columns().to_vec())
            .map_err(|error| WeirError::from(DataFusionError::from(error)))?;
        let batch = self.log.stamp_arrival(batch)?;
        if let Some(writer) = self.writer.as_mut() {
            for (index, added) in writer.unique.iter_mut().zip(&mut self.new_keys) {
                let keys = index.check(&batch)?;
                added.extend(keys.iter().cloned());
                index.insert(keys);
            }
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        if self.pending_rows >= SPILL_ROWS {
            let (entries, _) = self.take_entries()?;
            self.log.store.stage(entries)?;
        }
        Ok(())
    }

    /// The pending rows as log entries after the spilled ones, and as one
    /// batch.
    fn take_entries(&mut self) -> Result<(WriteBatch, Option<RecordBatch>)> {
        let mut entries = WriteBatch::new();
        if self.pending_rows == 0 {
            return Ok((entries, None));
        }
        let rows =
            concat_batches(&self.log.schema, &self.pending).map_err(DataFusionError::from)?;
        self.pending.clear();
        self.pending_rows = 0;
        let mut offset = 0;
        while offset < rows.num_rows() {
            let length = ROWS_PER_ENTRY.min(rows.num_rows() - offset);
            let slice = rows.slice(offset, length);
            let before = self
                .events
                .as_ref()
                .and_then(WatermarkTracker::max_event_ns);
            if let Some(events) = self.events.as_mut() {
                events.advance(&slice)?;
            }
            let at = self.first_row + self.spilled_rows;
            entries.put_log(entry_key(self.log.id, at), encode_entry(&slice, before)?);
            self.spilled_rows += length as u64;
            offset += length;
        }
        Ok((entries, Some(rows)))
    }

    /// Commits every row taken; returns the row count. With a `gate`, a
    /// cancel before the commit starts stops the write (57014) and one
    /// after it is ignored.
    pub async fn commit(mut self, gate: Option<&CommitGate>) -> Result<u64> {
        let (entries, last_rows) = self.take_entries()?;
        let rows = self.spilled_rows;
        if rows == 0 {
            return Ok(0);
        }
        if let Some(gate) = gate {
            gate.begin_commit()?;
        }
        let committed =
            tokio::task::spawn_blocking(move || self.commit_now(entries, last_rows)).await;
        if let Some(gate) = gate {
            gate.end_commit();
        }
        committed
            .map_err(|error| WeirError::internal(format!("commit task failed: {error}")))??;
        Ok(rows)
    }

    /// Runs the rows through the views and commits; `last_rows` are the
    /// rows whose entries are in `entries` (the rest were spilled).
    fn commit_now(mut self, mut entries: WriteBatch, last_rows: Option<RecordBatch>) -> Result<()> {
        let log = self.log.clone();
        let total = self.first_row + self.spilled_rows;
        let head = log.head_after(total, self.events.as_ref());
        entries.put(head_key(log.id), encode_head(&head)?);
        let in_memory = last_rows.as_ref().map_or(0, |rows| rows.num_rows() as u64);
        let spilled = EntryReader::new(
            &*log.store,
            log.id,
            log.schema.clone(),
            None,
            self.first_row,
            total - in_memory,
        )?;
        let rows = spilled
            .map(|entry| entry.map(|entry| entry.rows))
            .chain(last_rows.into_iter().map(Ok));
        // The views see each row with the watermark it arrived under.
        let mut tracker = log
            .watermark
            .as_ref()
            .map(|tracker| tracker.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let mut messages = rows.map(|rows| source_messages(rows?, tracker.as_mut()));
        let (committed, events) = (&mut self.committed, self.events.take());
        let mut publish = || {
            *committed = true;
            log.visible_rows.store(total, Ordering::Release);
            if let (Some(current), Some(next)) = (&log.watermark, events.clone()) {
                *current.lock().unwrap_or_else(|p| p.into_inner()) = next;
            }
            log.rows_arrived();
        };
        let observer = log.observer.clone();
        commit_with_views(
            &*log.store,
            entries,
            observer,
            &log.name,
            &mut messages,
            &mut publish,
        )
    }
}

impl Drop for BulkWrite {
    /// Not committed: forget the spilled rows and the keys they added.
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if self.spilled_rows > 0 {
            if let Err(error) = entries::delete_from(&*self.log.store, self.log.id, self.first_row)
            {
                // Harmless: the head never moved past them; the next open
                // or write replaces them.
                tracing::warn!(%error.message, "spilled rows of a failed write were not deleted");
            }
        }
        if let Some(writer) = self.writer.as_mut() {
            for (index, keys) in writer
                .unique
                .iter_mut()
                .zip(std::mem::take(&mut self.new_keys))
            {
                index.remove(&keys);
            }
        }
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
    messages: MessageChunks<'_>,
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

/// The messages of a write that is already in memory (a watermark raise).
pub(super) fn messages_once(messages: Vec<Message>) -> impl Iterator<Item = Result<Vec<Message>>> {
    std::iter::once(Ok(messages))
}
