//! `CREATE SOURCE`, `DROP SOURCE` and `SHOW CREATE SOURCE`, taken apart at
//! the token level: a source is declared like a table (columns, WATERMARK
//! FOR, `AS PROCTIME()`), so `CREATE SOURCE` becomes `CREATE TABLE` once
//! its connector options (`WITH (connector = '…', nexmark.table.type =
//! 'Bid')`, dotted names as RisingWave and Flink write them) and its
//! `FORMAT … ENCODE …` clause are taken out.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde::{Deserialize, Serialize};

use super::table_time::TableOptions;
use super::tokens::{is_word, significant};
use crate::error::{sqlstate, Result, WeirError};

/// What `CREATE SOURCE` says beyond a table's columns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceClause {
    /// Connector options in the order written, names lower case.
    pub options: Vec<(String, String)>,
    /// `FORMAT PLAIN` (upper case), if given.
    pub format: Option<String>,
    /// `ENCODE JSON | CSV` (upper case), if given.
    pub encode: Option<String>,
}

/// Options every table takes; the rest of a source's WITH is its connector's.
const TABLE_OPTIONS: &[&str] = &["watermark_idle_timeout", "retention"];

/// Rewrites `CREATE SOURCE` to `CREATE TABLE` and takes the source's clauses
/// out; None when the statement is not a CREATE SOURCE.
pub fn extract(tokens: &mut Vec<TokenWithSpan>) -> Result<Option<(SourceClause, TableOptions)>> {
    let positions = significant(tokens);
    let word = |position: usize| positions.get(position).map(|&index| &tokens[index].token);
    let is_source = word(0).is_some_and(|t| is_word(t, "CREATE"))
        && word(1).is_some_and(|t| is_word(t, "SOURCE"));
    if !is_source {
        return Ok(None);
    }
    tokens[positions[1]] = TokenWithSpan::wrap(Token::make_word("TABLE", None));
    let (format, encode) = take_format(tokens)?;
    let options = take_with(tokens)?;
    let mut clause = SourceClause {
        options: Vec::new(),
        format,
        encode,
    };
    let mut table_options = Vec::new();
    for (name, value) in options {
        if TABLE_OPTIONS.contains(&name.as_str()) {
            table_options.push(vec![
                Token::make_word(&name, None),
                Token::Eq,
                Token::SingleQuotedString(value),
            ]);
        } else {
            clause.options.push((name, value));
        }
    }
    let table = match table_options.is_empty() {
        true => TableOptions::default(),
        false => super::table_time::table_options(&table_options.join(&Token::Comma))?,
    };
    if !clause.options.iter().any(|(name, _)| name == "connector") {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "a source needs a connector",
        )
        .with_hint("Add WITH (connector = 'nexmark' | 'datagen', ...) after the columns."));
    }
    Ok(Some((clause, table)))
}

/// Takes `WITH (name = value, ...)` after the column list; names may be
/// dotted (`nexmark.table.type`) or quoted (`'properties.bootstrap.server'`).
fn take_with(tokens: &mut Vec<TokenWithSpan>) -> Result<Vec<(String, String)>> {
    let Some((with, open, close)) = find_after_columns(tokens, "WITH")? else {
        return Ok(Vec::new());
    };
    let inner: Vec<Token> = tokens[open + 1..close]
        .iter()
        .map(|t| t.token.clone())
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    tokens.drain(with..=close);
    parse_options(&inner)
}

/// `name = 'value', ...` (the inside of a WITH list, without whitespace).
pub(super) fn parse_options(inner: &[Token]) -> Result<Vec<(String, String)>> {
    let mut options: Vec<(String, String)> = Vec::new();
    for option in inner.split(|t| *t == Token::Comma) {
        let Some(equals) = option.iter().position(|t| *t == Token::Eq) else {
            return Err(
                WeirError::syntax("source options are written name = 'value'")
                    .with_hint("Write WITH (connector = 'nexmark', nexmark.table.type = 'Bid')."),
            );
        };
        let name = option_name(&option[..equals])?;
        let value = match &option[equals + 1..] {
            [Token::SingleQuotedString(text)] => text.clone(),
            [Token::Number(number, _)] => number.clone(),
            [Token::Minus, Token::Number(number, _)] => format!("-{number}"),
            [Token::Word(word)] => word.value.clone(),
            _ => {
                return Err(WeirError::syntax(format!(
                    "the value of source option {name} must be a quoted string or a number"
                )))
            }
        };
        if options.iter().any(|(seen, _)| *seen == name) {
            return Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("source option {name} is given twice"),
            ));
        }
        options.push((name, value));
    }
    Ok(options)
}

