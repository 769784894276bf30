//! A table's write path. A `BulkWrite` holds the table's writer lock and
//! checks keys as rows come; then it is queued for the group commit
//! (`group_commit`), which places its rows in the log, feeds them through
//! the views and commits the new head with the views' changes in one
//! atomic, durable batch shared with the other writes queued with it.
//!
//! A small write (known to fit in memory) releases the writer lock once
//! queued, so the table's next write can queue behind it and share its
//! fsync. A write of unknown size is exclusive: it first waits for the
//! table's queued writes, so that past one entry's worth it can spill rows
//! to the log beyond the committed head, where no reader looks. So a
//! statement of any size is all or nothing and its memory is bounded.
//!
//! Once queued, a write runs to the end in the committer's task, so a
//! cancelled or abandoned statement can never leave the store and the
//! views disagreeing. Rows become visible to queries only once durable.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DataFusionError;
use tokio::sync::OwnedMutexGuard;

use super::changes::TableChanges;
use super::group_commit::{encode_entries, PreparedWrite, Spilled};
use super::streaming::{self, Delivery, StreamSender};
use super::unique::KeyChanges;
use super::{lock, CommitGate, TableLog};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::WatermarkTracker;

/// Rows a write keeps in memory before spilling them to the log.
pub(super) const SPILL_ROWS: usize = 256 * 1024;
/// Bytes of pending rows that spill them whatever their count: wide rows
/// (a 1 KB text column) would otherwise hold 256 MB per write.
const SPILL_BYTES: usize = 16 * 1024 * 1024;

/// How a streaming write ended.
pub enum Streamed {
    Committed(u64),
    /// Not streamed, or no longer: commit it as an ordinary write.
    Ordinary(Box<BulkWrite>),
}

/// One statement's rows on their way into a table.
pub struct BulkWrite {
    log: Arc<TableLog>,
    /// Held until the write is queued (or dropped).
    _writer: OwnedMutexGuard<()>,
    /// The table's earlier writes are done: rows may spill from `first_row`.
    exclusive: bool,
    first_row: u64,
    /// Rows already written to the log (not yet committed).
    spilled_rows: u64,
    /// Rows not spilled yet.
    pending: Vec<TableChanges>,
    pending_rows: usize,
    /// Arrow memory of `pending`.
    pending_bytes: usize,
    /// Event times seen up to the spilled rows (exclusive writes).
    events: Option<WatermarkTracker>,
    /// What the write did to the unique indexes, undone if not committed.
    keys: KeyChanges,
    queued: bool,
    /// A source's write: its connector's position after these rows.
    position: Option<String>,
    /// Streaming (a COPY): the views take the rows as they are spilled,
    /// from the first part on (`stream`).
    streams: bool,
    stream: Option<StreamSender>,
    /// The committer let go of the streamed write: it goes on as an
    /// ordinary one, and the views may need rebuilding first.
    detached: bool,
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
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let mut write = if rows < SPILL_ROWS {
            BulkWrite::begin_small(self.clone()).await
        } else {
            BulkWrite::begin(self.clone()).await
        };
        for batch in batches {
            write.add(batch)?;
        }
        write.commit(gate).await
    }
}

impl TableLog {
    /// For a source: where its connector stands after the committed rows.
    pub fn source_position(&self) -> Option<String> {
        lock(&self.source_position).clone()
    }

    pub(super) fn set_source_position(&self, position: Option<String>) {
        if position.is_some() {
            *lock(&self.source_position) = position;
        }
    }

    /// Whether the table is a source, written by its connector alone.
    pub fn is_source(&self) -> bool {
        self.source
    }

    /// Fails for a source: only its connector writes it.
    pub fn check_writable(&self) -> Result<()> {
        match self.source {
            false => Ok(()),
            true => Err(WeirError::new(
                crate::error::sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot write to source \"{}\"", self.name),
            )
            .with_hint("A source's rows come from its connector; write to a table instead.")),
        }
    }

    /// A source's connector appends `rows` (fewer than `SPILL_ROWS`) and
    /// the position after them, and the records it rejected to the
    /// source's `rejected` log, durably and in one commit (so a restart
    /// neither repeats nor loses either). Returns the rows appended.
    pub async fn append_from_source(
        self: &Arc<Self>,
        rows: Option<RecordBatch>,
        position: String,
        rejected: Option<(&Arc<TableLog>, RecordBatch)>,
    ) -> Result<u64> {
        let count = rows.as_ref().map_or(0, |rows| rows.num_rows() as u64);
        let mut writes = Vec::with_capacity(2);
        let mut write = BulkWrite::begin_small(self.clone()).await;
        write.position = Some(position.clone());
        if let Some(rows) = rows {
            write.add(rows)?;
        }
        writes.push(write);
        if let Some((log, records)) = rejected {
            let mut write = BulkWrite::begin_small(log.clone()).await;
            write.position = Some(position);
            write.add(records)?;
            writes.push(write);
        }
        BulkWrite::commit_together(writes, None).await?;
        Ok(count)
    }
}

