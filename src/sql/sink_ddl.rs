//! `CREATE SINK`, `DROP SINK` and `SHOW CREATE SINK`, taken apart at the
//! token level (sqlparser has no sinks). A sink names the materialized view
//! it ships, its connector options (`WITH (connector = 'kafka', topic =
//! '…')`, dotted names as RisingWave writes them) and its format: `FORMAT
//! PLAIN | UPSERT ENCODE JSON [( options )]`, in either order with WITH.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::tokens::{is_word, words};
use crate::error::{Result, WeirError};

/// A sink statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkStatement {
    Create(CreateSink),
    Drop { names: Vec<String>, if_exists: bool },
    ShowCreate { name: String },
}

/// `CREATE SINK [IF NOT EXISTS] name FROM view WITH (…) FORMAT … ENCODE …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSink {
    pub name: String,
    pub view: String,
    pub if_not_exists: bool,
    /// WITH options and the options after ENCODE, names lower case.
    pub options: Vec<(String, String)>,
    /// `PLAIN` or `UPSERT` (upper case), if given.
    pub format: Option<String>,
    /// `JSON` (upper case), if given.
    pub encode: Option<String>,
    /// The statement as written, for the catalog.
    pub text: String,
}

/// The sink statement in `tokens`, if it is one.
pub fn parse(tokens: &[TokenWithSpan], text: &str) -> Result<Option<SinkStatement>> {
    let words = words(tokens);
    let at =
        |position: usize, keyword: &str| words.get(position).is_some_and(|t| is_word(t, keyword));
    if at(0, "CREATE") && at(1, "SINK") {
        return parse_create(&words[2..], text).map(|c| Some(SinkStatement::Create(c)));
    }
    if at(0, "DROP") && at(1, "SINK") {
        return parse_drop(&words[2..]).map(Some);
    }
    if at(0, "SHOW") && at(1, "CREATE") && at(2, "SINK") {
        return match &words[3..] {
            [name] => Ok(Some(SinkStatement::ShowCreate {
                name: identifier(name)?,
            })),
            _ => Err(WeirError::syntax("SHOW CREATE SINK needs one name")),
        };
    }
    Ok(None)
}

fn create_hint() -> &'static str {
    "Write CREATE SINK name FROM view WITH (connector = 'file', path = '…') FORMAT PLAIN ENCODE JSON."
}

fn parse_create(rest: &[&Token], text: &str) -> Result<CreateSink> {
    let mut rest = rest;
    let if_not_exists = rest.len() >= 3
        && is_word(rest[0], "IF")
        && is_word(rest[1], "NOT")
        && is_word(rest[2], "EXISTS");
    if if_not_exists {
        rest = &rest[3..];
    }
    let (name, rest) = qualified(rest)?;
    let (view, mut rest) = match rest {
        [from, rest @ ..] if is_word(from, "FROM") => qualified(rest)?,
        [as_word, ..] if is_word(as_word, "AS") => return Err(WeirError::unsupported(
            "CREATE SINK … AS SELECT is not supported",
        )
        .with_hint(
            "Create a materialized view of the query, then CREATE SINK name FROM that view.",
        )),
        _ => {
            return Err(WeirError::syntax("CREATE SINK needs a name and FROM view")
                .with_hint(create_hint()))
        }
    };
    let mut sink = CreateSink {
        name,
        view,
        if_not_exists,
        options: Vec::new(),
        format: None,
        encode: None,
        text: text.to_string(),
    };
    while let Some(first) = rest.first() {
        if is_word(first, "WITH") {
            let (inner, after) = parenthesised(&rest[1..], "WITH")?;
            sink.options
                .extend(super::source_ddl::parse_options(&inner)?);
            rest = after;
        } else if is_word(first, "FORMAT") {
            rest = take_format(&rest[1..], &mut sink)?;
        } else {
            return Err(
                WeirError::syntax(format!("syntax error in CREATE SINK at {first}"))
                    .with_hint(create_hint()),
            );
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some((name, _)) = sink
        .options
        .iter()
        .find(|(name, _)| !seen.insert(name.clone()))
    {
        return Err(WeirError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            format!("sink option {name} is given twice"),
        ));
    }
    Ok(sink)
}

/// `word ENCODE word [( options )]` after FORMAT; returns what follows.
fn take_format<'a>(rest: &'a [&'a Token], sink: &mut CreateSink) -> Result<&'a [&'a Token]> {
    let word = |token: Option<&&Token>| match token {
        Some(Token::Word(word)) => Some(word.value.to_ascii_uppercase()),
        _ => None,
    };
    let format = word(rest.first())
        .ok_or_else(|| WeirError::syntax("FORMAT needs a name").with_hint(create_hint()))?;
    let mut rest = &rest[1..];
    if rest.first().is_some_and(|t| is_word(t, "ENCODE")) {
        let encode = word(rest.get(1))
            .ok_or_else(|| WeirError::syntax("ENCODE needs a name").with_hint(create_hint()))?;
        sink.encode = Some(encode);
        rest = &rest[2..];
        if rest.first() == Some(&&Token::LParen) {
            let (inner, after) = parenthesised(rest, "ENCODE")?;
            sink.options
                .extend(super::source_ddl::parse_options(&inner)?);
            rest = after;
        }
    }
    sink.format = Some(format);
    Ok(rest)
}

/// The tokens inside the parentheses that open `rest`, and what follows.
fn parenthesised<'a>(rest: &'a [&'a Token], after: &str) -> Result<(Vec<Token>, &'a [&'a Token])> {
    let needs = || WeirError::syntax(format!("{after} needs (option = 'value', ...)"));
    if rest.first() != Some(&&Token::LParen) {
        return Err(needs());
    }
    let mut depth = 0;
    for (index, token) in rest.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    let inner = rest[1..index].iter().map(|t| (*t).clone()).collect();
                    return Ok((inner, &rest[index + 1..]));
                }
            }
            _ => {}
        }
    }
    Err(WeirError::syntax(format!("{after} ( is not closed")))
}

