//! USING and NATURAL joins as Postgres means them. A join column merges
//! the two sides' columns into one: after `a FULL JOIN b USING (g)`, `g`
//! is `COALESCE(a.g, b.g)` (after a RIGHT join, `b.g`), `SELECT *` lists
//! the join columns first, and a third `NATURAL JOIN` sees one `g`.
//! DataFusion keeps both sides' columns and resolves `g` to the left one:
//! a FULL join's right-only rows showed NULL, `*` kept the tables' order,
//! and a three-way NATURAL JOIN's `g` was ambiguous (42702).
//!
//! So before planning, each SELECT with such a join gets them written as
//! `ON a.g = b.g` joins, with its unqualified references to a join column
//! (and `*`) spelled as the merged column. Which columns each side has is
//! asked of the planner (`SELECT * FROM factor`), so tables, views and
//! subqueries alike are covered; a SELECT whose sides cannot be planned on
//! their own (LATERAL) is left to DataFusion as before.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::execution::SessionState;
use datafusion::sql::parser::Statement as DataFusionStatement;
use datafusion::sql::sqlparser::ast::{
    Distinct, Expr, GroupByExpr, Ident, JoinConstraint, OrderByKind, Query, Select, SelectItem,
    SetExpr, Statement, TableFactor, TableWithJoins, Visit, VisitMut, Visitor, VisitorMut,
    WildcardAdditionalOptions,
};

mod join_columns;

use super::names::identifier;
use crate::error::{Result, WeirError};
use join_columns::{constraint, joined_columns};

/// A column a FROM clause makes visible: its name, the expression an
/// unqualified reference to it means, and whether a join merged it.
#[derive(Clone)]
struct Column {
    name: String,
    reference: Expr,
    merged: bool,
}

/// The column names of each table factor, by the factor's text.
type FactorColumns = HashMap<String, Vec<String>>;

/// Rewrites the statement's USING and NATURAL joins (see the module),
/// from SQL edition 5 on: a view of an earlier edition keeps the columns
/// it was planned with.
pub async fn rewrite(statement: &mut Statement, state: &SessionState) -> Result<()> {
    if super::edition::of(state.config_options()) < 5 {
        return Ok(());
    }
    let mut collector = Factors(Vec::new());
    let _ = Visit::visit(&*statement, &mut collector);
    if collector.0.is_empty() {
        return Ok(());
    }
    // Boxed: planning futures are large, and this one is awaited inside
    // every statement's (a test thread's 2 MB stack overflowed in debug).
    let columns = Box::pin(columns_of(collector.0, state)).await;
    rewrite_with(statement, &columns)
}

async fn columns_of(factors: Vec<TableFactor>, state: &SessionState) -> FactorColumns {
    let mut columns = FactorColumns::new();
    for factor in factors {
        let key = factor.to_string();
        if columns.contains_key(&key) {
            continue;
        }
        if let Some(names) = factor_names(factor, state).await {
            columns.insert(key, names);
        }
    }
    columns
}

/// The rewrite, given the columns of the factors joined.
fn rewrite_with(statement: &mut Statement, columns: &FactorColumns) -> Result<()> {
    let mut rewriter = Queries { columns };
    match VisitMut::visit(statement, &mut rewriter) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The columns `SELECT * FROM factor` has, if it plans on its own.
async fn factor_names(factor: TableFactor, state: &SessionState) -> Option<Vec<String>> {
    let mut query = super::ast_build::parse_query("SELECT * FROM t");
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    select.from[0].relation = factor;
    let statement = Statement::Query(Box::new(query));
    let plan = state
        .statement_to_plan(DataFusionStatement::Statement(Box::new(statement)))
        .await
        .ok()?;
    Some(
        plan.schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    )
}

/// The table factors of every SELECT that has a USING or NATURAL join.
struct Factors(Vec<TableFactor>);

impl Visitor for Factors {
    type Break = ();

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        if select.from.iter().any(has_merging_join) {
            for from in &select.from {
                collect_factors(from, &mut self.0);
            }
        }
        ControlFlow::Continue(())
    }
}

fn has_merging_join(from: &TableWithJoins) -> bool {
    let nested = |factor: &TableFactor| match factor {
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => has_merging_join(table_with_joins),
        _ => false,
    };
    nested(&from.relation)
        || from.joins.iter().any(|join| {
            nested(&join.relation)
                || matches!(
                    constraint(&join.join_operator),
                    Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
                )
        })
}

fn collect_factors(from: &TableWithJoins, factors: &mut Vec<TableFactor>) {
    let factors_of = |factor: &TableFactor, factors: &mut Vec<TableFactor>| match factor {
        TableFactor::NestedJoin {
            table_with_joins,
            alias: None,
        } => collect_factors(table_with_joins, factors),
        other => factors.push(other.clone()),
    };
    factors_of(&from.relation, factors);
    for join in &from.joins {
        factors_of(&join.relation, factors);
    }
}

/// Rewrites each query's SELECTs and its ORDER BY.
struct Queries<'a> {
    columns: &'a FactorColumns,
}

impl VisitorMut for Queries<'_> {
    type Break = WeirError;

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<WeirError> {
        match rewrite_query(query, self.columns) {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => ControlFlow::Break(error),
        }
    }
}

