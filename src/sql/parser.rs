//! Statement splitting and parsing.
//!
//! The input is tokenized once and split at semicolons. Each statement's
//! tokens first pass through weir's extensions (the Flink window spelling,
//! `WATERMARK FOR` / `APPEND ONLY` in CREATE TABLE), then sqlparser parses
//! what remains, and window table functions are rewritten (`windows`).
//!
//! Catalog queries sent by psql and BI tools (`pg_catalog`, `regclass`,
//! `information_schema`, ...) go through datafusion-pg-catalog's compatibility
//! parser, which rewrites Postgres-only constructs into ones DataFusion can
//! plan (`catalog_compatibility`). Its rewrites are meant for those catalog
//! queries, so ordinary user statements
//! are parsed by sqlparser unchanged: a user query never silently changes
//! meaning.

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::materialized::{self, MaterializedView};
use super::stream_ddl::{self, StreamOptions};
use super::windows;
use crate::error::{Result, WeirError};

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// A statement in sqlparser's PostgreSQL grammar.
    Standard(Box<ast::Statement>),
    /// `FLUSH`: wait until views reflect everything read so far.
    Flush,
    /// CREATE TABLE with weir's stream options (WATERMARK, APPEND ONLY);
    /// `text` is the full statement as written, for the catalog.
    CreateTable {
        statement: Box<ast::Statement>,
        text: String,
        options: StreamOptions,
    },
    /// `[EXPLAIN] CREATE MATERIALIZED VIEW ... [EMIT ON WINDOW CLOSE]`.
    CreateMaterializedView(Box<MaterializedView>),
    /// `ALTER SYSTEM SET name = value` (None: `ALTER SYSTEM RESET name`).
    AlterSystem { name: String, value: Option<String> },
    /// `ALTER TABLE t SET (retention = ...)` / `RESET (retention)`.
    AlterRetention(super::alter_table::AlterRetention),
    /// `DROP SOURCE [IF EXISTS] name, ...`.
    DropSource { names: Vec<String>, if_exists: bool },
    /// SUBSCRIBE, DECLARE … CURSOR FOR SUBSCRIBE, FETCH, CLOSE, COPY
    /// (SUBSCRIBE …) TO STDOUT.
    Changefeed(super::subscribe::Changefeed),
    /// CREATE SINK, DROP SINK, SHOW CREATE SINK.
    Sink(super::sink_ddl::SinkStatement),
    /// CREATE/ALTER/DROP ROLE or USER.
    Role(super::role_ddl::RoleStatement),
    /// GRANT or REVOKE.
    Privilege(super::privilege_ddl::PrivilegeStatement),
}

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
    "current_database",
    "version",
];

/// Parses `sql` into its statements (an empty list for an empty string).
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    let tokens = Tokenizer::new(&WeirDialect::new(), sql)
        .tokenize_with_location()
        .map_err(|error| WeirError::syntax(format!("syntax error: {error}")))?;
    super::placeholders::check_numbers(&tokens)?;
    split(tokens)
        .into_iter()
        .filter(|tokens| tokens.iter().any(|t| !is_trivia(&t.token)))
        .map(parse_one)
        .collect()
}

fn is_trivia(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_) | Token::EOF)
}

fn split(tokens: Vec<TokenWithSpan>) -> Vec<Vec<TokenWithSpan>> {
    let mut statements = vec![Vec::new()];
    for token in tokens {
        match token.token {
            Token::SemiColon => statements.push(Vec::new()),
            Token::EOF => {}
            _ => statements
                .last_mut()
                .map_or((), |current| current.push(token)),
        }
    }
    statements
}

pub(super) fn render(tokens: &[TokenWithSpan]) -> String {
    tokens
        .iter()
        .map(|t| t.token.to_string())
        .collect::<String>()
        .trim()
        .to_string()
}

