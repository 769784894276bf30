//! The "first row" scalar subquery, `(SELECT e FROM … WHERE … ORDER BY o
//! LIMIT 1)`, which Grafana's table guess and hand-written "latest value per
//! row" queries use. DataFusion cannot decorrelate a subquery with a LIMIT
//! ("Correlated column is not allowed in predicate" or an unsupported
//! plan), but it does decorrelate an aggregate, so the subquery becomes
//! `(SELECT first_value(e ORDER BY o) FROM … WHERE …)`: the same value,
//! NULL over no rows as before. Only plain selects of one non-aggregate
//! expression are rewritten; anything else is left for DataFusion to plan
//! or refuse.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::OnceLock;

use datafusion::sql::sqlparser::ast::{
    self, Expr, Ident, LimitClause, OrderByKind, SelectItem, SetExpr, Value, Visit, VisitMut,
    Visitor, VisitorMut,
};

use super::ast_build::call;
use super::exists_value::keeps_rows_when_limited;
use super::output_names::item_name;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut FirstRowRewriter);
}

struct FirstRowRewriter;

impl VisitorMut for FirstRowRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Subquery(query) = expr {
            if let Some(ordering) = first_row_ordering(query) {
                aggregate_first_value(query, ordering);
            }
        }
        ControlFlow::Continue(())
    }
}

/// The aggregate's ordering when `query` asks for the first row of a plain
/// select of one value.
fn first_row_ordering(query: &ast::Query) -> Option<Vec<ast::OrderByExpr>> {
    if !limits_to_one_row(query.limit_clause.as_ref()) || !keeps_rows_when_limited(query) {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let (element, alias) = match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(expr)] => (expr, None),
        [SelectItem::ExprWithAlias { expr, alias }] => (expr, Some(alias.value.as_str())),
        _ => return None,
    };
    if aggregates(element) {
        return None;
    }
    let expressions = match query.order_by.as_ref().map(|order_by| &order_by.kind) {
        None => Vec::new(),
        Some(OrderByKind::Expressions(expressions)) => expressions.clone(),
        Some(OrderByKind::All(_)) => return None,
    };
    let mut ordering = expressions;
    // `ORDER BY 1` and `ORDER BY alias` name the selected value, which the
    // aggregate's ORDER BY cannot refer to by position or output name.
    for order in &mut ordering {
        let names_element = match &order.expr {
            Expr::Value(value) => matches!(&value.value, Value::Number(n, _) if n == "1"),
            Expr::Identifier(ident) => Some(ident.value.as_str()) == alias,
            _ => false,
        };
        if names_element {
            order.expr = element.clone();
        }
    }
    Some(ordering)
}

fn limits_to_one_row(limit: Option<&LimitClause>) -> bool {
    let Some(LimitClause::LimitOffset {
        limit: Some(Expr::Value(value)),
        offset: None,
        limit_by,
    }) = limit
    else {
        return false;
    };
    limit_by.is_empty() && matches!(&value.value, Value::Number(n, _) if n == "1")
}

fn aggregate_first_value(query: &mut ast::Query, ordering: Vec<ast::OrderByExpr>) {
    query.limit_clause = None;
    query.order_by = None;
    if let SetExpr::Select(select) = query.body.as_mut() {
        // The subquery's column keeps the name Postgres gives it.
        let (element, alias) = match select.projection.first() {
            Some(SelectItem::UnnamedExpr(expr)) => (expr.clone(), Ident::new(item_name(expr))),
            Some(SelectItem::ExprWithAlias { expr, alias }) => (expr.clone(), alias.clone()),
            _ => return,
        };
        select.projection = vec![SelectItem::ExprWithAlias {
            expr: call("first_value", vec![element], ordering),
            alias,
        }];
    }
}

/// Whether `expr` calls an aggregate or window function, which cannot be
/// nested inside `first_value`.
pub(super) fn aggregates(expr: &Expr) -> bool {
    struct Calls;
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Function(function)
                    if function.over.is_some() || is_aggregate_name(&function.name.to_string()) =>
                {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    expr.visit(&mut Calls).is_break()
}

fn is_aggregate_name(name: &str) -> bool {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        datafusion::functions_aggregate::all_default_aggregate_functions()
            .iter()
            .flat_map(|function| {
                std::iter::once(function.name().to_string())
                    .chain(function.aliases().iter().cloned())
            })
            .map(|name| name.to_ascii_lowercase())
            .collect()
    });
    let unqualified = name.rsplit('.').next().unwrap_or(name);
    names.contains(&unqualified.trim_matches('"').to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn first_row_becomes_first_value() {
        assert_eq!(
            rewritten(
                "SELECT (SELECT quote_ident(c) AS n FROM cs WHERE cs.t = t.name \
                 ORDER BY pos LIMIT 1) FROM t"
            ),
            "SELECT (SELECT first_value(quote_ident(c) ORDER BY pos) AS n FROM cs \
             WHERE cs.t = t.name) FROM t"
        );
    }

    #[test]
    fn ordering_by_position_or_alias_names_the_value() {
        assert_eq!(
            rewritten("SELECT (SELECT a + 1 AS n FROM s ORDER BY n DESC LIMIT 1)"),
            "SELECT (SELECT first_value(a + 1 ORDER BY a + 1 DESC) AS n FROM s)"
        );
        assert_eq!(
            rewritten("SELECT (SELECT a FROM s ORDER BY 1 LIMIT 1)"),
            "SELECT (SELECT first_value(a ORDER BY a) AS a FROM s)"
        );
    }

    #[test]
    fn other_subqueries_stay() {
        for sql in [
            "SELECT (SELECT max(a) FROM s ORDER BY 1 LIMIT 1)",
            "SELECT (SELECT row_number() OVER () FROM s LIMIT 1)",
            "SELECT (SELECT a FROM s ORDER BY a LIMIT 2)",
            "SELECT (SELECT a FROM s ORDER BY a LIMIT 1 OFFSET 1)",
            "SELECT (SELECT a FROM s GROUP BY a ORDER BY a LIMIT 1)",
            "SELECT (SELECT DISTINCT a FROM s ORDER BY a LIMIT 1)",
            "SELECT (SELECT a, b FROM s ORDER BY a LIMIT 1)",
            "SELECT * FROM t WHERE x IN (SELECT a FROM s ORDER BY a LIMIT 1)",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}
