//! `INSERT … ON CONFLICT DO NOTHING | DO UPDATE SET … [WHERE …]`.
//! The statement is planned as a plain INSERT; its rows are then matched
//! against the primary key with the table's writes held off: DO NOTHING
//! drops the rows whose key is taken (by a committed row or an earlier row
//! of the statement), DO UPDATE replaces each conflicting row with the SET
//! values, computed over the existing row (`t.col`) and the proposed one
//! (`excluded.col`) by DataFusion, as an UPDATE would.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{
    DmlStatement, EmptyRelation, Expr, ExprSchemable, LogicalPlan, Projection,
};
use datafusion::physical_plan::collect;
use datafusion::sql::sqlparser::ast;

use super::insert_values::{evaluate, values_insert};
use super::modify::{not_null, updatable_log};
use super::planning::Purpose;
use super::{Outcome, Session};
use crate::connectors::table::{BulkWrite, DurableTable, TableChanges, TableLog};
use crate::engine::CommandDone;
use crate::error::{sqlstate, Result, WeirError};

/// The statement without its ON CONFLICT clause, and the clause.
pub fn without_on_conflict(
    mut statement: Box<ast::Statement>,
) -> Result<(Box<ast::Statement>, Option<ast::OnConflict>)> {
    let ast::Statement::Insert(insert) = statement.as_mut() else {
        return Ok((statement, None));
    };
    match insert.on.take() {
        None => Ok((statement, None)),
        Some(ast::OnInsert::OnConflict(on_conflict)) => {
            if on_conflict.to_string().contains('$') {
                return Err(WeirError::unsupported("parameters in ON CONFLICT")
                    .with_hint("Use excluded.<column> for the proposed values."));
            }
            Ok((statement, Some(on_conflict)))
        }
        Some(_) => Err(WeirError::unsupported("ON DUPLICATE KEY UPDATE")
            .with_hint("Use Postgres' INSERT … ON CONFLICT (key) DO UPDATE SET …")),
    }
}

impl Session {
    pub(super) async fn execute_upsert(
        &self,
        dml: DmlStatement,
        on_conflict: &ast::OnConflict,
    ) -> Result<Outcome> {
        let provider = source_as_provider(&dml.target)?;
        let Some(table) = provider.as_ref().downcast_ref::<DurableTable>() else {
            return Err(WeirError::unsupported("INSERT into a view"));
        };
        let log = table.log().clone();
        check_target(&log, on_conflict)?;
        let (state, task) = self.planning(Purpose::Writes)?;
        let update = match &on_conflict.action {
            ast::OnConflictAction::DoNothing => None,
            ast::OnConflictAction::DoUpdate(update) => {
                updatable_log(&dml, "INSERT … ON CONFLICT DO UPDATE")?;
                Some(Assignments::plan(&state, &dml, &log, update)?)
            }
        };
        self.refuse_after_block_writes(&log, "INSERT … ON CONFLICT")?;
        let write = async {
            let rows = match values_insert(&dml, &state)? {
                Some((_, rows)) => rows,
                None => {
                    let physical = state.create_physical_plan(&dml.input).await?;
                    let batches = collect(physical, task).await?;
                    let rows = concat_batches(&dml.input.schema().inner().clone(), &batches)?;
                    not_null(&log, rows)?
                }
            };
            let rows = RecordBatch::try_new(log.schema(), rows.columns().to_vec())?;
            let write = BulkWrite::begin(log.clone()).await;
            let (changes, count) = match &update {
                None => without_conflicts(&log, rows)?,
                Some(assignments) => assignments.apply(&state, &log, rows)?,
            };
            self.apply_changes(&log, write, changes).await?;
            Ok::<u64, WeirError>(count)
        };
        let count = self.run_write(write).await?;
        Ok(Outcome::Done(CommandDone::new("INSERT").with_rows(count)))
    }
}