fn option_name(tokens: &[Token]) -> Result<String> {
    let mut name = String::new();
    for token in tokens {
        match token {
            Token::Word(word) => name.push_str(&word.value),
            Token::Period => name.push('.'),
            Token::Minus => name.push('-'),
            Token::Number(number, _) => name.push_str(number),
            Token::SingleQuotedString(text) | Token::DoubleQuotedString(text)
                if tokens.len() == 1 =>
            {
                name.push_str(text)
            }
            other => {
                return Err(WeirError::syntax(format!(
                    "unexpected {other} in a source option's name"
                )))
            }
        }
    }
    if name.is_empty() {
        return Err(WeirError::syntax("a source option needs a name"));
    }
    Ok(name.to_ascii_lowercase())
}

/// Takes `FORMAT word ENCODE word [( … )]` (or RisingWave's older `ROW
/// FORMAT word`) after the column list.
fn take_format(tokens: &mut Vec<TokenWithSpan>) -> Result<(Option<String>, Option<String>)> {
    let positions = significant(tokens);
    let mut depth = 0;
    let mut start = None;
    for (position, &index) in positions.iter().enumerate() {
        match &tokens[index].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            token if depth == 0 && position > 2 && is_word(token, "FORMAT") => {
                let row = position > 0 && is_word(&tokens[positions[position - 1]].token, "ROW");
                start = Some(if row { position - 1 } else { position });
                break;
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        return Ok((None, None));
    };
    let rest: Vec<&Token> = positions[start..]
        .iter()
        .map(|&i| &tokens[i].token)
        .collect();
    let word_at = |offset: usize| match rest.get(offset) {
        Some(Token::Word(word)) => Some(word.value.to_ascii_uppercase()),
        _ => None,
    };
    let skip = usize::from(is_word(rest[0], "ROW"));
    let format = word_at(skip + 1).ok_or_else(|| {
        WeirError::syntax("FORMAT needs a name").with_hint("Write FORMAT PLAIN ENCODE JSON.")
    })?;
    let mut end = skip + 2;
    let mut encode = None;
    if rest.get(end).is_some_and(|t| is_word(t, "ENCODE")) {
        encode = Some(word_at(end + 1).ok_or_else(|| {
            WeirError::syntax("ENCODE needs a name").with_hint("Write ENCODE JSON or ENCODE CSV.")
        })?);
        end += 2;
    }
    // RisingWave's `ROW FORMAT JSON` names the encoding, not the format.
    let (format, encode) = match (skip, encode) {
        (1, None) => ("PLAIN".to_string(), Some(format)),
        (_, encode) => (format, encode),
    };
    if rest.get(end) == Some(&&Token::LParen) {
        return Err(
            WeirError::unsupported("options after ENCODE are not supported")
                .with_hint("Leave out the parenthesised list after ENCODE."),
        );
    }
    if end < rest.len() {
        let next = rest[end].clone();
        if !is_word(&next, "WITH") {
            return Err(WeirError::syntax(format!(
                "syntax error: unexpected {next} after FORMAT … ENCODE …"
            )));
        }
    }
    let first = positions[start];
    let last = positions[start + end - 1];
    tokens.drain(first..=last);
    Ok((Some(format), encode))
}

/// The keyword `word` at depth 0 after the column list, with the bounds of
/// the parenthesised list after it.
fn find_after_columns(
    tokens: &[TokenWithSpan],
    word: &str,
) -> Result<Option<(usize, usize, usize)>> {
    let mut depth = 0;
    let mut closed_columns = false;
    let mut at = None;
    for (index, token) in tokens.iter().enumerate() {
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                closed_columns |= depth == 0;
            }
            other if depth == 0 && closed_columns && is_word(other, word) => {
                at = Some(index);
                break;
            }
            _ => {}
        }
    }
    let Some(at) = at else {
        return Ok(None);
    };
    let open = (at + 1..tokens.len())
        .find(|&index| !matches!(tokens[index].token, Token::Whitespace(_)))
        .filter(|&index| tokens[index].token == Token::LParen)
        .ok_or_else(|| WeirError::syntax(format!("{word} needs (option = 'value', ...)")))?;
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some((at, open, index)));
                }
            }
            _ => {}
        }
    }
    Err(WeirError::syntax(format!("{word} ( is not closed")))
}

