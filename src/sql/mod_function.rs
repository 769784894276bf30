//! `mod(a, b)`, Postgres' function spelling of `a % b` (the remainder,
//! with the sign of `a`): DataFusion has the operator, not the function.
//! A plain two-argument call becomes `(a % b)`; a select item that was the
//! call keeps Postgres' column name, `mod`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SetExpr, VisitMut,
    VisitorMut,
};

use super::ast_build::name_items;

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
    let Expr::Function(function) = expr else {
        return None;
    };
    let [name] = function.name.0.as_slice() else {
        return None;
    };
    let is_mod = name.as_ident().is_some_and(|ident| {
        ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("mod")
    });
    let plain = function.filter.is_none()
        && function.over.is_none()
        && function.within_group.is_empty()
        && matches!(function.parameters, FunctionArguments::None);
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match (
        is_mod && plain && list.clauses.is_empty(),
        list.args.as_slice(),
    ) {
        (
            true,
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(left)), FunctionArg::Unnamed(FunctionArgExpr::Expr(right))],
        ) => Some((left.clone(), right.clone())),
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
