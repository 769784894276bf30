//! The runtime: every materialized view is a `ViewPipeline`, a chain of
//! operators ending in a `MaterializeOperator`. A write to a table (or a
//! change to a view) is pushed through every view that reads it, then
//! through their readers, inside the writer's critical section, so the write
//! is acknowledged only once all dependent views reflect it
//! (read-your-writes).
//!
//! A checkpoint sends a `Barrier(epoch)` from every table; each operator
//! writes what changed in its state when the barrier passes it, and the
//! epoch record (epoch, every table's offset) goes into the same atomic
//! batch. Recovery restores operators from it and replays each table from
//! its offset.
//!
//! Execution is synchronous in the writer's (blocking) task: deterministic,
//! no channels to size, and nothing to wait for on FLUSH. Partition-parallel
//! execution behind an exchange is the direction in docs/architecture.md.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::record_batch::RecordBatch;

use super::checkpoint::{operator_state_prefix, EpochRecord};
use super::checkpoint_store::StoredState;
use super::commit_order;
use super::message::{Chunk, Message};
pub use super::pipeline::ViewPipeline;
use super::spill::DEFAULT_BUDGET_BYTES;
use super::WatermarkTracker;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::all_view_rows_prefix;
use crate::state::{StateStore, WriteBatch};
use crate::stream::append_observer::{AppendObserver, GroupFailure, WriteGroup};

mod group_outcomes;

#[derive(Default)]
pub struct Dataflow {
    /// By view id: creation order, so a view's inputs come before it.
    views: BTreeMap<u64, ViewPipeline>,
    /// Set when a push failed part-way: operator state may be ahead of what
    /// was committed, so views must be rebuilt before the next write.
    broken: bool,
    /// What the views cleared for a rebuild read: writes to these are
    /// refused until the rebuild is done, as their rows would reach the
    /// rebuilt operators (by replay) but never the views' stored rows.
    cleared_inputs: BTreeSet<String>,
    /// Rows of each table pushed through the views so far.
    offsets: BTreeMap<String, u64>,
    epoch: u64,
    /// Where the last checkpoint's operator state is stored.
    stored: StoredState,
    /// Something changed since the last checkpoint.
    changed: bool,
    /// The next checkpoint replaces all stored operator state (after a
    /// rebuild from scratch).
    full_checkpoint: bool,
    /// Where a big statement's view changes go ahead of its commit.
    spill_store: Option<Arc<dyn StateStore>>,
    /// The most memory the views' operator state may hold together.
    memory_limit_bytes: Option<usize>,
    /// The memory an operator's state may take before it spills (`spill`).
    operator_cache_bytes: Arc<AtomicUsize>,
    /// Recovery is replaying committed rows, which must not fail on the
    /// memory limit (they were accepted before).
    replaying: bool,
    /// Views the write group running now has reached: they undo it if it
    /// fails, and forget how once it commits.
    touched: BTreeSet<u64>,
    /// The last write group logged in `commit_order`.
    commit_sequence: u64,
    /// Views taken out because their state could not be restored or
    /// replayed, with why (the engine shows them as failed).
    failed: Vec<(String, WeirError)>,
}

/// A statement's pending view writes past this many bytes are spilled.
const VIEW_SPILL_BYTES: usize = 16 * 1024 * 1024;

impl Dataflow {
    pub fn add_view(&mut self, mut pipeline: ViewPipeline) {
        if let Some(store) = &self.spill_store {
            pipeline.attach(store, &self.operator_cache_bytes);
        }
        self.views.insert(pipeline.id, pipeline);
        self.changed = true;
    }

    pub fn remove_view(&mut self, name: &str) {
        self.views.retain(|_, view| view.name != name);
    }

    /// Drops every pipeline (to rebuild them); writes stay refused until
    /// `set_repaired`.
    pub fn clear_views(&mut self) {
        let inputs = self
            .views
            .values()
            .flat_map(|view| view.inputs.iter().cloned());
        self.cleared_inputs.extend(inputs);
        self.views.clear();
        self.broken = true;
    }

    pub fn set_repaired(&mut self) {
        self.broken = false;
        self.cleared_inputs.clear();
    }

