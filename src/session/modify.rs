//! UPDATE and DELETE on a table that takes updates (a primary key, no
//! watermark, not APPEND ONLY). DataFusion plans which rows and what new
//! values; the statement then holds the table's writes off (so it reads
//! every earlier write and no later one slips in between), reads the old
//! rows and logs them as retractions with the new rows as inserts, in one
//! atomic commit that also updates every view reading the table.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Cast, DmlStatement, Expr, LogicalPlan, Projection, WriteOp};
use datafusion::physical_plan::collect;

use super::planning::Purpose;
use super::{Outcome, Session};
use crate::connectors::table::{BulkWrite, DurableTable, TableChanges, TableLog};
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};

impl Session {
    /// Runs an UPDATE or DELETE.
    pub(super) async fn execute_modify(&self, dml: DmlStatement) -> Result<Outcome> {
        let verb = match dml.op {
            WriteOp::Update => "UPDATE",
            _ => "DELETE",
        };
        let log = updatable_log(&dml, verb)?;
        self.refuse_after_block_writes(&log, verb)?;
        let (state, task) = self.planning(Purpose::Writes)?;
        let write = async {
            // Held from the read to the commit: no write comes in between.
            let write = BulkWrite::begin(log.clone()).await;
            let plan = match dml.op {
                WriteOp::Update => old_and_new(&dml.input, &log.schema())?,
                _ => dml.input.as_ref().clone(),
            };
            let physical = state.create_physical_plan(&plan).await?;
            let batches = collect(physical, task).await?;
            let changes = changes(&log, &batches, dml.op == WriteOp::Update)?;
            let count = changes.num_rows() as u64 / if verb == "UPDATE" { 2 } else { 1 };
            self.apply_changes(&log, write, changes).await?;
            Ok::<u64, WeirError>(count)
        };
        let count = self.run_write(write).await?;
        Ok(Outcome::Done(CommandDone::new(verb).with_rows(count)))
    }

    /// Keeps `changes` for COMMIT inside a transaction block, or commits
    /// them through `write` (which has held the table's writes off).
    pub(super) async fn apply_changes(
        &self,
        log: &Arc<TableLog>,
        mut write: BulkWrite,
        changes: TableChanges,
    ) -> Result<()> {
        if self.pending.keep_changes(log, changes.clone())? {
            return Ok(());
        }
        write.add_changes(changes)?;
        write.commit(Some(self.gate.as_ref())).await?;
        Ok(())
    }

    /// Inside a transaction block a statement reads committed rows only,
    /// so it must not follow the block's own writes to the table.
    pub(super) fn refuse_after_block_writes(&self, log: &TableLog, verb: &str) -> Result<()> {
        if !self.pending.has_writes_for(log.id()) {
            return Ok(());
        }
        Err(WeirError::unsupported(format!(
            "{verb} of \"{}\" after another write to it in the same transaction block",
            log.name()
        ))
        .with_hint("COMMIT the earlier writes first: a block's statements read committed rows."))
    }
}

/// The log of the table a DML statement writes, if it takes updates.
pub(super) fn updatable_log(dml: &DmlStatement, verb: &str) -> Result<Arc<TableLog>> {
    let provider = source_as_provider(&dml.target)?;
    let Some(table) = provider.as_ref().downcast_ref::<DurableTable>() else {
        return Err(WeirError::unsupported(format!("{verb} of a view"))
            .with_hint("Change the tables the view reads."));
    };
    let log = table.log().clone();
    if log.accepts_updates() {
        return Ok(log);
    }
    let hint = match log.primary_key() {
        Some(_) => "Tables with a WATERMARK or APPEND ONLY are append-only streams.",
        None => "Declare a PRIMARY KEY: tables without one are append-only.",
    };
    Err(WeirError::unsupported(format!(
        "{verb} of \"{}\": the table is append-only",
        log.name()
    ))
    .with_hint(hint))
}

/// An UPDATE's input (new values over the matched rows) widened to carry
/// the old row first: `columns` old values, then the new ones.
fn old_and_new(input: &LogicalPlan, table: &Schema) -> Result<LogicalPlan> {
    let columns = table.fields().len();
    let LogicalPlan::Projection(projection) = input else {
        return Err(WeirError::internal("an UPDATE plan without its projection"));
    };
    let source = projection.input.clone();
    let old = source
        .schema()
        .columns()
        .into_iter()
        .take(columns)
        .enumerate()
        .map(|(index, column)| Expr::Column(column).alias(format!("__weir_old_{index}")));
    // Each new value cast to its column's type: planned as it was typed
    // before analysis (sql::literal_types retypes literals), a value can
    // reach the table as another integer width otherwise.
    let new =
        projection
            .expr
            .iter()
            .zip(table.fields())
            .enumerate()
            .map(|(index, (expr, field))| {
                let value = Expr::Cast(Cast::new(
                    Box::new(expr.clone().unalias()),
                    field.data_type().clone(),
                ));
                value.alias(format!("__weir_new_{index}"))
            });
    let exprs = old.chain(new).collect();
    Ok(LogicalPlan::Projection(Projection::try_new(exprs, source)?))
}

/// The statement's output as changes to `log`: each old row retracted,
/// and for an UPDATE its new row inserted.
fn changes(log: &TableLog, batches: &[RecordBatch], update: bool) -> Result<TableChanges> {
    let schema = log.schema();
    let width = schema.fields().len();
    let mut old = Vec::with_capacity(batches.len());
    let mut new = Vec::with_capacity(batches.len());
    for batch in batches {
        old.push(RecordBatch::try_new(
            schema.clone(),
            batch.columns()[..width].to_vec(),
        )?);
        if update {
            let values = not_null(log, batch.project(&(width..2 * width).collect::<Vec<_>>())?)?;
            new.push(RecordBatch::try_new(
                schema.clone(),
                values.columns().to_vec(),
            )?);
        }
    }
    let old = datafusion::arrow::compute::concat_batches(&schema, &old)?;
    let new = datafusion::arrow::compute::concat_batches(&schema, &new)?;
    log.replacing(&old, update.then_some(&new))
}

/// NOT NULL checked as DataFusion's insert does, for the same error.
pub(super) fn not_null(log: &TableLog, rows: RecordBatch) -> Result<RecordBatch> {
    log.check_not_null(rows)
}
