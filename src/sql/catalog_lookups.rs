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
//!
//! DataFusion cannot decorrelate a lookup whose value also reads the outer
//! row (SQLAlchemy's identity lookup, `json_build_object('always',
//! a.attidentity = 'a', 'start', s.seqstart, …)`): only filters may name
//! outer columns. Such a value is computed outside, each inner column
//! looked up on its own: `CASE WHEN (SELECT first_value(true) …) THEN
//! json_build_object('always', a.attidentity = 'a', 'start', (SELECT
//! first_value(s.seqstart) …), …) END` — NULL when no row matches, as
//! Postgres gives. A column is the outer row's when its qualifier names no
//! relation of the lookup's FROM; an unqualified one is taken as inner.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    self, Expr, SelectItem, SetExpr, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
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
        let Expr::Subquery(query) = expr else {
            return ControlFlow::Continue(());
        };
        let relations = relation_names(query);
        if lookup_value(query).is_none() {
            return ControlFlow::Continue(());
        }
        let guard = hoist_outer_conditions(query, &relations);
        let value = lookup_value(query).expect("checked above");
        let sides = Sides::of(value, &relations);
        if sides.outer && !sides.subquery {
            let template = query.as_ref().clone();
            *expr = computed_outside(&template, &sides.inner);
        } else {
            *value = call("first_value", vec![value.clone()], vec![]);
        }
        if let Some(condition) = guard {
            *expr = case_when(condition, expr.clone());
        }
        ControlFlow::Continue(())
    }
}

/// Moves the conditions of the lookup's WHERE that DataFusion cannot
/// decorrelate out of it: those reading only the outer row (SQLAlchemy's
/// `WHERE a.atthasdef AND d.adrelid = a.attrelid`), and those comparing
/// inner with outer columns other than by equality (psql's `\d`: `AND
/// a.attcollation <> t.typcollation`), whose inner columns are then looked
/// up by the remaining conditions. Returns them joined with AND; the lookup
/// is taken only when they hold, which is what the subquery gave (no row:
/// NULL).
fn hoist_outer_conditions(query: &mut ast::Query, relations: &[String]) -> Option<Expr> {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let mut conditions = Vec::new();
    split_conjunction(select.selection.take()?, &mut conditions);
    let (mut hoisted, mut kept) = (Vec::new(), Vec::new());
    for condition in conditions {
        let sides = Sides::of(&condition, relations);
        let mixed =
            sides.outer && !sides.inner.is_empty() && !is_key_equality(&condition, relations);
        match !sides.subquery && (mixed || (sides.outer && sides.inner.is_empty())) {
            true => hoisted.push((condition, sides.inner)),
            false => kept.push(condition),
        }
    }
    select.selection = conjunction(kept);
    let template = query.clone();
    let guards = hoisted.into_iter().map(|(mut condition, inner)| {
        replace_inner_columns(&mut condition, &inner, &template);
        condition
    });
    conjunction(guards.collect())
}

/// `inner = outer`: one side reads only the lookup's columns, the other only
/// the outer row's — the correlation DataFusion turns into a join key.
fn is_key_equality(condition: &Expr, relations: &[String]) -> bool {
    let Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = condition
    else {
        return false;
    };
    let (left, right) = (Sides::of(left, relations), Sides::of(right, relations));
    let inner_only = |sides: &Sides| !sides.outer && !sides.inner.is_empty();
    let outer_only = |sides: &Sides| sides.outer && sides.inner.is_empty();
    (inner_only(&left) && outer_only(&right)) || (outer_only(&left) && inner_only(&right))
}

fn split_conjunction(expr: Expr, into: &mut Vec<Expr>) {
    match expr {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split_conjunction(*left, into);
            split_conjunction(*right, into);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: ast::BinaryOperator::And,
                    ..
                }
            ) =>
        {
            split_conjunction(*inner, into)
        }
        other => into.push(other),
    }
}

fn conjunction(conditions: Vec<Expr>) -> Option<Expr> {
    conditions.into_iter().reduce(|left, right| Expr::BinaryOp {
        left: Box::new(left),
        op: ast::BinaryOperator::And,
        right: Box::new(right),
    })
}

fn case_when(condition: Expr, result: Expr) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![ast::CaseWhen { condition, result }],
        else_result: None,
    }
}

/// The names a column of the lookup's FROM may be qualified with: aliases,
/// and table names with and without their schema.
fn relation_names(query: &ast::Query) -> Vec<String> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return vec![];
    };
    let factors = select.from.iter().flat_map(|from| {
        std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
    });
    let mut names = Vec::new();
    for factor in factors {
        match factor {
            TableFactor::Table {
                alias: Some(alias), ..
            }
            | TableFactor::Derived {
                alias: Some(alias), ..
            }
            | TableFactor::Function {
                alias: Some(alias), ..
            }
            | TableFactor::UNNEST {
                alias: Some(alias), ..
            } => names.push(alias.name.value.to_ascii_lowercase()),
            TableFactor::Table { name, .. } => {
                let parts: Vec<String> = name
                    .0
                    .iter()
                    .map(|part| part.to_string().to_ascii_lowercase())
                    .collect();
                names.push(parts.join("."));
                names.extend(parts.last().cloned());
            }
            _ => {}
        }
    }
    names
}

