//! Subqueries that clients send verbatim and DataFusion cannot plan,
//! replaced (before the catalog parser sees the text) by queries that give
//! the same answer in weir. Each entry says why its replacement is exact.
//!
//! - Grafana lists tables by asking which schemas are on the search path,
//!   with a function as a FROM item and `generate_series` aliased as a
//!   column. datafusion-pg-catalog swaps it for `''`, so no schema matched
//!   and Grafana showed every table schema-qualified. The replacement is
//!   the same list as an `unnest` of the search path.
//! - psql's `\d+` appends a table's TOAST options, `array(select 'toast.'
//!   || x from pg_catalog.unnest(tc.reloptions) x)` (a correlated unnest
//!   DataFusion cannot decorrelate). weir has no TOAST tables and no
//!   storage options (`reloptions` is always NULL), so the array is always
//!   empty; NULL gives the same `array_to_string(c.reloptions || …)`.
//! - psql's `\dp` lists column privileges (`attacl`) and row security
//!   policies (`pg_policy`) through correlated `ARRAY(…)` subqueries. weir
//!   has neither (`attacl` is always NULL, `pg_policy` is empty), so both
//!   arrays are empty and `array_to_string` of them is `''`.

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// (what the client sends, what weir runs instead)
const IDIOMS: &[(&str, &str)] = &[
    (
        "SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END \
         FROM generate_series(array_lower(string_to_array(current_setting('search_path'),','),1), \
         array_upper(string_to_array(current_setting('search_path'),','),1)) as i, \
         string_to_array(current_setting('search_path'),',') s",
        "SELECT CASE WHEN trim(search_path_item) = '\"$user\"' THEN user \
         ELSE trim(search_path_item) END \
         FROM unnest(string_to_array(current_setting('search_path'), ',')) \
         AS search_path_items(search_path_item)",
    ),
    (
        "array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x)",
        "CAST(NULL AS TEXT[])",
    ),
    (
        "pg_catalog.array_to_string(ARRAY( \
         SELECT attname || E':\\n  ' || pg_catalog.array_to_string(attacl, E'\\n  ') \
         FROM pg_catalog.pg_attribute a \
         WHERE attrelid = c.oid AND NOT attisdropped AND attacl IS NOT NULL), E'\\n')",
        "CAST('' AS TEXT)",
    ),
    (
        "pg_catalog.array_to_string(ARRAY( \
         SELECT polname || CASE WHEN NOT polpermissive THEN E' (RESTRICTIVE)' ELSE '' END \
         || CASE WHEN polcmd != '*' THEN E' (' || polcmd::pg_catalog.text || E'):' ELSE E':' END \
         || CASE WHEN polqual IS NOT NULL THEN \
         E'\\n  (u): ' || pg_catalog.pg_get_expr(polqual, polrelid) ELSE E'' END \
         || CASE WHEN polwithcheck IS NOT NULL THEN \
         E'\\n  (c): ' || pg_catalog.pg_get_expr(polwithcheck, polrelid) ELSE E'' END \
         || CASE WHEN polroles <> '{0}' THEN E'\\n  to: ' || pg_catalog.array_to_string( \
         ARRAY(SELECT rolname FROM pg_catalog.pg_roles WHERE oid = ANY (polroles) ORDER BY 1), E', ') \
         ELSE E'' END \
         FROM pg_catalog.pg_policy pol WHERE polrelid = c.oid), E'\\n')",
        "CAST('' AS TEXT)",
    ),
];

pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    IDIOMS
        .iter()
        .fold(tokens, |tokens, (pattern, replacement)| {
            replace(tokens, &significant(&tokenize(pattern)), replacement)
        })
}

/// `tokens` with each run matching `pattern` (whitespace aside) replaced.
fn replace(tokens: Vec<TokenWithSpan>, pattern: &[Token], replacement: &str) -> Vec<TokenWithSpan> {
    let positions: Vec<usize> = (0..tokens.len())
        .filter(|&index| !is_trivia(&tokens[index].token))
        .collect();
    let mut rewritten = Vec::with_capacity(tokens.len());
    let (mut next, mut copied_to) = (0, 0);
    while next + pattern.len() <= positions.len() {
        let window = &positions[next..next + pattern.len()];
        let matches = window
            .iter()
            .zip(pattern)
            .all(|(&index, expected)| same(&tokens[index].token, expected));
        if !matches {
            next += 1;
            continue;
        }
        rewritten.extend_from_slice(&tokens[copied_to..window[0]]);
        rewritten.extend(tokenize(replacement));
        copied_to = window[window.len() - 1] + 1;
        next += pattern.len();
    }
    rewritten.extend_from_slice(&tokens[copied_to..]);
    rewritten
}

fn tokenize(sql: &str) -> Vec<TokenWithSpan> {
    Tokenizer::new(&WeirDialect::new(), sql)
        .tokenize_with_location()
        .unwrap_or_default()
}

fn significant(tokens: &[TokenWithSpan]) -> Vec<Token> {
    tokens
        .iter()
        .map(|token| token.token.clone())
        .filter(|token| !is_trivia(token))
        .collect()
}

fn is_trivia(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// Equal tokens, words compared without regard to case.
fn same(actual: &Token, expected: &Token) -> bool {
    match (actual, expected) {
        (Token::Word(actual), Token::Word(expected)) => {
            actual.quote_style == expected.quote_style
                && actual.value.eq_ignore_ascii_case(&expected.value)
        }
        _ => actual == expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        rewrite(tokenize(sql))
            .iter()
            .map(|token| token.token.to_string())
            .collect()
    }

    #[test]
    fn grafanas_search_path_subquery_becomes_an_unnest() {
        let grafana = IDIOMS[0].0;
        let sql = format!("SELECT x FROM t WHERE a IN ({grafana}) OR b IN (\n{grafana})");
        let text = rewritten(&sql);
        assert_eq!(text.matches("unnest(string_to_array(").count(), 2, "{text}");
        assert!(!text.contains("generate_series"), "{text}");
        assert!(
            text.starts_with("SELECT x FROM t WHERE a IN (SELECT"),
            "{text}"
        );
    }

    #[test]
    fn psqls_toast_options_are_null() {
        let sql = "SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x \
                   from pg_catalog.unnest(tc.reloptions) x), ', ') FROM c";
        assert_eq!(
            rewritten(sql),
            "SELECT pg_catalog.array_to_string(c.reloptions || CAST(NULL AS TEXT[]), ', ') FROM c"
        );
    }

    #[test]
    fn psqls_privilege_lists_are_empty() {
        let psql = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/psql15_dp.sql"
        ))
        .unwrap();
        let text = rewritten(&psql);
        assert_eq!(text.matches("CAST('' AS TEXT)").count(), 2, "{text}");
        assert!(!text.contains("pg_policy"), "{text}");
    }

    #[test]
    fn other_text_is_unchanged() {
        let sql = "SELECT s[i] FROM generate_series(1, 2) AS i";
        assert_eq!(rewritten(sql), sql);
    }
}
