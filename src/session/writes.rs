//! A session's writes: INSERT (a VALUES list directly, anything else
//! through DataFusion's plan), under `statement_timeout`, with the views
//! rebuilt when a write fails.

use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::collect;

use super::planning::Purpose;
use super::results::count_of;
use super::{insert_values, Outcome, Session};
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};

impl Session {
    pub(super) async fn execute_dml(&self, dml: DmlStatement) -> Result<Outcome> {
        if !matches!(dml.op, WriteOp::Insert(_)) {
            return Err(
                WeirError::unsupported(format!("{} is not supported", dml.op.name()))
                    .with_hint("weir tables are append-only: INSERT or COPY rows into them."),
            );
        }
        let (state, task) = self.planning(Purpose::Writes)?;
        let rows = match insert_values::values_insert(&dml, &state)? {
            Some((table, rows)) => {
                let gate = self.gate.clone();
                let write = async move { table.append(vec![rows], Some(gate.as_ref())).await };
                self.run_write(write).await?
            }
            None => {
                let physical = state.create_physical_plan(&LogicalPlan::Dml(dml)).await?;
                let write = collect(physical, task);
                count_of(&self.run_write(write).await?)
            }
        };
        self.note_write(rows);
        Ok(Outcome::Done(CommandDone::new("INSERT").with_rows(rows)))
    }

    /// Runs a write under `statement_timeout`; a failed one gets the views
    /// rebuilt.
    async fn run_write<T, E: Into<WeirError>>(
        &self,
        write: impl std::future::Future<Output = std::result::Result<T, E>>,
    ) -> Result<T> {
        let timeout = self.settings().statement_timeout()?;
        let outcome = match timeout {
            Some(limit) => self.within_timeout(write, limit).await,
            None => write.await.map_err(Into::into),
        };
        if outcome.is_err() {
            self.engine.repair_views().await;
        }
        outcome
    }

    /// Runs a write, cancelling it at `limit` unless it is already
    /// committing (it then finishes and counts as done).
    async fn within_timeout<T, E: Into<WeirError>>(
        &self,
        write: impl std::future::Future<Output = std::result::Result<T, E>>,
        limit: std::time::Duration,
    ) -> Result<T> {
        tokio::pin!(write);
        tokio::select! {
            outcome = &mut write => return outcome.map_err(Into::into),
            () = tokio::time::sleep(limit) => {}
        }
        if !self.gate.cancel() {
            return write.await.map_err(Into::into);
        }
        Err(WeirError::new(
            crate::error::sqlstate::QUERY_CANCELED,
            "canceling statement due to statement timeout",
        )
        .with_hint(
            "Nothing of the statement was applied. SET statement_timeout = 0 turns the limit off.",
        ))
    }

    pub(super) fn note_write(&self, rows: u64) {
        let mut transaction = self.transaction();
        if transaction.open {
            transaction.rows_written += rows;
        }
    }
}
