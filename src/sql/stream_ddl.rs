//! weir's additions to CREATE TABLE, taken out of the token stream before
//! sqlparser sees it: `WATERMARK FOR col [AS col - INTERVAL '...']` among the
//! columns and `APPEND ONLY` after them (RisingWave's spelling).

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};
use crate::sql::tokens::is_word;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    pub watermark: Option<WatermarkClause>,
    pub append_only: bool,
    /// The `name AS PROCTIME()` column, stamped with the arrival time.
    #[serde(default)]
    pub proctime: Option<String>,
    /// `WITH (watermark_idle_timeout = ...)` in milliseconds.
    #[serde(default)]
    pub idle_timeout_ms: Option<i64>,
    /// `WITH (retention = ...)` in milliseconds.
    #[serde(default)]
    pub retention_ms: Option<i64>,
    /// A `CREATE SOURCE`: its connector options and format.
    #[serde(default)]
    pub source: Option<super::source_ddl::SourceClause>,
}

/// `WATERMARK FOR column AS column - delay`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkClause {
    pub column: String,
    /// The subtracted delay as SQL (an interval expression); None is zero.
    pub delay_sql: Option<String>,
}

fn significant(tokens: &[TokenWithSpan]) -> impl Iterator<Item = (usize, &Token)> {
    tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(index, t)| (index, &t.token))
}

/// Removes weir's CREATE TABLE additions; None when there were none.
pub fn extract(
    mut tokens: Vec<TokenWithSpan>,
) -> Result<(Vec<TokenWithSpan>, Option<StreamOptions>)> {
    let source = super::source_ddl::extract(&mut tokens)?;
    let is_create_table = {
        let mut words = significant(&tokens).map(|(_, token)| token);
        words.next().is_some_and(|t| is_word(t, "CREATE"))
            && words.next().is_some_and(|t| is_word(t, "TABLE"))
    };
    if !is_create_table {
        return Ok((tokens, None));
    }
    let proctime = super::table_time::extract_proctime(&mut tokens)?;
    let with = match &source {
        Some((_, with)) => *with,
        None => super::table_time::extract_with_options(&mut tokens)?,
    };
    let mut options = StreamOptions {
        proctime,
        idle_timeout_ms: with.watermark_idle_timeout_ms,
        retention_ms: with.retention_ms,
        // A source only ever appends what its connector reads.
        append_only: source.is_some(),
        source: source.map(|(clause, _)| clause),
        ..StreamOptions::default()
    };
    if let Some((start, end)) = find_watermark(&tokens) {
        let clause: Vec<TokenWithSpan> = tokens.drain(start..end).collect();
        options.watermark = Some(parse_watermark(&clause)?);
    }
    if let Some(range) = find_append_only(&tokens) {
        tokens.drain(range);
        options.append_only = true;
    }
    let found = options != StreamOptions::default();
    Ok((tokens, found.then_some(options)))
}

/// The token range of the WATERMARK item including one separating comma.
fn find_watermark(tokens: &[TokenWithSpan]) -> Option<(usize, usize)> {
    let mut depth = 0;
    let mut previous_comma = None;
    let items: Vec<(usize, &Token)> = significant(tokens).collect();
    for (position, &(index, token)) in items.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 1 => previous_comma = Some(index),
            _ if depth == 1
                && is_word(token, "WATERMARK")
                && items
                    .get(position + 1)
                    .is_some_and(|(_, next)| is_word(next, "FOR")) =>
            {
                let end = clause_end(tokens, index);
                return Some(match previous_comma {
                    Some(comma) => (comma, end),
                    // First item: take the comma after it instead.
                    None if matches!(tokens.get(end).map(|t| &t.token), Some(Token::Comma)) => {
                        (index, end + 1)
                    }
                    None => (index, end),
                });
            }
            _ => {}
        }
    }
    None
}

/// Index just past the clause starting at `start` (at a depth-1 comma or
/// the closing parenthesis of the column list).
fn clause_end(tokens: &[TokenWithSpan], start: usize) -> usize {
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(start) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return index,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => return index,
            _ => {}
        }
    }
    tokens.len()
}

