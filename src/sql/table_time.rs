//! Processing time in CREATE TABLE, taken out of the tokens before
//! sqlparser sees them: a `name [type] AS PROCTIME()` column (Flink's and
//! RisingWave's spelling), stamped with the wall clock as rows arrive, and
//! `WITH (watermark_idle_timeout = '10s')` after the column list.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{sqlstate, Result, WeirError};
use crate::sql::tokens::{is_word, significant};

/// Rewrites `name [type] AS PROCTIME()` to `name TIMESTAMP` (or the type
/// given); returns the column's name.
pub fn extract_proctime(tokens: &mut Vec<TokenWithSpan>) -> Result<Option<String>> {
    let positions = significant(tokens);
    let token = |position: usize| positions.get(position).map(|&index| &tokens[index].token);
    let mut depth = 0;
    let mut item_start = None;
    let mut found: Option<(usize, usize, usize)> = None;
    for position in 0..positions.len() {
        match token(position) {
            Some(Token::LParen) => {
                depth += 1;
                if depth == 1 {
                    item_start = Some(position + 1);
                }
            }
            Some(Token::RParen) => depth -= 1,
            Some(Token::Comma) if depth == 1 => item_start = Some(position + 1),
            Some(word)
                if depth == 1
                    && is_word(word, "AS")
                    && token(position + 1).is_some_and(|t| is_word(t, "PROCTIME"))
                    && token(position + 2) == Some(&Token::LParen)
                    && token(position + 3) == Some(&Token::RParen) =>
            {
                if found.is_some() {
                    return Err(WeirError::syntax("a table can have one PROCTIME() column")
                        .with_hint("Keep one `name AS PROCTIME()` column."));
                }
                let start = item_start.unwrap_or(position);
                found = Some((start, position, position + 3));
            }
            _ => {}
        }
    }
    let Some((start, as_position, close)) = found else {
        return Ok(None);
    };
    let name = match token(start) {
        Some(Token::Word(word)) if start < as_position => match word.quote_style {
            Some(_) => word.value.clone(),
            None => word.value.to_ascii_lowercase(),
        },
        _ => {
            return Err(WeirError::syntax("PROCTIME() needs a column name")
                .with_hint("Write `arrived_at AS PROCTIME()` among the columns."))
        }
    };
    let typed = as_position > start + 1;
    let replacement = if typed {
        Vec::new()
    } else {
        vec![TokenWithSpan::wrap(Token::make_word("TIMESTAMP", None))]
    };
    tokens.splice(positions[as_position]..=positions[close], replacement);
    Ok(Some(name))
}

/// The options of `CREATE TABLE ... WITH (...)`, durations in milliseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    pub watermark_idle_timeout_ms: Option<i64>,
    pub retention_ms: Option<i64>,
}

/// Takes `WITH (name = 'value', ...)` after the column list out of the
/// tokens and returns the options.
pub fn extract_with_options(tokens: &mut Vec<TokenWithSpan>) -> Result<TableOptions> {
    let positions = significant(tokens);
    let mut depth = 0;
    let mut closed_columns = false;
    let mut with = None;
    for (position, &index) in positions.iter().enumerate() {
        match &tokens[index].token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                closed_columns |= depth == 0;
            }
            word if depth == 0 && closed_columns && is_word(word, "WITH") => {
                with = Some(position);
                break;
            }
            _ => {}
        }
    }
    let Some(with) = with else {
        return Ok(TableOptions::default());
    };
    let open = *positions
        .get(with + 1)
        .filter(|&&index| tokens[index].token == Token::LParen)
        .ok_or_else(|| WeirError::syntax("WITH needs (option = 'value', ...)"))?;
    let close = (open..tokens.len())
        .scan(0, |depth, index| {
            match tokens[index].token {
                Token::LParen => *depth += 1,
                Token::RParen => *depth -= 1,
                _ => {}
            }
            Some((index, *depth))
        })
        .find(|(_, depth)| *depth == 0)
        .map(|(index, _)| index)
        .ok_or_else(|| WeirError::syntax("WITH ( is not closed"))?;
    let inner: Vec<Token> = tokens[open + 1..close]
        .iter()
        .map(|t| t.token.clone())
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let options = table_options(&inner)?;
    tokens.drain(positions[with]..=close);
    Ok(options)
}

