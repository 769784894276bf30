//! Changefeed statements, taken apart at the token level (none of them is
//! SQL that sqlparser knows): `SUBSCRIBE [TO] v [WITH (SNAPSHOT = false)]`,
//! `DECLARE c CURSOR FOR SUBSCRIBE …`, `FETCH [n | ALL] [FROM] c [WITH
//! (TIMEOUT = '1s')]`, `CLOSE c | ALL` and `COPY (SUBSCRIBE …) TO STDOUT
//! [WITH (…)]`, spelled as Materialize does.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::tokens::{is_word, words};
use crate::error::{Result, WeirError};

/// `SUBSCRIBE [TO] view [WITH (SNAPSHOT = true | false)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub view: String,
    /// Start with the view's current rows (default), or only changes.
    pub snapshot: bool,
}

/// A changefeed statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changefeed {
    /// A bare SUBSCRIBE (answered with a hint: it never completes).
    Subscribe(Subscribe),
    Declare {
        cursor: String,
        subscribe: Subscribe,
    },
    /// `count` None: ALL. `timeout_ms` None: wait for a first row.
    Fetch {
        cursor: String,
        count: Option<u64>,
        timeout_ms: Option<u64>,
    },
    /// `cursor` None: CLOSE ALL.
    Close { cursor: Option<String> },
    /// COPY (SUBSCRIBE …) TO STDOUT; `copy` is the same COPY of a dummy
    /// query, for its options.
    Copy { subscribe: Subscribe, copy: String },
}

fn syntax(what: &str, hint: &str) -> WeirError {
    WeirError::syntax(format!("syntax error in {what}")).with_hint(hint.to_string())
}

const SUBSCRIBE_HINT: &str = "Write SUBSCRIBE [TO] view [WITH (SNAPSHOT = false)].";
const FETCH_HINT: &str = "Write FETCH [count | ALL] [FROM] cursor [WITH (TIMEOUT = '1s')].";

/// The changefeed statement `tokens` hold, if they hold one.
pub fn parse(tokens: &[TokenWithSpan]) -> Result<Option<Changefeed>> {
    let all = words(tokens);
    let Some(first) = all.first() else {
        return Ok(None);
    };
    let mut rest = Words { words: &all[1..] };
    let statement = match first {
        t if is_word(t, "SUBSCRIBE") => Changefeed::Subscribe(subscribe_tail(&mut rest)?),
        t if is_word(t, "DECLARE") => match declare(&mut rest)? {
            Some(statement) => statement,
            None => return Ok(None),
        },
        t if is_word(t, "FETCH") => fetch(&mut rest)?,
        t if is_word(t, "CLOSE") => {
            let cursor = rest.name("CLOSE", "Write CLOSE cursor (or CLOSE ALL).")?;
            match cursor.eq_ignore_ascii_case("all") {
                true => Changefeed::Close { cursor: None },
                false => Changefeed::Close {
                    cursor: Some(cursor),
                },
            }
        }
        t if is_word(t, "COPY") => match copy(&all)? {
            Some(statement) => return Ok(Some(statement)),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    if let Some(extra) = rest.words.first() {
        return Err(WeirError::syntax(format!(
            "syntax error at or near \"{extra}\""
        )));
    }
    Ok(Some(statement))
}

struct Words<'a> {
    words: &'a [&'a Token],
}

impl Words<'_> {
    fn next(&mut self) -> Option<&Token> {
        let (first, rest) = self.words.split_first()?;
        self.words = rest;
        Some(first)
    }

    fn take(&mut self, keyword: &str) -> bool {
        let found = self.words.first().is_some_and(|t| is_word(t, keyword));
        if found {
            self.words = &self.words[1..];
        }
        found
    }

    fn name(&mut self, what: &str, hint: &str) -> Result<String> {
        match self.next() {
            Some(Token::Word(word)) => Ok(match word.quote_style {
                Some(_) => word.value.clone(),
                None => word.value.to_ascii_lowercase(),
            }),
            _ => Err(syntax(what, hint)),
        }
    }

    /// `WITH (name [=] value, …)`: names lower case, values as written.
    fn options(&mut self, what: &str, hint: &str) -> Result<Vec<(String, String)>> {
        if !self.take("WITH") {
            return Ok(Vec::new());
        }
        if self.next() != Some(&Token::LParen) {
            return Err(syntax(what, hint));
        }
        let mut options = Vec::new();
        loop {
            let name = self.name(what, hint)?;
            if self.words.first() == Some(&&Token::Eq) {
                self.next();
            }
            let value = match self.next() {
                Some(Token::Word(word)) => word.value.clone(),
                Some(Token::SingleQuotedString(text)) => text.clone(),
                Some(Token::Number(number, _)) => number.clone(),
                _ => return Err(syntax(what, hint)),
            };
            options.push((name, value));
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::RParen) => return Ok(options),
                _ => return Err(syntax(what, hint)),
            }
        }
    }
}

fn subscribe_tail(rest: &mut Words) -> Result<Subscribe> {
    rest.take("TO");
    let mut view = rest.name("SUBSCRIBE", SUBSCRIBE_HINT)?;
    // A qualified name: `schema.view` is the view's catalog key.
    if rest.words.first() == Some(&&Token::Period) {
        rest.next();
        let name = rest.name("SUBSCRIBE", SUBSCRIBE_HINT)?;
        view = crate::catalog::relation_key(&view, &name);
    }
    let mut snapshot = true;
    for (name, value) in rest.options("SUBSCRIBE", SUBSCRIBE_HINT)? {
        match (name.as_str(), value.to_ascii_lowercase().as_str()) {
            ("snapshot", "true") => snapshot = true,
            ("snapshot", "false") => snapshot = false,
            _ => {
                return Err(WeirError::unsupported(format!(
                    "SUBSCRIBE option {name} = {value} is not supported"
                ))
                .with_hint("SUBSCRIBE takes WITH (SNAPSHOT = true | false)."))
            }
        }
    }
    Ok(Subscribe { view, snapshot })
}

