//! Integer arithmetic that fails on overflow, as in Postgres (22003
//! "bigint out of range"), instead of wrapping as DataFusion's operators
//! do; float arithmetic that fails where Postgres's does (22003 on
//! overflow and underflow, 22012 dividing by zero) instead of giving
//! ±Infinity, 0 or NaN (`float.rs`). An analyzer rule (`rule.rs`) replaces integer `+`, `-`, `*` and
//! unary minus by checked functions (`function.rs`) after type coercion.
//! Ad-hoc queries, INSERTs and materialized views all plan through the
//! analyzer, so all of them get it, and constant folding evaluates the
//! checked function (an overflow then fails when the statement runs).

mod float;
mod function;
mod rule;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{BinaryExpr, Expr};

pub use rule::CheckedArithmeticRule;

use function::Arithmetic;

/// `expr` with checked calls shown as the operators they replace, for
/// EXPLAIN output that reads like the query.
pub fn with_operators(expr: &Expr) -> Expr {
    expr.clone()
        .transform_up(|expr| Ok(as_operator(expr)))
        .map(|transformed| transformed.data)
        .unwrap_or_else(|_| expr.clone())
}

/// One checked call as its operator. Arguments are moved, not cloned: a
/// clone of a deep operand would recurse as deep as the operand is.
fn as_operator(expr: Expr) -> Transformed<Expr> {
    let Expr::ScalarFunction(mut call) = expr else {
        return Transformed::no(expr);
    };
    let arithmetic = Arithmetic::of_function_name(call.name());
    let operator = arithmetic.and_then(Arithmetic::operator);
    match (arithmetic, operator, call.args.len()) {
        (Some(_), Some(operator), 2) => {
            let right = call.args.pop().map(Box::new);
            let left = call.args.pop().map(Box::new);
            match (left, right) {
                (Some(left), Some(right)) => {
                    Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(left, operator, right)))
                }
                _ => Transformed::no(Expr::ScalarFunction(call)),
            }
        }
        (Some(_), None, 1) => match call.args.pop() {
            Some(value) => Transformed::yes(Expr::Negative(Box::new(value))),
            None => Transformed::no(Expr::ScalarFunction(call)),
        },
        _ => Transformed::no(Expr::ScalarFunction(call)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::logical_expr::LogicalPlan;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::error::{sqlstate, WeirError};

    fn context() -> SessionContext {
        let context = SessionContext::new();
        context.add_analyzer_rule(Arc::new(CheckedArithmeticRule::default()));
        context
    }

    async fn run(sql: &str) -> Result<Vec<String>, WeirError> {
        let frame = context().sql(sql).await?;
        let names = frame.schema().field_names();
        frame.collect().await?;
        Ok(names)
    }

    #[tokio::test]
    async fn overflow_fails_with_22003_where_datafusion_wraps() {
        for sql in [
            "SELECT 9223372036854775807 + 1",
            "SELECT -9223372036854775807 - 2",
            "SELECT 4611686018427387904 * 2",
            "SELECT -(a - 1) FROM (VALUES (-9223372036854775807)) AS t(a)",
            "SELECT a + a FROM (VALUES (CAST(2147483647 AS INT))) AS t(a)",
        ] {
            let error = run(sql).await.unwrap_err();
            assert_eq!(error.code, sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "{sql}");
            assert!(
                error.message.ends_with("out of range"),
                "{sql}: {}",
                error.message
            );
        }
        let error = run("SELECT 9223372036854775807 + 1").await.unwrap_err();
        assert_eq!(error.message, "bigint out of range");
    }

    #[tokio::test]
    async fn column_names_stay_those_of_the_operators() {
        let names = run("SELECT a + 1, a - a, a * 2, -a FROM (VALUES (1)) AS t(a)")
            .await
            .unwrap();
        assert_eq!(
            names,
            ["t.a + Int64(1)", "t.a - t.a", "t.a * Int64(2)", "(- t.a)"]
        );
        let grouped = "SELECT a + 1, count(*) FROM (VALUES (1), (1)) AS t(a) GROUP BY a + 1";
        assert_eq!(run(grouped).await.unwrap()[0], "t.a + Int64(1)");
    }

    #[tokio::test]
    async fn results_are_nullable_only_when_an_operand_is() {
        let context = context();
        context
            .sql("CREATE TABLE t (a BIGINT NOT NULL, b BIGINT)")
            .await
            .unwrap();
        let plan = context
            .sql("SELECT a + 1, a + b FROM t")
            .await
            .unwrap()
            .into_unoptimized_plan();
        let state = context.state();
        let analyzed = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .unwrap();
        let LogicalPlan::Projection(projection) = &analyzed else {
            panic!("{analyzed}");
        };
        assert!(matches!(projection.expr[0], Expr::ScalarFunction(_)));
        let fields = analyzed.schema().fields();
        assert!(!fields[0].is_nullable());
        assert!(fields[1].is_nullable());
    }

    #[tokio::test]
    async fn explain_shows_operators() {
        let plan = context()
            .sql("SELECT a + 1 FROM (VALUES (1)) AS t(a)")
            .await
            .unwrap()
            .into_optimized_plan()
            .unwrap();
        let LogicalPlan::Projection(projection) = &plan else {
            panic!("{plan}");
        };
        let shown = with_operators(&projection.expr[0]).to_string();
        assert!(shown.starts_with("t.a + Int64(1)"), "{shown}");
    }
}
