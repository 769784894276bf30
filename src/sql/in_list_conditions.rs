//! `CASE WHEN x IN (SELECT …) THEN …` in a select list or ORDER BY
//! (Grafana's table list): DataFusion turns IN subqueries into joins only in
//! filters and fails elsewhere ("Physical plan does not support logical
//! expression InSubquery"). As a CASE condition — where NULL and false both
//! fall through to the next branch — `x IN (subquery)` is exactly
//! `array_has((SELECT array_agg(v) FROM (subquery) AS in_list(v)), x)`, a
//! scalar subquery DataFusion plans anywhere. NOT IN is left alone: there
//! NULL and true differ.

use std::ops::ControlFlow;

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{self, Expr, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::parser::Parser;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut InListRewriter);
}

struct InListRewriter;

impl VisitorMut for InListRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Case { conditions, .. } = expr else {
            return ControlFlow::Continue(());
        };
        for when in conditions {
            if let Some(rewritten) = as_array_has(&when.condition) {
                when.condition = rewritten;
            }
        }
        ControlFlow::Continue(())
    }
}

fn as_array_has(condition: &Expr) -> Option<Expr> {
    if let Expr::Nested(inner) = condition {
        return as_array_has(inner);
    }
    let Expr::InSubquery {
        expr,
        subquery,
        negated: false,
    } = condition
    else {
        return None;
    };
    // Built from a template and the two parts as trees: the subquery's
    // text may not parse back (`current_user()`).
    let mut lookup = Parser::new(&WeirDialect::new())
        .try_with_sql(
            "array_has((SELECT array_agg(in_list.v) FROM (SELECT 1) AS in_list(v)), in_list_value)",
        )
        .ok()?
        .parse_expr()
        .ok()?;
    let _ = VisitMut::visit(&mut lookup, &mut Fill { expr, subquery });
    Some(lookup)
}

/// Puts the IN's value and subquery into the template.
struct Fill<'a> {
    expr: &'a Expr,
    subquery: &'a ast::Query,
}

impl VisitorMut for Fill<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut ast::TableFactor) -> ControlFlow<()> {
        if let ast::TableFactor::Derived { subquery, .. } = factor {
            **subquery = self.subquery.clone();
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if matches!(expr, Expr::Identifier(ident) if ident.value == "in_list_value") {
            *expr = self.expr.clone();
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, super::rewrite)
    }

    #[test]
    fn in_subqueries_as_case_conditions_become_array_lookups() {
        assert_eq!(
            rewritten("SELECT CASE WHEN s IN (SELECT n FROM t) THEN 1 ELSE 2 END FROM u"),
            "SELECT CASE WHEN array_has((SELECT array_agg(in_list.v) FROM (SELECT n FROM t) AS in_list (v)), s) \
             THEN 1 ELSE 2 END FROM u"
        );
    }

    #[test]
    fn catalog_queries_are_rewritten_too() {
        let statements = crate::sql::parse(
            "SELECT CASE WHEN quote_ident(table_schema) IN (SELECT user) THEN 1 END \
             FROM information_schema.tables",
        )
        .unwrap();
        let text = format!("{statements:?}");
        assert!(text.contains("array_has"), "{text}");
    }

    #[test]
    fn not_in_and_filters_stay() {
        for sql in [
            "SELECT CASE WHEN s NOT IN (SELECT n FROM t) THEN 1 END FROM u",
            "SELECT s FROM u WHERE s IN (SELECT n FROM t)",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}
