//! Group commit. Writes from concurrent statements, to one table or many,
//! wait in one queue; one committer at a time takes everything queued,
//! places each write's rows after the rows queued before it, runs them
//! through the views in queue order and commits the lot in one atomic,
//! durable store commit: one fsync for the group instead of one per
//! statement. A write's rows become visible, and its statement is
//! acknowledged, once its group is durable.
//!
//! A group is all or nothing: when one write fails in the views nothing
//! of the group is applied (the views undo what it did); that write gets
//! its error, writes that may depend on it (its transaction block's, later
//! ones to a table it wrote) a retryable one (40001), and the rest are
//! committed again as a group of their own.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::changes::TableChanges;
use super::entries::{self, encode_entry, encode_head, entry_key, head_key, EntryReader};
use super::locations::LocationChanges;
use super::unique::KeyChanges;
use super::{lock, TableLog, ROWS_PER_ENTRY};
use crate::error::{Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::append_observer::{AppendObserver, GroupFailure, WriteGroup};
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};

/// The one queue of writes waiting to commit, for every table of a store.
pub struct GroupCommitter {
    store: Arc<dyn StateStore>,
    observer: Option<Arc<dyn AppendObserver>>,
    queue: Mutex<Queue>,
    /// Groups committed and the writes in them, since the start.
    groups: AtomicU64,
    writes: AtomicU64,
    /// Numbers `enqueue_all` calls.
    units: AtomicU64,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Queued>,
    /// A committer task is running; it takes what is queued until empty.
    committing: bool,
}

struct Queued {
    write: PreparedWrite,
    done: oneshot::Sender<Result<()>>,
    /// The writes of one `enqueue_all` (a transaction block's) share it:
    /// they commit or fail together.
    unit: u64,
}

/// A statement's write, ready to commit.
pub(super) struct PreparedWrite {
    pub log: Arc<TableLog>,
    /// Rows the write already put in the log (a big, exclusive write).
    pub spilled: Option<Spilled>,
    /// Rows still in memory: placed after every row queued before them.
    pub rows: Option<TableChanges>,
    /// What the write did to the table's unique indexes.
    pub keys: KeyChanges,
    /// A source's connector position after these rows.
    pub position: Option<String>,
}

/// Rows a write spilled to the log from `first_row` on, and the table's
/// event times after them.
pub(super) struct Spilled {
    pub first_row: u64,
    pub rows: u64,
    pub events: Option<WatermarkTracker>,
}

