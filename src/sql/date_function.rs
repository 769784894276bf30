//! `date(x)`, Postgres' function-call spelling of `x::date` (BI tools and
//! hand-written queries use it: `date('2024-01-02')`, `date(ts)`):
//! DataFusion has no `date` function, so a call with one argument and no
//! other clause becomes a cast. A `date` with other arguments is left for
//! the planner to refuse.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, VisitMut,
    VisitorMut,
};

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut DateRewriter);
}

struct DateRewriter;

impl VisitorMut for DateRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(argument) = date_argument(expr) {
            *expr = Expr::Cast {
                kind: CastKind::DoubleColon,
                expr: Box::new(argument),
                data_type: DataType::Date,
                array: false,
                format: None,
            };
        }
        ControlFlow::Continue(())
    }
}

/// The argument of a plain one-argument `date(…)` call.
fn date_argument(expr: &Expr) -> Option<Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let [name] = function.name.0.as_slice() else {
        return None;
    };
    let is_date = name.as_ident().is_some_and(|ident| {
        ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("date")
    });
    let plain = function.filter.is_none()
        && function.over.is_none()
        && function.within_group.is_empty()
        && matches!(function.parameters, FunctionArguments::None);
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match (
        is_date && plain && list.clauses.is_empty(),
        list.args.as_slice(),
    ) {
        // `date(1)`: Postgres has no date(integer) (42883); a number
        // literal is left for the planner to refuse.
        (true, [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))])
            if matches!(value.value, ast::Value::Number(..)) =>
        {
            None
        }
        (true, [FunctionArg::Unnamed(FunctionArgExpr::Expr(argument))]) => Some(argument.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn one_argument_date_calls_become_casts() {
        assert_eq!(
            rewritten("SELECT date('2024-01-02')"),
            "SELECT '2024-01-02'::DATE"
        );
        assert_eq!(
            rewritten("SELECT DATE(ts) FROM t WHERE date(ts) > '2024-01-01'"),
            "SELECT ts::DATE FROM t WHERE ts::DATE > '2024-01-01'"
        );
        assert_eq!(rewritten("SELECT date(a, b)"), "SELECT date(a, b)");
        assert_eq!(rewritten("SELECT \"date\"(a)"), "SELECT \"date\"(a)");
    }
}
