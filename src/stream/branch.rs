//! A view's operators as a tree: a branch is a chain of operators from a
//! source, or from where other branches meet at a junction (a union, or a
//! join of two). Runs messages through it, depth first, and numbers the
//! operators' checkpoint slots in that order.

use super::checkpoint::{operator_prefix, StateReader, StateWriter};
use super::junction::Junction;
use super::message::Message;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::operator::{Operator, Output, Stage};
use super::spill::{operator_space, SpillSpace};
use crate::error::Result;
use crate::state::{StateStore, WriteBatch};

/// The operators from one source, or from where other branches meet, to
/// the next junction (or the sink).
pub struct Branch {
    pub input: String,
    meeting: Option<Box<Meeting>>,
    operators: Vec<Stage>,
    /// The checkpoint slot of its first operator.
    first_slot: usize,
}

/// Branches and the junction where they meet.
struct Meeting {
    branches: Vec<Branch>,
    junction: Junction,
    slot: usize,
}

impl Branch {
    /// A chain from the relation `input`.
    pub fn new(input: String, operators: Vec<Box<dyn Operator>>) -> Self {
        Branch {
            input,
            meeting: None,
            operators: stages(operators),
            first_slot: 0,
        }
    }

    /// A chain from where `branches` meet at `junction`.
    pub fn meeting(
        branches: Vec<Branch>,
        junction: Junction,
        operators: Vec<Box<dyn Operator>>,
    ) -> Self {
        Branch {
            input: String::new(),
            meeting: Some(Box::new(Meeting {
                branches,
                junction,
                slot: 0,
            })),
            operators: stages(operators),
            first_slot: 0,
        }
    }

    /// Numbers the checkpoint slots depth first: each inner branch's
    /// operators in turn, the junction, then its own operators (a view
    /// with one junction numbers them as it always has).
    pub(super) fn number(&mut self, next: &mut usize) {
        if let Some(meeting) = &mut self.meeting {
            for branch in &mut meeting.branches {
                branch.number(next);
            }
            meeting.slot = *next;
            *next += 1;
        }
        self.first_slot = *next;
        *next += self.operators.len();
    }

    pub(super) fn inputs(&self, inputs: &mut Vec<String>) {
        match &self.meeting {
            Some(meeting) => meeting.branches.iter().for_each(|b| b.inputs(inputs)),
            None if !inputs.contains(&self.input) => inputs.push(self.input.clone()),
            None => {}
        }
    }

    pub(super) fn reads(&self, input: &str) -> bool {
        match &self.meeting {
            Some(meeting) => meeting.branches.iter().any(|b| b.reads(input)),
            None => self.input == input,
        }
    }

    pub(super) fn clocked(&self) -> bool {
        self.operators.iter().any(Stage::clocked)
            || self
                .meeting
                .as_ref()
                .is_some_and(|meeting| meeting.branches.iter().any(Branch::clocked))
    }

    pub(super) fn memory_bytes(&self) -> usize {
        let own: usize = self.operators.iter().map(Stage::memory_bytes).sum();
        let meeting = self.meeting.as_ref().map_or(0, |meeting| {
            meeting.junction.memory_bytes()
                + meeting
                    .branches
                    .iter()
                    .map(Branch::memory_bytes)
                    .sum::<usize>()
        });
        own + meeting
    }

    /// One message from `input` (which it reads) through the branch.
    pub(super) fn run(
        &mut self,
        view_id: u64,
        input: &str,
        message: Message,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let messages = match &mut self.meeting {
            Some(meeting) => meeting.run(view_id, input, message, checkpoint)?,
            None => vec![message],
        };
        self.run_from(view_id, 0, messages, checkpoint)
    }

    /// `messages` through its operators from `from` on.
    fn run_from(
        &mut self,
        view_id: u64,
        from: usize,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        run_chain(
            &mut self.operators[from..],
            (view_id, self.first_slot + from),
            messages,
            checkpoint,
        )
    }

    /// Finishes the work its operators (and those of the branches meeting
    /// at its start) handed to other threads; what they held back runs on.
    pub(super) fn flush(
        &mut self,
        view_id: u64,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let mut through = Vec::new();
        if let Some(meeting) = &mut self.meeting {
            let held = meeting.flush(view_id, checkpoint)?;
            if !held.is_empty() {
                through.extend(self.run_from(view_id, 0, held, checkpoint)?);
            }
        }
        for position in 0..self.operators.len() {
            let held = self.operators[position].flush()?;
            if !held.is_empty() {
                through.extend(self.run_from(view_id, position + 1, held, checkpoint)?);
            }
        }
        Ok(through)
    }

