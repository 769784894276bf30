//! A prepared `INSERT INTO t VALUES ($1, …)` compiled once: drivers send
//! the same statement with new parameters again and again, and binding
//! them into the plan (`replace_params_with_values` rebuilds and re-types
//! every node), analysing and simplifying it was most of what a one-row
//! INSERT cost. The template turns each value into a physical expression
//! over a one-row batch of the parameters, so an execution is: cast the
//! parameters, evaluate, check NOT NULL, append.
//!
//! Only statements whose every expression gives the same result for the
//! same parameters compile: `now()`, `random()` and subqueries take the
//! per-execution path (`insert_values`), which gives the same values and
//! errors (tested against it below).

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ParamValues, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{DmlStatement, Expr, Volatility, WriteOp};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::PhysicalExpr;

use super::insert_values::{batch, needs_a_plan, values_under_projections};
use super::parameters::{bound_type, coerce_parameters};
use crate::connectors::table::{DurableTable, TableLog};
use crate::error::Result;

/// A prepared statement's compiled INSERT, for one planning state.
#[derive(Default)]
pub struct TemplateCache {
    /// The planning generation it was compiled under, and the template
    /// (None: the statement does not compile).
    compiled: Mutex<Option<(u64, Option<Arc<InsertTemplate>>)>>,
}

impl std::fmt::Debug for TemplateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TemplateCache")
    }
}

impl TemplateCache {
    /// The template for `generation`, compiled on first use.
    pub fn get(
        &self,
        generation: u64,
        compile: impl FnOnce() -> Result<Option<InsertTemplate>>,
    ) -> Result<Option<Arc<InsertTemplate>>> {
        let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        match &*compiled {
            Some((built, template)) if *built == generation => Ok(template.clone()),
            _ => {
                let template = compile()?.map(Arc::new);
                *compiled = Some((generation, template.clone()));
                Ok(template)
            }
        }
    }
}

pub struct InsertTemplate {
    log: Arc<TableLog>,
    parameter_types: Vec<Option<DataType>>,
    /// `$1..$n` as the columns of a one-row batch.
    parameters: SchemaRef,
    /// Per VALUES row, per column: the value, over the parameters; with
    /// `block`, only the first row's, evaluated once over all rows.
    rows: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    /// Every row is the first with its parameters shifted by this many
    /// (a driver's multi-row VALUES list): the parameters become a batch
    /// of `row_count` rows and each column one vectorised evaluation.
    block: Option<usize>,
    row_count: usize,
    values_schema: SchemaRef,
    /// Projections above the VALUES, innermost first.
    projections: Vec<(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)>,
    /// Columns that must not be NULL.
    required: Vec<usize>,
}

impl InsertTemplate {
    /// Compiles `dml` if it is an INSERT … VALUES into a weir table whose
    /// values depend only on the parameters.
    pub fn compile(
        dml: &DmlStatement,
        state: &SessionState,
        parameter_types: &[Option<DataType>],
    ) -> Result<Option<Self>> {
        if dml.op != WriteOp::Insert(InsertOp::Append)
            || parameter_types.iter().any(Option::is_none)
        {
            return Ok(None);
        }
        let provider = source_as_provider(&dml.target)?;
        let Some(table) = provider.as_ref().downcast_ref::<DurableTable>() else {
            return Ok(None);
        };
        let analyzed = state.analyzer().execute_and_check(
            dml.input.as_ref().clone(),
            state.config_options(),
            |_, _| {},
        )?;
        let Some((projections, values)) = values_under_projections(&analyzed) else {
            return Ok(None);
        };
        let varies = |expr: &Expr| needs_a_plan_besides_parameters(expr) || !immutable(expr);
        let projected = projections.iter().flat_map(|projection| &projection.expr);
        if values.values.iter().flatten().any(varies) || projected.clone().any(needs_a_plan) {
            return Ok(None);
        }
        let fields: Vec<Field> = parameter_types
            .iter()
            .enumerate()
            .map(|(index, data_type)| {
                Field::new(
                    format!("${}", index + 1),
                    bound_type(data_type.as_ref()),
                    true,
                )
            })
            .collect();
        let block = same_shape(&values.values, parameter_types);
        let fields = match block {
            Some(width) => fields[..width].to_vec(),
            None => fields,
        };
        let parameters = Arc::new(Schema::new(fields));
        let parameter_schema = Arc::new(DFSchema::try_from(parameters.as_ref().clone())?);
        let compile = |expr: &Expr, schema: &Arc<DFSchema>| -> Result<Arc<dyn PhysicalExpr>> {
            let context = SimplifyContext::builder()
                .with_schema(schema.clone())
                .with_config_options(state.config_options().clone())
                .build();
            let simplified = ExprSimplifier::new(context).simplify(parameters_as_columns(expr)?)?;
            Ok(state.create_physical_expr(simplified, schema)?)
        };
        let compiled_rows = match block {
            Some(_) => &values.values[..1],
            None => &values.values[..],
        };
        let rows = compiled_rows
            .iter()
            .map(|row| {
                row.iter()
                    .map(|expr| compile(expr, &parameter_schema))
                    .collect()
            })
            .collect::<Result<Vec<_>>>()?;
        let projections = projections
            .iter()
            .rev()
            .map(|projection| {
                let exprs = projection
                    .expr
                    .iter()
                    .map(|expr| compile(expr, projection.input.schema()))
                    .collect::<Result<Vec<_>>>()?;
                Ok((exprs, Arc::new(projection.schema.as_arrow().clone())))
            })
            .collect::<Result<Vec<_>>>()?;
        let log = table.log().clone();
        let required = log.not_null_columns();
        Ok(Some(InsertTemplate {
            log,
            parameter_types: parameter_types.to_vec(),
            parameters,
            rows,
            block,
            row_count: values.values.len(),
            values_schema: Arc::new(values.schema.as_arrow().clone()),
            projections,
            required,
        }))
    }