impl GroupCommitter {
    pub fn new(store: Arc<dyn StateStore>, observer: Option<Arc<dyn AppendObserver>>) -> Arc<Self> {
        Arc::new(GroupCommitter {
            store,
            observer,
            queue: Mutex::new(Queue::default()),
            groups: AtomicU64::new(0),
            units: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// Groups committed and the writes in them, since the start.
    pub fn committed(&self) -> (u64, u64) {
        (
            self.groups.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    pub(super) fn observer(&self) -> Option<Arc<dyn AppendObserver>> {
        self.observer.clone()
    }

    /// Queues `write`; the receiver says when its group is durable (or
    /// failed). The write is committed even if nobody waits for it.
    /// Queues `writes` together, so they land in one group: all of them
    /// commit or none. A receiver per write says when its group is durable
    /// (or failed); the writes are committed even if nobody waits.
    pub(super) fn enqueue_all(
        self: &Arc<Self>,
        writes: Vec<PreparedWrite>,
    ) -> Vec<oneshot::Receiver<Result<()>>> {
        let mut outcomes = Vec::with_capacity(writes.len());
        let unit = self.units.fetch_add(1, Ordering::Relaxed);
        let start = {
            let mut queue = lock(&self.queue);
            for write in writes {
                let (done, outcome) = oneshot::channel();
                write.log.in_flight.fetch_add(1, Ordering::AcqRel);
                queue.waiting.push(Queued { write, done, unit });
                outcomes.push(outcome);
            }
            !std::mem::replace(&mut queue.committing, true)
        };
        if start {
            let committer = self.clone();
            tokio::task::spawn_blocking(move || committer.run());
        }
        outcomes
    }

    /// Commits groups until nothing is queued.
    fn run(&self) {
        loop {
            let group = {
                let mut queue = lock(&self.queue);
                if queue.waiting.is_empty() {
                    queue.committing = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            self.commit_group(group);
        }
    }

    /// Commits a group; when a write fails in the views the group was
    /// undone, and the writes that do not depend on the failed one are
    /// committed again without it, so only the statements whose rows
    /// caused a failure fail.
    fn commit_group(&self, mut group: Vec<Queued>) {
        loop {
            let writes: Vec<&PreparedWrite> = group.iter().map(|queued| &queued.write).collect();
            let outcome =
                catch_unwind(AssertUnwindSafe(|| self.apply(&writes))).unwrap_or_else(|_| {
                    Err(GroupFailure {
                        write: None,
                        error: WeirError::internal("a group commit failed unexpectedly"),
                    })
                });
            let failure = match outcome {
                Ok(()) => {
                    self.groups.fetch_add(1, Ordering::Relaxed);
                    self.writes.fetch_add(group.len() as u64, Ordering::Relaxed);
                    group.into_iter().for_each(|queued| queued.finish(Ok(())));
                    return;
                }
                Err(failure) => failure,
            };
            let failed_unit = failure.write.map(|index| group[index].unit);
            let retried = match failure.write {
                Some(index) if !group.iter().any(|q| q.write.spilled.is_some()) => {
                    independent_of(&mut group, index)
                }
                _ => Vec::new(),
            };
            // What failed, or may have counted on what failed, is forgotten.
            group.iter().for_each(|queued| queued.write.forget());
            for queued in group {
                let error = match failed_unit {
                    None => failure.error.clone(),
                    Some(unit) if unit == queued.unit => failure.error.clone(),
                    Some(_) => failed_with_another(),
                };
                queued.finish(Err(error));
            }
            if retried.is_empty() {
                return;
            }
            group = retried;
        }
    }

    /// Places, runs through the views and commits one group.
    fn apply(&self, writes: &[&PreparedWrite]) -> std::result::Result<(), GroupFailure> {
        let mut placement = Placement::default();
        let mut batch = WriteBatch::new();
        let mut sources = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            let source = placement
                .place(write, &mut batch)
                .map_err(|error| GroupFailure {
                    write: Some(index),
                    error,
                })?;
            sources.push(source);
        }
        placement
            .finish(&mut batch)
            .map_err(|error| GroupFailure { write: None, error })?;
        let mut group = GroupMessages::new(sources, &placement);
        let mut publish = || placement.publish();
        commit_with_views(
            &*self.store,
            batch,
            self.observer.clone(),
            &mut group,
            &mut publish,
        )
    }
}

impl Queued {
    /// The write is done with: its statement hears `result`.
    fn finish(self, result: Result<()>) {
        self.write.log.write_finished();
        // The statement may be gone (client closed): its write stands.
        let _ = self.done.send(result);
    }
}

/// Takes out of `group` the writes that do not depend on write `failed`:
/// not of its unit, and not to a table its unit wrote queued after it
/// (such a write was prepared over the failed one's rows and keys).
fn independent_of(group: &mut Vec<Queued>, failed: usize) -> Vec<Queued> {
    let unit = group[failed].unit;
    let first = group.iter().position(|q| q.unit == unit).unwrap_or(failed);
    let tables: std::collections::HashSet<u64> = group
        .iter()
        .filter(|q| q.unit == unit)
        .map(|q| q.write.log.id)
        .collect();
    let (mut retried, mut kept) = (Vec::new(), Vec::new());
    for (position, queued) in std::mem::take(group).into_iter().enumerate() {
        let depends =
            queued.unit == unit || (position > first && tables.contains(&queued.write.log.id));
        match depends {
            true => kept.push(queued),
            false => retried.push(queued),
        }
    }
    *group = kept;
    retried
}

impl PreparedWrite {
    /// Not committed: forget the spilled rows and the keys it added.
    pub(super) fn forget(&self) {
        self.log.forget_write(
            self.spilled.as_ref().map(|spilled| spilled.first_row),
            &self.keys,
        );
    }
}

fn failed_with_another() -> WeirError {
    WeirError::new(
        crate::error::sqlstate::SERIALIZATION_FAILURE,
        "a write committed together with this one failed; nothing of this statement was applied",
    )
    .with_hint("Retry the statement.")
}

/// Where a group's writes go in their tables' logs.
#[derive(Default)]
struct Placement {
    tables: HashMap<u64, Placed>,
}

/// A table's log as the group has extended it so far.
struct Placed {
    log: Arc<TableLog>,
    rows: u64,
    events: Option<WatermarkTracker>,
    /// In-memory rows placed but not yet encoded: consecutive small writes
    /// share log entries (one entry, one compression, for many one-row
    /// INSERTs), starting at `unencoded_at`.
    unencoded: Vec<TableChanges>,
    unencoded_at: u64,
    /// What the group does to where the table's live rows are.
    locations: LocationChanges,
    /// A source's connector position after the placed rows.
    position: Option<String>,
}

impl Placed {
    fn encode(&mut self, batch: &mut WriteBatch) -> Result<()> {
        if self.unencoded.is_empty() {
            return Ok(());
        }
        let rows = TableChanges::concat(&self.log.schema, &self.unencoded)?;
        self.unencoded.clear();
        encode_entries(
            self.log.id,
            &rows,
            self.unencoded_at,
            self.events.as_mut(),
            batch,
        )
    }
}

impl Placement {
    /// Puts the write's in-memory rows after everything before them.
    fn place(&mut self, write: &PreparedWrite, batch: &mut WriteBatch) -> Result<WriteSource> {
        let log = &write.log;
        let placed = self.tables.entry(log.id).or_insert_with(|| Placed {
            log: log.clone(),
            rows: log.row_count(),
            events: log.visible_tracker(),
            unencoded: Vec::new(),
            unencoded_at: 0,
            locations: LocationChanges::default(),
            position: log.source_position(),
        });
        if write.position.is_some() {
            placed.position = write.position.clone();
        }
        let (first_row, spilled_rows) = match &write.spilled {
            Some(spilled) => {
                placed.encode(batch)?;
                // Spilled writes wait for the table's earlier writes.
                if spilled.first_row != placed.rows {
                    return Err(WeirError::internal(format!(
                        "a write spilled at row {} of {} but its table has {} rows",
                        spilled.first_row, log.name, placed.rows
                    )));
                }
                placed.events = spilled.events.clone();
                (spilled.first_row, spilled.rows)
            }
            None => (placed.rows, 0),
        };
        let at = first_row + spilled_rows;
        if let Some(locations) = &log.locations {
            let locations = lock(locations);
            if spilled_rows > 0 {
                let schema = log.schema.clone();
                let reader = EntryReader::new(&*log.store, log.id, schema, None, first_row, at)?;
                for entry in reader {
                    let entry = entry?;
                    let changes = entry.changes_from(entry.first_row);
                    locations.place(&changes, entry.first_row, &mut placed.locations)?;
                }
            }
            if let Some(rows) = &write.rows {
                locations.place(rows, at, &mut placed.locations)?;
            }
        }
        if let Some(rows) = &write.rows {
            if placed.unencoded.is_empty() {
                placed.unencoded_at = at;
            }
            placed.unencoded.push(rows.clone());
        }
        let in_memory = write.rows.as_ref().map_or(0, |rows| rows.num_rows() as u64);
        placed.rows = at + in_memory;
        let spilled = match spilled_rows {
            0 => None,
            _ => Some(EntryReader::new(
                &*log.store,
                log.id,
                log.schema.clone(),
                None,
                first_row,
                at,
            )?),
        };
        Ok(WriteSource {
            log: log.clone(),
            spilled,
            rows: write.rows.clone(),
        })
    }

    /// The rest of the entries, and each table's new head.
    fn finish(&mut self, batch: &mut WriteBatch) -> Result<()> {
        for placed in self.tables.values_mut() {
            placed.encode(batch)?;
            let head =
                placed
                    .log
                    .head_after(placed.rows, placed.events.as_ref(), placed.position.clone());
            batch.put(head_key(placed.log.id), encode_head(&head)?);
        }
        Ok(())
    }

    /// The group is durable: its rows become visible.
    fn publish(&mut self) {
        for placed in self.tables.values_mut() {
            if let Some(locations) = &placed.log.locations {
                lock(locations).apply(std::mem::take(&mut placed.locations));
            }
            placed.log.published(placed.rows, placed.events.clone());
            placed.log.set_source_position(placed.position.take());
        }
    }
}

/// Appends `rows` as log entries from row `at`, moving `events` along.
pub(super) fn encode_entries(
    table_id: u64,
    rows: &TableChanges,
    at: u64,
    mut events: Option<&mut WatermarkTracker>,
    batch: &mut WriteBatch,
) -> Result<()> {
    let mut offset = 0;
    while offset < rows.num_rows() {
        let length = ROWS_PER_ENTRY.min(rows.num_rows() - offset);
        let slice = rows.slice(offset, length);
        let before = events.as_deref().and_then(WatermarkTracker::max_event_ns);
        if let Some(events) = events.as_deref_mut() {
            events.advance(&slice.rows)?;
        }
        batch.put_log(
            entry_key(table_id, at + offset as u64),
            encode_entry(&slice, before)?,
        );
        offset += length;
    }
    Ok(())
}

/// One write's rows as the views read them: spilled entries, then the
/// rows in memory.
struct WriteSource {
    log: Arc<TableLog>,
    spilled: Option<EntryReader>,
    rows: Option<TableChanges>,
}

/// The group's writes as messages, each row with the watermark it arrives
/// under (carried from write to write of a table).
struct GroupMessages {
    sources: Vec<WriteSource>,
    trackers: HashMap<u64, Option<WatermarkTracker>>,
}

impl GroupMessages {
    fn new(sources: Vec<WriteSource>, placement: &Placement) -> Self {
        let trackers = placement
            .tables
            .iter()
            .map(|(id, placed)| (*id, placed.log.visible_tracker()))
            .collect();
        GroupMessages { sources, trackers }
    }
}

impl WriteGroup for GroupMessages {
    fn writes(&self) -> usize {
        self.sources.len()
    }

    fn table(&self, write: usize) -> &str {
        &self.sources[write].log.name
    }

    fn next_messages(&mut self, write: usize) -> Option<Result<Vec<Message>>> {
        let source = &mut self.sources[write];
        let changes = match source.spilled.as_mut().and_then(Iterator::next) {
            Some(entry) => entry.map(|entry| entry.changes_from(entry.first_row)),
            None => Ok(source.rows.take()?),
        };
        let tracker = self.trackers.get_mut(&source.log.id)?.as_mut();
        Some(changes.and_then(|changes| {
            let diffs = changes.diffs();
            source_messages(changes.rows, diffs, tracker)
        }))
    }
}

/// A single write already in memory (a watermark raise).
struct SingleWrite<'a> {
    pub table: &'a str,
    pub messages: Option<Vec<Message>>,
}

impl WriteGroup for SingleWrite<'_> {
    fn writes(&self) -> usize {
        1
    }

    fn table(&self, _write: usize) -> &str {
        self.table
    }

    fn next_messages(&mut self, _write: usize) -> Option<Result<Vec<Message>>> {
        self.messages.take().map(Ok)
    }
}

/// Runs a group through the views reading its tables, then commits its
/// writes and the views' changes in one atomic, durable batch;
/// `published` runs once it is durable, while the views' lock is held.
fn commit_with_views(
    store: &dyn StateStore,
    mut write: WriteBatch,
    observer: Option<Arc<dyn AppendObserver>>,
    group: &mut dyn WriteGroup,
    published: &mut dyn FnMut(),
) -> std::result::Result<(), GroupFailure> {
    let whole = |error| GroupFailure { write: None, error };
    let Some(observer) = observer else {
        store.commit(write).map_err(whole)?;
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
    // A failed group was undone by the observer; a bug in an operator
    // (a panic) must not leave views half-updated unnoticed.
    catch_unwind(AssertUnwindSafe(|| {
        observer.append_and_commit(group, &mut commit)
    }))
    .unwrap_or_else(|_| {
        observer.on_commit_failed();
        Err(whole(WeirError::internal(
            "a materialized view failed on this write; views are rebuilt",
        )))
    })
}

impl TableLog {
    /// Commits `write`, an entry logged between rows (a clock tick, a
    /// firing), with the views' changes `messages` cause, in one atomic,
    /// durable batch; `published` runs once it is durable.
    pub(super) fn commit_between_rows(
        &self,
        write: WriteBatch,
        messages: Vec<Message>,
        published: &mut dyn FnMut(),
    ) -> Result<()> {
        let mut group = SingleWrite {
            table: &self.name,
            messages: Some(messages),
        };
        let observer = self.committer.observer();
        commit_with_views(&*self.store, write, observer, &mut group, published)
            .map_err(|failure| failure.error)
    }

    /// The table's event-time tracker as of its visible rows.
    pub(super) fn visible_tracker(&self) -> Option<WatermarkTracker> {
        self.watermark.as_ref().map(|tracker| lock(tracker).clone())
    }

    /// A group made rows up to `rows` durable: queries and later writes
    /// see them.
    fn published(&self, rows: u64, events: Option<WatermarkTracker>) {
        self.visible_rows.store(rows, Ordering::Release);
        if let (Some(current), Some(next)) = (&self.watermark, events) {
            *lock(current) = next;
        }
        self.rows_arrived();
    }

    /// A queued write is done (committed or not).
    fn write_finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Waits until no write of this table is queued or committing. With
    /// the writer lock held, none can start either: the table is quiet.
    pub(super) async fn quiesce(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Takes back an uncommitted write: its spilled rows (from
    /// `spilled_from`) and the keys it added.
    pub(super) fn forget_write(&self, spilled_from: Option<u64>, keys: &KeyChanges) {
        if let Some(first_row) = spilled_from {
            if let Err(error) = entries::delete_from(&*self.store, self.id, first_row) {
                // Harmless: the head never moved past them; the next open
                // or write replaces them.
                tracing::warn!(%error.message, "spilled rows of a failed write were not deleted");
            }
        }
        keys.release(&mut lock(&self.unique));
    }
}