fn find_append_only(tokens: &[TokenWithSpan]) -> Option<std::ops::Range<usize>> {
    let items: Vec<(usize, &Token)> = significant(tokens).collect();
    items.windows(2).find_map(|pair| {
        (is_word(pair[0].1, "APPEND") && is_word(pair[1].1, "ONLY"))
            .then(|| pair[0].0..pair[1].0 + 1)
    })
}

fn parse_watermark(clause: &[TokenWithSpan]) -> Result<WatermarkClause> {
    let body: Vec<TokenWithSpan> = clause
        .iter()
        .skip_while(|t| !is_word(&t.token, "WATERMARK"))
        .skip(1)
        .skip_while(|t| !is_word(&t.token, "FOR"))
        .skip(1)
        .take_while(|t| t.token != Token::Comma)
        .cloned()
        .collect();
    let dialect = WeirDialect::new();
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(body);
    let column = parser.parse_identifier()?;
    let column_name = normalize(&column);
    if !parser.parse_keyword(datafusion::sql::sqlparser::keywords::Keyword::AS) {
        expect_end(&mut parser)?;
        return Ok(WatermarkClause {
            column: column_name,
            delay_sql: None,
        });
    }
    let expression = parser.parse_expr()?;
    expect_end(&mut parser)?;
    let delay = match &expression {
        Expr::Identifier(ident) if normalize(ident) == column_name => None,
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if matches!(left.as_ref(), Expr::Identifier(ident) if normalize(ident) == column_name) => {
            Some(right.to_string())
        }
        _ => {
            return Err(WeirError::unsupported(format!(
                "WATERMARK FOR {column_name} AS {expression} is not supported"
            ))
            .with_hint(format!(
                "Write WATERMARK FOR {column_name} AS {column_name} - INTERVAL '5' SECOND (or leave out AS for no delay)."
            )))
        }
    };
    Ok(WatermarkClause {
        column: column_name,
        delay_sql: delay,
    })
}

fn expect_end(parser: &mut Parser) -> Result<()> {
    let next = parser.peek_token();
    if next.token == Token::EOF {
        return Ok(());
    }
    Err(WeirError::syntax(format!(
        "syntax error in WATERMARK clause: unexpected {} at {}",
        next.token, next.span.start
    )))
}

fn normalize(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parser::render;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn run(sql: &str) -> (String, Option<StreamOptions>) {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        let (rest, options) = extract(tokens).unwrap();
        (render(&rest), options)
    }

    #[test]
    fn watermark_with_delay_and_append_only() {
        let (rest, options) = run(
            "CREATE TABLE pv (user_id BIGINT, viewed_at TIMESTAMP, WATERMARK FOR viewed_at AS viewed_at - INTERVAL '5' SECOND) APPEND ONLY",
        );
        assert_eq!(
            rest,
            "CREATE TABLE pv (user_id BIGINT, viewed_at TIMESTAMP)"
        );
        let options = options.unwrap();
        assert!(options.append_only);
        assert_eq!(
            options.watermark.unwrap(),
            WatermarkClause {
                column: "viewed_at".into(),
                delay_sql: Some("INTERVAL '5' SECOND".into())
            }
        );
    }

    #[test]
    fn watermark_first_and_without_delay() {
        let (rest, options) = run("CREATE TABLE t (WATERMARK FOR Ts, ts TIMESTAMP, v INT)");
        assert_eq!(rest, "CREATE TABLE t ( ts TIMESTAMP, v INT)");
        let watermark = options.unwrap().watermark.unwrap();
        assert_eq!(watermark.column, "ts");
        assert_eq!(watermark.delay_sql, None);
    }

    #[test]
    fn plain_tables_and_other_statements_are_untouched() {
        assert_eq!(run("CREATE TABLE t (a INT)").1, None);
        assert_eq!(run("SELECT watermark FROM t").1, None);
    }

    #[test]
    fn unsupported_watermark_expressions_are_0a000() {
        let tokens = Tokenizer::new(
            &WeirDialect::new(),
            "CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS ts + INTERVAL '1' SECOND)",
        )
        .tokenize_with_location()
        .unwrap();
        assert_eq!(extract(tokens).unwrap_err().code, "0A000");
    }
}