/// `DECLARE c [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR SUBSCRIBE …`; None
/// for a cursor over anything else.
fn declare(rest: &mut Words) -> Result<Option<Changefeed>> {
    let cursor = rest.name("DECLARE", "Write DECLARE c CURSOR FOR SUBSCRIBE view.")?;
    while !rest.take("FOR") {
        if rest.next().is_none() {
            return Ok(None);
        }
    }
    if !rest.take("SUBSCRIBE") {
        return Ok(None);
    }
    let subscribe = subscribe_tail(rest)?;
    Ok(Some(Changefeed::Declare { cursor, subscribe }))
}

fn fetch(rest: &mut Words) -> Result<Changefeed> {
    rest.take("FORWARD");
    let count = match rest.words.first() {
        Some(Token::Number(number, _)) => {
            let count = number
                .parse::<u64>()
                .map_err(|_| syntax("FETCH", FETCH_HINT))?;
            rest.next();
            Some(count)
        }
        Some(t) if is_word(t, "ALL") => {
            rest.next();
            None
        }
        _ => Some(1),
    };
    if !rest.take("FROM") {
        rest.take("IN");
    }
    let cursor = rest.name("FETCH", FETCH_HINT)?;
    let mut timeout_ms = None;
    for (name, value) in rest.options("FETCH", FETCH_HINT)? {
        if name != "timeout" {
            return Err(
                WeirError::unsupported(format!("FETCH option {name} is not supported"))
                    .with_hint(FETCH_HINT),
            );
        }
        let milliseconds = super::units::parse_milliseconds(&value).ok_or_else(|| {
            WeirError::new(
                crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                format!("FETCH timeout '{value}' is not a duration"),
            )
            .with_hint("Write a duration such as '1s' or '250ms'.")
        })?;
        timeout_ms = Some(milliseconds);
    }
    Ok(Changefeed::Fetch {
        cursor,
        count,
        timeout_ms,
    })
}

/// `COPY ( SUBSCRIBE … ) TO …`: the subscription, and the COPY with a
/// dummy query in its place (so COPY's own options parse as usual).
fn copy(all: &[&Token]) -> Result<Option<Changefeed>> {
    let opens = all.get(1) == Some(&&Token::LParen);
    if !opens || !all.get(2).is_some_and(|t| is_word(t, "SUBSCRIBE")) {
        return Ok(None);
    }
    let Some(close) = all.iter().position(|t| **t == Token::RParen) else {
        return Err(syntax("COPY", "Write COPY (SUBSCRIBE view) TO STDOUT."));
    };
    let mut inner = Words {
        words: &all[3..close],
    };
    let subscribe = subscribe_tail(&mut inner)?;
    if !inner.words.is_empty() {
        return Err(syntax("COPY", "Write COPY (SUBSCRIBE view) TO STDOUT."));
    }
    let tail: Vec<String> = all[close + 1..].iter().map(|t| t.to_string()).collect();
    let copy = format!("COPY (SELECT 1) {}", tail.join(" "));
    Ok(Some(Changefeed::Copy { subscribe, copy }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn parsed(sql: &str) -> Result<Option<Changefeed>> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        parse(&tokens)
    }

    fn subscribe(view: &str, snapshot: bool) -> Subscribe {
        Subscribe {
            view: view.to_string(),
            snapshot,
        }
    }

    #[test]
    fn the_statements() {
        assert_eq!(
            parsed("SUBSCRIBE TO public.Totals").unwrap(),
            Some(Changefeed::Subscribe(subscribe("totals", true)))
        );
        assert_eq!(
            parsed("DECLARE c CURSOR FOR SUBSCRIBE v WITH (SNAPSHOT = false)").unwrap(),
            Some(Changefeed::Declare {
                cursor: "c".to_string(),
                subscribe: subscribe("v", false)
            })
        );
        assert_eq!(
            parsed("FETCH 100 c WITH (timeout = '1s')").unwrap(),
            Some(Changefeed::Fetch {
                cursor: "c".to_string(),
                count: Some(100),
                timeout_ms: Some(1000)
            })
        );
        assert_eq!(
            parsed("FETCH ALL FROM c").unwrap(),
            Some(Changefeed::Fetch {
                cursor: "c".to_string(),
                count: None,
                timeout_ms: None
            })
        );
        assert_eq!(
            parsed("CLOSE ALL").unwrap(),
            Some(Changefeed::Close { cursor: None })
        );
        assert_eq!(
            parsed("COPY (SUBSCRIBE TO v) TO STDOUT WITH (FORMAT csv)").unwrap(),
            Some(Changefeed::Copy {
                subscribe: subscribe("v", true),
                copy: "COPY (SELECT 1) TO STDOUT WITH ( FORMAT csv )".to_string()
            })
        );
    }

    #[test]
    fn other_statements_are_left_alone_and_mistakes_refused() {
        assert_eq!(parsed("DECLARE c CURSOR FOR SELECT 1").unwrap(), None);
        assert_eq!(parsed("COPY (SELECT 1) TO STDOUT").unwrap(), None);
        assert_eq!(parsed("SELECT 1").unwrap(), None);
        assert!(parsed("SUBSCRIBE").is_err());
        assert!(parsed("SUBSCRIBE v WITH (progress = true)").is_err());
        assert!(parsed("FETCH 1 c WITH (timeout = 'soon')").is_err());
        assert!(parsed("FETCH 1 c extra").is_err());
    }
}
