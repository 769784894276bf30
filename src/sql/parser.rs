//! Statement splitting and parsing.
//!
//! Catalog queries sent by psql and BI tools (`pg_catalog`, `regclass`,
//! `information_schema`, ...) go through datafusion-pg-catalog's compatibility
//! parser, which rewrites Postgres-only constructs into ones DataFusion can
//! plan. Its rewrites are meant for those catalog queries (one replaces
//! unsupported projection subqueries with NULL), so ordinary user statements
//! are parsed by sqlparser unchanged: a user query never silently changes
//! meaning.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::error::Result;

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// A statement in sqlparser's PostgreSQL grammar.
    Standard(Box<ast::Statement>),
}

static COMPATIBILITY: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// Words that mark a statement as a client's catalog query.
const CATALOG_MARKERS: &[&str] = &[
    "information_schema",
    "regclass",
    "regtype",
    "regproc",
    "regnamespace",
    "regrole",
    "current_schema",
    "current_schemas",
    "current_user",
    "session_user",
    "current_database",
    "version",
];

/// Parses `sql` into its statements (an empty list for an empty string).
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    let dialect = PostgreSqlDialect {};
    let statements = if is_catalog_query(sql) {
        COMPATIBILITY.parse(sql)?
    } else {
        Parser::parse_sql(&dialect, sql)?
    };
    Ok(statements
        .into_iter()
        .map(|statement| Statement::Standard(Box::new(statement)))
        .collect())
}

fn is_catalog_query(sql: &str) -> bool {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return false;
    };
    tokens.iter().any(|token| match token {
        Token::Word(word) => {
            let value = word.value.to_ascii_lowercase();
            value.starts_with("pg_") || CATALOG_MARKERS.contains(&value.as_str())
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standard(sql: &str) -> ast::Statement {
        let mut statements = parse(sql).unwrap();
        assert_eq!(statements.len(), 1);
        let Statement::Standard(statement) = statements.remove(0);
        *statement
    }

    #[test]
    fn splits_multiple_statements() {
        assert_eq!(parse("SELECT 1; SELECT 2;").unwrap().len(), 2);
        assert!(parse("  ").unwrap().is_empty());
    }

    #[test]
    fn syntax_errors_carry_sqlstate_42601() {
        let error = parse("SELEC 1").unwrap_err();
        assert_eq!(error.code, crate::error::sqlstate::SYNTAX_ERROR);
        assert!(error.message.contains("SELEC"), "{}", error.message);
    }

    #[test]
    fn user_queries_are_not_rewritten() {
        let sql = "SELECT a, (SELECT max(b) FROM t2 WHERE t2.a = t1.a) AS m FROM t1";
        assert_eq!(standard(sql).to_string(), sql);
    }

    #[test]
    fn catalog_queries_are_detected() {
        assert!(is_catalog_query("SELECT * FROM pg_catalog.pg_class"));
        assert!(is_catalog_query("select 'x'::regclass"));
        assert!(!is_catalog_query("SELECT * FROM orders"));
        assert!(!is_catalog_query("SELECT 'pg_class' AS name"));
    }

    #[test]
    fn psql_describe_query_parses() {
        let sql = "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c \
                   LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default \
                   AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3;";
        assert_eq!(parse(sql).unwrap().len(), 1);
    }
}
