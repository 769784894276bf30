//! One materialized view's running operators: a chain per source it reads
//! (a branch), a junction where several meet (a union: minimum watermark,
//! barriers aligned; or a join of two), the operators after it and the
//! sink. Each
//! operator runs in a `Stage` that keeps its input watermark; an operator
//! checkpoints when a barrier passes it.

use std::sync::Arc;

use std::sync::atomic::Ordering;

use super::checkpoint::{decode_i64, encode_i64, operator_prefix, StateReader, StateWriter};
use super::junction::Junction;
use super::late::LateRows;
use super::message::{Chunk, Message};
use super::operator::{Operator, Output, Stage};
use super::operators::MaterializeOperator;
use super::view_sink::ViewSink;
use crate::error::Result;
use crate::state::WriteBatch;

const LATE_ROWS: &[u8] = b"late_rows";

pub struct ViewPipeline {
    pub id: u64,
    pub name: String,
    /// The relations it reads, each once.
    pub inputs: Vec<String>,
    /// One chain per source; several meet at `junction`.
    branches: Vec<Branch>,
    junction: Option<Junction>,
    /// The operators after the junction (all are in the branch without one).
    operators: Vec<Stage>,
    pub(super) sink: Stage<MaterializeOperator>,
    /// `<view>_late` when the view keeps its late rows.
    late: Option<LateSink>,
    memory: MemoryGauge,
}

/// The operators from one source to the junction (or the sink).
pub struct Branch {
    pub input: String,
    pub operators: Vec<Stage>,
}

impl ViewPipeline {
    /// Whether an operator's output changes with the clock alone.
    pub fn clocked(&self) -> bool {
        self.branches
            .iter()
            .flat_map(|branch| &branch.operators)
            .chain(&self.operators)
            .any(Stage::clocked)
    }
}

impl Branch {
    pub fn new(input: String, operators: Vec<Box<dyn Operator>>) -> Self {
        Branch {
            input,
            operators: stages(operators),
        }
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
        branches: Vec<Branch>,
        junction: Option<Junction>,
        operators: Vec<Box<dyn Operator>>,
        result: Arc<dyn ViewSink>,
        late: Option<LateSink>,
    ) -> Self {
        let mut inputs: Vec<String> = Vec::new();
        for branch in &branches {
            if !inputs.contains(&branch.input) {
                inputs.push(branch.input.clone());
            }
        }
        ViewPipeline {
            id,
            late,
            name: name.to_string(),
            memory: MemoryGauge::default(),
            inputs,
            branches,
            junction,
            operators: stages(operators),
            sink: Stage::new(Box::new(MaterializeOperator::new(result))),
        }
    }

    /// Checkpoint slots: each branch's operators in turn, the junction,
    /// the operators after it, then the sink (a view without a junction
    /// numbers its operators as a plain chain).
    fn junction_slot(&self) -> usize {
        self.branches.iter().map(|b| b.operators.len()).sum()
    }

    fn tail_slot(&self) -> usize {
        self.junction_slot() + usize::from(self.junction.is_some())
    }

