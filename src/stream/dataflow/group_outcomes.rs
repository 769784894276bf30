//! How a write group ends for the views it reached — committed (their
//! operators forget their undo) or failed (they undo it) — and views taken
//! out as failed when their state does not restore or replay.

use super::Dataflow;
use crate::error::{sqlstate, Result, WeirError};

impl Dataflow {
    /// The write group committed: the views it reached forget how to undo
    /// it.
    pub fn commit_group(&mut self) {
        for id in std::mem::take(&mut self.touched) {
            if let Some(view) = self.views.get_mut(&id) {
                view.commit();
            }
        }
    }

    /// The write group failed: its staged view rows are discarded and the
    /// views it reached undo what it did to their operators, in proportion
    /// to what it did. Only if a view cannot (an operator without an undo
    /// yet) are the views left to be rebuilt (`is_broken`).
    pub fn roll_back(&mut self) {
        self.discard();
        for id in std::mem::take(&mut self.touched) {
            let Some(view) = self.views.get_mut(&id) else {
                continue;
            };
            match view.rollback() {
                Ok(true) => {}
                Ok(false) => self.broken = true,
                Err(error) => {
                    tracing::error!(view = %view.name, %error.message, "a failed write could not be undone");
                    self.broken = true;
                }
            }
        }
    }

    /// Restores every view's operators from checkpointed state; a view
    /// whose state does not restore is taken out as failed, with the views
    /// reading it, and the others go on.
    pub fn restore(
        &mut self,
        mut state_of: impl FnMut(&[u8]) -> Result<crate::stream::checkpoint::StateReader>,
    ) {
        let ids: Vec<u64> = self.views.keys().copied().collect();
        for id in ids {
            let Some(view) = self.views.get_mut(&id) else {
                continue;
            };
            if let Err(error) = view.restore(&mut state_of) {
                self.fail_view(id, error);
            }
        }
    }

    /// Takes view `id` out as failed because of `error`, and every view
    /// reading it (their state would follow rows it no longer changes).
    pub(super) fn fail_view(&mut self, id: u64, error: WeirError) {
        let Some(view) = self.views.remove(&id) else {
            return;
        };
        let late = format!("{}_late", view.name);
        let readers: Vec<u64> = self
            .views
            .iter()
            .filter(|(_, reader)| reader.inputs.iter().any(|i| *i == view.name || *i == late))
            .map(|(id, _)| *id)
            .collect();
        for reader in readers {
            let reason = format!("it reads materialized view \"{}\", which failed", view.name);
            self.fail_view(reader, WeirError::new(sqlstate::INTERNAL_ERROR, reason));
        }
        self.failed.push((view.name, error));
    }

    /// The views taken out as failed since the last call.
    pub fn take_failed(&mut self) -> Vec<(String, WeirError)> {
        std::mem::take(&mut self.failed)
    }
}