fn parse_one(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let text = render(&tokens);
    if text.eq_ignore_ascii_case("FLUSH") {
        return Ok(Statement::Flush);
    }
    if let Some((name, value)) = super::alter_system::parse(&tokens)? {
        return Ok(Statement::AlterSystem { name, value });
    }
    if let Some(alter) = super::alter_table::parse(&tokens)? {
        return Ok(Statement::AlterRetention(alter));
    }
    if let Some((names, if_exists)) = super::source_ddl::parse_drop(&tokens)? {
        return Ok(Statement::DropSource { names, if_exists });
    }
    if let Some(sink) = super::sink_ddl::parse(&tokens, &text)? {
        return Ok(Statement::Sink(sink));
    }
    if let Some(role) = super::role_ddl::parse(&tokens)? {
        return Ok(Statement::Role(role));
    }
    super::privilege_ddl::refuse_membership(&tokens)?;
    if let Some(changefeed) = super::subscribe::parse(&tokens)? {
        return Ok(Statement::Changefeed(changefeed));
    }
    let tokens = super::source_ddl::show_create_as_table(tokens);
    let tokens = windows::normalize_flink_spelling(tokens)?;
    // A view keeps its text with the lookup clauses, so a restart plans
    // its lookup joins again.
    let unstripped = tokens
        .iter()
        .any(|token| super::tokens::is_word(&token.token, "SYSTEM_TIME"))
        .then(|| tokens.clone());
    let (tokens, lookup_tables) = super::lookup_join::strip(tokens)?;
    let tokens = materialized::show_create_as_view(tokens);
    if let Some(materialized::Split {
        explain,
        create,
        text,
        emit,
        every,
    }) = materialized::split(&tokens)
    {
        let with_lookups = unstripped
            .and_then(|tokens| materialized::split(&materialized::show_create_as_view(tokens)));
        let text = render(&with_lookups.map_or(text, |split| split.text));
        let statement = parse_tokens(create)?;
        super::limits::check_nesting(&statement)?;
        materialized::check(&statement)?;
        let mut options = match &statement {
            ast::Statement::CreateView(create) => {
                super::view_options::view_options(&create.options)?
            }
            _ => super::ViewOptions::default(),
        };
        options.lookup_tables = lookup_tables;
        if let Some(every) = every {
            options.firing_interval_ns = Some(super::view_options::firing_interval(every)?);
        }
        return Ok(Statement::CreateMaterializedView(Box::new(
            MaterializedView {
                statement: windows::rewrite_streaming(statement)?,
                text,
                emit,
                options,
                explain,
            },
        )));
    }
    let (tokens, options) = stream_ddl::extract(tokens)?;
    let tokens = to_regtype_as_cast(tokens);
    let tokens = regtype_text_as_format_type(tokens);
    let statement = if is_catalog_query(&tokens) {
        let tokens = super::client_idioms::rewrite(tokens);
        let mut statement = super::catalog_compatibility::parse(&render(&tokens))?;
        super::regclass_cast::rewrite(&mut statement);
        super::catalog_lookups::rewrite(&mut statement);
        statement
    } else {
        parse_tokens(tokens)?
    };
    if let Some(privilege) = super::privilege_ddl::from_statement(&statement) {
        return privilege.map(Statement::Privilege);
    }
    // Before anything walks the tree recursively.
    super::limits::check_nesting(&statement)?;
    let mut statement = windows::rewrite(statement)?;
    postgres_rewrites(&mut statement, crate::catalog::SQL_EDITION)?;
    Ok(match options {
        Some(options) => Statement::CreateTable {
            statement: Box::new(statement),
            text,
            options,
        },
        None => Statement::Standard(Box::new(statement)),
    })
}