fn rewrite_query(query: &mut Query, columns: &FactorColumns) -> Result<()> {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return rewrite_set_operands(query.body.as_mut(), columns);
    };
    let Some(merged) = rewrite_select(select, columns)? else {
        return Ok(());
    };
    let outputs = output_names(&select.projection);
    let Some(order_by) = query.order_by.as_mut() else {
        return Ok(());
    };
    if let OrderByKind::Expressions(items) = &mut order_by.kind {
        for item in items {
            // ORDER BY a bare name means the output column of that name
            // first, as in Postgres.
            let output = matches!(&item.expr, Expr::Identifier(ident)
                if outputs.contains(&identifier(ident)));
            if !output {
                replace_references(&mut item.expr, &merged);
            }
        }
    }
    Ok(())
}

fn rewrite_set_operands(body: &mut SetExpr, columns: &FactorColumns) -> Result<()> {
    match body {
        SetExpr::Select(select) => rewrite_select(select, columns).map(|_| ()),
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_set_operands(left, columns)?;
            rewrite_set_operands(right, columns)
        }
        _ => Ok(()),
    }
}

/// Rewrites one SELECT; returns its merged columns by name, or None when
/// it has no USING or NATURAL join or a side's columns are unknown.
fn rewrite_select(
    select: &mut Select,
    columns: &FactorColumns,
) -> Result<Option<HashMap<String, Expr>>> {
    if !select.from.iter().any(has_merging_join) {
        return Ok(None);
    }
    let mut from = select.from.clone();
    let mut visible = Vec::new();
    for item in &mut from {
        match joined_columns(item, columns)? {
            Some(item_columns) => visible.extend(item_columns),
            None => return Ok(None),
        }
    }
    select.from = from;
    let merged = merged_references(&visible);
    select.projection = project(std::mem::take(&mut select.projection), &visible, &merged);
    let mut expressions: Vec<&mut Expr> = Vec::new();
    expressions.extend(select.selection.as_mut());
    expressions.extend(select.having.as_mut());
    expressions.extend(select.qualify.as_mut());
    if let GroupByExpr::Expressions(items, _) = &mut select.group_by {
        expressions.extend(items.iter_mut());
    }
    if let Some(Distinct::On(items)) = &mut select.distinct {
        expressions.extend(items.iter_mut());
    }
    for expression in expressions {
        replace_references(expression, &merged);
    }
    Ok(Some(merged))
}

/// The select list with `*` spelled out and references to merged columns
/// replaced; a bare reference keeps its name.
fn project(
    items: Vec<SelectItem>,
    visible: &[Column],
    merged: &HashMap<String, Expr>,
) -> Vec<SelectItem> {
    let mut projection = Vec::with_capacity(items.len());
    for item in items {
        match item {
            SelectItem::Wildcard(options) if plain_wildcard(&options) => {
                projection.extend(visible.iter().map(|column| match column.merged {
                    true => SelectItem::ExprWithAlias {
                        expr: column.reference.clone(),
                        alias: Ident::with_quote('"', column.name.clone()),
                    },
                    false => SelectItem::UnnamedExpr(column.reference.clone()),
                }))
            }
            SelectItem::UnnamedExpr(Expr::Identifier(ident))
                if merged.contains_key(&identifier(&ident)) =>
            {
                projection.push(SelectItem::ExprWithAlias {
                    expr: merged[&identifier(&ident)].clone(),
                    alias: ident,
                })
            }
            SelectItem::UnnamedExpr(mut expr) => {
                replace_references(&mut expr, merged);
                projection.push(SelectItem::UnnamedExpr(expr))
            }
            SelectItem::ExprWithAlias { mut expr, alias } => {
                replace_references(&mut expr, merged);
                projection.push(SelectItem::ExprWithAlias { expr, alias })
            }
            other => projection.push(other),
        }
    }
    projection
}

fn plain_wildcard(options: &WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
        && options.opt_alias.is_none()
}

fn output_names(projection: &[SelectItem]) -> Vec<String> {
    projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(identifier(alias)),
            SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(identifier(ident)),
            _ => None,
        })
        .collect()
}

/// Merged columns whose name no other visible column has.
fn merged_references(visible: &[Column]) -> HashMap<String, Expr> {
    visible
        .iter()
        .filter(|column| column.merged)
        .filter(|column| visible.iter().filter(|c| c.name == column.name).count() == 1)
        .map(|column| (column.name.clone(), column.reference.clone()))
        .collect()
}

/// Replaces the expression's unqualified references to merged columns,
/// not descending into subqueries (their names are their own).
fn replace_references(expr: &mut Expr, merged: &HashMap<String, Expr>) {
    if merged.is_empty() {
        return;
    }
    let _ = VisitMut::visit(expr, &mut References { merged, depth: 0 });
}

struct References<'a> {
    merged: &'a HashMap<String, Expr>,
    depth: usize,
}

impl VisitorMut for References<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0 {
            if let Expr::Identifier(ident) = expr {
                if let Some(reference) = self.merged.get(&identifier(ident)) {
                    *expr = reference.clone();
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
#[path = "using_joins_tests.rs"]
mod tests;
