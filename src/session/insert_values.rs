//! `INSERT INTO t VALUES (…)` without DataFusion's logical optimizer and
//! physical planner. Their ~45 rules were most of the CPU a one-row INSERT
//! cost; a VALUES list needs none of them. The plan still goes through
//! DataFusion's analyzer (type coercion, weir's checked arithmetic) and each
//! expression through its simplifier (so `now()` is the statement's start
//! time) and physical expressions, so values, casts, defaults and errors are
//! what the general path gives. Anything else — a query as the source, a
//! subquery in a value — returns None and takes the general path.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::cast;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, Projection, Values, WriteOp};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

use crate::connectors::table::{DurableTable, TableLog};
use crate::error::Result;

/// The table and the rows an INSERT … VALUES writes, or None when the
/// statement is not one.
pub fn values_insert(
    dml: &DmlStatement,
    state: &SessionState,
) -> Result<Option<(Arc<TableLog>, RecordBatch)>> {
    if dml.op != WriteOp::Insert(InsertOp::Append) {
        return Ok(None);
    }
    let provider = source_as_provider(&dml.target)?;
    let Some(table) = provider.as_ref().downcast_ref::<DurableTable>() else {
        return Ok(None);
    };
    let input = dml.input.as_ref().clone();
    let analyzed = state
        .analyzer()
        .execute_and_check(input, state.config_options(), |_, _| {})?;
    let Some((projections, values)) = values_under_projections(&analyzed) else {
        return Ok(None);
    };
    let all_exprs = values
        .values
        .iter()
        .flatten()
        .chain(projections.iter().flat_map(|projection| &projection.expr));
    if all_exprs.clone().any(needs_a_plan) {
        return Ok(None);
    }
    let mut rows = evaluate_values(values, state)?;
    for projection in projections.iter().rev() {
        let input_schema = projection.input.schema();
        let columns = projection
            .expr
            .iter()
            .map(|expr| evaluate(expr, input_schema, &rows, state))
            .collect::<Result<Vec<_>>>()?;
        rows = batch(
            projection.schema.as_arrow().clone().into(),
            columns,
            rows.num_rows(),
        )?;
    }
    // The table takes the rows as its own schema's; NOT NULL is checked
    // as DataFusion's sink does, for the same error.
    let log = table.log().clone();
    let rows = super::modify::not_null(&log, rows)?;
    Ok(Some((log, rows)))
}

/// A VALUES node under projections only (outermost projection first), or
/// None for any other plan.
pub(super) fn values_under_projections(plan: &LogicalPlan) -> Option<(Vec<&Projection>, &Values)> {
    let mut projections = Vec::new();
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::Projection(projection) => {
                projections.push(projection);
                node = projection.input.as_ref();
            }
            LogicalPlan::Values(values) => return Some((projections, values)),
            _ => return None,
        }
    }
}

/// Subqueries and unbound parameters need the general path.
pub(super) fn needs_a_plan(expr: &Expr) -> bool {
    expr.exists(|expr| {
        Ok(matches!(
            expr,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::Placeholder(_)
        ))
    })
    .unwrap_or(true)
}

