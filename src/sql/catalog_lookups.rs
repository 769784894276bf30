//! Scalar subqueries in clients' catalog queries that look one row up by
//! key — SQLAlchemy's `get_columns` (`(SELECT pg_get_expr(d.adbin,
//! d.adrelid) FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND …)`),
//! psql's `\dT` (`(SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid =
//! t.typrelid)`). DataFusion decorrelates a correlated scalar subquery only
//! when it aggregates ("must be aggregated to return at most one row"), so
//! in catalog queries (and only there: `parser` calls this for them) the
//! one selected value is wrapped in `first_value`. Such a lookup is by a
//! key, so it has at most one row; where Postgres would fail on a second
//! row, this takes the first.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, SelectItem, SetExpr, Visit, VisitMut, Visitor, VisitorMut,
};

use super::ast_build::call;

/// Aggregates a lookup may already use; a subquery with one is left alone.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "bool_and",
    "bool_or",
    "every",
    "first_value",
    "last_value",
];

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut LookupRewriter);
}

struct LookupRewriter;

impl VisitorMut for LookupRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Subquery(query) = expr {
            if let Some(value) = lookup_value(query) {
                let wrapped = call("first_value", vec![value.clone()], vec![]);
                *value = wrapped;
            }
        }
        ControlFlow::Continue(())
    }
}

/// The one selected value of a plain lookup: one FROM, no grouping,
/// aggregate, window, DISTINCT or LIMIT.
fn lookup_value(query: &mut ast::Query) -> Option<&mut Expr> {
    let plain = query.with.is_none() && query.limit_clause.is_none() && query.fetch.is_none();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let grouped = match &select.group_by {
        ast::GroupByExpr::All(_) => true,
        ast::GroupByExpr::Expressions(expressions, _) => !expressions.is_empty(),
    };
    if !plain
        || grouped
        || select.having.is_some()
        || select.distinct.is_some()
        || select.from.is_empty()
    {
        return None;
    }
    match select.projection.as_mut_slice() {
        [SelectItem::UnnamedExpr(value) | SelectItem::ExprWithAlias { expr: value, .. }]
            if !aggregates(value) =>
        {
            Some(value)
        }
        _ => None,
    }
}

fn aggregates(expr: &Expr) -> bool {
    struct Aggregates;
    impl Visitor for Aggregates {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Function(function) = expr {
                let name = function.name.to_string().to_ascii_lowercase();
                let name = name.rsplit('.').next().unwrap_or_default();
                if function.over.is_some() || AGGREGATES.contains(&name) {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    expr.visit(&mut Aggregates).is_break()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn lookups_take_their_one_value() {
        assert_eq!(
            rewritten(
                "SELECT a.attname, (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d \
                 WHERE d.adrelid = a.attrelid) AS default FROM pg_attribute a"
            ),
            "SELECT a.attname, (SELECT first_value(pg_get_expr(d.adbin, d.adrelid)) FROM pg_attrdef d \
             WHERE d.adrelid = a.attrelid) AS default FROM pg_attribute a"
        );
    }

    #[test]
    fn aggregating_or_limited_subqueries_stay() {
        for sql in [
            "SELECT (SELECT count(*) FROM pg_class c WHERE c.oid = t.typrelid) FROM pg_type t",
            "SELECT (SELECT c.relname FROM pg_class c LIMIT 1)",
            "SELECT (SELECT 1)",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}
