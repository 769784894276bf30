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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::changes::TableChanges;
use super::entries;
use super::group_messages::{commit_with_views, GroupMessages};
use super::placement::{PlacedGroup, Placement};
use super::streaming::StreamReceiver;
use super::unique::KeyChanges;
use super::{lock, TableLog};
use crate::error::{Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::append_observer::{AppendObserver, GroupFailure};
use crate::stream::WatermarkTracker;

pub(super) use super::placement::encode_entries;

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
    /// A streamed write's rows, as they come (`streaming`); taken when
    /// the write is placed.
    pub stream: Mutex<Option<StreamReceiver>>,
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
                next_group(&mut queue.waiting)
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
        let mut placed = PlacedGroup {
            placement: Placement::default(),
            batch: WriteBatch::new(),
        };
        let mut sources = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            let source = placed
                .placement
                .place(write, &mut placed.batch)
                .map_err(|error| GroupFailure {
                    write: Some(index),
                    error,
                })?;
            sources.push(source);
        }
        let others_waiting = || !lock(&self.queue).waiting.is_empty();
        let mut group = GroupMessages::new(sources, &placed.placement, &others_waiting);
        commit_with_views(&*self.store, &mut placed, self.observer.clone(), &mut group)
    }

    /// Queues a streamed write (`streaming`), whose rows come through
    /// `stream` while the committer runs it; the receiver says how it
    /// ended.
    pub(super) fn enqueue_stream(
        self: &Arc<Self>,
        log: &Arc<TableLog>,
        stream: StreamReceiver,
    ) -> oneshot::Receiver<Result<()>> {
        let write = PreparedWrite {
            log: log.clone(),
            spilled: None,
            rows: None,
            keys: KeyChanges::default(),
            position: None,
            stream: Mutex::new(Some(stream)),
        };
        match self.enqueue_all(vec![write]).pop() {
            Some(outcome) => outcome,
            None => oneshot::channel().1,
        }
    }
}

/// Takes the next group from the queue: everything queued, but a streamed
/// write goes alone (those queued before it go first, as a group), so
/// nothing waits for a client's data that was not queued behind it.
fn next_group(waiting: &mut Vec<Queued>) -> Vec<Queued> {
    let end = match waiting.iter().position(|queued| queued.write.is_streamed()) {
        Some(0) => 1,
        Some(at) => at,
        None => waiting.len(),
    };
    let rest = waiting.split_off(end);
    std::mem::replace(waiting, rest)
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
    fn is_streamed(&self) -> bool {
        lock(&self.stream).is_some()
    }

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

impl TableLog {
    /// The table's event-time tracker as of its visible rows.
    pub(super) fn visible_tracker(&self) -> Option<WatermarkTracker> {
        self.watermark.as_ref().map(|tracker| lock(tracker).clone())
    }

    /// A group made rows up to `rows` durable: queries and later writes
    /// see them.
    pub(super) fn published(&self, rows: u64, events: Option<WatermarkTracker>) {
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