    /// The write group committed: every operator forgets its undo.
    pub(super) fn commit(&mut self) {
        if let Some(meeting) = &mut self.meeting {
            meeting.branches.iter_mut().for_each(Branch::commit);
            meeting.junction.commit();
        }
        self.operators.iter_mut().for_each(Stage::commit);
    }

    /// The write group failed: every operator undoes it; false when one
    /// could not (each is still asked, so none keeps a stale undo).
    pub(super) fn rollback(&mut self) -> Result<bool> {
        let mut undone = true;
        if let Some(meeting) = &mut self.meeting {
            for branch in &mut meeting.branches {
                undone &= branch.rollback()?;
            }
            undone &= meeting.junction.rollback()?;
        }
        for operator in &mut self.operators {
            undone &= operator.rollback()?;
        }
        Ok(undone)
    }

    /// Gives each operator its key space to spill to.
    pub(super) fn attach(
        &mut self,
        view_id: u64,
        store: &Arc<dyn StateStore>,
        budget_bytes: &Arc<AtomicUsize>,
    ) {
        if let Some(meeting) = &mut self.meeting {
            for branch in &mut meeting.branches {
                branch.attach(view_id, store, budget_bytes);
            }
            meeting.junction.attach(SpillSpace {
                store: store.clone(),
                space: operator_space(view_id, meeting.slot),
                budget_bytes: budget_bytes.clone(),
            });
        }
        for (index, operator) in self.operators.iter_mut().enumerate() {
            operator.attach(SpillSpace {
                store: store.clone(),
                space: operator_space(view_id, self.first_slot + index),
                budget_bytes: budget_bytes.clone(),
            });
        }
    }

    pub(super) fn restore(
        &mut self,
        view_id: u64,
        state_of: &mut dyn FnMut(&[u8]) -> Result<StateReader>,
    ) -> Result<()> {
        if let Some(meeting) = &mut self.meeting {
            for branch in &mut meeting.branches {
                branch.restore(view_id, state_of)?;
            }
            let prefix = operator_prefix(view_id, meeting.slot);
            meeting.junction.restore(&state_of(&prefix)?)?;
        }
        for (index, operator) in self.operators.iter_mut().enumerate() {
            operator.restore(&state_of(&operator_prefix(
                view_id,
                self.first_slot + index,
            ))?)?;
        }
        Ok(())
    }
}

impl Meeting {
    /// One message from `input` through every branch reading it, then the
    /// junction; returns what passed the junction.
    fn run(
        &mut self,
        view_id: u64,
        input: &str,
        message: Message,
        checkpoint: &mut WriteBatch,
    ) -> Result<Vec<Message>> {
        let reading: Vec<usize> = (0..self.branches.len())
            .filter(|&index| self.branches[index].reads(input))
            .collect();
        let mut output = Vec::new();
        let Some((last, others)) = reading.split_last() else {
            return Ok(output);
        };
        // Only a relation read by several branches needs copies.
        for &index in others {
            let step = self.branches[index].run(view_id, input, message.clone(), checkpoint)?;
            self.meet(view_id, index, step, checkpoint, &mut output)?;
        }
        let step = self.branches[*last].run(view_id, input, message, checkpoint)?;
        self.meet(view_id, *last, step, checkpoint, &mut output)?;
        Ok(output)
    }

    /// `messages` from branch `branch` into the junction, which writes its
    /// state when a barrier has come from every branch.
    fn meet(
        &mut self,
        view_id: u64,
        branch: usize,
        messages: Vec<Message>,
        checkpoint: &mut WriteBatch,
        output: &mut Output,
    ) -> Result<()> {
        for message in messages {
            if self.junction.on_message(branch, message, output)?.is_some() {
                let prefix = operator_prefix(view_id, self.slot);
                self.junction
                    .checkpoint(&mut StateWriter::new(prefix, checkpoint))?;
            }
        }
        Ok(())
    }

    fn flush(&mut self, view_id: u64, checkpoint: &mut WriteBatch) -> Result<Vec<Message>> {
        let mut output = Vec::new();
        for index in 0..self.branches.len() {
            let held = self.branches[index].flush(view_id, checkpoint)?;
            self.meet(view_id, index, held, checkpoint, &mut output)?;
        }
        Ok(output)
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
