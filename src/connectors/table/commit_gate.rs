//! Whether a statement's write commits or is cancelled, decided once.

use std::sync::Mutex;

use crate::error::{sqlstate, Result, WeirError};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    #[default]
    Running,
    Cancelled,
    Committing,
}

/// One per session. A cancel request or a statement timeout stops a write
/// only before its commit starts; a commit that has started completes (in
/// its own task, even if the client goes away) and the statement reports
/// success — as Postgres ignores a cancel during COMMIT. So a statement is
/// either applied whole and acknowledged, or not applied and reported
/// cancelled, never applied and reported cancelled.
#[derive(Debug, Default)]
pub struct CommitGate {
    phase: Mutex<Phase>,
}

impl CommitGate {
    /// A new statement begins: cancels of earlier ones no longer apply.
    pub fn start_statement(&self) {
        *self.lock() = Phase::Running;
    }

    /// Asks to cancel the running statement; false when its write is
    /// already committing (the cancel is then ignored).
    pub fn cancel(&self) -> bool {
        let mut phase = self.lock();
        if *phase == Phase::Committing {
            return false;
        }
        *phase = Phase::Cancelled;
        true
    }

    /// A write's point of no return; fails with 57014 once cancelled.
    pub fn begin_commit(&self) -> Result<()> {
        let mut phase = self.lock();
        if *phase == Phase::Cancelled {
            return Err(WeirError::new(
                sqlstate::QUERY_CANCELED,
                "canceling statement due to user request",
            )
            .with_hint("Nothing of the statement was applied."));
        }
        *phase = Phase::Committing;
        Ok(())
    }

    /// The write committed (or failed): cancels apply to what follows.
    pub fn end_commit(&self) {
        let mut phase = self.lock();
        if *phase == Phase::Committing {
            *phase = Phase::Running;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_before_the_commit_stops_it_and_one_during_it_is_ignored() {
        let gate = CommitGate::default();
        assert!(gate.cancel());
        assert!(gate.begin_commit().is_err(), "cancelled before the commit");
        gate.start_statement();
        gate.begin_commit().unwrap();
        assert!(!gate.cancel(), "a committing write is not cancelled");
        gate.end_commit();
        assert!(gate.cancel(), "the next statement can be cancelled");
    }
}
