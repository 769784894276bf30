//! Integer arithmetic that fails on overflow, as in Postgres (22003
//! "bigint out of range"), instead of wrapping as DataFusion's operators
//! do. An analyzer rule (`rule.rs`) replaces integer `+`, `-`, `*` and
//! unary minus by checked functions (`function.rs`) after type coercion.
//! Ad-hoc queries, INSERTs and materialized views all plan through the
//! analyzer, so all of them get it, and constant folding evaluates the
//! checked function (an overflow then fails when the statement runs).

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
