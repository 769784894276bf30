//! `EXISTS (…)` used as a value — in a select list (`SELECT EXISTS(SELECT 1
//! FROM t WHERE …)`, which ORMs send to test for a row) or under OR in a
//! WHERE clause. DataFusion plans EXISTS only as a filter conjunct (a semi
//! join) and refuses it anywhere else, so there it becomes a counting
//! scalar subquery, which DataFusion decorrelates into a join:
//! `(SELECT count(*) FROM … WHERE …) > 0`. A subquery with anything that
//! changes its row count (GROUP BY, aggregates, DISTINCT, LIMIT, set
//! operations) is counted whole instead: `(SELECT count(*) FROM (…) AS
//! exists_rows) > 0`. EXISTS as a conjunct of WHERE/HAVING keeps its
//! semi-join plan.

use std::ops::ControlFlow;

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, Expr, GroupByExpr, Ident, SelectItem, SetExpr, TableFactor,
    TableWithJoins, UnaryOperator, Value, Visit, VisitMut, Visitor, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

use super::ast_build::parse_query;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut SelectRewriter);
}

struct SelectRewriter;

impl VisitorMut for SelectRewriter {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in &mut select.projection {
                let unnamed_exists = matches!(item, SelectItem::UnnamedExpr(Expr::Exists { .. }));
                if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item
                {
                    rewrite_all(expr);
                    if unnamed_exists {
                        // Postgres names such a column `exists`.
                        *item = SelectItem::ExprWithAlias {
                            expr: expr.clone(),
                            alias: Ident::new("exists"),
                        };
                    }
                }
            }
            for filter in [&mut select.selection, &mut select.having]
                .into_iter()
                .flatten()
            {
                rewrite_outside_conjuncts(filter);
            }
        }
        ControlFlow::Continue(())
    }
}

/// Keeps `[NOT] EXISTS` that is a whole conjunct; rewrites the others.
fn rewrite_outside_conjuncts(expr: &mut Expr) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            rewrite_outside_conjuncts(left);
            rewrite_outside_conjuncts(right);
        }
        Expr::Nested(inner) => rewrite_outside_conjuncts(inner),
        Expr::Exists { .. } => {}
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: inner,
        } if matches!(inner.as_ref(), Expr::Exists { .. }) => {}
        other => rewrite_all(other),
    }
}

fn rewrite_all(expr: &mut Expr) {
    let _ = expr.visit(&mut ExistsRewriter);
}

struct ExistsRewriter;

impl VisitorMut for ExistsRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Exists { subquery, negated } = expr {
            let counted = counting(std::mem::replace(subquery, Box::new(empty_query())));
            *expr = Expr::BinaryOp {
                left: Box::new(Expr::Subquery(Box::new(counted))),
                op: if *negated {
                    BinaryOperator::Eq
                } else {
                    BinaryOperator::Gt
                },
                right: Box::new(Expr::value(Value::Number("0".to_string(), false))),
            };
        }
        ControlFlow::Continue(())
    }
}

/// The subquery with its select list replaced by `count(*)` when that
/// keeps its row count, otherwise wrapped and counted whole.
fn counting(mut query: Box<ast::Query>) -> ast::Query {
    if keeps_rows_when_counted(&query) {
        if let SetExpr::Select(select) = query.body.as_mut() {
            select.projection = vec![SelectItem::UnnamedExpr(count_star())];
            query.order_by = None;
            return *query;
        }
    }
    let mut outer = parse_query("SELECT count(*) FROM (SELECT 1) AS exists_rows");
    if let SetExpr::Select(select) = outer.body.as_mut() {
        if let Some(TableWithJoins {
            relation: TableFactor::Derived { subquery, .. },
            ..
        }) = select.from.first_mut()
        {
            *subquery = query;
        }
    }
    outer
}

/// A plain `SELECT … FROM … WHERE …`: no grouping, aggregate, DISTINCT,
/// limit, set operation or WITH that the count would see through.
pub(super) fn keeps_rows_when_counted(query: &ast::Query) -> bool {
    query.limit_clause.is_none() && keeps_rows_when_limited(query) && !query_calls_functions(query)
}

/// A plain `SELECT … FROM … WHERE …` but for its LIMIT and select list: no
/// grouping, HAVING, DISTINCT, fetch, set operation or WITH.
pub(super) fn keeps_rows_when_limited(query: &ast::Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let grouped = match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(expressions, modifiers) => {
            !expressions.is_empty() || !modifiers.is_empty()
        }
    };
    query.with.is_none()
        && query.fetch.is_none()
        && !grouped
        && select.having.is_none()
        && select.distinct.is_none()
        && select.top.is_none()
        && select.qualify.is_none()
        && select.named_window.is_empty()
        && !select.from.is_empty()
}

fn query_calls_functions(query: &ast::Query) -> bool {
    match query.body.as_ref() {
        SetExpr::Select(select) => calls_functions(&select.projection),
        _ => true,
    }
}

fn calls_functions(projection: &[SelectItem]) -> bool {
    struct Calls;
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            match expr {
                Expr::Function(_) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    projection
        .iter()
        .any(|item| item.visit(&mut Calls).is_break())
}

fn count_star() -> Expr {
    Parser::new(&WeirDialect::new())
        .try_with_sql("count(*)")
        .and_then(|mut parser| parser.parse_expr())
        .unwrap_or_else(|_| Expr::value(Value::Null))
}

fn empty_query() -> ast::Query {
    parse_query("SELECT 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn exists_in_a_select_list_counts_the_rows() {
        assert_eq!(
            rewritten("SELECT EXISTS (SELECT 1 FROM t WHERE t.a = 3)"),
            "SELECT (SELECT count(*) FROM t WHERE t.a = 3) > 0 AS exists"
        );
        assert_eq!(
            rewritten("SELECT k, NOT EXISTS (SELECT * FROM u WHERE u.k = t.k) AS lonely FROM t"),
            "SELECT k, (SELECT count(*) FROM u WHERE u.k = t.k) = 0 AS lonely FROM t"
        );
    }

    #[test]
    fn subqueries_whose_count_differs_are_counted_whole() {
        assert_eq!(
            rewritten("SELECT EXISTS (SELECT max(a) FROM t)"),
            "SELECT (SELECT count(*) FROM (SELECT max(a) FROM t) AS exists_rows) > 0 AS exists"
        );
        assert_eq!(
            rewritten("SELECT EXISTS (SELECT 1)"),
            "SELECT (SELECT count(*) FROM (SELECT 1) AS exists_rows) > 0 AS exists"
        );
    }

    #[test]
    fn exists_conjuncts_keep_their_semi_join() {
        let sql = "SELECT * FROM t WHERE a > 1 AND NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k)";
        assert_eq!(rewritten(sql), sql);
        assert_eq!(
            rewritten("SELECT * FROM t WHERE a > 1 OR EXISTS (SELECT 1 FROM u)"),
            "SELECT * FROM t WHERE a > 1 OR (SELECT count(*) FROM u) > 0"
        );
    }
}