impl BulkWrite {
    /// A write of any size: waits for the table's earlier writes to
    /// commit; holds later ones off until this one is queued or dropped.
    pub async fn begin(log: Arc<TableLog>) -> Self {
        let writer = log.writer.clone().lock_owned().await;
        log.quiesce().await;
        let events = log.visible_tracker();
        Self::new(log, writer, true, events)
    }

    /// A write that stays in memory: queued behind the table's earlier
    /// writes without waiting for them.
    pub(super) async fn begin_small(log: Arc<TableLog>) -> Self {
        let writer = log.writer.clone().lock_owned().await;
        Self::new(log, writer, false, None)
    }

    fn new(
        log: Arc<TableLog>,
        writer: OwnedMutexGuard<()>,
        exclusive: bool,
        events: Option<WatermarkTracker>,
    ) -> Self {
        BulkWrite {
            first_row: log.row_count(),
            log,
            _writer: writer,
            exclusive,
            spilled_rows: 0,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            events,
            keys: KeyChanges::default(),
            queued: false,
            position: None,
            streams: false,
            stream: None,
            detached: false,
        }
    }

    /// A write of any size whose rows go through the views as they come
    /// (`streaming`): for an append-only table some view reads. Otherwise
    /// as `begin`.
    /// The stream starts with the first part spilled, so a small COPY (or
    /// one typed by hand) stays an ordinary write.
    pub async fn begin_streaming(log: Arc<TableLog>) -> Self {
        let mut write = Self::begin(log).await;
        let observer = write.log.committer.observer();
        let read = observer.is_some_and(|o| o.reads_now(&write.log.name) != Some(false));
        write.streams = read && write.log.locations.is_none();
        write
    }

    /// Takes more rows: key checks now, spilled once enough wait.
    pub fn add(&mut self, batch: RecordBatch) -> Result<()> {
        self.add_changes(TableChanges::inserts(batch))
    }

    /// Takes more rows, some of them retractions (UPDATE, DELETE).
    pub fn add_changes(&mut self, changes: TableChanges) -> Result<()> {
        if self.position.is_none() {
            self.log.check_writable()?;
        }
        if changes.num_rows() == 0 {
            return Ok(());
        }
        if changes.retracts.is_some() && !self.log.accepts_updates() {
            return Err(WeirError::internal("retractions for an append-only table"));
        }
        let batch = RecordBatch::try_new(self.log.schema.clone(), changes.rows.columns().to_vec())
            .map_err(|error| WeirError::from(DataFusionError::from(error)))?;
        let batch = match changes.retracts {
            // Retracted rows keep the arrival time they were logged with.
            Some(_) => batch,
            None => self.log.stamp_arrival(batch)?,
        };
        super::character_limits::check(&batch)?;
        let changes = TableChanges {
            rows: batch,
            retracts: changes.retracts,
        };
        {
            let mut unique = self.log.unique.lock().unwrap_or_else(|p| p.into_inner());
            let keys = KeyChanges::check(&unique, &changes)?;
            keys.reserve(&mut unique);
            self.keys.extend(keys);
        }
        self.pending_rows += changes.num_rows();
        self.pending_bytes += changes.rows.get_array_memory_size();
        self.pending.push(changes);
        let spill_rows = match self.streams {
            true => streaming::PART_ROWS,
            false => SPILL_ROWS,
        };
        let enough = self.pending_rows >= spill_rows || self.pending_bytes >= SPILL_BYTES;
        if self.exclusive && enough {
            self.spill()?;
        }
        Ok(())
    }

    /// The pending rows, as one batch.
    fn take_pending(&mut self) -> Result<Option<TableChanges>> {
        if self.pending_rows == 0 {
            return Ok(None);
        }
        let rows = TableChanges::concat(&self.log.schema, &self.pending)?;
        self.pending.clear();
        self.pending_rows = 0;
        self.pending_bytes = 0;
        Ok(Some(rows))
    }

    /// Writes the pending rows to the log after the spilled ones.
    fn spill(&mut self) -> Result<()> {
        let Some(rows) = self.take_pending()? else {
            return Ok(());
        };
        let mut entries = WriteBatch::new();
        let at = self.first_row + self.spilled_rows;
        encode_entries(self.log.id, &rows, at, self.events.as_mut(), &mut entries)?;
        self.spilled_rows += rows.num_rows() as u64;
        self.log.store.stage(entries)?;
        if self.streams && self.stream.is_none() {
            let (sender, receiver) = streaming::channel(self.first_row);
            let outcome = self.log.committer.enqueue_stream(&self.log, receiver);
            self.stream = Some(sender.queued(outcome));
        }
        if let Some(stream) = self.stream.as_mut() {
            match stream.is_detached() {
                false => stream.keep(rows),
                true => self.stop_streaming(),
            }
        }
        Ok(())
    }

    /// The committer let go of the streamed write.
    fn stop_streaming(&mut self) {
        self.streams = false;
        self.stream = None;
        self.detached = true;
        self.log.count_stream(true);
    }

