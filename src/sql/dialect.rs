//! The dialect weir parses user statements with: sqlparser's PostgreSQL
//! dialect, with two changes that keep parse time linear in the length of
//! the statement. sqlparser 0.62 (the version DataFusion 55 pins) tries
//! some constructs one way, rewinds and tries another; when such attempts
//! nest, each level doubles the work. Fuzzing found `SELECT f(f(…(1)…))`
//! 18 levels deep taking 8.5 s, 30 levels many minutes (docs/fuzzing.md),
//! and `CAST(CASE (` repeated 12 times 50 s. Parsing happens before
//! statement_timeout applies and where a cancel cannot reach.
//!
//! - A named function argument's name is an identifier (`f(name =>
//!   value)`, as in Postgres), not any expression: with expression names
//!   every argument was parsed twice, once looking for `=>`.
//! - A budget of expression atoms per parse, proportional to the number of
//!   tokens: past it every further atom fails with sqlparser's
//!   `RecursionLimitExceeded`, the one error its rewinding passes on, so
//!   any remaining backtracking shape (such as a keyword's special form
//!   failing deep inside and being retried as a plain function call) ends
//!   in bounded time with 54001 instead of running on.
//!
//! Every other method forwards to `PostgreSqlDialect`, and `dialect()`
//! answers its type, so sqlparser's `dialect_of!(… is PostgreSqlDialect)`
//! checks still hold. A test parses every statement in `sql-tests/` with
//! both dialects and compares the trees, so a forward missed here (or a
//! method PostgreSqlDialect starts to override) shows up. Remove the
//! argument change once DataFusion ships a sqlparser with upstream's fix.

use std::any::TypeId;
use std::cell::Cell;

use datafusion::sql::sqlparser::ast::Expr;
use datafusion::sql::sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};

use crate::error::WeirError;

/// Expression atoms a parse may attempt per token of the statement: the
/// statements in `sql-tests/` need at most 0.5 (whitespace counts as a
/// token), so real statements stay far from it.
const ATOMS_PER_TOKEN: u64 = 16;
/// The budget of a statement of few tokens.
const MINIMUM_ATOMS: u64 = 10_000;

const POSTGRES: PostgreSqlDialect = PostgreSqlDialect {};

/// sqlparser's PostgreSQL dialect with identifier-named function arguments
/// and a budget of expression atoms.
#[derive(Debug)]
pub struct WeirDialect {
    atoms_left: Cell<u64>,
}

impl WeirDialect {
    /// For text weir parses itself (options, fragments): a fixed budget.
    pub fn new() -> Self {
        Self::for_tokens(0)
    }

    /// For a statement of `tokens` tokens.
    pub fn for_tokens(tokens: usize) -> Self {
        let budget = (tokens as u64)
            .saturating_mul(ATOMS_PER_TOKEN)
            .max(MINIMUM_ATOMS);
        Self {
            atoms_left: Cell::new(budget),
        }
    }

    /// Whether a parse ran out of its budget (its error then says little).
    pub fn exhausted(&self) -> bool {
        self.atoms_left.get() == 0
    }
}

/// `error` from a parse with `dialect`, as 54001 when the parse ran out of
/// its budget.
pub fn explain_exhaustion(dialect: &WeirDialect, error: ParserError) -> WeirError {
    if !dialect.exhausted() {
        return error.into();
    }
    WeirError::new(
        "54001",
        "statement too complex: parsing it takes more steps than its length allows",
    )
    .with_hint("Nest fewer function calls, CASE or CAST expressions inside one another.")
}

impl Default for WeirDialect {
    fn default() -> Self {
        Self::new()
    }
}

