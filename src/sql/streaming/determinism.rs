//! A materialized view is maintained by replaying its inputs (after a
//! failed write, on restart, when a view reads another), so its query must
//! give the same rows for the same input. Functions whose result changes
//! between calls (DataFusion's Stable and Volatile ones: now(), random(),
//! ...) cannot be maintained; now() cannot even be called unsimplified, so
//! such a view made every write to its input fail. They are refused when
//! the view is created.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

use crate::error::WeirError;

/// The name of the first non-deterministic function among `plan`'s own
/// expressions (not its inputs').
pub(super) fn non_deterministic_function(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_expressions(|expr| {
        found = non_deterministic_expression(expr);
        Ok(match found {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// The name of the first non-deterministic function in `expr`.
pub(super) fn non_deterministic_expression(expr: &Expr) -> Option<String> {
    let mut found = None;
    let _ = expr.apply(|node| {
        if let Expr::ScalarFunction(call) = node {
            if call.func.signature().volatility != Volatility::Immutable {
                found = Some(call.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// 0A000 for a view calling `function`.
pub fn non_deterministic(function: &str) -> WeirError {
    let hint = if function.eq_ignore_ascii_case("proctime") {
        "In a materialized view PROCTIME() can only be a window's time argument, e.g. TUMBLE(t, PROCTIME(), INTERVAL '1' MINUTE), which stands for t's PROCTIME() column; select that column instead.".to_string()
    } else {
        format!(
            "A view must give the same rows whenever it is rebuilt from its inputs. The one use of now() a view keeps up to date is a temporal filter in WHERE, a time column compared with now() plus or minus a fixed interval (WHERE ts > now() - INTERVAL '1' HOUR); otherwise apply {function}() when querying the view."
        )
    };
    WeirError::unsupported(format!(
        "{function}() is not supported in a materialized view: its result changes from one call to the next"
    ))
    .with_hint(hint)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    /// The first non-deterministic function of `sql`'s plan, node by node.
    async fn found(sql: &str) -> Option<String> {
        let plan = SessionContext::new()
            .sql(sql)
            .await
            .unwrap()
            .into_unoptimized_plan();
        let mut found = None;
        let _ = plan.apply(|node| {
            found = found.take().or_else(|| non_deterministic_function(node));
            Ok(TreeNodeRecursion::Continue)
        });
        found
    }

    #[tokio::test]
    async fn stable_and_volatile_functions_are_found() {
        let t = "WITH t (ts, n) AS (VALUES (CAST('2026-01-01' AS TIMESTAMP), 1))";
        for (query, function) in [
            (
                "SELECT ts FROM t WHERE ts > now() - INTERVAL '1 hour'",
                "now",
            ),
            ("SELECT current_date FROM t", "current_date"),
            ("SELECT n FROM t WHERE random() < 0.5", "random"),
            ("SELECT uuid(), n FROM t", "uuid"),
        ] {
            let sql = format!("{t} {query}");
            assert_eq!(found(&sql).await.as_deref(), Some(function), "{sql}");
        }
        let deterministic = format!("{t} SELECT date_trunc('day', ts), abs(n) + 1 FROM t");
        assert_eq!(found(&deterministic).await, None);
    }

    #[test]
    fn the_error_names_the_function_and_says_what_to_do() {
        let error = non_deterministic("now");
        assert_eq!(error.code, crate::error::sqlstate::FEATURE_NOT_SUPPORTED);
        assert!(error
            .message
            .starts_with("now() is not supported in a materialized view"));
        assert!(error.hint.unwrap().contains("when querying the view"));
        assert!(non_deterministic("proctime")
            .hint
            .unwrap()
            .contains("time argument"));
    }
}