/// The VALUES rows as a batch of the node's schema.
fn evaluate_values(values: &Values, state: &SessionState) -> Result<RecordBatch> {
    let empty = Arc::new(DFSchema::empty());
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let fields = values.schema.fields();
    let mut columns = Vec::with_capacity(fields.len());
    for (index, field) in fields.iter().enumerate() {
        let scalars = values
            .values
            .iter()
            .map(|row| {
                let array = evaluate(&row[index], &empty, &one_row, state)?;
                Ok(ScalarValue::try_from_array(&array, 0)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let array = ScalarValue::iter_to_array(scalars)?;
        columns.push(cast(&array, field.data_type())?);
    }
    batch(
        values.schema.as_arrow().clone().into(),
        columns,
        values.values.len(),
    )
}

/// One expression over `rows`, as an array of their length.
pub(super) fn evaluate(
    expr: &Expr,
    schema: &Arc<DFSchema>,
    rows: &RecordBatch,
    state: &SessionState,
) -> Result<ArrayRef> {
    let context = SimplifyContext::builder()
        .with_schema(schema.clone())
        .with_config_options(state.config_options().clone())
        .with_query_execution_start_time(state.execution_props().query_execution_start_time)
        .build();
    let simplified = ExprSimplifier::new(context).simplify(expr.clone())?;
    let physical = state.create_physical_expr(simplified, schema)?;
    Ok(physical.evaluate(rows)?.into_array(rows.num_rows())?)
}

pub(super) fn batch(
    schema: datafusion::arrow::datatypes::SchemaRef,
    columns: Vec<ArrayRef>,
    rows: usize,
) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use futures::TryStreamExt;

    use crate::engine::Engine;
    use crate::session::{Outcome, Session};

    const COLUMNS: &str = "(i BIGINT NOT NULL, s SMALLINT, f DOUBLE, d DECIMAL(10, 2), \
        t TEXT DEFAULT 'none', b BOOLEAN, ts TIMESTAMP, day DATE, n INT DEFAULT 7)";

    /// What the statement did: the rows `query` then gives, or the error.
    async fn outcome(session: &Session, sql: &str, query: &str) -> String {
        let run = async {
            for statement in session.parse(sql)? {
                let prepared = session.prepare(statement).await?;
                session.execute(&prepared, None).await?;
            }
            let statement = session.parse(query)?.remove(0);
            let prepared = session.prepare(statement).await?;
            let Outcome::Rows(rows) = session.execute(&prepared, None).await? else {
                unreachable!("a query");
            };
            let batches: Vec<_> = rows.try_collect().await?;
            Ok::<_, crate::error::WeirError>(pretty_format_batches(&batches)?.to_string())
        };
        match run.await {
            Ok(rows) => rows,
            Err(error) => format!("{}: {}", error.code, error.message),
        }
    }

    fn all_rows(table: &str) -> String {
        format!("SELECT * FROM {table} ORDER BY i, s, f, t")
    }

    /// Each VALUES list gives the same rows or the same error as the same
    /// rows through a query (which DataFusion plans in full).
    #[tokio::test]
    async fn values_give_what_the_planned_path_gives() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path()).await.unwrap();
        let session = Session::new(engine);
        let cases = [
            "(1, 2, 3.5, 4.25, 'a', true, '2026-01-01 10:00:00', '2026-01-01', 3)",
            "(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            "(1, 2, 3, 4, 5, false, '2026-01-01', '2026-02-03', 4), (2, -2, -3.25, 1e2, 'x', NULL, NULL, NULL, 5)",
            "(9223372036854775807, 32767, 1e308, 99999999.99, '', true, '1677-09-22 00:00:00', '0001-01-01', -2147483648)",
            "(NULL, 1, 1, 1, 'null key', true, NULL, NULL, 1)",
            "(1, 32768, 1, 1, 'too big', true, NULL, NULL, 1)",
            "(1, 1, 1, 123456789012, 'decimal overflow', true, NULL, NULL, 1)",
            "(9223372036854775807 + 1, 1, 1, 1, 'overflow', true, NULL, NULL, 1)",
            "(1, 1, 1, 1, 'bad time', true, 'yesterday-ish', NULL, 1)",
            "(1, 1, 1, 1, 'x' || 'y', 1 = 1, CAST('2026-01-01' AS DATE) + INTERVAL '1' DAY, NULL, 2 * 3)",
            "(1, 1, 1, 1, 1, 1)",
            "((SELECT count(*) FROM fast0), 1, 1, 1, 'subquery: the planned path', true, NULL, NULL, 1)",
            "(1, 1, 1 / 0, 1, 'division by zero', true, NULL, NULL, 1)",
        ];
        for (number, values) in cases.iter().enumerate() {
            let (fast, general) = (format!("fast{number}"), format!("general{number}"));
            let create = |name: &str| format!("CREATE TABLE {name} {COLUMNS}");
            for name in [&fast, &general] {
                outcome(&session, &create(name), &all_rows(name)).await;
            }
            let direct = format!("INSERT INTO {fast} VALUES {values}");
            let planned =
                format!("INSERT INTO {general} SELECT * FROM (VALUES {values}) WHERE true");
            let direct = outcome(&session, &direct, &all_rows(&fast)).await;
            let planned = outcome(&session, &planned, &all_rows(&general)).await;
            assert_eq!(direct, planned, "VALUES {values}");
        }
        // `now()` is the statement's start time (simplified, as planned).
        let now = "INSERT INTO fast0 (i, ts) VALUES (2, now())";
        let recent = "SELECT count(*) AS recent FROM fast0 WHERE ts > now() - INTERVAL '1' MINUTE";
        assert!(outcome(&session, now, recent).await.contains("| 1      |"));
        // Column lists and defaults.
        for name in ["fast_columns", "general_columns"] {
            let create = format!("CREATE TABLE {name} {COLUMNS}");
            outcome(&session, &create, &all_rows(name)).await;
        }
        let direct = "INSERT INTO fast_columns (b, i) VALUES (true, 5), (false, 6)";
        let planned = "INSERT INTO general_columns (b, i) SELECT * FROM (VALUES (true, 5), (false, 6)) WHERE true";
        assert_eq!(
            outcome(&session, direct, &all_rows("fast_columns")).await,
            outcome(&session, planned, &all_rows("general_columns")).await
        );
    }
}
