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

/// `sql` after `rewrite`, as text (the rewrites' unit tests).
#[cfg(test)]
pub fn rewritten(sql: &str, rewrite: fn(&mut ast::Statement)) -> String {
    let mut statement = Parser::parse_sql(&WeirDialect::new(), sql)
        .unwrap()
        .remove(0);
    rewrite(&mut statement);
    statement.to_string()
}
