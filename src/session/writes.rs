//! A session's writes: INSERT (a prepared VALUES list through its
//! compiled template, any VALUES list directly, anything else through
//! DataFusion's plan), under `statement_timeout`, with the views
//! rebuilt when a write fails.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::collect;

use super::insert_template::InsertTemplate;
use super::planning::Purpose;
use super::results::count_of;
use super::{insert_values, Outcome, Prepared, Session};
use crate::connectors::table::TableLog;
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};

impl Session {
    pub(super) async fn execute_dml(&self, dml: DmlStatement) -> Result<Outcome> {
        match dml.op {
            WriteOp::Update | WriteOp::Delete => return self.execute_modify(dml).await,
            WriteOp::Insert(_) => {}
            _ => {
                return Err(
                    WeirError::unsupported(format!("{} is not supported", dml.op.name()))
                        .with_hint("Use INSERT, UPDATE or DELETE."),
                )
            }
        }
        let (state, task) = self.planning(Purpose::Writes)?;
        if let Some((table, rows)) = insert_values::values_insert(&dml, &state)? {
            return self.insert_rows(table, rows).await;
        }
        let physical = state.create_physical_plan(&LogicalPlan::Dml(dml)).await?;
        let write = collect(physical, task);
        let rows = count_of(&self.run_write(write).await?);
        Ok(Outcome::Done(CommandDone::new("INSERT").with_rows(rows)))
    }

    /// A prepared INSERT … VALUES through its compiled template; None when
    /// the statement does not compile to one.
    pub(super) async fn insert_prepared(
        &self,
        prepared: &Prepared,
        plan: &LogicalPlan,
        values: &ParamValues,
    ) -> Result<Option<Outcome>> {
        let LogicalPlan::Dml(dml) = plan else {
            return Ok(None);
        };
        let (state, _) = self.planning(Purpose::Writes)?;
        let generation = self.planning_cache().generation();
        let compile = || InsertTemplate::compile(dml, &state, &prepared.parameter_types);
        let template = prepared.insert_template.get(generation, compile)?;
        let Some(template) = template.filter(|template| template.fits(values)) else {
            return Ok(None);
        };
        let rows = template.rows(values)?;
        Ok(Some(
            self.insert_rows(template.table().clone(), rows).await?,
        ))
    }

    async fn insert_rows(&self, table: Arc<TableLog>, rows: RecordBatch) -> Result<Outcome> {
        let count = rows.num_rows() as u64;
        if self.pending.keep(&table, rows.clone())? {
            return Ok(Outcome::Done(CommandDone::new("INSERT").with_rows(count)));
        }
        let gate = self.gate.clone();
        let write = async move { table.append(vec![rows], Some(gate.as_ref())).await };
        let rows = self.run_write(write).await?;
        Ok(Outcome::Done(CommandDone::new("INSERT").with_rows(rows)))
    }

    /// Runs a write under `statement_timeout`; a failed one gets the views
    /// rebuilt.
    pub(super) async fn run_write<T, E: Into<WeirError>>(
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

    /// Runs `work` that stops itself once the session's gate is cancelled
    /// (a view's backfill), cancelling it at `statement_timeout` and waiting
    /// for it to stop: it either committed whole or left nothing.
    pub(super) async fn within_statement_timeout<T>(
        &self,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(limit) = self.settings().statement_timeout()? else {
            return work.await;
        };
        tokio::pin!(work);
        tokio::select! {
            outcome = &mut work => return outcome,
            () = tokio::time::sleep(limit) => {}
        }
        let cancelled = self.gate.cancel();
        match work.await {
            Err(error) if cancelled && error.code == crate::error::sqlstate::QUERY_CANCELED => {
                Err(timed_out())
            }
            outcome => outcome,
        }
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
        Err(timed_out())
    }
}

pub(super) fn timed_out() -> WeirError {
    WeirError::new(
        crate::error::sqlstate::QUERY_CANCELED,
        "canceling statement due to statement timeout",
    )
    .with_hint(
        "Nothing of the statement was applied. SET statement_timeout = 0 turns the limit off.",
    )
}
