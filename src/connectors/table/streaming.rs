//! A big write's rows fed through the views while the client still sends
//! them (a COPY), so that decoding the data and running the views overlap
//! instead of following each other, and the rows are not read back from
//! the log at the end.
//!
//! The write is queued for the group commit with its first part (64 k
//! rows; a smaller COPY stays an ordinary write), alone in its group; the
//! committer pushes each part through the views as it comes and commits
//! once the last has come. It stays all or nothing: a failure
//! undoes what the views did (as for any failed group). Its rows still go
//! to the log as they come (spilled past the head), so the committer can
//! let go of a client that stops sending — after `STALL_WITH_OTHERS_MS`
//! when other writes wait, after `STALL_MS` anyway — without losing
//! anything: the views undo the rows so far ("detached") and the write
//! ends as an ordinary exclusive write, read back from the log at its
//! commit. docs/decisions.md, "A COPY runs through the views as it comes".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::changes::TableChanges;
use crate::error::{sqlstate, Result, WeirError};
use crate::stream::WatermarkTracker;

/// Parts waiting for the committer: the connection stops reading the
/// client past them.
const PARTS_IN_FLIGHT: usize = 4;
/// Rows a streamed write spills (and sends) at once: a part comes every
/// few tens of milliseconds from a client sending at full speed, so a
/// wait of `STALL_WITH_OTHERS_MS` is a client that stopped.
pub(super) const PART_ROWS: usize = 64 * 1024;
/// How long the committer waits for a part while other writes wait.
const STALL_WITH_OTHERS_MS: u64 = 500;
/// How long it waits for a part whatever else waits (DDL and checkpoints
/// wait for the views too, unseen from here).
const STALL_MS: u64 = 2_000;

/// What a streaming write sends the committer.
pub(super) enum Part {
    /// Rows, already checked, stamped and spilled to the log.
    Rows(TableChanges),
    /// Every row was sent: how many, and the table's event times after them.
    End {
        rows: u64,
        events: Option<WatermarkTracker>,
    },
}

/// How a streamed write ended, for the committer's placement: its rows
/// and event times, once its last part has come.
pub(super) type StreamEnd = Arc<Mutex<Option<(u64, Option<WatermarkTracker>)>>>;

/// The writer's end of a streaming write.
pub(super) struct StreamSender {
    parts: flume::Sender<Part>,
    detached: Arc<AtomicBool>,
    outcome: oneshot::Receiver<Result<()>>,
    /// Parts spilled but not yet sent.
    unsent: Vec<TableChanges>,
}

/// The committer's end of a streaming write.
pub(super) struct StreamReceiver {
    parts: flume::Receiver<Part>,
    pub first_row: u64,
    detached: Arc<AtomicBool>,
}

/// Rows for the committer, sent outside any lock (the send waits for room).
pub struct Delivery {
    parts: flume::Sender<Part>,
    rows: Vec<TableChanges>,
}

impl Delivery {
    /// Sends the rows; a committer that let go of the write takes none,
    /// and the write hears why at its end.
    pub async fn send(self) {
        for rows in self.rows {
            if self.parts.send_async(Part::Rows(rows)).await.is_err() {
                return;
            }
        }
    }
}

/// A channel for a write whose rows start at `first_row`: the writer's
/// end (given the committer's outcome once queued) and the committer's.
pub(super) fn channel(first_row: u64) -> (UnqueuedSender, StreamReceiver) {
    let (sender, receiver) = flume::bounded(PARTS_IN_FLIGHT);
    let detached = Arc::new(AtomicBool::new(false));
    let receiving = StreamReceiver {
        parts: receiver,
        first_row,
        detached: detached.clone(),
    };
    (UnqueuedSender { sender, detached }, receiving)
}

/// The writer's end before the write is queued.
pub(super) struct UnqueuedSender {
    sender: flume::Sender<Part>,
    detached: Arc<AtomicBool>,
}

impl UnqueuedSender {
    pub fn queued(self, outcome: oneshot::Receiver<Result<()>>) -> StreamSender {
        StreamSender {
            parts: self.sender,
            detached: self.detached,
            outcome,
            unsent: Vec::new(),
        }
    }
}

impl StreamSender {
    /// The committer let go of the write (it goes on as an ordinary one).
    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    pub fn keep(&mut self, rows: TableChanges) {
        self.unsent.push(rows);
    }

    pub fn delivery(&mut self) -> Option<Delivery> {
        (!self.unsent.is_empty()).then(|| Delivery {
            parts: self.parts.clone(),
            rows: std::mem::take(&mut self.unsent),
        })
    }

    /// Sends what is left and the end, then waits for the committer:
    /// Ok(true) when the write committed, Ok(false) when the committer let
    /// go of it before its end.
    pub async fn finish(mut self, rows: u64, events: Option<WatermarkTracker>) -> Result<bool> {
        if let Some(delivery) = self.delivery() {
            delivery.send().await;
        }
        let end = Part::End { rows, events };
        // A committer that already failed the write dropped its end.
        let _ = self.parts.send_async(end).await;
        drop(self.parts);
        let outcome = self.outcome.await.unwrap_or_else(|_| {
            Err(WeirError::internal(
                "the group commit stopped before this write",
            ))
        });
        match outcome {
            Ok(()) => Ok(true),
            Err(_) if self.detached.load(Ordering::Acquire) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl StreamReceiver {
    /// The next part. Waits for the client, but lets go of the write
    /// (Err, and `detached` set) when it stalls: `others_waiting` says
    /// whether other writes wait for the committer.
    pub fn next(&mut self, others_waiting: &dyn Fn() -> bool) -> Result<Part> {
        let poll = Duration::from_millis(STALL_WITH_OTHERS_MS / 5);
        // The stall is the wait for the client, not the time the views took.
        let waiting_since = Instant::now();
        loop {
            match self.parts.recv_timeout(poll) {
                Ok(part) => return Ok(part),
                Err(flume::RecvTimeoutError::Disconnected) => return Err(ended_early()),
                Err(flume::RecvTimeoutError::Timeout) => {}
            }
            let stalled = waiting_since.elapsed();
            let others = stalled >= Duration::from_millis(STALL_WITH_OTHERS_MS) && others_waiting();
            if others || stalled >= Duration::from_millis(STALL_MS) {
                self.detached.store(true, Ordering::Release);
                return Err(detached());
            }
        }
    }
}

/// The writer went away before its end (its statement failed or was
/// cancelled; it reports its own error).
fn ended_early() -> WeirError {
    WeirError::new(
        sqlstate::QUERY_CANCELED,
        "the write ended before all its rows were sent",
    )
}

fn detached() -> WeirError {
    WeirError::new(
        sqlstate::SERIALIZATION_FAILURE,
        "the client stopped sending while other writes waited; the write goes on without the views until its end",
    )
}

impl super::TableLog {
    /// COPYs streamed through the views since the start, and of those the
    /// ones let go of part way because their client stopped sending.
    pub fn copies_streamed(&self) -> (u64, u64) {
        (
            self.copies_streamed.load(Ordering::Relaxed),
            self.copies_detached.load(Ordering::Relaxed),
        )
    }

    pub(super) fn count_stream(&self, detached: bool) {
        let counter = match detached {
            false => &self.copies_streamed,
            true => &self.copies_detached,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