    /// Runs `messages` from `input` through every branch reading it, the
    /// junction and the rest of the chain; returns the view's changes.
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
        let rows: usize = messages.iter().map(Message::num_rows).sum();
        // Each message goes through the whole chain before the next one,
        // so what an operator makes of one batch (a HOP window's five rows
        // per event) is gone before the next batch is read.
        let mut through = Vec::new();
        let reading: Vec<usize> = (0..self.branches.len())
            .filter(|&index| self.branches[index].input == input)
            .collect();
        let Some((last, others)) = reading.split_last() else {
            return Ok(Vec::new());
        };
        for message in messages {
            // Only a table read by several branches needs copies.
            for &index in others {
                self.run_message(index, message.clone(), checkpoint, &mut through)?;
            }
            self.run_message(*last, message, checkpoint, &mut through)?;
        }
        self.finish(through, checkpoint, (rows, limited))
    }

    /// Finishes the work its operators handed to other threads; what they
    /// held back runs through the rest of the chain. Returns the view's
    /// changes.
    pub(super) fn flush(&mut self, checkpoint: &mut WriteBatch) -> Result<Vec<Message>> {
        let mut through = Vec::new();
        for index in 0..self.branches.len() {
            for position in 0..self.branches[index].operators.len() {
                let held = self.branches[index].operators[position].flush()?;
                if held.is_empty() {
                    continue;
                }
                let step = self.run_branch_from(index, position + 1, held, checkpoint)?;
                let step = self.run_junction(index, step, checkpoint)?;
                through.extend(self.run_tail(step, checkpoint)?);
            }
        }
        for position in 0..self.operators.len() {
            let held = self.operators[position].flush()?;
            if !held.is_empty() {
                through.extend(self.run_tail_from(position + 1, held, checkpoint)?);
            }
        }
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

    /// One message through branch `index`, the junction and the rest.
    fn run_message(
        &mut self,
        index: usize,
        message: Message,
        checkpoint: &mut WriteBatch,
        through: &mut Vec<Message>,
    ) -> Result<()> {
        let step = self.run_branch(index, message, checkpoint)?;
        let step = self.run_junction(index, step, checkpoint)?;
        through.extend(self.run_tail(step, checkpoint)?);
        Ok(())
    }

    fn run_branch(
        &mut self,
        index: usize,
        message: Message,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        self.run_branch_from(index, 0, vec![message], checkpoint)
    }

    /// `messages` through branch `index` from its operator `from` on.
    fn run_branch_from(
        &mut self,
        index: usize,
        from: usize,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let first_slot: usize = self.branches[..index]
            .iter()
            .map(|b| b.operators.len())
            .sum();
        let branch = &mut self.branches[index];
        run_chain(
            &mut branch.operators[from..],
            (self.id, first_slot + from),
            messages,
            checkpoint,
        )
    }

    fn run_junction(
        &mut self,
        branch: usize,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let slot = self.junction_slot();
        let Some(junction) = &mut self.junction else {
            return Ok(messages);
        };
        let mut output = Vec::new();
        for message in messages {
            if junction.on_message(branch, message, &mut output)?.is_some() {
                junction.checkpoint(&mut StateWriter::new(
                    operator_prefix(self.id, slot),
                    checkpoint,
                ));
            }
        }
        Ok(output)
    }

    fn run_tail(
        &mut self,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        self.run_tail_from(0, messages, checkpoint)
    }

    fn run_tail_from(
        &mut self,
        from: usize,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let first_slot = self.tail_slot() + from;
        run_chain(
            &mut self.operators[from..],
            (self.id, first_slot),
            messages,
            checkpoint,
        )
    }

    fn all_operators(&self) -> impl Iterator<Item = &Stage> {
        let branches = self.branches.iter().flat_map(|b| b.operators.iter());
        branches.chain(self.operators.iter())
    }

    fn measure_memory(&mut self) {
        let junction = self.junction.as_ref().map_or(0, Junction::memory_bytes);
        let bytes = junction
            + self
                .all_operators()
                .map(|o| o.memory_bytes())
                .sum::<usize>();
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
        operator_prefix(self.id, self.tail_slot() + self.operators.len())
    }

    /// Loads every operator's checkpointed state, `state_of(prefix)`
    /// returning an operator's entries.
    pub fn restore(
        &mut self,
        mut state_of: impl FnMut(&[u8]) -> Result<StateReader>,
    ) -> Result<()> {
        let mut slot = 0;
        for branch in &mut self.branches {
            for operator in &mut branch.operators {
                operator.restore(&state_of(&operator_prefix(self.id, slot))?)?;
                slot += 1;
            }
        }
        if let Some(junction) = &mut self.junction {
            junction.restore(&state_of(&operator_prefix(self.id, slot))?)?;
            slot += 1;
        }
        for operator in &mut self.operators {
            operator.restore(&state_of(&operator_prefix(self.id, slot))?)?;
            slot += 1;
        }
        let sink = state_of(&self.sink_prefix())?;
        let late = sink.get(LATE_ROWS).and_then(decode_i64).unwrap_or(0);
        self.sink
            .operator()
            .result()
            .late_rows()
            .store(late as u64, Ordering::Relaxed);
        Ok(())
    }
}

struct StateTarget<'a> {
    view_id: u64,
    operator: usize,
    batch: &'a mut WriteBatch,
}

/// Runs `messages` through `operators` in turn; the first has checkpoint
/// slot `slot` of view `view_id`, the next one more, and so on.
fn run_chain(
    operators: &mut [Stage],
    (view_id, slot): (u64, usize),
    messages: Vec<Message>,
    checkpoint: &mut WriteBatch,
) -> Result<Vec<Message>> {
    let mut step = messages;
    for (index, operator) in operators.iter_mut().enumerate() {
        if step.is_empty() {
            break;
        }
        let target = StateTarget {
            view_id,
            operator: slot + index,
            batch: checkpoint,
        };
        step = run_with_checkpoints(operator, step, target)?;
    }
    Ok(step)
}

/// Like `run`, but a barrier first makes the operator write its state.
fn run_with_checkpoints(
    operator: &mut Stage,
    messages: Vec<Message>,
    target: StateTarget,
) -> Result<Output> {
    if !messages.iter().any(|m| matches!(m, Message::Barrier(_))) {
        return operator.run(messages);
    }
    let mut output = Vec::new();
    for message in messages {
        if let Message::Barrier(epoch) = message {
            let prefix = operator_prefix(target.view_id, target.operator);
            operator.checkpoint(&mut StateWriter::new(prefix, target.batch))?;
            operator.on_barrier(epoch, &mut output)?;
        } else {
            output.extend(operator.run(vec![message])?);
        }
    }
    Ok(output)
}

fn stages(operators: Vec<Box<dyn Operator>>) -> Vec<Stage> {
    operators.into_iter().map(Stage::new).collect()
}
