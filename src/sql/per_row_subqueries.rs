//! Correlated scalar subqueries DataFusion cannot decorrelate, evaluated
//! per outer row as Postgres evaluates a SubPlan. DataFusion turns a
//! subquery correlated by equalities into a join; one correlated any
//! other way (`WHERE b.x > a.x`, `ORDER BY … LIMIT 1`, `ARRAY(…)`) it left
//! in the plan, and the physical planner refused it (0A000 "Physical plan
//! does not support logical expression ScalarSubquery").
//!
//! An optimizer rule, after DataFusion's, replaces each such subquery by a
//! call of a function that holds the subquery's plan and takes the outer
//! columns it reads. For each distinct tuple of outer values in a batch it
//! binds them as literals, plans and runs the subquery, and takes its one
//! value (NULL for no row, 21000 for more than one, as Postgres). The
//! subquery runs on a thread of its own with its own runtime: the caller
//! is a DataFusion stream already inside weir's runtime. It costs a
//! planning and a run per distinct outer tuple, like Postgres's SubPlan;
//! queries only (a materialized view refuses such a subquery while
//! planning its stream, before this rule).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::new_empty_array;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DataFusionError, Result, ScalarValue};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Subquery, Volatility,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::prelude::SessionConfig;

use crate::error::{sqlstate, WeirError};

#[derive(Debug, Default)]
pub struct PerRowSubqueryRule;

impl OptimizerRule for PerRowSubqueryRule {
    fn name(&self) -> &str {
        "weir_per_row_subqueries"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !plan.expressions().iter().any(has_correlated_subquery) {
            return Ok(Transformed::no(plan));
        }
        let names = NamePreserver::new(&plan);
        plan.map_expressions(|expr| {
            let name = names.save(&expr);
            Ok(expr
                .transform_up(|expr| match expr {
                    Expr::ScalarSubquery(subquery) if !subquery.outer_ref_columns.is_empty() => {
                        per_row_call(subquery).map(Transformed::yes)
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .update_data(|expr| name.restore(expr)))
        })?
        .map_data(LogicalPlan::recompute_schema)
    }
}

fn has_correlated_subquery(expr: &Expr) -> bool {
    expr.exists(|expr| {
        Ok(matches!(expr, Expr::ScalarSubquery(subquery)
            if !subquery.outer_ref_columns.is_empty()))
    })
    .unwrap_or(false)
}

/// `per_row_subquery(outer columns…)` for the subquery.
fn per_row_call(subquery: Subquery) -> Result<Expr> {
    let mut outer: Vec<(FieldRef, Column)> = Vec::new();
    for reference in &subquery.outer_ref_columns {
        if let Expr::OuterReferenceColumn(field, column) = reference {
            if !outer.iter().any(|(_, known)| known == column) {
                outer.push((field.clone(), column.clone()));
            }
        }
    }
    let returns = subquery.subquery.schema().field(0).data_type().clone();
    let arguments = outer
        .iter()
        .map(|(_, column)| Expr::Column(column.clone()))
        .collect();
    let function = ScalarUDF::new_from_impl(PerRowSubquery {
        signature: Signature::any(outer.len(), Volatility::Volatile),
        plan: subquery.subquery.as_ref().clone(),
        outer,
        returns,
    });
    Ok(Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(function),
        arguments,
    )))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PerRowSubquery {
    signature: Signature,
    plan: LogicalPlan,
    /// The outer columns the plan reads, in argument order.
    outer: Vec<(FieldRef, Column)>,
    returns: DataType,
}

impl ScalarUDFImpl for PerRowSubquery {
    fn name(&self) -> &str {
        "per_row_subquery"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = args.number_rows;
        let outcome = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    runtime.block_on(self.evaluate_rows(&arrays, rows))
                })
                .join()
        });
        let values = outcome.map_err(|_| {
            DataFusionError::Execution("a correlated subquery failed inside weir".to_string())
        })??;
        if values.is_empty() {
            return Ok(ColumnarValue::Array(new_empty_array(&self.returns)));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(values)?))
    }
}

impl PerRowSubquery {
    async fn evaluate_rows(
        &self,
        arrays: &[datafusion::arrow::array::ArrayRef],
        rows: usize,
    ) -> Result<Vec<ScalarValue>> {
        let state = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(1))
            .with_default_features()
            .build();
        let mut known: HashMap<Vec<ScalarValue>, ScalarValue> = HashMap::new();
        let mut values = Vec::with_capacity(rows);
        for row in 0..rows {
            let key = arrays
                .iter()
                .map(|array| ScalarValue::try_from_array(array, row))
                .collect::<Result<Vec<_>>>()?;
            if let Some(value) = known.get(&key) {
                values.push(value.clone());
                continue;
            }
            let value = self.evaluate(&state, &key).await?;
            known.insert(key, value.clone());
            values.push(value);
        }
        Ok(values)
    }

    /// The subquery's one value with the outer columns bound to `key`.
    async fn evaluate(
        &self,
        state: &datafusion::execution::SessionState,
        key: &[ScalarValue],
    ) -> Result<ScalarValue> {
        let bound = self
            .plan
            .clone()
            .transform_up_with_subqueries(|plan| {
                plan.map_expressions(|expr| expr.transform_up(|expr| self.bind(expr, key)))?
                    .map_data(LogicalPlan::recompute_schema)
            })?
            .data;
        let physical = state.create_physical_plan(&bound).await?;
        let batches = datafusion::physical_plan::collect(physical, state.task_ctx()).await?;
        let mut found = None;
        for batch in &batches {
            for row in 0..batch.num_rows() {
                if found.is_some() {
                    return Err(DataFusionError::External(Box::new(WeirError::new(
                        sqlstate::CARDINALITY_VIOLATION,
                        "more than one row returned by a subquery used as an expression",
                    ))));
                }
                found = Some(ScalarValue::try_from_array(batch.column(0), row)?);
            }
        }
        match found {
            Some(value) => Ok(value),
            None => ScalarValue::try_from(&self.returns),
        }
    }

    fn bind(&self, expr: Expr, key: &[ScalarValue]) -> Result<Transformed<Expr>> {
        let Expr::OuterReferenceColumn(field, column) = &expr else {
            return Ok(Transformed::no(expr));
        };
        let Some(position) = self.outer.iter().position(|(_, known)| known == column) else {
            return Ok(Transformed::no(expr));
        };
        let value = key[position].cast_to(field.data_type())?;
        Ok(Transformed::yes(Expr::Literal(value, None)))
    }
}