    pub fn table(&self) -> &Arc<TableLog> {
        &self.log
    }

    /// Whether `values` are one per parameter (otherwise the planned path
    /// reports what is wrong).
    pub fn fits(&self, values: &ParamValues) -> bool {
        matches!(values, ParamValues::List(list) if list.len() == self.parameter_types.len())
    }

    /// The rows the statement inserts with these parameters.
    pub fn rows(&self, values: &ParamValues) -> Result<RecordBatch> {
        let ParamValues::List(list) = coerce_parameters(values, &self.parameter_types)? else {
            return Err(crate::error::WeirError::internal(
                "named parameters in an INSERT",
            ));
        };
        let columns = match self.block {
            Some(width) => self.evaluate_block(&list, width)?,
            None => self.evaluate_rows(&list)?,
        };
        let mut rows = batch(self.values_schema.clone(), columns, self.row_count)?;
        for (exprs, schema) in &self.projections {
            let columns = exprs
                .iter()
                .map(|expr| Ok(expr.evaluate(&rows)?.into_array(rows.num_rows())?))
                .collect::<Result<Vec<_>>>()?;
            rows = batch(schema.clone(), columns, rows.num_rows())?;
        }
        self.log.check_columns_not_null(rows, &self.required)
    }
}

impl InsertTemplate {
    /// Each row's expressions over a one-row batch of all parameters.
    fn evaluate_rows(&self, list: &[ScalarAndMetadata]) -> Result<Vec<ArrayRef>> {
        let columns = list
            .iter()
            .map(|value| value.value.to_array_of_size(1))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let parameters = batch(self.parameters.clone(), columns, 1)?;
        let mut columns = Vec::with_capacity(self.values_schema.fields().len());
        for (index, field) in self.values_schema.fields().iter().enumerate() {
            let values = self
                .rows
                .iter()
                .map(|row| Ok(row[index].evaluate(&parameters)?.into_array(1)?))
                .collect::<Result<Vec<ArrayRef>>>()?;
            let pieces: Vec<&dyn Array> = values.iter().map(|array| array.as_ref()).collect();
            columns.push(cast(&concat(&pieces)?, field.data_type())?);
        }
        Ok(columns)
    }

