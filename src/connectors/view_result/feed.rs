//! A view's changefeed (SUBSCRIBE): each subscriber gets the view's rows at
//! one commit (the snapshot) and then every later commit's changes, in
//! commit order, each row with the commit's epoch and a +1 or -1 diff.
//! A commit's changes are handed over whole when it is published, so no
//! subscriber sees half of one. Every subscriber has a queue bounded in
//! bytes: one that does not keep up is cut off with an error instead of
//! holding the server's memory (it may subscribe again).
//!
//! The epoch is the commit's time in milliseconds since 1970, made strictly
//! increasing per view, so epochs of different subscriptions compare.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{sqlstate, Result, WeirError};
use crate::stream::message::Chunk;

/// One commit's changes: rows and their diffs (+1 / -1 per row).
#[derive(Debug, Clone)]
pub struct Change {
    pub epoch: u64,
    pub rows: RecordBatch,
    pub diffs: Int64Array,
}

#[derive(Default)]
pub(super) struct Feed {
    state: Mutex<FeedState>,
}

#[derive(Default)]
struct FeedState {
    subscribers: Vec<Weak<Queue>>,
    /// Changes applied but not committed yet (only while subscribed).
    staged: Vec<Chunk>,
    staged_bytes: usize,
    /// More was staged than any subscriber may hold: they are cut off.
    staged_overflow: bool,
    last_epoch: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

impl Feed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a chunk of the commit being staged, for the subscribers.
    pub(super) fn stage(&self, chunk: &Chunk) {
        let mut state = self.lock();
        if state.subscribers.is_empty() || state.staged_overflow {
            return;
        }
        state.staged_bytes += chunk.rows.get_array_memory_size();
        let limit = state
            .subscribers
            .iter()
            .filter_map(Weak::upgrade)
            .map(|queue| queue.limit_bytes)
            .max()
            .unwrap_or(0);
        if state.staged_bytes > limit {
            state.staged_overflow = true;
            state.staged = Vec::new();
        } else {
            state.staged.push(chunk.clone());
        }
    }

    /// The staged changes were committed: every subscriber gets them.
    pub(super) fn publish(&self) {
        let mut state = self.lock();
        state.subscribers.retain(|queue| queue.strong_count() > 0);
        let staged = std::mem::take(&mut state.staged);
        let overflow = std::mem::take(&mut state.staged_overflow);
        state.staged_bytes = 0;
        if staged.is_empty() && !overflow {
            return;
        }
        let epoch = now_ms().max(state.last_epoch + 1);
        state.last_epoch = epoch;
        let changes = staged
            .iter()
            .map(|chunk| change(epoch, chunk))
            .collect::<Result<Vec<Change>>>();
        let changes = match changes {
            Ok(changes) => changes,
            Err(error) => {
                // Never a commit in part: the subscribers end, saying why.
                drop(state);
                return self.end(&format!(
                    "its changes could not be copied: {}",
                    error.message
                ));
            }
        };
        for queue in state.subscribers.iter().filter_map(Weak::upgrade) {
            queue.push(&changes, overflow);
        }
    }

    /// Every subscriber is told `why` there will be no more changes.
    pub(super) fn end(&self, why: &str) {
        let mut state = self.lock();
        for queue in state
            .subscribers
            .drain(..)
            .filter_map(|queue| queue.upgrade())
        {
            queue.lock().ended = Some(why.to_string());
            queue.arrived.notify_waiters();
        }
    }

    pub(super) fn discard(&self) {
        let mut state = self.lock();
        state.staged = Vec::new();
        state.staged_bytes = 0;
        state.staged_overflow = false;
    }

    /// A new subscriber and the epoch of the rows committed now (call with
    /// no commit staged, so the snapshot read now is exactly that epoch).
    pub(super) fn subscribe(&self, limit_bytes: usize) -> (Arc<Queue>, u64) {
        let mut state = self.lock();
        let epoch = now_ms().max(state.last_epoch);
        state.last_epoch = epoch;
        let queue = Arc::new(Queue {
            limit_bytes,
            state: Mutex::new(QueueState::default()),
            arrived: tokio::sync::Notify::new(),
        });
        state.subscribers.push(Arc::downgrade(&queue));
        (queue, epoch)
    }
}

/// Rows with -n or +n repeated as n rows of -1 or +1.
fn change(epoch: u64, chunk: &Chunk) -> Result<Change> {
    let Some(diffs) = &chunk.diffs else {
        let ones = Int64Array::from(vec![1; chunk.rows.num_rows()]);
        return Ok(Change {
            epoch,
            rows: chunk.rows.clone(),
            diffs: ones,
        });
    };
    if diffs.iter().all(|d| matches!(d, Some(1) | Some(-1))) {
        return Ok(Change {
            epoch,
            rows: chunk.rows.clone(),
            diffs: diffs.clone(),
        });
    }
    let mut indexes = Vec::new();
    let mut signs = Vec::new();
    for (row, diff) in diffs.iter().enumerate() {
        let diff = diff.unwrap_or(1);
        for _ in 0..diff.unsigned_abs() {
            indexes.push(row as u64);
            signs.push(diff.signum());
        }
    }
    let indexes = datafusion::arrow::array::UInt64Array::from(indexes);
    let rows = datafusion::arrow::compute::take_record_batch(&chunk.rows, &indexes)?;
    Ok(Change {
        epoch,
        rows,
        diffs: Int64Array::from(signs),
    })
}