/// ON CONFLICT must name the primary key (by its columns or constraint
/// name); DO NOTHING may name nothing.
fn check_target(log: &TableLog, on_conflict: &ast::OnConflict) -> Result<()> {
    let key = log.primary_key();
    let schema = log.schema();
    let names = |columns: &[usize]| -> Vec<String> {
        let mut names: Vec<String> = columns
            .iter()
            .map(|&c| schema.field(c).name().clone())
            .collect();
        names.sort();
        names
    };
    let no_match = || {
        WeirError::new(
            sqlstate::INVALID_COLUMN_REFERENCE,
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        )
        .with_hint("Name the table's PRIMARY KEY columns: ON CONFLICT (id).")
    };
    match &on_conflict.conflict_target {
        None if matches!(on_conflict.action, ast::OnConflictAction::DoUpdate(_)) => {
            Err(WeirError::new(
                sqlstate::SYNTAX_ERROR,
                "ON CONFLICT DO UPDATE requires inference specification or constraint name",
            )
            .with_hint("For example, ON CONFLICT (id) DO UPDATE SET …"))
        }
        None => Ok(()),
        Some(ast::ConflictTarget::Columns(columns)) => {
            let mut given: Vec<String> = columns.iter().map(|c| c.value.clone()).collect();
            given.sort();
            match key {
                Some(key) if names(&key) == given => Ok(()),
                _ => Err(no_match()),
            }
        }
        Some(ast::ConflictTarget::OnConstraint(name)) => {
            let constraints = log.key_constraints();
            let wanted = name.to_string();
            match constraints.iter().find(|c| c.name == wanted) {
                Some(constraint) if constraint.primary => Ok(()),
                Some(_) => Err(no_match()),
                None => Err(WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!(
                        "constraint \"{wanted}\" for table \"{}\" does not exist",
                        log.name()
                    ),
                )),
            }
        }
    }
}

/// DO NOTHING: the rows whose key no committed or earlier row has.
fn without_conflicts(log: &TableLog, rows: RecordBatch) -> Result<(TableChanges, u64)> {
    let Some(conflicts) = log.key_conflicts(&rows)? else {
        let count = rows.num_rows() as u64;
        return Ok((TableChanges::inserts(rows), count));
    };
    let keep: BooleanArray = conflicts
        .iter()
        .map(|(taken, repeated)| Some(!taken && !repeated))
        .collect();
    let rows = filter_record_batch(&rows, &keep)?;
    let count = rows.num_rows() as u64;
    Ok((TableChanges::inserts(rows), count))
}

/// DO UPDATE's SET values and WHERE, over the existing row and `excluded`.
struct Assignments {
    schema: Arc<DFSchema>,
    /// Per table column its new value.
    values: Vec<Expr>,
    condition: Option<Expr>,
}

