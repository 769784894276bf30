//! Postgres lets a SELECT list repeat an output name (`SELECT -1, -1`,
//! `SELECT a, a FROM t`, `SELECT 1 AS x, 2 AS x`); DataFusion refuses a
//! projection whose expressions share a name. A repeated item is given an
//! alias DataFusion accepts: the name clients should see, a marker, and its
//! position; `output_names` reports the part before the marker, so the
//! client sees Postgres's names.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, Value, VisitMut, VisitorMut,
};

/// Separates the reported name from what makes an alias unique; a control
/// character, so no name a user writes is mistaken for one of these.
const MARKER: char = '\u{1f}';

/// Aliases the repeated items of the statement's SELECT lists
/// (a query, or the query of an INSERT … SELECT).
pub fn name_repeated_columns(statement: &mut Statement) {
    match statement {
        Statement::Query(query) => name_in_query(query),
        Statement::Insert(insert) => {
            if let Some(source) = insert.source.as_mut() {
                name_in_query(source);
            }
        }
        _ => {}
    }
}

/// An item's text as DataFusion names it: every subquery is `(<subquery>)`,
/// so `(SELECT a) = 1, (SELECT b) = 1` share a name; a cast is named after
/// what it casts (`x::int, x::text`, `DATE 'd', TIMESTAMP 'd'`), and a decimal literal after its
/// float value (`1.5`, `1.50`).
fn planned_name(expr: &Expr) -> String {
    struct MaskSubqueries;
    impl VisitorMut for MaskSubqueries {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            match expr {
                Expr::Subquery(_) => *expr = Expr::Identifier(Ident::new("(<subquery>)")),
                Expr::Cast { expr: inner, .. } | Expr::Nested(inner) => {
                    let placeholder = Expr::Identifier(Ident::new(""));
                    *expr = std::mem::replace(inner.as_mut(), placeholder);
                }
                // `DATE '…'` is planned as a cast of the text.
                Expr::TypedString(typed) => *expr = Expr::Value(typed.value.clone()),
                Expr::Value(value) => {
                    if let Value::Number(text, _) = &mut value.value {
                        let decimal = text.contains(['.', 'e', 'E']);
                        if let Some(float) = text.parse::<f64>().ok().filter(|_| decimal) {
                            *text = format!("Float64({float})");
                        }
                    }
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut masked = expr.clone();
    let _ = VisitMut::visit(&mut masked, &mut MaskSubqueries);
    masked.to_string()
}

/// The name to report for an alias given here (None for any other alias).
pub fn reported_name(alias: &str) -> Option<&str> {
    alias.split_once(MARKER).map(|(name, _)| name)
}

fn name_in_query(query: &mut Query) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut seen = HashSet::new();
    for (position, item) in select.projection.iter_mut().enumerate() {
        let key = match item {
            SelectItem::UnnamedExpr(expr) => planned_name(expr),
            SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
            _ => continue,
        };
        if seen.insert(key) {
            continue;
        }
        match item {
            SelectItem::UnnamedExpr(expr) => {
                let shown = shown_name(expr);
                let alias = Ident::with_quote('"', format!("{shown}{MARKER}{position}"));
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias,
                };
            }
            SelectItem::ExprWithAlias { alias, .. } => {
                let shown = std::mem::take(&mut alias.value);
                *alias = Ident::with_quote('"', format!("{shown}{MARKER}{position}"));
            }
            _ => {}
        }
    }
}

/// What Postgres names the column: a column's own name, else what
/// `output_names` says for the expression.
fn shown_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(ident) => ident.value.clone(),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map_or_else(|| "?column?".to_string(), |ident| ident.value.clone()),
        other => {
            super::output_names::expression_name(other).unwrap_or_else(|| "?column?".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{parse, Statement as WeirStatement};

    fn aliases(sql: &str) -> Vec<Option<String>> {
        let WeirStatement::Standard(statement) = parse(sql).unwrap().remove(0) else {
            panic!("not a standard statement");
        };
        let query = match *statement {
            Statement::Query(query) => query,
            Statement::Insert(insert) => insert.source.unwrap(),
            other => panic!("{other}"),
        };
        let SetExpr::Select(select) = *query.body else {
            panic!("not a select");
        };
        select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_repeats_get_aliases_that_report_postgres_names() {
        let given = aliases("SELECT -1, -1, a, a, a AS b, count(*), count(*) FROM t");
        assert_eq!(given[0], None);
        assert_eq!(given[2], None);
        assert_eq!(given[4].as_deref(), Some("b"));
        assert_eq!(given[3].as_deref().and_then(reported_name), Some("a"));
        let reported: Vec<Option<&str>> = given
            .iter()
            .map(|alias| alias.as_deref().and_then(reported_name))
            .collect();
        assert_eq!(
            reported,
            vec![
                None,
                Some("?column?"),
                None,
                Some("a"),
                None,
                None,
                Some("count")
            ]
        );
        // Casts are named after what they cast.
        let casts =
            aliases("SELECT a::int, a::text, 1.5::float8::text, CAST(1.50 AS NUMERIC)::text");
        assert_eq!(casts[0], None);
        assert_eq!(casts[1].as_deref().and_then(reported_name), Some("a"));
        assert_eq!(casts[2], None);
        assert_eq!(casts[3].as_deref().and_then(reported_name), Some("text"));
        let typed = aliases("SELECT date_trunc('day', DATE '2024-01-01'), date_trunc('day', TIMESTAMP '2024-01-01')");
        assert_eq!(
            typed[1].as_deref().and_then(reported_name),
            Some("date_trunc")
        );
        let named = aliases("SELECT 1 AS x, 2 AS x");
        assert_eq!(named[0].as_deref(), Some("x"));
        assert_eq!(named[1].as_deref().and_then(reported_name), Some("x"));
        let inserted = aliases("INSERT INTO t SELECT -1, -1");
        assert_eq!(
            inserted[1].as_deref().and_then(reported_name),
            Some("?column?")
        );
    }
}