    /// The first row's expressions once, over the parameters as a batch of
    /// one row per VALUES row (`width` parameters each).
    fn evaluate_block(&self, list: &[ScalarAndMetadata], width: usize) -> Result<Vec<ArrayRef>> {
        let columns = (0..width)
            .map(|column| {
                let values = list.iter().skip(column).step_by(width);
                ScalarValue::iter_to_array(values.map(|value| value.value.clone()))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let parameters = batch(self.parameters.clone(), columns, self.row_count)?;
        self.values_schema
            .fields()
            .iter()
            .zip(&self.rows[0])
            .map(|(field, expr)| {
                let values = expr.evaluate(&parameters)?.into_array(self.row_count)?;
                Ok(cast(&values, field.data_type())?)
            })
            .collect()
    }
}

/// The parameters per row when every VALUES row is the first one with its
/// parameters shifted (`($1, $2), ($3, $4), …`) and typed alike.
fn same_shape(rows: &[Vec<Expr>], parameter_types: &[Option<DataType>]) -> Option<usize> {
    if rows.len() < 2 || parameter_types.len() % rows.len() != 0 {
        return None;
    }
    let width = parameter_types.len() / rows.len();
    let first = rows[0]
        .iter()
        .map(|expr| shifted(expr, 0, width))
        .collect::<Option<Vec<_>>>()?;
    for (index, row) in rows.iter().enumerate().skip(1) {
        for (expr, expected) in row.iter().zip(&first) {
            if shifted(expr, index * width, width).as_ref() != Some(expected) {
                return None;
            }
        }
        if parameter_types[index * width..(index + 1) * width] != parameter_types[..width] {
            return None;
        }
    }
    Some(width)
}

/// `expr` with `$n` renamed `$(n - by)`; None if a parameter is outside
/// `by + 1 ..= by + width`.
fn shifted(expr: &Expr, by: usize, width: usize) -> Option<Expr> {
    let mut inside = true;
    let renamed = expr
        .clone()
        .transform_up(|expr| match expr {
            Expr::Placeholder(mut placeholder) => {
                let number = placeholder
                    .id
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok());
                match number {
                    Some(number) if number > by && number <= by + width => {
                        placeholder.id = format!("${}", number - by);
                    }
                    _ => inside = false,
                }
                Ok(Transformed::yes(Expr::Placeholder(placeholder)))
            }
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    inside.then_some(renamed)
}

/// `$n` as the column `$n` of the parameters batch.
fn parameters_as_columns(expr: &Expr) -> Result<Expr> {
    Ok(expr
        .clone()
        .transform_up(|expr| match expr {
            Expr::Placeholder(placeholder) => Ok(Transformed::yes(Expr::Column(
                Column::from_name(placeholder.id),
            ))),
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// Subqueries need a plan; parameters are what the template binds.
fn needs_a_plan_besides_parameters(expr: &Expr) -> bool {
    expr.exists(|expr| {
        Ok(matches!(
            expr,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::OuterReferenceColumn(..)
        ))
    })
    .unwrap_or(true)
}

/// No function whose result may change between executions (`now()`,
/// `random()`).
fn immutable(expr: &Expr) -> bool {
    !expr
        .exists(|expr| {
            Ok(match expr {
                Expr::ScalarFunction(function) => {
                    function.func.signature().volatility != Volatility::Immutable
                }
                _ => false,
            })
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::common::{ParamValues, ScalarValue};
    use futures::TryStreamExt;

    use crate::engine::Engine;
    use crate::session::{Outcome, Session};

    const COLUMNS: &str = "(i BIGINT NOT NULL, s SMALLINT, d DECIMAL(10, 2), \
        t TEXT DEFAULT 'none', ts TIMESTAMP, n INT DEFAULT 7)";

    /// Runs `sql` with `parameters` (twice: the second run uses the
    /// compiled template if there is one) and returns the table's rows or
    /// the error.
    async fn outcome(
        session: &Session,
        sql: &str,
        parameters: &[ScalarValue],
        table: &str,
    ) -> String {
        let run = async {
            let prepared = session.prepare(session.parse(sql)?.remove(0)).await?;
            let values = ParamValues::from(parameters.to_vec());
            session.execute(&prepared, Some(&values)).await?;
            session.execute(&prepared, Some(&values)).await?;
            let query = format!("SELECT * FROM {table} ORDER BY i, n");
            let prepared = session.prepare(session.parse(&query)?.remove(0)).await?;
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

    /// The statement's compiled template, if it compiles.
    async fn template(session: &Session, sql: &str) -> Option<super::InsertTemplate> {
        let prepared = session
            .prepare(session.parse(sql).unwrap().remove(0))
            .await
            .unwrap();
        let crate::session::Action::Plan(plan) = &prepared.action else {
            unreachable!("a plan");
        };
        let datafusion::logical_expr::LogicalPlan::Dml(dml) = plan.as_ref() else {
            unreachable!("an insert");
        };
        let (state, _) = session
            .planning(crate::session::planning::Purpose::Writes)
            .unwrap();
        super::InsertTemplate::compile(dml, &state, &prepared.parameter_types).unwrap()
    }

    /// A prepared VALUES insert gives the rows or the error the planned
    /// path gives with the same parameters.
    #[tokio::test]
    async fn templates_give_what_the_planned_path_gives() {
        let directory = tempfile::tempdir().unwrap();
        let session = Session::new(Engine::open(directory.path()).await.unwrap());
        let text = |value: &str| ScalarValue::Utf8(Some(value.to_string()));
        let big = ScalarValue::Int64;
        let cases: Vec<(&str, &str, Vec<ScalarValue>)> = vec![
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    big(Some(1)),
                    big(Some(2)),
                    text("3.25"),
                    text("a"),
                    text("2026-01-01 10:00:00"),
                    big(Some(4)),
                ],
            ),
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    big(Some(1)),
                    ScalarValue::Null,
                    ScalarValue::Null,
                    ScalarValue::Null,
                    ScalarValue::Null,
                    ScalarValue::Null,
                ],
            ),
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    ScalarValue::Null,
                    big(Some(2)),
                    text("1"),
                    text("null key"),
                    ScalarValue::Null,
                    big(Some(1)),
                ],
            ),
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    big(Some(1)),
                    big(Some(40_000)),
                    text("1"),
                    text("too big"),
                    ScalarValue::Null,
                    big(Some(1)),
                ],
            ),
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    big(Some(1)),
                    big(Some(1)),
                    text("123456789012"),
                    text("decimal"),
                    ScalarValue::Null,
                    big(Some(1)),
                ],
            ),
            (
                "",
                "$1, $2, $3, $4, $5, $6",
                vec![
                    big(Some(1)),
                    big(Some(1)),
                    text("1"),
                    text("bad time"),
                    text("yesterday-ish"),
                    big(Some(1)),
                ],
            ),
            (
                "(i, ts, n)",
                "$1 + 1, to_timestamp_millis($2), $3 * 2",
                vec![big(Some(5)), big(Some(1_767_225_600_123)), big(Some(21))],
            ),
            (
                "(i, n)",
                "$1, $2 * 2",
                vec![big(Some(i64::MAX)), big(Some(i32::MAX as i64))],
            ),
            (
                "(i, n)",
                "$1 + 1, 1",
                vec![big(Some(i64::MAX)), big(Some(0))],
            ),
            (
                "(i, t)",
                "$1, $2 || '!'), ($1 + 1, upper($2)",
                vec![big(Some(7)), text("hi")],
            ),
            ("(n, i)", "$2, $1", vec![big(Some(9)), big(Some(10))]),
            (
                "(i, t, n)",
                "$1, $2, $3 * 2), ($4, $5, $6 * 2), ($7, $8, $9 * 2",
                vec![
                    big(Some(1)),
                    text("a"),
                    big(Some(2)),
                    big(Some(2)),
                    ScalarValue::Null,
                    ScalarValue::Null,
                    big(Some(3)),
                    text("c"),
                    big(Some(5)),
                ],
            ),
            (
                "(i, n)",
                "$1, $2 * 2), ($3, $4 * 2",
                vec![
                    big(Some(1)),
                    big(Some(2)),
                    big(Some(2)),
                    big(Some(i32::MAX as i64)),
                ],
            ),
            (
                "(i, n)",
                "$1, $2), (NULL, $4",
                vec![big(Some(1)), big(Some(2)), big(Some(2)), big(Some(3))],
            ),
        ];
        for (number, (columns, values, parameters)) in cases.iter().enumerate() {
            let (direct, general) = (format!("direct{number}"), format!("general{number}"));
            for name in [&direct, &general] {
                let create = format!("CREATE TABLE {name} {COLUMNS}");
                outcome(&session, &create, &[], name).await;
            }
            let compiled = format!("INSERT INTO {direct} {columns} VALUES ({values})");
            let planned = format!(
                "INSERT INTO {general} {columns} SELECT * FROM (VALUES ({values})) WHERE true"
            );
            // Errors name the table; the two tables differ only in name.
            let compiled = outcome(&session, &compiled, parameters, &direct).await;
            let planned = outcome(&session, &planned, parameters, &general).await;
            assert_eq!(
                compiled.replace(&direct, "t"),
                planned.replace(&general, "t"),
                "VALUES ({values}) with {parameters:?}"
            );
        }
    }

    #[tokio::test]
    async fn only_statements_that_depend_on_their_parameters_alone_compile() {
        let directory = tempfile::tempdir().unwrap();
        let session = Session::new(Engine::open(directory.path()).await.unwrap());
        outcome(&session, &format!("CREATE TABLE c {COLUMNS}"), &[], "c").await;
        let compiles = |sql: &'static str| {
            let session = &session;
            async move { template(session, sql).await.is_some() }
        };
        assert!(compiles("INSERT INTO c (i, n) VALUES ($1, $2 + 1)").await);
        assert!(!compiles("INSERT INTO c (i, ts) VALUES ($1, now())").await);
        assert!(!compiles("INSERT INTO c (i, n) VALUES ($1, (SELECT count(*) FROM c))").await);
        assert!(!compiles("INSERT INTO c (i, d) VALUES ($1, random())").await);
        let block = |sql: &'static str| {
            let session = &session;
            async move {
                template(session, sql)
                    .await
                    .and_then(|template| template.block)
            }
        };
        assert_eq!(
            block("INSERT INTO c (i, n) VALUES ($1, $2), ($3, $4), ($5, $6)").await,
            Some(2)
        );
        assert_eq!(
            block("INSERT INTO c (i, n) VALUES ($1, $2), ($3, $4 + 1)").await,
            None
        );
        assert_eq!(
            block("INSERT INTO c (i, n) VALUES ($1, $2), ($4, $3)").await,
            None
        );
        assert_eq!(block("INSERT INTO c (i, n) VALUES ($1, $2)").await, None);
    }
}
