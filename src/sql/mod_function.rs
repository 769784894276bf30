//! `mod(a, b)`, Postgres' function spelling of `a % b` (the remainder,
//! with the sign of `a`): DataFusion has the operator, not the function.
//! A plain two-argument call becomes `(a % b)`; a select item that was the
//! call keeps Postgres' column name, `mod`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, BinaryOperator, Expr, SetExpr, VisitMut, VisitorMut};

use super::ast_build::{name_items, plain_call_arguments};

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut ModRewriter);
}

struct ModRewriter;

impl VisitorMut for ModRewriter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            name_items(&mut select.projection, |expr| operands(expr).map(|_| "mod"));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some((left, right)) = operands(expr) {
            *expr = Expr::Nested(Box::new(Expr::BinaryOp {
                left: Box::new(left),
                op: BinaryOperator::Modulo,
                right: Box::new(right),
            }));
        }
        ControlFlow::Continue(())
    }
}

/// The two arguments of a plain `mod(a, b)` call.
fn operands(expr: &Expr) -> Option<(Expr, Expr)> {
    match plain_call_arguments(expr, "mod", 2)?[..] {
        [left, right] => Some((left.clone(), right.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::ast_build::rewritten;

    #[test]
    fn mod_becomes_the_operator_and_keeps_its_name() {
        assert_eq!(
            rewritten("SELECT mod(a, 3), 1 + mod(-7, b) FROM t", rewrite),
            "SELECT (a % 3) AS mod, 1 + (-7 % b) FROM t"
        );
        assert_eq!(
            rewritten("SELECT mod(a) FROM t", rewrite),
            "SELECT mod(a) FROM t"
        );
    }
}