/// `DROP SOURCE [IF EXISTS] name [, name ...]`: the names and IF EXISTS.
pub fn parse_drop(tokens: &[TokenWithSpan]) -> Result<Option<(Vec<String>, bool)>> {
    let words: Vec<&Token> = super::tokens::words(tokens);
    if !(words.len() >= 2 && is_word(words[0], "DROP") && is_word(words[1], "SOURCE")) {
        return Ok(None);
    }
    let mut rest = &words[2..];
    let if_exists = rest.len() >= 2 && is_word(rest[0], "IF") && is_word(rest[1], "EXISTS");
    if if_exists {
        rest = &rest[2..];
    }
    let mut names = Vec::new();
    // Names separated by commas, each `name` or `schema.name`.
    let mut parts: Vec<String> = Vec::new();
    let mut expect_name = true;
    for token in rest {
        match (expect_name, token) {
            (true, Token::Word(word))
                if !is_word(token, "CASCADE") || word.quote_style.is_some() =>
            {
                parts.push(match word.quote_style {
                    Some(_) => word.value.clone(),
                    None => word.value.to_ascii_lowercase(),
                });
                expect_name = false;
            }
            (false, Token::Period) if parts.len() == 1 => expect_name = true,
            (false, Token::Comma) => {
                names.push(source_key(std::mem::take(&mut parts)));
                expect_name = true;
            }
            (_, other) if is_word(other, "CASCADE") => {
                return Err(WeirError::unsupported("DROP ... CASCADE is not supported")
                    .with_hint("Drop the views that read the source first."))
            }
            (_, other) => {
                return Err(
                    WeirError::syntax(format!("syntax error in DROP SOURCE at {other}"))
                        .with_hint("Write DROP SOURCE [IF EXISTS] name."),
                )
            }
        }
    }
    if parts.is_empty() || expect_name {
        return Err(WeirError::syntax("DROP SOURCE needs a name")
            .with_hint("Write DROP SOURCE [IF EXISTS] name."));
    }
    names.push(source_key(parts));
    Ok(Some((names, if_exists)))
}

/// The catalog key of a source named by one or two parts.
fn source_key(parts: Vec<String>) -> String {
    match parts.as_slice() {
        [schema, name] => crate::catalog::relation_key(schema, name),
        _ => parts.concat(),
    }
}

/// `SHOW CREATE SOURCE x` is answered as `SHOW CREATE TABLE x`.
pub fn show_create_as_table(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions = significant(&tokens);
    let matches = ["SHOW", "CREATE", "SOURCE"]
        .iter()
        .enumerate()
        .all(|(position, keyword)| {
            positions
                .get(position)
                .is_some_and(|&index| is_word(&tokens[index].token, keyword))
        });
    if matches {
        tokens[positions[2]] = TokenWithSpan::wrap(Token::make_word("TABLE", None));
    }
    tokens
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
    fn create_source_becomes_create_table() {
        let mut create = tokens(
            "CREATE SOURCE bid (auction BIGINT, date_time TIMESTAMP) WITH (connector = 'nexmark', \
             nexmark.table.type = 'Bid', nexmark.event.num = 1000, retention = '1 day') \
             FORMAT PLAIN ENCODE JSON",
        );
        let (clause, table) = extract(&mut create).unwrap().unwrap();
        assert_eq!(
            render(&create),
            "CREATE TABLE bid (auction BIGINT, date_time TIMESTAMP)"
        );
        assert_eq!(
            clause.options,
            vec![
                ("connector".to_string(), "nexmark".to_string()),
                ("nexmark.table.type".to_string(), "Bid".to_string()),
                ("nexmark.event.num".to_string(), "1000".to_string()),
            ]
        );
        assert_eq!(clause.format.as_deref(), Some("PLAIN"));
        assert_eq!(clause.encode.as_deref(), Some("JSON"));
        assert_eq!(table.retention_ms, Some(86_400_000));
    }

    #[test]
    fn quoted_and_dashed_option_names() {
        let mut create = tokens(
            "CREATE SOURCE s (v INT) WITH ('connector' = 'datagen', 'rows-per-second' = '5', \
             fields.v.kind = 'sequence') ROW FORMAT JSON",
        );
        let (clause, _) = extract(&mut create).unwrap().unwrap();
        assert_eq!(clause.options[1].0, "rows-per-second");
        assert_eq!(clause.options[2].0, "fields.v.kind");
        assert_eq!(clause.format.as_deref(), Some("PLAIN"));
        assert_eq!(clause.encode.as_deref(), Some("JSON"));
    }

    #[test]
    fn a_source_needs_a_connector_and_distinct_options() {
        let mut missing = tokens("CREATE SOURCE s (v INT)");
        assert_eq!(
            extract(&mut missing).unwrap_err().code,
            sqlstate::INVALID_PARAMETER_VALUE
        );
        let mut twice = tokens("CREATE SOURCE s (v INT) WITH (connector = 'a', connector = 'b')");
        assert!(extract(&mut twice).is_err());
        let mut table = tokens("CREATE TABLE t (v INT)");
        assert!(extract(&mut table).unwrap().is_none());
    }

    #[test]
    fn drop_source_names() {
        let drop = tokens("DROP SOURCE IF EXISTS a, \"B\"");
        assert_eq!(
            parse_drop(&drop).unwrap(),
            Some((vec!["a".to_string(), "B".to_string()], true))
        );
        assert!(parse_drop(&tokens("DROP SOURCE")).is_err());
        assert!(parse_drop(&tokens("DROP SOURCE a CASCADE")).is_err());
        assert_eq!(parse_drop(&tokens("DROP TABLE a")).unwrap(), None);
    }

    #[test]
    fn show_create_source() {
        let show = show_create_as_table(tokens("SHOW CREATE SOURCE bid"));
        assert_eq!(render(&show), "SHOW CREATE TABLE bid");
    }
}
