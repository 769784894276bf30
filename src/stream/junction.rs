//! Where a view's branches meet: a UNION ALL (`UnionOperator`) or a join
//! of two (`JoinOperator`). Either aligns the branches' barriers; the
//! pipeline checkpoints it when a barrier has come from every branch.

use super::checkpoint::{StateReader, StateWriter};
use super::message::Message;
use super::operator::Output;
use super::operators::{JoinOperator, UnionOperator};
use super::spill::SpillSpace;
use crate::error::Result;

pub enum Junction {
    Union(Box<UnionOperator>),
    Join(Box<JoinOperator>),
}

impl Junction {
    /// A message from `branch`; what passes goes to `output`. Returns the
    /// epoch of a barrier that has now come from every branch.
    pub fn on_message(
        &mut self,
        branch: usize,
        message: Message,
        output: &mut Output,
    ) -> Result<Option<u64>> {
        match self {
            Junction::Union(union) => union.on_message(branch, message, output),
            Junction::Join(join) => join.on_message(branch, message, output),
        }
    }

    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        match self {
            Junction::Union(union) => {
                union.checkpoint(state);
                Ok(())
            }
            Junction::Join(join) => join.checkpoint(state),
        }
    }

    /// Gives a join its key space to spill to.
    pub fn attach(&mut self, space: SpillSpace) {
        if let Junction::Join(join) = self {
            join.attach(space);
        }
    }

    pub fn restore(&mut self, state: &StateReader) -> Result<()> {
        match self {
            Junction::Union(union) => {
                union.restore(state);
                Ok(())
            }
            Junction::Join(join) => join.restore(state),
        }
    }

    pub fn commit(&mut self) {
        match self {
            Junction::Union(union) => union.commit(),
            Junction::Join(join) => join.commit(),
        }
    }

    /// Undoes the failed write group (see `Operator::rollback`).
    pub fn rollback(&mut self) -> Result<bool> {
        match self {
            Junction::Union(union) => Ok(union.rollback()),
            Junction::Join(join) => join.rollback(),
        }
    }

    pub fn memory_bytes(&self) -> usize {
        match self {
            Junction::Union(_) => 0,
            Junction::Join(join) => join.memory_bytes(),
        }
    }
}