/// The Postgres constructs DataFusion plans otherwise, rewritten into ones
/// it plans as Postgres means them. A query's statement gets them when
/// parsed; a materialized view's when planned (engine::materialized), from
/// SQL edition 3 on, as views of earlier editions were planned without.
/// `edition`: the SQL edition the statement is planned by (a view keeps
/// its own; catalog::SQL_EDITION).
pub fn postgres_rewrites(statement: &mut ast::Statement, edition: u32) -> Result<()> {
    super::character_lengths::rewrite(statement);
    // Before naming repeated columns: these two name the items they change.
    super::special_registers::rewrite(statement);
    super::exists_value::rewrite(statement);
    super::array_subquery::rewrite(statement);
    super::mod_function::rewrite(statement);
    if edition >= 4 {
        super::extract_types::rewrite(statement);
    }
    super::first_row_subquery::rewrite(statement);
    if edition >= 5 {
        super::single_row_subquery::rewrite(statement);
    }
    super::in_list_conditions::rewrite(statement);
    super::repeated_columns::name_repeated_columns(statement);
    super::like_escape::rewrite(statement);
    super::generate_subscripts::rewrite(statement);
    super::field_access::rewrite(statement);
    super::date_function::rewrite(statement);
    super::interval_text::rewrite(statement, edition);
    super::to_char_pattern::rewrite(statement, edition)
}

pub(super) fn parse_tokens(tokens: Vec<TokenWithSpan>) -> Result<ast::Statement> {
    let dialect = WeirDialect::for_tokens(tokens.len());
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let statement = parser
        .parse_statement()
        .map_err(|error| super::dialect::explain_exhaustion(&dialect, error))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(WeirError::syntax(format!(
            "syntax error: Expected: end of statement, found: {} at {}",
            next.token, next.span.start
        ))
        .with_hint("Check the statement near the line and column shown."));
    }
    Ok(statement)
}

/// `to_regtype(x)` for one token `x` (a literal or `$n`) becomes
/// `x::regtype`, which the catalog parser resolves against pg_type — NULL
/// for a type that does not exist, as `to_regtype` answers (psycopg asks
/// it for each type it adapts).
fn to_regtype_as_cast(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let is_call = |window: &[TokenWithSpan]| {
        matches!(&window[0].token, Token::Word(word) if word.value.eq_ignore_ascii_case("to_regtype"))
            && window[1].token == Token::LParen
            && window[3].token == Token::RParen
    };
    if !tokens.windows(4).any(is_call) {
        return tokens;
    }
    let mut rewritten = Vec::with_capacity(tokens.len());
    let mut index = 0;
    while index < tokens.len() {
        if index + 4 <= tokens.len() && is_call(&tokens[index..index + 4]) {
            rewritten.push(tokens[index + 2].clone());
            rewritten.push(TokenWithSpan::wrap(Token::DoubleColon));
            rewritten.push(TokenWithSpan::wrap(Token::make_word("regtype", None)));
            index += 4;
        } else {
            rewritten.push(tokens[index].clone());
            index += 1;
        }
    }
    rewritten
}

/// `name::regtype::text` (a type oid column shown as its type's name, as
/// pgcli asks for `prorettype`) becomes `pg_catalog.format_type(name,
/// NULL)`: the catalog parser's regtype cast keeps the oid, so its text
/// would be a number. `name` is a column, possibly qualified.
fn regtype_text_as_format_type(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let is_word = |token: &Token, value: &str| matches!(token, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(value));
    let is_cast_to_text = |window: &[TokenWithSpan]| {
        window[0].token == Token::DoubleColon
            && is_word(&window[1].token, "regtype")
            && window[2].token == Token::DoubleColon
            && is_word(&window[3].token, "text")
    };
    if !tokens.windows(4).any(is_cast_to_text) {
        return tokens;
    }
    let mut rewritten: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut index = 0;
    while index < tokens.len() {
        if index + 4 <= tokens.len() && is_cast_to_text(&tokens[index..index + 4]) {
            let operand_start = rewritten.len() - operand_length(&rewritten);
            if operand_start < rewritten.len() {
                let operand = rewritten.split_off(operand_start);
                let word = |value: &str| TokenWithSpan::wrap(Token::make_word(value, None));
                rewritten.extend([word("pg_catalog"), TokenWithSpan::wrap(Token::Period)]);
                rewritten.extend([word("format_type"), TokenWithSpan::wrap(Token::LParen)]);
                rewritten.extend(operand);
                rewritten.extend([TokenWithSpan::wrap(Token::Comma), word("NULL")]);
                rewritten.push(TokenWithSpan::wrap(Token::RParen));
                index += 4;
                continue;
            }
        }
        rewritten.push(tokens[index].clone());
        index += 1;
    }
    rewritten
}