impl Assignments {
    fn plan(
        state: &SessionState,
        dml: &DmlStatement,
        log: &TableLog,
        update: &ast::DoUpdate,
    ) -> Result<Self> {
        let table_schema = log.schema();
        let existing = DFSchema::try_from_qualified_schema(dml.table_name.clone(), &table_schema)?;
        let excluded = DFSchema::try_from_qualified_schema("excluded", &table_schema)?;
        let mut schema = existing.clone();
        schema.merge(&excluded);
        let schema = Arc::new(schema);
        let mut values: Vec<Expr> = existing.columns().into_iter().map(Expr::Column).collect();
        for assignment in &update.assignments {
            let ast::AssignmentTarget::ColumnName(name) = &assignment.target else {
                return Err(WeirError::unsupported("assigning a tuple in ON CONFLICT"));
            };
            let column = name
                .0
                .last()
                .map(|part| part.to_string())
                .unwrap_or_default();
            let column = column.trim_matches('"').to_string();
            let index = table_schema.index_of(&column).map_err(|_| {
                WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!(
                        "column \"{column}\" of relation \"{}\" does not exist",
                        log.name()
                    ),
                )
            })?;
            let value = state.create_logical_expr(&assignment.value.to_string(), &schema)?;
            values[index] = value.cast_to(table_schema.field(index).data_type(), &schema)?;
        }
        let condition = match &update.selection {
            Some(selection) => Some(state.create_logical_expr(&selection.to_string(), &schema)?),
            None => None,
        };
        // The analyzer coerces types and applies weir's checked arithmetic.
        let mut exprs = values;
        exprs.extend(condition.clone());
        let relation = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: schema.clone(),
        });
        let projection = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(relation))?);
        let analyzed =
            state
                .analyzer()
                .execute_and_check(projection, state.config_options(), |_, _| {})?;
        let LogicalPlan::Projection(analyzed) = analyzed else {
            return Err(WeirError::internal(
                "ON CONFLICT values lost their projection",
            ));
        };
        let mut values = analyzed.expr;
        let condition = condition.and_then(|_| values.pop());
        Ok(Assignments {
            schema,
            values,
            condition,
        })
    }

    /// The statement's changes: conflicting rows replaced (where WHERE
    /// holds), other rows inserted; and the rows inserted or updated.
    fn apply(
        &self,
        state: &SessionState,
        log: &TableLog,
        rows: RecordBatch,
    ) -> Result<(TableChanges, u64)> {
        let conflicts = log.key_conflicts(&rows)?.unwrap_or_default();
        if conflicts.iter().any(|(_, repeated)| *repeated) {
            return Err(WeirError::new(
                sqlstate::CARDINALITY_VIOLATION,
                "ON CONFLICT DO UPDATE command cannot affect row a second time",
            )
            .with_hint(
                "Ensure that no rows proposed for insertion within the same command have \
                 duplicate constrained values.",
            ));
        }
        let taken: BooleanArray = conflicts.iter().map(|(taken, _)| Some(*taken)).collect();
        let fresh = filter_record_batch(&rows, &datafusion::arrow::compute::not(&taken)?)?;
        let proposed = filter_record_batch(&rows, &taken)?;
        let offsets: Vec<u64> = log
            .live_offsets(&proposed)?
            .into_iter()
            .map(|offset| offset.ok_or_else(|| WeirError::internal("a taken key has no row")))
            .collect::<Result<_>>()?;
        let existing = log.rows_at(&offsets)?;
        let both = self.both(&existing, &proposed)?;
        // Each value as its column's type: a literal may be typed narrower
        // (sql::literal_types).
        let columns = self
            .values
            .iter()
            .zip(log.schema().fields())
            .map(|(value, field)| {
                let column = evaluate(value, &self.schema, &both, state)?;
                Ok(datafusion::arrow::compute::cast(
                    &column,
                    field.data_type(),
                )?)
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let updated = not_null(log, RecordBatch::try_new(log.schema(), columns)?)?;
        let (existing, updated) = match &self.condition {
            Some(condition) => {
                let holds = evaluate(condition, &self.schema, &both, state)?;
                let holds = datafusion::arrow::array::as_boolean_array(&holds);
                let holds = crate::stream::message::without_nulls(holds);
                (
                    filter_record_batch(&existing, &holds)?,
                    filter_record_batch(&updated, &holds)?,
                )
            }
            None => (existing, updated),
        };
        let count = (updated.num_rows() + fresh.num_rows()) as u64;
        let new = concat_batches(&log.schema(), [&updated, &fresh])?;
        Ok((log.replacing(&existing, Some(&new))?, count))
    }

    /// The existing rows' columns, then the proposed rows' (`excluded`).
    fn both(&self, existing: &RecordBatch, proposed: &RecordBatch) -> Result<RecordBatch> {
        let mut columns = existing.columns().to_vec();
        columns.extend(proposed.columns().iter().cloned());
        Ok(RecordBatch::try_new(
            Arc::new(self.schema.as_arrow().clone()),
            columns,
        )?)
    }
}