    /// Rows of a streaming write spilled since the last call, for the
    /// views; sent outside any lock, as sending waits for room.
    pub fn delivery(&mut self) -> Option<Delivery> {
        self.stream.as_mut()?.delivery()
    }

    /// The committer let go of this streaming write before its end: it
    /// goes on as an ordinary write, and the views may have been left to
    /// rebuild when they could not undo its rows.
    pub fn was_detached(&self) -> bool {
        self.detached
    }

    /// Ends a streaming write: its rows once committed; when it is not
    /// streamed (or no longer is), the write, for `commit`.
    pub async fn finish_streaming(mut self, gate: Option<&CommitGate>) -> Result<Streamed> {
        if self.stream.as_ref().is_some_and(StreamSender::is_detached) {
            self.stop_streaming();
        }
        if self.stream.is_none() {
            return Ok(Streamed::Ordinary(Box::new(self)));
        }
        self.spill()?;
        let Some(stream) = self.stream.take() else {
            return Ok(Streamed::Ordinary(Box::new(self)));
        };
        if let Some(gate) = gate {
            // A cancel now drops the stream: the committer fails the write.
            gate.begin_commit()?;
        }
        // In a task of its own: once the end is sent the write may commit,
        // so it must not be forgotten if this statement is dropped.
        let (rows, events) = (self.spilled_rows, self.events.clone());
        let ending = tokio::spawn(async move {
            let committed = stream.finish(rows, events).await;
            if matches!(committed, Ok(true)) {
                self.queued = true;
            }
            (self, committed)
        });
        let ended = ending.await;
        if let Some(gate) = gate {
            gate.end_commit();
        }
        let (mut write, committed) =
            ended.map_err(|_| WeirError::internal("a streaming write's end failed"))?;
        match committed? {
            true => {
                write.log.count_stream(false);
                Ok(Streamed::Committed(rows))
            }
            false => {
                write.stop_streaming();
                Ok(Streamed::Ordinary(Box::new(write)))
            }
        }
    }

    /// Commits every row taken; returns the row count. With a `gate`, a
    /// cancel before the commit starts stops the write (57014) and one
    /// after it is ignored.
    pub async fn commit(self, gate: Option<&CommitGate>) -> Result<u64> {
        Self::commit_together(vec![self], gate).await
    }

    /// Commits `writes` (to different tables) in one group: all or none.
    /// Returns their rows.
    pub(super) async fn commit_together(
        mut writes: Vec<BulkWrite>,
        gate: Option<&CommitGate>,
    ) -> Result<u64> {
        let mut prepared = Vec::with_capacity(writes.len());
        let mut total = 0;
        for write in &mut writes {
            if let Some(ready) = write.prepare()? {
                total += ready.rows.as_ref().map_or(0, |r| r.num_rows() as u64);
                total += ready.spilled.as_ref().map_or(0, |s| s.rows);
                prepared.push(ready);
            }
        }
        let Some(committer) = prepared.first().map(|write| write.log.committer.clone()) else {
            return Ok(0);
        };
        if let Some(gate) = gate {
            gate.begin_commit()?;
        }
        writes.iter_mut().for_each(|write| write.queued = true);
        let outcomes = committer.enqueue_all(prepared);
        // The tables' next writes may queue now.
        drop(writes);
        let mut committed = Ok(());
        for outcome in outcomes {
            let outcome = outcome.await.unwrap_or_else(|_| {
                Err(WeirError::internal(
                    "the group commit stopped before this write",
                ))
            });
            // The group failed as a whole: report the write that failed it
            // rather than the others' "retry" error.
            if let Err(error) = outcome {
                let retry = error.code == sqlstate::SERIALIZATION_FAILURE;
                if committed.is_ok() || !retry {
                    committed = Err(error);
                }
            }
        }
        if let Some(gate) = gate {
            gate.end_commit();
        }
        committed.map(|()| total)
    }

    /// The write as the group commit takes it; None when it has no rows.
    fn prepare(&mut self) -> Result<Option<PreparedWrite>> {
        let rows = self.take_pending()?;
        // A source's write without rows still moves its position.
        if self.spilled_rows == 0 && rows.is_none() && self.position.is_none() {
            return Ok(None);
        }
        self.log.check_not_dropped()?;
        let spilled = (self.spilled_rows > 0).then(|| Spilled {
            first_row: self.first_row,
            rows: self.spilled_rows,
            events: self.events.take(),
        });
        Ok(Some(PreparedWrite {
            log: self.log.clone(),
            spilled,
            rows,
            keys: std::mem::take(&mut self.keys),
            position: self.position.take(),
            stream: std::sync::Mutex::new(None),
        }))
    }
}

impl Drop for BulkWrite {
    /// Not queued: forget the spilled rows and the keys they added.
    fn drop(&mut self) {
        if self.queued {
            return;
        }
        let spilled_from = (self.spilled_rows > 0).then_some(self.first_row);
        self.log.forget_write(spilled_from, &self.keys);
    }
}
