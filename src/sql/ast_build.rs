//! Building sqlparser syntax for the AST rewrites (`exists_value`,
//! `array_subquery`, `catalog_lookups`, `special_registers`): function
//! calls, template queries, and naming a select list's items.

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{
    self, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentClause,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, SelectItem,
};
use datafusion::sql::sqlparser::parser::Parser;

/// `name(arguments…)`, with an aggregate's ORDER BY when `ordering` has one.
pub fn call(name: &str, arguments: Vec<Expr>, ordering: Vec<ast::OrderByExpr>) -> Expr {
    let clauses = match ordering.is_empty() {
        true => vec![],
        false => vec![FunctionArgumentClause::OrderBy(ordering)],
    };
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: arguments
                .into_iter()
                .map(|argument| FunctionArg::Unnamed(FunctionArgExpr::Expr(argument)))
                .collect(),
            clauses,
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// A query written here (a template the rewrite fills in).
pub fn parse_query(sql: &str) -> ast::Query {
    Parser::new(&WeirDialect::new())
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_query())
        .map(|query| *query)
        .unwrap_or_else(|error| unreachable!("{sql}: {error}"))
}

/// Gives each unaliased item that `name_of` names that name, as Postgres
/// names such columns (`exists`, `array`, `current_user`).
pub fn name_items(projection: &mut [SelectItem], name_of: impl Fn(&Expr) -> Option<&'static str>) {
    for item in projection {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        if let Some(name) = name_of(expr) {
            *item = SelectItem::ExprWithAlias {
                expr: expr.clone(),
                alias: Ident::new(name),
            };
        }
    }
}

/// The arguments of a plain call of `name` (unquoted, any case, one part)
/// with exactly `count` unnamed arguments: no FILTER, OVER, WITHIN GROUP,
/// parameters or clauses. The rewrites of Postgres's function spellings
/// (`date(x)`, `mod(a, b)`, `date_part('f', x)`) match calls with it.
pub fn plain_call_arguments<'a>(expr: &'a Expr, name: &str, count: usize) -> Option<Vec<&'a Expr>> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let [part] = function.name.0.as_slice() else {
        return None;
    };
    let named = part
        .as_ident()
        .is_some_and(|ident| ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case(name));
    let plain = function.filter.is_none()
        && function.over.is_none()
        && function.within_group.is_empty()
        && matches!(function.parameters, ast::FunctionArguments::None);
    let ast::FunctionArguments::List(list) = &function.args else {
        return None;
    };
    if !named || !plain || !list.clauses.is_empty() || list.args.len() != count {
        return None;
    }
    list.args
        .iter()
        .map(|argument| match argument {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(expr)) => Some(expr),
            _ => None,
        })
        .collect()
}

/// `sql` after `rewrite`, as text (the rewrites' unit tests).
#[cfg(test)]
pub fn rewritten(sql: &str, rewrite: fn(&mut ast::Statement)) -> String {
    let mut statement = Parser::parse_sql(&WeirDialect::new(), sql)
        .unwrap()
        .remove(0);
    rewrite(&mut statement);
    statement.to_string()
}
