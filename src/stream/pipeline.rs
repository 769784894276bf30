//! One materialized view's running operators: a tree of branches
//! (`branch.rs`: a chain per source it reads, junctions where branches
//! meet — a union: minimum watermark, barriers aligned; or a join of two —
//! and branches starting at junctions), then the sink. Each operator runs
//! in a `Stage` that keeps its input watermark; an operator checkpoints
//! when a barrier passes it.

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

pub use super::branch::Branch;
use super::checkpoint::{decode_i64, encode_i64, operator_prefix, StateReader, StateWriter};
use super::late::LateRows;
use super::message::{Chunk, Message};
use super::operator::Stage;
use super::operators::MaterializeOperator;
use super::view_sink::ViewSink;
use crate::error::Result;
use crate::state::{StateStore, WriteBatch};

const LATE_ROWS: &[u8] = b"late_rows";

pub struct ViewPipeline {
    pub id: u64,
    pub name: String,
    /// The relations it reads, each once.
    pub inputs: Vec<String>,
    /// The chain to the sink, from a source or a junction.
    root: Branch,
    pub(super) sink: Stage<MaterializeOperator>,
    /// The sink's checkpoint slot: after every operator's.
    sink_slot: usize,
    /// `<view>_late` when the view keeps its late rows.
    late: Option<LateSink>,
    memory: MemoryGauge,
    /// Its late rows count and measured memory at the last commit.
    late_rows_committed: u64,
    memory_committed_bytes: usize,
}

impl ViewPipeline {
    /// Whether an operator's output changes with the clock alone.
    pub fn clocked(&self) -> bool {
        self.root.clocked()
    }
}

/// The operators' state in memory, measured often enough to enforce a
/// limit yet with amortised cost: a measurement walks the state, so the
/// next comes only after input proportional to the state's size.
#[derive(Debug, Default)]
struct MemoryGauge {
    measured_bytes: usize,
    rows_since_measured: usize,
}

/// Input rows between measurements: at least this many, and one per this
/// many bytes of measured state (a group's state is ~100 bytes or more, so
/// a walk visits at most ~10 groups per input row).
const MIN_ROWS_BETWEEN_MEASUREMENTS: usize = 4096;
const STATE_BYTES_PER_ROW_BETWEEN_MEASUREMENTS: usize = 1024;

impl MemoryGauge {
    fn due(&mut self, rows: usize) -> bool {
        self.rows_since_measured += rows;
        let interval = (self.measured_bytes / STATE_BYTES_PER_ROW_BETWEEN_MEASUREMENTS)
            .max(MIN_ROWS_BETWEEN_MEASUREMENTS);
        self.rows_since_measured >= interval
    }

    fn record(&mut self, bytes: usize) {
        self.measured_bytes = bytes;
        self.rows_since_measured = 0;
    }
}

/// The side output: late rows the operators kept, applied to `<view>_late`.
pub struct LateSink {
    pub name: String,
    pub rows: LateRows,
    pub sink: Stage<MaterializeOperator>,
    /// Its changes since the dataflow last took them.
    changes: Vec<Message>,
}

impl LateSink {
    pub fn new(name: String, rows: LateRows, result: Arc<dyn ViewSink>) -> Self {
        LateSink {
            name,
            rows,
            sink: Stage::new(Box::new(MaterializeOperator::new(result))),
            changes: Vec::new(),
        }
    }

    fn collect(&mut self) -> Result<()> {
        let messages: Vec<Message> = self
            .rows
            .take_kept()
            .into_iter()
            .map(|rows| Message::batch(Chunk::inserts(rows)))
            .collect();
        if !messages.is_empty() {
            self.changes.extend(self.sink.run(messages)?);
        }
        Ok(())
    }
}

impl ViewPipeline {
    pub fn new(
        id: u64,
        name: &str,
        mut root: Branch,
        result: Arc<dyn ViewSink>,
        late: Option<LateSink>,
    ) -> Self {
        let mut inputs: Vec<String> = Vec::new();
        root.inputs(&mut inputs);
        let mut sink_slot = 0;
        root.number(&mut sink_slot);
        ViewPipeline {
            id,
            late,
            name: name.to_string(),
            memory: MemoryGauge::default(),
            inputs,
            root,
            sink: Stage::new(Box::new(MaterializeOperator::new(result))),
            sink_slot,
            late_rows_committed: 0,
            memory_committed_bytes: 0,
        }
    }

    /// Runs `messages` from `input` through every branch reading it, the
    /// junctions and the rest of the chain; returns the view's changes.
    /// Operators passed a barrier write their state to `checkpoint`. The
    /// state's memory is measured at barriers, and when `limited` (a memory
    /// limit is enforced) also every so many rows in between.
    pub(super) fn process(
        &mut self,
        input: &str,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
        limited: bool,
    ) -> Result<Vec<Message>> {
        if !self.root.reads(input) {
            return Ok(Vec::new());
        }
        let rows: usize = messages.iter().map(Message::num_rows).sum();
        // Each message goes through the whole chain before the next one,
        // so what an operator makes of one batch (a HOP window's five rows
        // per event) is gone before the next batch is read.
        let mut through = Vec::new();
        for message in messages {
            // Another view's firing.
            if matches!(message, Message::Fire(view) if view != self.id) {
                continue;
            }
            through.extend(self.root.run(self.id, input, message, checkpoint)?);
        }
        self.finish(through, checkpoint, (rows, limited))
    }

