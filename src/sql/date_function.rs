//! `date(x)`, Postgres' function-call spelling of `x::date` (BI tools and
//! hand-written queries use it: `date('2024-01-02')`, `date(ts)`):
//! DataFusion has no `date` function, so a call with one argument and no
//! other clause becomes a cast. A `date` with other arguments is left for
//! the planner to refuse.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, CastKind, DataType, Expr, VisitMut, VisitorMut};

use super::ast_build::plain_call_arguments;

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

/// The argument of a plain one-argument `date(…)` call. `date(1)`:
/// Postgres has no date(integer) (42883); a number literal is left for the
/// planner to refuse.
fn date_argument(expr: &Expr) -> Option<Expr> {
    let [argument] = plain_call_arguments(expr, "date", 1)?[..] else {
        return None;
    };
    match argument {
        Expr::Value(value) if matches!(value.value, ast::Value::Number(..)) => None,
        argument => Some(argument.clone()),
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
