//! Parsing clients' catalog queries with datafusion-pg-catalog's
//! compatibility parser, minus one of its rules.
//!
//! The parser swaps whole queries it knows DataFusion cannot plan (psql's
//! policy and publication lookups, pgcli's foreign keys) for equivalent
//! ones, then applies its AST rules. One rule, `RemoveSubqueryFromProjection`,
//! replaces every correlated subquery that is a select item by NULL: psql,
//! SQLAlchemy and JDBC then read NULL where Postgres has a value (a type's
//! name, a column's default), a wrong answer without an error. weir plans
//! those lookups itself (`catalog_lookups`), so a query the parser did not
//! swap gets every rule but that one; a swapped query keeps the parser's
//! whole treatment, which its replacement text was written for. Relations
//! weir adds to pg_catalog (`ADDED_CATALOG_RELATIONS`) are qualified like the
//! crate's own, since `pg_catalog` is on every search path.

use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{self, Ident, ObjectName, ObjectNamePart, VisitMut};
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::TokenWithSpan;
use datafusion_pg_catalog::sql::rules::{
    AliasDuplicatedProjectionRewrite, CurrentUserVariableToSessionUserFunctionCall,
    FixArrayLiteral, FixVersionColumnName, PrependUnqualifiedPgTableName,
    ResolveUnqualifiedIdentifier, RewriteArrayAnyAllOperation, RewritePgCatalogOperator,
    RewriteRegCastToSubquery, SqlStatementRewriteRule, StripCallableQualifier, StripCollate,
};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::error::{Result, WeirError};

static COMPATIBILITY: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// The parser's rules in its order, without `RemoveSubqueryFromProjection`.
static RULES: LazyLock<Vec<Arc<dyn SqlStatementRewriteRule>>> = LazyLock::new(|| {
    vec![
        Arc::new(AliasDuplicatedProjectionRewrite),
        Arc::new(ResolveUnqualifiedIdentifier),
        Arc::new(RewriteArrayAnyAllOperation),
        Arc::new(PrependUnqualifiedPgTableName),
        Arc::new(StripCallableQualifier),
        Arc::new(FixArrayLiteral),
        Arc::new(CurrentUserVariableToSessionUserFunctionCall),
        Arc::new(StripCollate),
        Arc::new(RewritePgCatalogOperator),
        Arc::new(RewriteRegCastToSubquery::new()),
        Arc::new(FixVersionColumnName),
    ]
});

/// pg_catalog relations weir has and datafusion-pg-catalog has not.
pub const ADDED_CATALOG_RELATIONS: [&str; 2] = ["pg_user", "pg_indexes"];

/// One catalog statement, rewritten for DataFusion.
pub fn parse(text: &str) -> Result<ast::Statement> {
    let mut statement = rewritten(text)?;
    let _ = statement.visit(&mut QualifyAddedRelations);
    let _ = statement.visit(&mut SystemColumns);
    Ok(statement)
}

/// `alias.tableoid`, the system column naming a row's table, which psql's
/// `\dd` joins with `pg_description.classoid`: 0, since weir keeps no
/// descriptions (comments) for any object to match, and the crate's
/// catalog tables have no system columns.
struct SystemColumns;

impl ast::VisitorMut for SystemColumns {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        if let ast::Expr::CompoundIdentifier(parts) = expr {
            let system = parts.last().is_some_and(|last| {
                last.quote_style.is_none() && last.value.eq_ignore_ascii_case("tableoid")
            });
            if system && parts.len() == 2 {
                *expr = ast::Expr::value(ast::Value::Number("0".to_string(), false));
            }
        }
        ControlFlow::Continue(())
    }
}

fn rewritten(text: &str) -> Result<ast::Statement> {
    let compatible = compatible(text)?;
    let Ok(mut plain) = Parser::parse_sql(&WeirDialect::new(), text) else {
        return Ok(compatible);
    };
    let Some(plain) = plain.pop() else {
        return Ok(compatible);
    };
    // Equal after all the rules: the parser did not swap the text.
    if COMPATIBILITY.rewrite(plain.clone()) != compatible {
        return Ok(compatible);
    }
    Ok(RULES
        .iter()
        .fold(plain, |statement, rule| rule.rewrite(statement)))
}

/// What `PostgresCompatibilityParser::parse` answers, but parsed with
/// `WeirDialect` (its own parse uses sqlparser's PostgreSQL dialect, which
/// takes exponential time on nested calls: `dialect`).
fn compatible(text: &str) -> Result<ast::Statement> {
    let tokens: Vec<TokenWithSpan> = COMPATIBILITY
        .maybe_replace_tokens(text)?
        .into_iter()
        .map(TokenWithSpan::wrap)
        .collect();
    let dialect = WeirDialect::for_tokens(tokens.len());
    let statement = Parser::new(&dialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|error| super::dialect::explain_exhaustion(&dialect, error))?
        .pop()
        .ok_or_else(|| WeirError::syntax("empty statement"))?;
    Ok(COMPATIBILITY.rewrite(statement))
}

/// `pg_user` → `pg_catalog.pg_user`.
struct QualifyAddedRelations;

impl ast::VisitorMut for QualifyAddedRelations {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut ast::TableFactor) -> ControlFlow<()> {
        if let ast::TableFactor::Table {
            name, args: None, ..
        } = factor
        {
            if let [ObjectNamePart::Identifier(ident)] = name.0.as_slice() {
                let added = ADDED_CATALOG_RELATIONS.iter().any(|added| {
                    ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case(added)
                });
                if added {
                    let schema = ObjectNamePart::Identifier(Ident::new("pg_catalog"));
                    *name = ObjectName(vec![schema, name.0[0].clone()]);
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlated_select_items_stay() {
        let sql = "SELECT t.typname, (SELECT c.relkind FROM pg_catalog.pg_class c \
                   WHERE c.oid = t.typrelid) AS kind FROM pg_catalog.pg_type t";
        let parsed = parse(sql).unwrap().to_string();
        assert!(parsed.contains("(SELECT c.relkind FROM"), "{parsed}");
    }

    #[test]
    fn added_relations_are_qualified() {
        let parsed = parse("SELECT usename FROM pg_user u JOIN \"pg_user\" q ON true")
            .unwrap()
            .to_string();
        assert!(parsed.contains("FROM pg_catalog.pg_user u"), "{parsed}");
        assert!(parsed.contains("JOIN \"pg_user\""), "{parsed}");
    }

    #[test]
    fn the_other_rules_still_apply() {
        let parsed = parse("SELECT 'pg_class'::regclass, version()")
            .unwrap()
            .to_string();
        assert!(!parsed.contains("regclass"), "{parsed}");
        assert!(parsed.contains("AS version"), "{parsed}");
    }

    #[test]
    fn swapped_queries_keep_the_parsers_text() {
        // psql's extended-statistics lookup, which the parser replaces.
        let sql = "SELECT oid, stxrelid::pg_catalog.regclass, \
                   stxnamespace::pg_catalog.regnamespace::pg_catalog.text AS nsp, stxname, \
                   pg_catalog.pg_get_statisticsobjdef_columns(oid) AS columns, \
                   'd' = any(stxkind) AS ndist_enabled, 'f' = any(stxkind) AS deps_enabled, \
                   'm' = any(stxkind) AS mcv_enabled, stxstattarget \
                   FROM pg_catalog.pg_statistic_ext WHERE stxrelid = '16419' ORDER BY nsp, stxname";
        let expected = COMPATIBILITY.parse(sql).unwrap().pop().unwrap();
        assert_eq!(parse(sql).unwrap(), expected);
    }
}