    /// Finishes the work its operators handed to other threads; what they
    /// held back runs through the rest of the chain. Returns the view's
    /// changes.
    pub(super) fn flush(&mut self, checkpoint: &mut WriteBatch) -> Result<Vec<Message>> {
        let through = self.root.flush(self.id, checkpoint)?;
        if through.is_empty() {
            return Ok(through);
        }
        self.finish(through, checkpoint, (0, false))
    }

    /// What came out of the operators, to the sink (and the late rows to
    /// theirs); returns the view's changes. `rows` read, and whether
    /// memory is `limited`, say when to measure it.
    fn finish(
        &mut self,
        current: Vec<Message>,
        checkpoint: &mut WriteBatch,
        (rows, limited): (usize, bool),
    ) -> Result<Vec<Message>> {
        let barrier = current.iter().any(|m| matches!(m, Message::Barrier(_)));
        if barrier {
            // The view's own state: how many rows its operators dropped.
            let late = self
                .sink
                .operator()
                .result()
                .late_rows()
                .load(Ordering::Relaxed) as i64;
            StateWriter::new(self.sink_prefix(), checkpoint).put(LATE_ROWS, encode_i64(late));
        }
        // Measuring walks the state (a tenth of a SESSION view's time at
        // the interval below), so without a limit only barriers pay for it.
        if (limited && self.memory.due(rows)) || barrier {
            self.measure_memory();
        }
        if let Some(late) = &mut self.late {
            late.collect()?;
            // Views reading the side output checkpoint with this epoch too.
            let barriers = current.iter().filter(|m| matches!(m, Message::Barrier(_)));
            late.changes.extend(barriers.cloned());
        }
        self.sink.run(current)
    }

    fn measure_memory(&mut self) {
        let bytes = self.root.memory_bytes();
        self.memory.record(bytes);
        self.sink
            .operator()
            .result()
            .record_state_memory(bytes as u64);
    }

    /// Its operators' state in memory when last measured.
    pub fn memory_bytes(&self) -> usize {
        self.memory.measured_bytes
    }

    /// The writes of the view's rows (and late rows) changed so far.
    pub(super) fn take_writes(&mut self) -> WriteBatch {
        let mut writes = self.sink.operator_mut().take_writes();
        if let Some(late) = &mut self.late {
            writes.extend(late.sink.operator_mut().take_writes());
        }
        writes
    }

    /// The view's committed changes become visible to queries.
    pub(super) fn publish(&self) {
        self.results().for_each(|result| result.publish());
    }

    /// The view's changes were not committed.
    pub(super) fn discard(&self) {
        self.results().for_each(|result| result.discard());
    }

    pub(super) fn results(&self) -> impl Iterator<Item = &Arc<dyn ViewSink>> {
        let late = self.late.as_ref().map(|late| late.sink.operator().result());
        std::iter::once(self.sink.operator().result()).chain(late)
    }

    /// The write group committed: its operators forget how to undo it.
    pub(super) fn commit(&mut self) {
        self.root.commit();
        self.sink.commit();
        if let Some(late) = &mut self.late {
            late.sink.commit();
        }
        self.late_rows_committed = self.late_rows().load(Ordering::Relaxed);
        self.memory_committed_bytes = self.memory.measured_bytes;
    }

    /// The write group failed: its operators undo what it did (its staged
    /// rows are discarded with `discard`). False when one could not.
    pub(super) fn rollback(&mut self) -> Result<bool> {
        let undone = self.root.rollback()? & self.sink.rollback()?;
        let late_undone = match &mut self.late {
            Some(late) => {
                late.rows.take_kept();
                late.changes.clear();
                late.sink.rollback()?
            }
            None => true,
        };
        self.late_rows()
            .store(self.late_rows_committed, Ordering::Relaxed);
        // What the group grew is gone: its measurement with it.
        self.memory.record(self.memory_committed_bytes);
        Ok(undone && late_undone)
    }

    fn late_rows(&self) -> &std::sync::atomic::AtomicU64 {
        self.sink.operator().result().late_rows()
    }

    /// The side output's name and its changes since the last call.
    pub(super) fn take_late_changes(&mut self) -> Option<(String, Vec<Message>)> {
        let late = self.late.as_mut()?;
        let changes = std::mem::take(&mut late.changes);
        (!changes.is_empty()).then(|| (late.name.clone(), changes))
    }

    pub(super) fn set_replaying(&mut self, replaying: bool) {
        self.sink.operator_mut().set_replaying(replaying);
        if let Some(late) = &mut self.late {
            late.sink.operator_mut().set_replaying(replaying);
        }
    }

    fn sink_prefix(&self) -> Vec<u8> {
        operator_prefix(self.id, self.sink_slot)
    }

    /// Gives its operators key spaces in `store` to spill to.
    pub fn attach(&mut self, store: &Arc<dyn StateStore>, budget_bytes: &Arc<AtomicUsize>) {
        self.root.attach(self.id, store, budget_bytes);
    }

    /// Loads every operator's checkpointed state, `state_of(prefix)`
    /// returning an operator's entries.
    pub fn restore(
        &mut self,
        mut state_of: impl FnMut(&[u8]) -> Result<StateReader>,
    ) -> Result<()> {
        self.root.restore(self.id, &mut state_of)?;
        let sink = state_of(&self.sink_prefix())?;
        let late = sink.get(LATE_ROWS).and_then(decode_i64).unwrap_or(0);
        self.sink
            .operator()
            .result()
            .late_rows()
            .store(late as u64, Ordering::Relaxed);
        self.late_rows_committed = late as u64;
        Ok(())
    }
}
