//! The contract between a table's commits and the dataflow: a group of
//! writes is pushed through the views that read the tables before it
//! commits, and their changes commit with it. Tables (connectors) call it;
//! the dataflow implements it.

use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::Message;

/// The writes of one commit, in order, each read chunk by chunk as the
/// views consume them.
pub trait WriteGroup {
    fn writes(&self) -> usize;
    /// The table write `write` goes to.
    fn table(&self, write: usize) -> &str;
    /// The next messages of write `write`; None once it has no more.
    fn next_messages(&mut self, write: usize) -> Option<Result<Vec<Message>>>;
    /// Write `write` reaches no view: its rows are not read, but a write
    /// that is still arriving must be received to its end.
    fn skip(&mut self, _write: usize) -> Result<()> {
        Ok(())
    }
}

/// Why a group did not commit: which write failed (None: all of them).
#[derive(Debug)]
pub struct GroupFailure {
    pub write: Option<usize>,
    pub error: WeirError,
}

/// Told about every group of writes before it commits; returns writes
/// (e.g. view changes) to commit atomically with it.
pub trait AppendObserver: Send + Sync {
    /// Pushes the group's writes, in order, through what observes them and
    /// calls `commit` with the combined writes while still holding its
    /// lock, so a checkpoint never sees state or offsets the store does
    /// not have.
    fn append_and_commit(
        &self,
        group: &mut dyn WriteGroup,
        commit: &mut dyn FnMut(WriteBatch) -> Result<()>,
    ) -> std::result::Result<(), GroupFailure>;
    /// Something failed part-way: observed state is ahead.
    fn on_commit_failed(&self);
    /// Whether any view reads `table`; None when that cannot be told
    /// without waiting (a group is being committed).
    fn reads_now(&self, table: &str) -> Option<bool>;
}