/// Which side's columns an expression reads: the lookup's own (in order,
/// each once) or the outer row's, and whether it holds a subquery.
struct Sides {
    inner: Vec<Expr>,
    outer: bool,
    subquery: bool,
}

impl Sides {
    fn of(expr: &Expr, relations: &[String]) -> Sides {
        let mut sides = SidesVisitor {
            relations,
            sides: Sides {
                inner: vec![],
                outer: false,
                subquery: false,
            },
        };
        let _ = expr.visit(&mut sides);
        sides.sides
    }
}

struct SidesVisitor<'a> {
    relations: &'a [String],
    sides: Sides,
}

impl Visitor for SidesVisitor<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        match expr {
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                self.sides.subquery = true;
                return ControlFlow::Break(());
            }
            Expr::Identifier(_) => self.push_inner(expr),
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let qualifier = parts[..parts.len() - 1]
                    .iter()
                    .map(|part| part.value.to_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .join(".");
                match self.relations.contains(&qualifier) {
                    true => self.push_inner(expr),
                    false => self.sides.outer = true,
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

impl SidesVisitor<'_> {
    fn push_inner(&mut self, column: &Expr) {
        if !self.sides.inner.contains(column) {
            self.sides.inner.push(column.clone());
        }
    }
}

/// `CASE WHEN <a row matches> THEN <value, inner columns looked up> END`.
fn computed_outside(template: &ast::Query, inner: &[Expr]) -> Expr {
    let mut value = lookup_value(&mut template.clone())
        .cloned()
        .unwrap_or(Expr::value(ast::Value::Null));
    replace_inner_columns(&mut value, inner, template);
    case_when(
        lookup(template, Expr::value(ast::Value::Boolean(true))),
        value,
    )
}

/// The lookup selecting `first_value(selected)` instead of its value.
fn lookup(template: &ast::Query, selected: Expr) -> Expr {
    let mut query = template.clone();
    if let SetExpr::Select(select) = query.body.as_mut() {
        select.projection = vec![SelectItem::UnnamedExpr(call(
            "first_value",
            vec![selected],
            vec![],
        ))];
    }
    Expr::Subquery(Box::new(query))
}

fn replace_inner_columns(expr: &mut Expr, inner: &[Expr], template: &ast::Query) {
    let lookup = |selected: Expr| lookup(template, selected);
    let _ = VisitMut::visit(
        expr,
        &mut ReplaceColumns {
            inner,
            lookup: &lookup,
        },
    );
}

struct ReplaceColumns<'a, F> {
    inner: &'a [Expr],
    lookup: &'a F,
}

impl<F: Fn(Expr) -> Expr> VisitorMut for ReplaceColumns<'_, F> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.inner.contains(expr) {
            *expr = (self.lookup)(expr.clone());
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

    #[test]
    fn conditions_on_the_outer_row_guard_the_lookup() {
        assert_eq!(
            rewritten(
                "SELECT (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d \
                 WHERE a.atthasdef AND d.adrelid = a.attrelid AND d.adnum = a.attnum) FROM pg_attribute a"
            ),
            "SELECT CASE WHEN a.atthasdef THEN (SELECT first_value(pg_get_expr(d.adbin, d.adrelid)) \
             FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum) END FROM pg_attribute a"
        );
    }

    #[test]
    fn values_reading_the_outer_row_are_computed_outside() {
        assert_eq!(
            rewritten(
                "SELECT (SELECT json_build_object('a', a.attname, 'b', s.seqstart) FROM pg_sequence s \
                 WHERE s.seqrelid = a.attrelid) FROM pg_attribute a"
            ),
            "SELECT CASE WHEN (SELECT first_value(true) FROM pg_sequence s WHERE s.seqrelid = a.attrelid) \
             THEN json_build_object('a', a.attname, 'b', (SELECT first_value(s.seqstart) FROM pg_sequence s \
             WHERE s.seqrelid = a.attrelid)) END FROM pg_attribute a"
        );
    }

    #[test]
    fn comparisons_with_the_outer_row_look_their_inner_columns_up() {
        assert_eq!(
            rewritten(
                "SELECT (SELECT c.collname FROM pg_collation c, pg_type t WHERE c.oid = a.attcollation \
                 AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) FROM pg_attribute a"
            ),
            "SELECT CASE WHEN a.attcollation <> (SELECT first_value(t.typcollation) FROM pg_collation c, \
             pg_type t WHERE c.oid = a.attcollation AND t.oid = a.atttypid) THEN (SELECT \
             first_value(c.collname) FROM pg_collation c, pg_type t WHERE c.oid = a.attcollation AND \
             t.oid = a.atttypid) END FROM pg_attribute a"
        );
    }
}
