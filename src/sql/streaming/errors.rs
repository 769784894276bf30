//! The errors the streaming planner gives, and expression helpers for them
//! and for EXPLAIN.

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::error::WeirError;

pub(super) fn unsupported(what: &str, hint: &str) -> WeirError {
    WeirError::unsupported(format!("{what} is not supported in a materialized view"))
        .with_hint(hint)
}

/// An expression as SQL for EXPLAIN (DataFusion's text where it has none).
pub(super) fn shown(expr: &Expr) -> String {
    let expr = match expr {
        Expr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    match expr {
        Expr::Column(column) => column.to_string(),
        other => {
            let other = crate::sql::checked_arithmetic::with_operators(other);
            datafusion::sql::unparser::expr_to_sql(&other)
                .map(|sql| sql.to_string())
                .unwrap_or_else(|_| other.schema_name().to_string())
        }
    }
}

pub(super) fn has_subquery(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|node| {
        if matches!(
            node,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ) {
            found = true;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

pub(super) fn no_watermark(relation: &str, column: Option<&str>) -> WeirError {
    let column = column.unwrap_or("its time column");
    WeirError::unsupported(format!(
        "EMIT ON WINDOW CLOSE needs a watermark on {column} of \"{relation}\""
    ))
    .with_hint(format!(
        "Declare one: CREATE TABLE {relation} (..., WATERMARK FOR {column} AS {column} - INTERVAL '5' SECOND), or drop EMIT ON WINDOW CLOSE."
    ))
}

/// 0A000 naming the construct a materialized view cannot run yet.
pub(super) fn refused(plan: &LogicalPlan) -> WeirError {
    let (what, hint) = match plan {
        LogicalPlan::Limit(_) | LogicalPlan::Sort(_) => {
            ("LIMIT / OFFSET", "Apply LIMIT when querying the view.")
        }
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => (
            "a query that reads no table",
            "A materialized view reads a table or another materialized view.",
        ),
        LogicalPlan::Unnest(_) => ("unnest", "Unnest when querying the view."),
        LogicalPlan::RecursiveQuery(_) => ("WITH RECURSIVE", "Query the tables directly."),
        other => {
            return unsupported(
                &other.display().to_string(),
                "Simplify the query to projections, filters, windows and GROUP BY.",
            )
        }
    };
    unsupported(what, hint)
}