    /// A new view's backfill failed: only that view was touched.
    pub fn remove_failed_view(&mut self, name: &str) {
        self.remove_view(name);
        self.broken = false;
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    pub fn has_readers(&self, relation: &str) -> bool {
        self.cleared_inputs.contains(relation)
            || self
                .views
                .values()
                .any(|view| view.inputs.iter().any(|input| input == relation))
    }

    pub fn set_memory_limit_bytes(&mut self, limit: Option<usize>) {
        self.memory_limit_bytes = limit;
    }

    /// Sets the memory an operator's state may take before it spills, for
    /// every view's operators (running ones included).
    pub fn set_operator_cache_bytes(&mut self, bytes: usize) {
        self.operator_cache_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn memory_limit_bytes(&self) -> Option<usize> {
        self.memory_limit_bytes
    }

    /// The views' operator state in memory, as last measured.
    pub fn memory_bytes(&self) -> usize {
        self.views.values().map(ViewPipeline::memory_bytes).sum()
    }

    /// Fails when the views' state has grown past the memory limit, naming
    /// `view`, whose state just grew (the statement is then undone).
    fn check_memory(&self, id: u64) -> Result<()> {
        let (Some(limit), Some(view)) = (self.memory_limit_bytes, self.views.get(&id)) else {
            return Ok(());
        };
        let total = self.memory_bytes();
        if self.replaying || total <= limit {
            return Ok(());
        }
        Err(WeirError::new(
            sqlstate::OUT_OF_MEMORY,
            format!(
                "materialized view \"{}\" would need {} of state in memory; with the other views that exceeds the memory limit of {}",
                view.name,
                format_bytes(view.memory_bytes()),
                format_bytes(limit),
            ),
        )
        .with_hint(
            "The statement was not applied. Bound the view's state (shorter windows or allowed_lateness, fewer groups), drop a view, or restart weir with a larger --memory-limit.",
        ))
    }

    pub fn set_replaying(&mut self, replaying: bool) {
        self.replaying = replaying;
        for view in self.views.values_mut() {
            view.set_replaying(replaying);
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where recovery starts: the restored checkpoint's epoch and offsets,
    /// or (None) a rebuild from scratch whose first checkpoint is full.
    pub fn start_from(&mut self, record: Option<&EpochRecord>) {
        match record {
            Some(record) => {
                self.epoch = record.epoch;
                self.stored.generation = record.generation;
                self.offsets = record.offsets.clone();
                self.commit_sequence = record.commit_sequence;
            }
            None => {
                self.offsets.clear();
                self.full_checkpoint = true;
            }
        }
        self.changed = true;
    }

    /// Where the operator state of the last checkpoint is stored.
    pub fn stored_state(&mut self) -> &mut StoredState {
        &mut self.stored
    }

    /// The last write group logged in `commit_order`.
    pub fn commit_sequence(&self) -> u64 {
        self.commit_sequence
    }

    /// Recovery replayed up to group `sequence`: the next logs after it.
    pub fn set_commit_sequence(&mut self, sequence: u64) {
        self.commit_sequence = self.commit_sequence.max(sequence);
    }

    pub fn offset(&self, table: &str) -> u64 {
        self.offsets.get(table).copied().unwrap_or(0)
    }

    /// A table the views have now seen all `rows` of (a new view read its
    /// whole history while its writes were paused).
    pub fn set_offset(&mut self, table: &str, rows: u64) {
        self.offsets.insert(table.to_string(), rows);
        self.changed = true;
    }

    /// Counts `rows` of `table` as seen by the views.
    pub fn advance_offset(&mut self, table: &str, rows: u64) {
        *self.offsets.entry(table.to_string()).or_insert(0) += rows;
        self.changed = true;
    }

    /// Pushes `messages` from `source` through every view reading it, and
    /// on through views reading those; returns the writes to commit.
    pub fn push(&mut self, source: &str, messages: Vec<Message>) -> Result<WriteBatch> {
        self.push_to(None, source, messages)
    }

    /// Like `push`, but the first hop only reaches view `only` (backfill).
    pub fn push_to(
        &mut self,
        only: Option<&str>,
        source: &str,
        messages: Vec<Message>,
    ) -> Result<WriteBatch> {
        if self.broken {
            return Err(views_rebuilding());
        }
        let mut writes = WriteBatch::new();
        let outcome = self.propagate(only, source, messages, &mut writes);
        self.changed = true;
        // Nothing to undo in a replay (it never fails but on a bug) nor
        // in a new view's backfill (the view goes if it fails): the undo
        // of a long one would only take memory.
        if self.replaying || only.is_some() {
            self.commit_group();
        }
        outcome.map(|()| writes)
    }

    /// Finishes the views' work on what was pushed (some of it runs on
    /// other threads): what operators held back for it goes on through
    /// their views and the views reading those. Returns the writes to
    /// commit with what `push` returned.
    pub fn flush(&mut self) -> Result<WriteBatch> {
        let mut writes = WriteBatch::new();
        self.flush_into(&mut writes)?;
        Ok(writes)
    }

    fn flush_into(&mut self, writes: &mut WriteBatch) -> Result<()> {
        // A view's held-back changes may start work in the views reading
        // it, so flush until a round brings nothing out.
        loop {
            let mut moved = false;
            let ids: Vec<u64> = self.views.keys().copied().collect();
            for id in ids {
                let Some(view) = self.views.get_mut(&id) else {
                    continue;
                };
                let changes = match view.flush(writes) {
                    Ok(changes) => changes,
                    Err(error) if self.replaying => {
                        self.fail_view(id, error);
                        continue;
                    }
                    Err(error) => {
                        self.touched.insert(id);
                        return Err(error);
                    }
                };
                if !changes.is_empty() {
                    self.touched.insert(id);
                }
                for (input, messages) in self.outputs_of(id, changes, writes) {
                    moved = true;
                    self.propagate(None, &input, messages, writes)?;
                }
            }
            if !moved {
                return self.seal_views(writes);
            }
        }
    }

    /// Every view's changes of the statement are in: the writes that end
    /// them.
    fn seal_views(&mut self, writes: &mut WriteBatch) -> Result<()> {
        for view in self.views.values() {
            for result in view.results() {
                writes.extend(result.seal()?);
            }
        }
        Ok(())
    }

    fn propagate(
        &mut self,
        only: Option<&str>,
        source: &str,
        messages: Vec<Message>,
        writes: &mut WriteBatch,
    ) -> Result<()> {
        let mut queue = VecDeque::from([(source.to_string(), messages, only)]);
        while let Some((input, messages, only)) = queue.pop_front() {
            let ids: Vec<u64> = self.views.keys().copied().collect();
            for id in ids {
                // A view failed in a replay takes its readers with it.
                let Some(view) = self.views.get_mut(&id) else {
                    continue;
                };
                let reads = view.inputs.contains(&input);
                if !reads || only.is_some_and(|only| only != view.name) {
                    continue;
                }
                let limited = self.memory_limit_bytes.is_some();
                self.touched.insert(id);
                let changes = match view.process(&input, messages.clone(), writes, limited) {
                    Ok(changes) => changes,
                    // Recovery replays rows the views took before: a view
                    // that fails on them now goes, not the whole start.
                    Err(error) if self.replaying => {
                        self.fail_view(id, error);
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                self.check_memory(id)?;
                let next = self.outputs_of(id, changes, writes);
                queue.extend(
                    next.into_iter()
                        .map(|(input, messages)| (input, messages, None)),
                );
            }
        }
        Ok(())
    }

    /// Takes view `id`'s writes into `writes`; returns what the views
    /// reading it get next: its side output's changes and its own.
    fn outputs_of(
        &mut self,
        id: u64,
        changes: Vec<Message>,
        writes: &mut WriteBatch,
    ) -> Vec<(String, Vec<Message>)> {
        let view = self.views.get_mut(&id).expect("a listed view");
        writes.extend(view.take_writes());
        let mut next: Vec<(String, Vec<Message>)> = view.take_late_changes().into_iter().collect();
        if !changes.is_empty() {
            next.push((view.name.clone(), changes));
        }
        next
    }

    /// A big statement's view changes: once the writes pending for its
    /// commit pass `VIEW_SPILL_BYTES`, the views' row versions go to the
    /// store now (written at an epoch no reader reads until the commit, and
    /// reserved durably first so a crash cannot leave them readable), so
    /// memory holds a bounded part of them. Heads stay for the commit.
    pub fn spill_if_large(&mut self, writes: &mut WriteBatch) -> Result<()> {
        let Some(store) = self.spill_store.clone() else {
            return Ok(());
        };
        if writes.size_bytes() < VIEW_SPILL_BYTES {
            return Ok(());
        }
        let mut reservations = WriteBatch::new();
        for view in self.views.values() {
            for result in view.results() {
                if let Some(reservation) = result.reserve()? {
                    reservations.extend(reservation);
                }
            }
        }
        if !reservations.is_empty() {
            store.commit(reservations)?;
        }
        store.stage(writes.split_off_prefix(&all_view_rows_prefix()))?;
        for view in self.views.values() {
            view.results().for_each(|result| result.spilled());
        }
        Ok(())
    }

    /// The writes taken so far are committed: every view's changes become
    /// visible to queries. (Call it only after the commit: a reader must
    /// never see rows a crash could take back.)
    pub fn publish(&self) {
        for view in self.views.values() {
            view.publish();
        }
    }

    /// The writes taken so far were not committed: forget the changes.
    pub fn discard(&self) {
        for view in self.views.values() {
            view.discard();
        }
    }

    /// A checkpoint of every view, if anything changed: a barrier from every
    /// table. Its keys are in generation 0 (`checkpoint::in_generation`);
    /// the checkpoint counts once the batch and the record are committed,
    /// before the next push.
    pub fn checkpoint(&mut self, unix_ms: u64) -> Result<Option<(EpochRecord, WriteBatch)>> {
        let clocked = self.views.values().any(ViewPipeline::clocked);
        if !(self.changed || clocked) || self.broken {
            return Ok(None);
        }
        let epoch = self.epoch + 1;
        let mut writes = WriteBatch::new();
        if std::mem::take(&mut self.full_checkpoint) {
            writes.delete_prefix(operator_state_prefix());
        }
        let tables: Vec<String> = self
            .views
            .values()
            .flat_map(|view| view.inputs.iter().cloned())
            .filter(|input| !self.views.values().any(|view| &view.name == input))
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for table in tables
            .into_iter()
            .filter(|table| seen.insert(table.clone()))
        {
            self.propagate(None, &table, vec![Message::Barrier(epoch)], &mut writes)
                .inspect_err(|_| self.broken = true)?;
        }
        self.seal_views(&mut writes)
            .inspect_err(|_| self.broken = true)?;
        // A barrier's changes commit with the checkpoint, and barriers
        // are not undone (a failed checkpoint rebuilds the views).
        self.commit_group();
        let record = EpochRecord {
            epoch,
            offsets: self.offsets.clone(),
            unix_ms,
            generation: self.stored.generation,
            commit_sequence: self.commit_sequence,
        };
        self.epoch = epoch;
        self.changed = false;
        Ok(Some((record, writes)))
    }
}

/// `bytes` for people: "512 MB", "1.5 GB" (powers of 1024, as Postgres
/// prints memory settings).
pub fn format_bytes(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() < 0.05 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn views_rebuilding() -> WeirError {
    WeirError::new(
        "40001",
        "materialized views are being rebuilt after a failed write",
    )
    .with_hint("Retry the statement.")
}

/// The most rows in one `Batch` a table sends: a COPY chunk holds some
/// 200,000, and what operators build per batch (a HOP view's five rows per
/// event, group indices, taken columns) would otherwise be that large too.
pub const MAX_BATCH_ROWS: usize = 8192;

/// The messages a table emits for rows appended to it: batches of at most
/// `MAX_BATCH_ROWS` rows, each with the watermark every row arrived under
/// and followed by the new watermark. (A watermark between two slices of a
/// statement is one the same rows sent as two statements would give, so
/// views do not change; windows just close sooner.)
pub fn source_messages(
    rows: RecordBatch,
    diffs: Option<Int64Array>,
    mut tracker: Option<&mut WatermarkTracker>,
) -> Result<Vec<Message>> {
    let total = rows.num_rows();
    let mut messages = Vec::new();
    let mut offset = 0;
    // An empty append still sends its (empty) batch and the watermark.
    while offset < total || messages.is_empty() {
        let length = MAX_BATCH_ROWS.min(total - offset);
        let slice = rows.slice(offset, length);
        let diffs = diffs.as_ref().map(|diffs| diffs.slice(offset, length));
        offset += length;
        let Some(tracker) = tracker.as_deref_mut() else {
            messages.push(Message::batch(Chunk {
                rows: slice,
                diffs,
                watermarks: None,
            }));
            continue;
        };
        let watermarks = tracker.watermarks_before(&slice)?;
        messages.push(Message::batch(Chunk {
            rows: slice,
            diffs,
            watermarks: Some(watermarks),
        }));
        if let Some(watermark) = tracker.current_ns() {
            messages.push(Message::Watermark(watermark));
        }
    }
    Ok(messages)
}

/// The dataflow shared by the engine and every table's writer, and the
/// order in which checkpoints are committed.
#[derive(Clone, Default)]
pub struct SharedDataflow {
    flow: Arc<Mutex<Dataflow>>,
    commits: Arc<Mutex<CheckpointCommits>>,
}

/// Held while a checkpoint is committed (without the dataflow lock, so
/// writers go on). Taken while the dataflow lock is held (never the other
/// way round): checkpoints commit in the order they were taken, and a DDL
/// waits for the one being committed.
#[derive(Debug, Default)]
pub struct CheckpointCommits {
    /// A commit failed: state is incremental from the last commit, so no
    /// later checkpoint may commit before views are rebuilt.
    pub failed: bool,
}

impl SharedDataflow {
    /// A dataflow whose big statements spill view changes to `store`.
    pub fn new(store: Arc<dyn StateStore>) -> Self {
        let flow = Dataflow {
            spill_store: Some(store),
            operator_cache_bytes: Arc::new(AtomicUsize::new(DEFAULT_BUDGET_BYTES)),
            ..Dataflow::default()
        };
        SharedDataflow {
            flow: Arc::new(Mutex::new(flow)),
            commits: Arc::default(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Dataflow> {
        self.flow
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Take it with the dataflow lock held.
    pub fn lock_commits(&self) -> MutexGuard<'_, CheckpointCommits> {
        self.commits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl AppendObserver for SharedDataflow {
    fn append_and_commit(
        &self,
        group: &mut dyn WriteGroup,
        commit: &mut dyn FnMut(WriteBatch) -> Result<()>,
    ) -> std::result::Result<(), GroupFailure> {
        let mut flow = self.lock();
        match push_and_commit(&mut flow, group, commit) {
            Ok(offsets) => {
                flow.publish();
                flow.commit_group();
                if offsets.iter().any(|(_, rows)| *rows > 0) {
                    flow.commit_sequence += 1;
                }
                for (table, rows) in offsets {
                    flow.advance_offset(&table, rows);
                }
                Ok(())
            }
            Err(failure) => {
                flow.roll_back();
                Err(failure)
            }
        }
    }

    fn on_commit_failed(&self) {
        self.lock().mark_broken();
    }

    fn reads_now(&self, table: &str) -> Option<bool> {
        let flow = match self.flow.try_lock() {
            Ok(flow) => flow,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(flow.has_readers(table))
    }
}

/// Pushes a group's writes through the views and commits them with the
/// views' changes; returns the rows of each table pushed.
fn push_and_commit(
    flow: &mut Dataflow,
    group: &mut dyn WriteGroup,
    commit: &mut dyn FnMut(WriteBatch) -> Result<()>,
) -> std::result::Result<Vec<(String, u64)>, GroupFailure> {
    let mut writes = WriteBatch::new();
    let mut offsets = Vec::with_capacity(group.writes());
    for write in 0..group.writes() {
        let failed = |error| GroupFailure {
            write: Some(write),
            error,
        };
        let table = group.table(write).to_string();
        if !flow.has_readers(&table) {
            group.skip(write).map_err(failed)?;
            continue;
        }
        let mut rows = 0;
        while let Some(chunk) = group.next_messages(write) {
            let chunk = chunk.map_err(failed)?;
            rows += chunk.iter().map(|m| m.num_rows() as u64).sum::<u64>();
            writes.extend(flow.push(&table, chunk).map_err(failed)?);
            flow.spill_if_large(&mut writes).map_err(failed)?;
        }
        offsets.push((table, rows));
    }
    let whole = |error| GroupFailure { write: None, error };
    writes.extend(flow.flush().map_err(whole)?);
    if offsets.iter().any(|(_, rows)| *rows > 0) {
        commit_order::put(&mut writes, flow.commit_sequence + 1, &offsets);
    }
    commit(writes).map_err(whole)?;
    Ok(offsets)
}
