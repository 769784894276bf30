//! The counted layout of a view's rows: for views whose rows are retracted
//! but have no key (a ranking that hides its rank, a join, a UNION ALL of
//! updating inputs), each distinct row with its count, as sorted runs of
//! count changes (`runs`, `Combine::Sum`). A statement's changes are summed
//! in memory per row and written as one run when it is sealed, as the
//! keyed layout does; a row's count is the sum of its entries in every run,
//! and merges add them up (dropping rows whose changes cancel). Nothing is
//! read when a row changes — the multiset layout (`multiset`) read and
//! rewrote a stored entry per row — so a commit is a few large writes
//! (docs/decisions.md).

use super::keyed::STAGED_ENTRY_BYTES;
use super::ViewResult;
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::message::Chunk;

impl ViewResult {
    /// Stages a chunk's changes in memory (written when sealed, or as a
    /// run of their own once they outgrow `STAGED_BYTES`).
    pub(super) fn apply_counted(&self, chunk: &Chunk) -> Result<WriteBatch> {
        let rows = self.converter.convert_columns(chunk.rows.columns())?;
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if staged.keyed.sealed.is_some() {
            return Err(WeirError::internal(
                "a counted view took changes after its statement was sealed",
            ));
        }
        staged.epoch = self.readers.for_write().3;
        let mut total = 0;
        let keyed = &mut staged.keyed;
        for index in 0..chunk.num_rows() {
            let diff = chunk.diff(index);
            total += diff;
            let row = rows.row(index).data();
            match keyed.counts.get_mut(row) {
                Some(count) => *count += diff,
                None => {
                    keyed.counts.insert(row.to_vec(), diff);
                    keyed.bytes += row.len() + STAGED_ENTRY_BYTES;
                }
            }
        }
        staged.total += total;
        self.spill_when_big(&mut staged.keyed)
    }
}
