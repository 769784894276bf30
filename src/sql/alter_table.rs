//! `ALTER TABLE t SET (retention = '7 days')` and `ALTER TABLE t RESET
//! (retention)`: a stream's retention changed after it was created. Other
//! ALTER TABLE forms go on to sqlparser (and are refused by the planner).

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::table_time::table_options;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::tokens::{is_word, words};

/// A parsed `ALTER TABLE ... SET | RESET (retention ...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterRetention {
    pub table: String,
    pub if_exists: bool,
    /// The new retention in milliseconds; None after RESET (keep all).
    pub retention_ms: Option<i64>,
}

/// The statement, when the tokens are ALTER TABLE ... SET/RESET ( ... ).
pub fn parse(tokens: &[TokenWithSpan]) -> Result<Option<AlterRetention>> {
    let words = words(tokens);
    if !(words.len() >= 3 && is_word(words[0], "ALTER") && is_word(words[1], "TABLE")) {
        return Ok(None);
    }
    let mut at = 2;
    let if_exists =
        is_word(words[at], "IF") && words.get(at + 1).is_some_and(|t| is_word(t, "EXISTS"));
    if if_exists {
        at += 2;
    }
    let Some(Token::Word(name)) = words.get(at) else {
        return Ok(None);
    };
    let table = match name.quote_style {
        Some(_) => name.value.clone(),
        None => name.value.to_ascii_lowercase(),
    };
    let verb = words.get(at + 1);
    let reset = verb.is_some_and(|t| is_word(t, "RESET"));
    let set = verb.is_some_and(|t| is_word(t, "SET"));
    let (Some(Token::LParen), Some(Token::RParen)) = (words.get(at + 2), words.last()) else {
        return Ok(None);
    };
    if !(set || reset) {
        return Ok(None);
    }
    let inner: Vec<Token> = words[at + 3..words.len() - 1]
        .iter()
        .map(|t| (*t).clone())
        .collect();
    let retention_ms = if set {
        let options = table_options(&inner)?;
        if options.watermark_idle_timeout_ms.is_some() || options.retention_ms.is_none() {
            return Err(only_retention());
        }
        options.retention_ms
    } else {
        match inner.as_slice() {
            [option] if is_word(option, "retention") => None,
            _ => return Err(only_retention()),
        }
    };
    Ok(Some(AlterRetention {
        table,
        if_exists,
        retention_ms,
    }))
}

fn only_retention() -> WeirError {
    WeirError::new(
        sqlstate::FEATURE_NOT_SUPPORTED,
        "ALTER TABLE can change only the retention option",
    )
    .with_hint("Write ALTER TABLE t SET (retention = '7 days') or ALTER TABLE t RESET (retention).")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn parsed(sql: &str) -> Result<Option<AlterRetention>> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        parse(&tokens)
    }

    #[test]
    fn set_and_reset_retention() {
        let set = parsed("ALTER TABLE Events SET (retention = '7 days')").unwrap();
        assert_eq!(
            set,
            Some(AlterRetention {
                table: "events".into(),
                if_exists: false,
                retention_ms: Some(7 * 24 * 3600 * 1000),
            })
        );
        let reset = parsed("alter table if exists \"Events\" reset (retention)").unwrap();
        assert_eq!(
            reset,
            Some(AlterRetention {
                table: "Events".into(),
                if_exists: true,
                retention_ms: None,
            })
        );
    }

    #[test]
    fn other_alters_pass_and_other_options_are_refused() {
        assert_eq!(parsed("ALTER TABLE t ADD COLUMN x INT").unwrap(), None);
        assert_eq!(parsed("ALTER TABLE t RENAME TO u").unwrap(), None);
        let code = |sql: &str| parsed(sql).unwrap_err().code;
        assert_eq!(
            code("ALTER TABLE t SET (watermark_idle_timeout = '1s')"),
            "0A000"
        );
        assert_eq!(code("ALTER TABLE t RESET (fillfactor)"), "0A000");
        assert_eq!(code("ALTER TABLE t SET (retention = 'soon')"), "22023");
        assert_eq!(code("ALTER TABLE t SET (fillfactor = 70)"), "22023");
    }
}