fn parse_drop(rest: &[&Token]) -> Result<SinkStatement> {
    let mut rest = rest;
    let if_exists = rest.len() >= 2 && is_word(rest[0], "IF") && is_word(rest[1], "EXISTS");
    if if_exists {
        rest = &rest[2..];
    }
    let hint = "Write DROP SINK [IF EXISTS] name.";
    let mut names = Vec::new();
    for (position, token) in rest.iter().enumerate() {
        match (position % 2, token) {
            (0, Token::Word(_)) => names.push(identifier(token)?),
            (1, Token::Comma) => {}
            (_, other) => {
                return Err(
                    WeirError::syntax(format!("syntax error in DROP SINK at {other}"))
                        .with_hint(hint),
                )
            }
        }
    }
    if names.is_empty() || rest.len() % 2 == 0 {
        return Err(WeirError::syntax("DROP SINK needs a name").with_hint(hint));
    }
    Ok(SinkStatement::Drop { names, if_exists })
}

/// A name as Postgres folds it: lower case unless quoted.
/// A relation's name (`name` or `schema.name`) as its catalog key, and
/// the words after it.
fn qualified<'a, 'b>(words: &'a [&'b Token]) -> Result<(String, &'a [&'b Token])> {
    match words {
        [schema, Token::Period, name, rest @ ..] => Ok((
            crate::catalog::relation_key(&identifier(schema)?, &identifier(name)?),
            rest,
        )),
        [name, rest @ ..] => Ok((identifier(name)?, rest)),
        [] => {
            Err(WeirError::syntax("CREATE SINK needs a name and FROM view")
                .with_hint(create_hint()))
        }
    }
}

fn identifier(token: &Token) -> Result<String> {
    match token {
        Token::Word(word) => Ok(match word.quote_style {
            Some(_) => word.value.clone(),
            None => word.value.to_ascii_lowercase(),
        }),
        other => Err(WeirError::syntax(format!("expected a name, found {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn statement(sql: &str) -> Result<Option<SinkStatement>> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        parse(&tokens, sql)
    }

    #[test]
    fn create_takes_with_and_format_in_either_order() {
        let Some(SinkStatement::Create(sink)) = statement(
            "CREATE SINK k FROM Counts WITH (connector = 'kafka', properties.bootstrap.server = 'h:1') \
             FORMAT UPSERT ENCODE JSON (force_append_only = 'true')",
        )
        .unwrap() else {
            panic!("a CREATE SINK");
        };
        assert_eq!((sink.name.as_str(), sink.view.as_str()), ("k", "counts"));
        assert_eq!(sink.format.as_deref(), Some("UPSERT"));
        assert_eq!(sink.encode.as_deref(), Some("JSON"));
        let names: Vec<_> = sink.options.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "connector",
                "properties.bootstrap.server",
                "force_append_only"
            ]
        );
        let Some(SinkStatement::Create(sink)) = statement(
            "create sink if not exists k from v format plain encode json with (connector = 'file')",
        )
        .unwrap() else {
            panic!("a CREATE SINK");
        };
        assert!(sink.if_not_exists);
        assert_eq!(
            sink.options,
            vec![("connector".to_string(), "file".to_string())]
        );
    }

    #[test]
    fn mistakes_are_syntax_errors_with_hints() {
        for sql in [
            "CREATE SINK k",
            "CREATE SINK k FROM v WITH connector = 'file'",
            "CREATE SINK k FROM v WITH (connector = 'file') garbage",
            "CREATE SINK k FROM v FORMAT",
            "DROP SINK",
            "DROP SINK a b",
        ] {
            assert!(statement(sql).is_err(), "{sql}");
        }
        let error = statement("CREATE SINK k AS SELECT 1").unwrap_err();
        assert_eq!(error.code, crate::error::sqlstate::FEATURE_NOT_SUPPORTED);
        assert_eq!(statement("SELECT 1").unwrap(), None);
        assert_eq!(
            statement("DROP SINK IF EXISTS a, \"B\"").unwrap(),
            Some(SinkStatement::Drop {
                names: vec!["a".into(), "B".into()],
                if_exists: true
            })
        );
    }
}
