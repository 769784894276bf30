//! `ARRAY(SELECT …)`, Postgres' array of a subquery's rows, which psql's
//! `\du` and `\d+` and BI tools' catalog queries use and DataFusion does
//! not plan ("Invalid function 'array'"). It becomes a scalar subquery
//! aggregating the rows with `array_agg`, which DataFusion decorrelates
//! when the subquery refers to the outer row: a plain `SELECT e FROM …
//! WHERE … [ORDER BY o]` becomes `(SELECT array_agg(e ORDER BY o) FROM …
//! WHERE …)`; anything else is aggregated whole, `(SELECT
//! array_agg(array_rows.element) FROM (…) AS array_rows(element))`.
//! Over no rows `array_agg` gives NULL where Postgres gives an empty array
//! (`\du`'s "Member of" is `{}`), so the subquery is wrapped in
//! `coalesce(…, make_array())`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArguments, Ident, OrderByKind, SelectItem, SetExpr, TableFactor,
    TableWithJoins, VisitMut, VisitorMut,
};

use super::ast_build::{call, name_items, parse_query};
use super::exists_value::keeps_rows_when_limited;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut ArrayRewriter);
}

struct ArrayRewriter;

impl VisitorMut for ArrayRewriter {
    type Break = ();

    /// Postgres names an unaliased `ARRAY(…)` column `array`.
    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            name_items(&mut select.projection, |expr| {
                is_array_subquery(expr).then_some("array")
            });
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if !is_array_subquery(expr) {
            return ControlFlow::Continue(());
        }
        if let Expr::Function(function) = expr {
            if let FunctionArguments::Subquery(query) = &function.args {
                let aggregated = Expr::Subquery(Box::new(aggregated(query.clone())));
                let empty = call("make_array", vec![], vec![]);
                *expr = call("coalesce", vec![aggregated, empty], vec![]);
            }
        }
        ControlFlow::Continue(())
    }
}

fn is_array_subquery(expr: &Expr) -> bool {
    let Expr::Function(function) = expr else {
        return false;
    };
    let named_array = match function.name.0.as_slice() {
        [name] => name.as_ident().is_some_and(|ident| {
            ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("array")
        }),
        _ => false,
    };
    named_array && matches!(function.args, FunctionArguments::Subquery(_))
}

fn aggregated(mut query: Box<ast::Query>) -> ast::Query {
    let order_by = query.order_by.take();
    if keeps_rows_when_limited(&query) && query.limit_clause.is_none() && !aggregates(&query) {
        if let SetExpr::Select(select) = query.body.as_mut() {
            if let [SelectItem::UnnamedExpr(element)
            | SelectItem::ExprWithAlias { expr: element, .. }] = select.projection.as_slice()
            {
                let mut ordering = match order_by.map(|order_by| order_by.kind) {
                    Some(OrderByKind::Expressions(expressions)) => expressions,
                    _ => Vec::new(),
                };
                // `ORDER BY 1` is the subquery's one column.
                for order in &mut ordering {
                    if order.expr.to_string() == "1" {
                        order.expr = element.clone();
                    }
                }
                let call = call("array_agg", vec![element.clone()], ordering);
                select.projection = vec![SelectItem::UnnamedExpr(call)];
                return *query;
            }
        }
    }
    let outer_ordering = ordering_by_element(&query, order_by.as_ref());
    query.order_by = order_by;
    let mut outer =
        parse_query("SELECT array_agg(array_rows.element) FROM (SELECT 1) AS array_rows(element)");
    if let SetExpr::Select(select) = outer.body.as_mut() {
        if let Some(TableWithJoins {
            relation: TableFactor::Derived { subquery, .. },
            ..
        }) = select.from.first_mut()
        {
            *subquery = query;
        }
        if let Some(ordering) = outer_ordering {
            let aggregate = call("array_agg", vec![element_column()], ordering);
            select.projection = vec![SelectItem::UnnamedExpr(aggregate)];
        }
    }
    outer
}

/// Aggregate functions Postgres users write in a subquery's select list:
/// a select list with one (or any window function) is aggregated whole,
/// since `array_agg` cannot take an aggregate. Scalar functions stay in
/// `array_agg`'s argument, so the subquery keeps its outer references
/// where DataFusion decorrelates them (psql's `\dD`).
const AGGREGATES: [&str; 14] = [
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
];

fn aggregates(query: &ast::Query) -> bool {
    struct Aggregates;
    impl ast::Visitor for Aggregates {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            let Expr::Function(function) = expr else {
                return ControlFlow::Continue(());
            };
            let name = function
                .name
                .0
                .last()
                .map(|part| part.to_string().to_lowercase());
            let aggregate = name.is_some_and(|name| AGGREGATES.contains(&name.as_str()));
            match aggregate || function.over.is_some() {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            }
        }
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return true;
    };
    select
        .projection
        .iter()
        .any(|item| ast::Visit::visit(item, &mut Aggregates).is_break())
}

/// A subquery's ORDER BY as an order of `array_agg` outside it, when it
/// orders by the one column (`ORDER BY 1` or the column's expression or
/// name): a derived table's own order does not reach the aggregate.
fn ordering_by_element(
    query: &ast::Query,
    order_by: Option<&ast::OrderBy>,
) -> Option<Vec<ast::OrderByExpr>> {
    let Some(OrderByKind::Expressions(expressions)) = order_by.map(|order_by| &order_by.kind)
    else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let names: Vec<String> = match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(expr)] => vec![expr.to_string()],
        [SelectItem::ExprWithAlias { expr, alias }] => vec![expr.to_string(), alias.to_string()],
        _ => return None,
    };
    expressions
        .iter()
        .map(|order| {
            let text = order.expr.to_string();
            (text == "1" || names.contains(&text)).then(|| ast::OrderByExpr {
                expr: element_column(),
                ..order.clone()
            })
        })
        .collect()
}

fn element_column() -> Expr {
    Expr::CompoundIdentifier(vec![Ident::new("array_rows"), Ident::new("element")])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn a_plain_subquery_aggregates_its_one_column_in_order() {
        assert_eq!(
            rewritten("SELECT r.name, ARRAY(SELECT m.role FROM m WHERE m.member = r.oid ORDER BY 1) FROM r"),
            "SELECT r.name, coalesce((SELECT array_agg(m.role ORDER BY m.role) FROM m WHERE m.member = r.oid), make_array()) AS array FROM r"
        );
    }

    #[test]
    fn other_subqueries_are_aggregated_whole() {
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT DISTINCT a FROM t)"),
            "SELECT coalesce((SELECT array_agg(array_rows.element) FROM (SELECT DISTINCT a FROM t) AS array_rows (element)), make_array()) AS array"
        );
        assert_eq!(
            rewritten("SELECT ARRAY(SELECT DISTINCT a FROM t ORDER BY a DESC)"),
            "SELECT coalesce((SELECT array_agg(array_rows.element ORDER BY array_rows.element DESC) \
             FROM (SELECT DISTINCT a FROM t ORDER BY a DESC) AS array_rows (element)), make_array()) AS array"
        );
        assert_eq!(rewritten("SELECT ARRAY[1, 2]"), "SELECT ARRAY[1, 2]");
    }
}