pub(super) fn table_options(options: &[Token]) -> Result<TableOptions> {
    let mut parsed = TableOptions::default();
    for option in options.split(|t| *t == Token::Comma) {
        let [Token::Word(key), Token::Eq, value] = option else {
            return Err(
                WeirError::syntax("table options are written name = 'value'")
                    .with_hint("Write WITH (watermark_idle_timeout = '10s')."),
            );
        };
        let name = key.value.to_ascii_lowercase();
        let slot = match name.as_str() {
            "watermark_idle_timeout" => &mut parsed.watermark_idle_timeout_ms,
            "retention" => &mut parsed.retention_ms,
            _ => {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("unknown table option \"{}\"", key.value),
                )
                .with_hint("The table options are watermark_idle_timeout and retention."))
            }
        };
        let text = match value {
            Token::SingleQuotedString(text) => text.clone(),
            other => other.to_string(),
        };
        let nanoseconds = super::interval::text_nanoseconds(&text)
            .filter(|n| *n >= 1_000_000 && *n <= i64::MAX as i128)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("{name} = '{text}' is not a duration of 1ms or more"),
                )
                .with_hint("Write it like '10s', '500ms', '2 minutes' or '7 days'.")
            })?;
        *slot = Some((nanoseconds / 1_000_000) as i64);
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use crate::sql::parser::render;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn tokens(sql: &str) -> Vec<TokenWithSpan> {
        Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap()
    }

    #[test]
    fn proctime_columns_become_timestamps() {
        let mut create = tokens("CREATE TABLE t (v INT, arrived AS PROCTIME(), w TEXT)");
        assert_eq!(
            extract_proctime(&mut create).unwrap().as_deref(),
            Some("arrived")
        );
        assert_eq!(
            render(&create),
            "CREATE TABLE t (v INT, arrived TIMESTAMP, w TEXT)"
        );
        let mut typed = tokens("CREATE TABLE t (pt TIMESTAMPTZ AS proctime())");
        assert_eq!(extract_proctime(&mut typed).unwrap().as_deref(), Some("pt"));
        assert_eq!(render(&typed), "CREATE TABLE t (pt TIMESTAMPTZ )");
        let mut plain = tokens("CREATE TABLE t (v INT)");
        assert_eq!(extract_proctime(&mut plain).unwrap(), None);
    }

    #[test]
    fn idle_timeout_option() {
        let mut create =
            tokens("CREATE TABLE t (v INT) WITH (watermark_idle_timeout = '10s') APPEND ONLY");
        let options = extract_with_options(&mut create).unwrap();
        assert_eq!(options.watermark_idle_timeout_ms, Some(10_000));
        let mut retained = tokens(
            "CREATE TABLE t (v INT) WITH (retention = '7 days', watermark_idle_timeout = '1s')",
        );
        let options = extract_with_options(&mut retained).unwrap();
        assert_eq!(options.retention_ms, Some(7 * 24 * 3600 * 1000));
        assert_eq!(options.watermark_idle_timeout_ms, Some(1000));
        assert_eq!(render(&create), "CREATE TABLE t (v INT)  APPEND ONLY");
        let mut bad = tokens("CREATE TABLE t (v INT) WITH (color = 'red')");
        assert_eq!(extract_with_options(&mut bad).unwrap_err().code, "22023");
        let mut zero = tokens("CREATE TABLE t (v INT) WITH (watermark_idle_timeout = '0s')");
        assert_eq!(extract_with_options(&mut zero).unwrap_err().code, "22023");
    }
}