impl Dialect for WeirDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<PostgreSqlDialect>()
    }

    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        false
    }

    /// Called before each expression atom: counts it against the budget.
    fn parse_prefix(&self, _parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let left = self.atoms_left.get();
        if left == 0 {
            return Some(Err(ParserError::RecursionLimitExceeded));
        }
        self.atoms_left.set(left - 1);
        None
    }

    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        POSTGRES.identifier_quote_style(identifier)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        POSTGRES.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        POSTGRES.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        POSTGRES.is_identifier_part(ch)
    }

    fn supports_unicode_string_literal(&self) -> bool {
        POSTGRES.supports_unicode_string_literal()
    }

    fn is_reserved_for_identifier(&self, keyword: Keyword) -> bool {
        POSTGRES.is_reserved_for_identifier(keyword)
    }

    fn is_custom_operator_part(&self, ch: char) -> bool {
        POSTGRES.is_custom_operator_part(ch)
    }

    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        POSTGRES.get_next_precedence(parser)
    }

    fn prec_value(&self, precedence: Precedence) -> u8 {
        POSTGRES.prec_value(precedence)
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        POSTGRES.supports_filter_during_aggregation()
    }

    fn supports_group_by_expr(&self) -> bool {
        POSTGRES.supports_group_by_expr()
    }

    fn allow_extract_custom(&self) -> bool {
        POSTGRES.allow_extract_custom()
    }

    fn allow_extract_single_quotes(&self) -> bool {
        POSTGRES.allow_extract_single_quotes()
    }

    fn supports_create_index_with_clause(&self) -> bool {
        POSTGRES.supports_create_index_with_clause()
    }

    fn supports_explain_with_utility_options(&self) -> bool {
        POSTGRES.supports_explain_with_utility_options()
    }

    fn supports_listen_notify(&self) -> bool {
        POSTGRES.supports_listen_notify()
    }

    fn supports_factorial_operator(&self) -> bool {
        POSTGRES.supports_factorial_operator()
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        POSTGRES.supports_bitwise_shift_operators()
    }

    fn supports_comment_on(&self) -> bool {
        POSTGRES.supports_comment_on()
    }

    fn supports_load_extension(&self) -> bool {
        POSTGRES.supports_load_extension()
    }

    fn supports_named_fn_args_with_colon_operator(&self) -> bool {
        POSTGRES.supports_named_fn_args_with_colon_operator()
    }

    fn supports_empty_projections(&self) -> bool {
        POSTGRES.supports_empty_projections()
    }

    fn supports_nested_comments(&self) -> bool {
        POSTGRES.supports_nested_comments()
    }

    fn supports_string_escape_constant(&self) -> bool {
        POSTGRES.supports_string_escape_constant()
    }

    fn supports_numeric_literal_underscores(&self) -> bool {
        POSTGRES.supports_numeric_literal_underscores()
    }

    fn supports_array_typedef_with_brackets(&self) -> bool {
        POSTGRES.supports_array_typedef_with_brackets()
    }

    fn supports_geometric_types(&self) -> bool {
        POSTGRES.supports_geometric_types()
    }

    fn supports_set_names(&self) -> bool {
        POSTGRES.supports_set_names()
    }

    fn supports_alter_column_type_using(&self) -> bool {
        POSTGRES.supports_alter_column_type_using()
    }

    fn supports_notnull_operator(&self) -> bool {
        POSTGRES.supports_notnull_operator()
    }

    fn supports_interval_options(&self) -> bool {
        POSTGRES.supports_interval_options()
    }

    fn supports_insert_table_alias(&self) -> bool {
        POSTGRES.supports_insert_table_alias()
    }

    fn supports_create_table_like_parenthesized(&self) -> bool {
        POSTGRES.supports_create_table_like_parenthesized()
    }

    fn supports_select_wildcard_with_alias(&self) -> bool {
        POSTGRES.supports_select_wildcard_with_alias()
    }

    fn supports_comma_separated_trim(&self) -> bool {
        POSTGRES.supports_comma_separated_trim()
    }

    fn supports_xml_expressions(&self) -> bool {
        POSTGRES.supports_xml_expressions()
    }

    fn supports_comment_optimizer_hint(&self) -> bool {
        POSTGRES.supports_comment_optimizer_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;
    use std::time::{Duration, Instant};

    fn parse_with(dialect: &dyn Dialect, sql: &str) -> Result<Vec<Statement>, String> {
        Parser::parse_sql(dialect, sql).map_err(|error| error.to_string())
    }

    /// Parses `sql` as weir does: with a budget for its tokens. Also
    /// answers the atoms it took per token.
    fn weir_parse(sql: &str) -> (Result<Vec<Statement>, ParserError>, f64, WeirDialect) {
        let tokens = Tokenizer::new(&POSTGRES, sql)
            .tokenize_with_location()
            .unwrap_or_default();
        let count = tokens.len();
        let dialect = WeirDialect::for_tokens(count);
        let budget = dialect.atoms_left.get();
        let parsed = Parser::new(&dialect)
            .with_tokens_with_locations(tokens)
            .parse_statements();
        let used = budget - dialect.atoms_left.get();
        (parsed, used as f64 / count.max(1) as f64, dialect)
    }

    fn weir_error(sql: &str) -> Option<WeirError> {
        let (parsed, _, dialect) = weir_parse(sql);
        parsed
            .err()
            .map(|error| explain_exhaustion(&dialect, error))
    }

    /// Statements of the sqllogictest files: the lines after each
    /// `statement` or `query` header up to a blank line or `----`.
    fn sql_test_statements() -> Vec<String> {
        let directory = concat!(env!("CARGO_MANIFEST_DIR"), "/sql-tests");
        let mut statements = Vec::new();
        for entry in std::fs::read_dir(directory).expect("sql-tests exists") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|extension| extension != "slt") {
                continue;
            }
            let text = std::fs::read_to_string(path).expect("readable");
            let mut lines = text.lines();
            while let Some(line) = lines.next() {
                if line.starts_with("statement ") || line.starts_with("query ") {
                    let body: Vec<&str> = lines
                        .by_ref()
                        .take_while(|line| !line.trim().is_empty() && *line != "----")
                        .collect();
                    statements.push(body.join("\n"));
                }
            }
        }
        statements
    }

    #[test]
    fn every_sql_test_statement_parses_as_with_postgres_dialect() {
        let statements = sql_test_statements();
        let (mut compared, mut most_atoms_per_token) = (0, 0.0f64);
        for sql in statements.iter().filter(|sql| !sql.contains("=>")) {
            let (ours, atoms_per_token, _) = weir_parse(sql);
            let ours = ours.map_err(|error| error.to_string());
            let theirs = parse_with(&POSTGRES, sql);
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{sql}");
            if ours.is_ok() {
                most_atoms_per_token = most_atoms_per_token.max(atoms_per_token);
            }
            compared += 1;
        }
        assert!(compared > 1_500, "only {compared} statements compared");
        // Headroom between what real statements need and the budget.
        eprintln!("most atoms per token: {most_atoms_per_token:.2}");
        assert!(most_atoms_per_token * 4.0 < ATOMS_PER_TOKEN as f64);
    }

    #[test]
    fn named_arguments_keep_working() {
        let sql = "SELECT make_interval(days => 3, hours := 2)";
        let statement = parse_with(&WeirDialect::new(), sql).expect("parses");
        assert_eq!(statement[0].to_string(), sql);
    }

    /// Shapes that made sqlparser 0.62 backtrack, each deep enough to take
    /// minutes to hours there: each now parses or fails within a bound
    /// far above the milliseconds it takes (docs/fuzzing.md).
    #[test]
    fn nested_shapes_parse_in_bounded_time() {
        let depth = 30;
        let shapes = [
            format!("SELECT {}1{}", "f(".repeat(depth), ")".repeat(depth)),
            format!("SELECT {}1{}", "f(1, f(".repeat(depth), "))".repeat(depth)),
            format!("SELECT {}", "f(".repeat(depth)),
            format!(
                "SELECT {}x{}",
                "CAST(CASE (".repeat(depth),
                ")".repeat(3 * depth)
            ),
            format!("SELECT {}x", "SUBSTRING(TRIM(".repeat(depth)),
            include_str!("../../fuzz/artifacts-found/statement_parser-slow-unit-b06d614e.sql")
                .to_string(),
        ];
        for sql in shapes {
            let started = Instant::now();
            let error = weir_error(&sql);
            let elapsed = started.elapsed();
            assert!(elapsed < Duration::from_secs(2), "{elapsed:?}: {sql}");
            if let Some(error) = error {
                let expected = ["42601", "53000", "54001"];
                assert!(expected.contains(&error.code), "{error:?}");
            }
        }
    }

    #[test]
    fn a_parse_past_its_budget_fails_with_54001() {
        let sql = format!("SELECT {}x{}", "CAST(CASE (".repeat(12), ")".repeat(36));
        let error = weir_error(&sql).expect("malformed");
        assert_eq!(error.code, "54001", "{error:?}");
        let nested = format!("SELECT {}1{}", "abs(".repeat(40), ")".repeat(40));
        assert!(weir_error(&nested).is_none());
    }
}
