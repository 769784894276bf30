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
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    phase: Phase,
    /// Counts the session's statements: work that outlives its statement
    /// (a view's backfill runs on its own thread) must not commit once a
    /// later statement has started, whatever the phase says by then.
    statement: u64,
}

impl CommitGate {
    /// A new statement begins: cancels of earlier ones no longer apply.
    pub fn start_statement(&self) {
        let mut state = self.lock();
        state.phase = Phase::Running;
        state.statement += 1;
    }

    /// The running statement's number, for `check` and `begin_commit_of`.
    pub fn statement(&self) -> u64 {
        self.lock().statement
    }

    /// Fails with 57014 once statement `statement` is cancelled (or over:
    /// a later one started); long work calls it as it goes, so a cancel
    /// stops the work and not just the reply.
    pub fn check(&self, statement: u64) -> Result<()> {
        let state = self.lock();
        if state.phase == Phase::Cancelled || state.statement != statement {
            return Err(cancelled());
        }
        Ok(())
    }

    /// `begin_commit` for statement `statement`, which may be over.
    pub fn begin_commit_of(&self, statement: u64) -> Result<()> {
        let mut state = self.lock();
        if state.phase == Phase::Cancelled || state.statement != statement {
            return Err(cancelled());
        }
        state.phase = Phase::Committing;
        Ok(())
    }

    /// Asks to cancel the running statement; false when its write is
    /// already committing (the cancel is then ignored).
    pub fn cancel(&self) -> bool {
        let mut state = self.lock();
        if state.phase == Phase::Committing {
            return false;
        }
        state.phase = Phase::Cancelled;
        true
    }

    /// A write's point of no return; fails with 57014 once cancelled.
    pub fn begin_commit(&self) -> Result<()> {
        let mut state = self.lock();
        if state.phase == Phase::Cancelled {
            return Err(cancelled());
        }
        state.phase = Phase::Committing;
        Ok(())
    }

    /// The write committed (or failed): cancels apply to what follows.
    pub fn end_commit(&self) {
        let mut state = self.lock();
        if state.phase == Phase::Committing {
            state.phase = Phase::Running;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn cancelled() -> WeirError {
    WeirError::new(
        sqlstate::QUERY_CANCELED,
        "canceling statement due to user request",
    )
    .with_hint("Nothing of the statement was applied.")
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

    #[test]
    fn work_that_outlives_its_statement_never_commits() {
        let gate = CommitGate::default();
        gate.start_statement();
        let first = gate.statement();
        gate.check(first).unwrap();
        assert!(gate.cancel());
        assert!(gate.check(first).is_err());
        // The client moved on before the work noticed its cancel.
        gate.start_statement();
        assert!(gate.check(first).is_err());
        assert!(gate.begin_commit_of(first).is_err());
        gate.begin_commit_of(gate.statement()).unwrap();
    }
}
