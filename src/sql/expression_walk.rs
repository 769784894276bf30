//! The walk weir's analyzer rules share: every expression of every plan
//! node, subqueries included, rewritten bottom-up against the schema of the
//! node's inputs, each keeping the output name it had (a rewritten
//! projection item would otherwise be renamed after its new expression).
//! Nodes store their output schema, so once anything has changed every
//! node visited after it (its ancestors among them) recomputes its own: a
//! changed field's metadata reaches the output.

use std::cell::Cell;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan};

pub fn rewrite_every_expression(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    rewrite_expressions_except(plan, |_| false, rewrite)
}

/// Like `rewrite_every_expression`, leaving the nodes `skip` picks as
/// they are.
pub fn rewrite_expressions_except(
    plan: LogicalPlan,
    skip: impl Fn(&LogicalPlan) -> bool,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    let changed = Cell::new(false);
    Ok(plan
        .transform_up_with_subqueries(|plan| {
            if skip(&plan) {
                return match changed.get() {
                    true => Transformed::yes(plan).map_data(LogicalPlan::recompute_schema),
                    false => Ok(Transformed::no(plan)),
                };
            }
            let schema = merge_schema(&plan.inputs());
            let names = NamePreserver::new(&plan);
            let rewritten = plan.map_expressions(|expr| {
                let name = names.save(&expr);
                Ok(expr
                    .transform_up(|expr| rewrite(expr, &schema))?
                    .update_data(|expr| name.restore(expr)))
            })?;
            changed.set(changed.get() || rewritten.transformed);
            match changed.get() {
                true => rewritten.map_data(LogicalPlan::recompute_schema),
                false => Ok(rewritten),
            }
        })?
        .data)
}
