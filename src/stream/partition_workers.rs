//! Partitions of a keyed operator that work while the operator goes on.
//! Partition `i` of every operator runs on long-lived worker thread `i`,
//! jobs in the order they were sent, so an operator hands a batch's share
//! to each partition and turns to the next batch (windowing, evaluating
//! keys) while the partitions aggregate the last one: a pipeline across
//! cores. The operator waits for its partitions only when it needs their
//! state — a window closing, a checkpoint, the end of a write group — and
//! an error in a partition surfaces at that wait, before anything commits.
//!
//! A worker's queue is bounded: an operator whose partitions fall behind
//! waits when it sends, so a slow aggregate holds its input back instead
//! of buffering it (backpressure). The same thread for a partition also
//! keeps its allocations in one malloc arena (docs/benchmarks.md).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::{Result, WeirError};

/// Jobs waiting per worker thread before a sender waits.
const QUEUE_JOBS: usize = 8;

type Job = Box<dyn FnOnce() + Send>;

/// The partitions of one operator: each partition's state, shared with
/// the jobs working on it, and the outcomes of jobs not yet waited for.
pub struct Partitioned<S, R> {
    states: Vec<Arc<Mutex<S>>>,
    finished: Sender<Result<R>>,
    outcomes: Receiver<Result<R>>,
    /// Jobs sent and not yet waited for.
    in_flight: usize,
    /// Outcomes of jobs run on the calling thread, not yet waited for.
    ready: Vec<Result<R>>,
}

impl<S: Send + 'static, R: Send + 'static> Partitioned<S, R> {
    pub fn new(states: Vec<S>) -> Self {
        let (finished, outcomes) = channel();
        Partitioned {
            states: states
                .into_iter()
                .map(|state| Arc::new(Mutex::new(state)))
                .collect(),
            finished,
            outcomes,
            in_flight: 0,
            ready: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Runs `work` on partition `index`'s state after every job sent to it
    /// before. A small job with nothing in flight runs here and now: waking
    /// a thread would cost more than it saves.
    pub fn send<F>(&mut self, index: usize, small: bool, work: F) -> Result<()>
    where
        F: FnOnce(&mut S) -> Result<R> + Send + 'static,
    {
        let state = self.states[index].clone();
        if small && self.in_flight == 0 {
            self.ready.push(run_job(&state, work));
            return Ok(());
        }
        let finished = self.finished.clone();
        let job: Job = Box::new(move || {
            // The operator may be gone (a failed view dropped): nobody waits.
            let _ = finished.send(run_job(&state, work));
        });
        worker(index)?
            .send(job)
            .map_err(|_| WeirError::internal("a partition worker stopped"))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Waits for every job sent; their outcomes (in the order they
    /// finished), or the first error once all are done.
    pub fn wait(&mut self) -> Result<Vec<R>> {
        self.finished(true)?.into_iter().collect()
    }

    /// The outcomes of the jobs finished since the last call, in the order
    /// they finished; when `block`, after waiting for every job sent.
    pub fn finished(&mut self, block: bool) -> Result<Vec<Result<R>>> {
        let mut outcomes = std::mem::take(&mut self.ready);
        while self.in_flight > 0 {
            let outcome = if block {
                self.outcomes.recv().ok()
            } else {
                match self.outcomes.try_recv() {
                    Ok(outcome) => Some(outcome),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => None,
                }
            };
            let outcome = outcome.ok_or_else(|| WeirError::internal("a partition job was lost"))?;
            self.in_flight -= 1;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Each partition's state; every outcome must have been taken
    /// (`finished(true)` or `wait`).
    pub fn states(&mut self) -> Result<Vec<MutexGuard<'_, S>>> {
        if self.in_flight > 0 || !self.ready.is_empty() {
            return Err(WeirError::internal(
                "partition state read while jobs are outstanding",
            ));
        }
        Ok(self.states.iter().map(|s| lock(s)).collect())
    }

    /// Each partition's state as it is now (jobs may still be queued):
    /// for estimates such as memory.
    pub fn peek(&self) -> impl Iterator<Item = MutexGuard<'_, S>> {
        self.states.iter().map(|s| lock(s))
    }
}

fn run_job<S, R>(state: &Mutex<S>, work: impl FnOnce(&mut S) -> Result<R>) -> Result<R> {
    catch_unwind(AssertUnwindSafe(|| work(&mut lock(state))))
        .unwrap_or_else(|_| Err(WeirError::internal("an operator partition panicked")))
}

/// A partition's state; a job that panicked left it poisoned, and the
/// error it returned makes the views rebuild, so what it holds is moot.
fn lock<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The queue of worker thread `index`, started on first use.
fn worker(index: usize) -> Result<SyncSender<Job>> {
    static WORKERS: OnceLock<Mutex<Vec<SyncSender<Job>>>> = OnceLock::new();
    let mut workers = lock(WORKERS.get_or_init(Default::default));
    while workers.len() <= index {
        let (sender, jobs) = sync_channel::<Job>(QUEUE_JOBS);
        std::thread::Builder::new()
            .name(format!("weir-worker-{}", workers.len()))
            .spawn(move || {
                for job in jobs {
                    job();
                }
            })
            .map_err(|error| WeirError::internal(format!("starting a worker thread: {error}")))?;
        workers.push(sender);
    }
    Ok(workers[index].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_per_partition_and_wait_returns_their_outcomes() {
        let mut partitions: Partitioned<Vec<u32>, u32> = Partitioned::new(vec![Vec::new(); 3]);
        for value in 0..30u32 {
            let partition = (value % 3) as usize;
            partitions
                .send(partition, value % 2 == 0, move |seen| {
                    seen.push(value);
                    Ok(value)
                })
                .unwrap();
        }
        let mut outcomes = partitions.wait().unwrap();
        outcomes.sort_unstable();
        let states = partitions.states().unwrap();
        assert_eq!(outcomes, (0..30).collect::<Vec<_>>());
        for (index, seen) in states.iter().enumerate() {
            let expected: Vec<u32> = (0..30).filter(|v| v % 3 == index as u32).collect();
            assert_eq!(**seen, expected);
        }
    }

    #[test]
    fn an_error_or_a_panic_surfaces_at_the_wait_after_every_job_is_done() {
        let mut partitions: Partitioned<u32, ()> = Partitioned::new(vec![0, 0]);
        partitions
            .send(0, false, |_| Err(WeirError::internal("boom")))
            .unwrap();
        partitions.send(1, false, |_| panic!("a bug")).unwrap();
        for partition in [0, 1] {
            partitions
                .send(partition, false, |count| {
                    *count += 1;
                    Ok(())
                })
                .unwrap();
        }
        let error = partitions.wait().unwrap_err();
        assert!(error.message.contains("boom") || error.message.contains("panicked"));
        let states = partitions.states().unwrap();
        assert_eq!(*states[0] + *states[1], 2, "later jobs still ran");
    }
}