/// How many tokens at the end of `tokens` form a (qualified) column name.
fn operand_length(tokens: &[TokenWithSpan]) -> usize {
    let mut length: usize = 0;
    let mut expect_word = true;
    for token in tokens.iter().rev() {
        match (&token.token, expect_word) {
            (Token::Word(_), true) => length += 1,
            (Token::Period, false) => length += 1,
            _ => break,
        }
        expect_word = !expect_word;
    }
    // A name ends in a word, never in a period.
    if length % 2 == 0 {
        length.saturating_sub(1)
    } else {
        length
    }
}

fn is_catalog_query(tokens: &[TokenWithSpan]) -> bool {
    tokens.iter().any(|token| match &token.token {
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
        match statements.remove(0) {
            Statement::Standard(statement) => *statement,
            other => panic!("not standard: {other:?}"),
        }
    }

    fn tokens(sql: &str) -> Vec<TokenWithSpan> {
        Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap()
    }

    #[test]
    fn regtype_text_casts_become_format_type() {
        let rewritten = render(&regtype_text_as_format_type(tokens(
            "SELECT prorettype::regtype::text, p.proargtypes::regtype, x FROM pg_proc p",
        )));
        assert_eq!(
            rewritten,
            "SELECT pg_catalog.format_type(prorettype,NULL), p.proargtypes::regtype, x FROM pg_proc p"
        );
    }

    #[test]
    fn splits_multiple_statements() {
        assert_eq!(parse("SELECT 1; SELECT 2;").unwrap().len(), 2);
        assert_eq!(parse("SELECT ';'; ; -- c\n").unwrap().len(), 1);
        assert!(parse("  ").unwrap().is_empty());
    }

    #[test]
    fn syntax_errors_carry_sqlstate_42601() {
        let error = parse("SELEC 1").unwrap_err();
        assert_eq!(error.code, crate::error::sqlstate::SYNTAX_ERROR);
        assert!(error.message.contains("SELEC"), "{}", error.message);
        assert_eq!(parse("SELECT 1 2").unwrap_err().code, "42601");
    }

    #[test]
    fn to_regtype_becomes_a_regtype_cast() {
        let rewritten = to_regtype_as_cast(tokens("SELECT oid = to_regtype($1), to_regtype('x')"));
        assert_eq!(render(&rewritten), "SELECT oid = $1::regtype, 'x'::regtype");
        let untouched = to_regtype_as_cast(tokens("SELECT to_regtype(a || b)"));
        assert_eq!(render(&untouched), "SELECT to_regtype(a || b)");
    }

    #[test]
    fn user_queries_are_not_rewritten() {
        let sql = "SELECT a, (SELECT max(b) FROM t2 WHERE t2.a = t1.a) AS m FROM t1";
        assert_eq!(standard(sql).to_string(), sql);
    }

    #[test]
    fn catalog_queries_are_detected() {
        assert!(is_catalog_query(&tokens(
            "SELECT * FROM pg_catalog.pg_class"
        )));
        assert!(is_catalog_query(&tokens("select 'x'::regclass")));
        assert!(!is_catalog_query(&tokens("SELECT * FROM orders")));
        assert!(!is_catalog_query(&tokens("SELECT 'pg_class' AS name")));
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