/// One subscriber's waiting changes.
pub struct Queue {
    limit_bytes: usize,
    state: Mutex<QueueState>,
    arrived: tokio::sync::Notify,
}

#[derive(Default)]
struct QueueState {
    changes: VecDeque<Change>,
    bytes: usize,
    overflowed: bool,
    /// The view went away: no more changes will come.
    ended: Option<String>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, changes: &[Change], overflow: bool) {
        let mut state = self.lock();
        if state.overflowed {
            return;
        }
        let bytes: usize = changes.iter().map(|c| c.rows.get_array_memory_size()).sum();
        if overflow || state.bytes + bytes > self.limit_bytes {
            // Cut off: what is queued is dropped, the reader gets the error.
            state.overflowed = true;
            state.changes.clear();
            state.bytes = 0;
        } else {
            state.changes.extend(changes.iter().cloned());
            state.bytes += bytes;
        }
        drop(state);
        self.arrived.notify_waiters();
    }

    /// The changes waiting now (possibly none), or the error of a
    /// subscriber that fell behind.
    pub fn take(&self) -> Result<Vec<Change>> {
        let mut state = self.lock();
        if state.overflowed {
            return Err(WeirError::new(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "the subscription fell behind: more than {} MiB of changes waited for it",
                    self.limit_bytes >> 20
                ),
            )
            .with_hint(
                "Read the changes faster (FETCH more rows at a time), raise \
                 subscribe_queue_limit, or subscribe again to start from the current rows.",
            ));
        }
        state.bytes = 0;
        let changes: Vec<Change> = state.changes.drain(..).collect();
        match (&state.ended, changes.is_empty()) {
            (Some(why), true) => Err(WeirError::new(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("the subscription ended: {why}"),
            )
            .with_hint("Subscribe again to start from the view's current rows.")),
            _ => Ok(changes),
        }
    }

    /// Waits until changes arrive (or the subscriber was cut off).
    pub async fn wait(&self) {
        let arrived = self.arrived.notified();
        {
            let state = self.lock();
            if !state.changes.is_empty() || state.overflowed || state.ended.is_some() {
                return;
            }
        }
        arrived.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    const QUEUE_LIMIT_BYTES: usize = 64 << 20;

    fn chunk(values: &[i64], diffs: Option<Vec<i64>>) -> Chunk {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from(values.to_vec()));
        Chunk {
            rows: RecordBatch::try_new(schema, vec![column]).unwrap(),
            diffs: diffs.map(Int64Array::from),
            watermarks: None,
        }
    }

    fn values(change: &Change) -> Vec<(i64, i64)> {
        let rows = change.rows.column(0).as_primitive::<Int64Type>();
        (0..rows.len())
            .map(|i| (rows.value(i), change.diffs.value(i)))
            .collect()
    }

    #[test]
    fn a_commit_arrives_whole_with_one_increasing_epoch() {
        let feed = Feed::default();
        feed.stage(&chunk(&[1], None));
        feed.publish();
        let (queue, snapshot_epoch) = feed.subscribe(QUEUE_LIMIT_BYTES);
        feed.stage(&chunk(&[2, 3], None));
        assert!(
            queue.take().unwrap().is_empty(),
            "nothing before the commit"
        );
        feed.stage(&chunk(&[2], Some(vec![-1])));
        feed.publish();
        feed.stage(&chunk(&[4], Some(vec![3])));
        feed.discard();
        feed.stage(&chunk(&[5], Some(vec![-2])));
        feed.publish();
        let changes = queue.take().unwrap();
        assert_eq!(changes.len(), 3);
        assert!(changes[0].epoch > snapshot_epoch);
        assert_eq!(changes[0].epoch, changes[1].epoch);
        assert!(changes[2].epoch > changes[1].epoch);
        assert_eq!(values(&changes[0]), vec![(2, 1), (3, 1)]);
        assert_eq!(values(&changes[1]), vec![(2, -1)]);
        assert_eq!(values(&changes[2]), vec![(5, -1), (5, -1)]);
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_cut_off() {
        let feed = Feed::default();
        let (queue, _) = feed.subscribe(4096);
        let (kept, _) = feed.subscribe(QUEUE_LIMIT_BYTES);
        for round in 0..100 {
            feed.stage(&chunk(&[round; 64], None));
            feed.publish();
        }
        let error = queue.take().unwrap_err();
        assert_eq!(error.code, sqlstate::PROGRAM_LIMIT_EXCEEDED);
        assert_eq!(kept.take().unwrap().len(), 100);
        feed.end("the view was dropped");
        let ended = kept.take().unwrap_err();
        assert!(ended.message.contains("dropped"), "{}", ended.message);
        drop(queue);
        drop(kept);
        feed.stage(&chunk(&[1], None));
        assert!(feed.lock().staged.is_empty(), "no subscriber: nothing kept");
    }
}
