//! `ALTER SYSTEM SET name { = | TO } value` and `ALTER SYSTEM RESET name`
//! (Postgres's server-wide settings; sqlparser has no grammar for them).

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Result, WeirError};
use crate::sql::tokens::{is_word, words};

/// `(name, value)` (None value: RESET) when the tokens are ALTER SYSTEM.
pub fn parse(tokens: &[TokenWithSpan]) -> Result<Option<(String, Option<String>)>> {
    let words = words(tokens);
    if !(words.len() >= 2 && is_word(words[0], "ALTER") && is_word(words[1], "SYSTEM")) {
        return Ok(None);
    }
    let usage = || {
        WeirError::syntax("syntax error in ALTER SYSTEM")
            .with_hint("Use ALTER SYSTEM SET name = value, or ALTER SYSTEM RESET name.")
    };
    let name = match words.get(3) {
        Some(Token::Word(word)) => word.value.to_ascii_lowercase(),
        _ => return Err(usage()),
    };
    match words.get(2) {
        Some(token) if is_word(token, "RESET") && words.len() == 4 => Ok(Some((name, None))),
        Some(token) if is_word(token, "SET") => {
            let separator_ok = words
                .get(4)
                .is_some_and(|t| **t == Token::Eq || is_word(t, "TO"));
            let value = match words.get(5..) {
                Some([Token::SingleQuotedString(text)]) => text.clone(),
                Some([Token::Number(number, _)]) => number.clone(),
                Some([Token::Word(word)]) => word.value.clone(),
                _ => return Err(usage()),
            };
            if !separator_ok {
                return Err(usage());
            }
            Ok(Some((name, Some(value))))
        }
        _ => Err(usage()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn parsed(sql: &str) -> Result<Option<(String, Option<String>)>> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        parse(&tokens)
    }

    #[test]
    fn set_and_reset() {
        assert_eq!(
            parsed("ALTER SYSTEM SET checkpoint_interval = '500ms'").unwrap(),
            Some(("checkpoint_interval".into(), Some("500ms".into())))
        );
        assert_eq!(
            parsed("alter system set checkpoint_interval to 2000").unwrap(),
            Some(("checkpoint_interval".into(), Some("2000".into())))
        );
        assert_eq!(
            parsed("ALTER SYSTEM RESET checkpoint_interval").unwrap(),
            Some(("checkpoint_interval".into(), None))
        );
        assert_eq!(parsed("ALTER TABLE t ADD x INT").unwrap(), None);
        assert_eq!(parsed("ALTER SYSTEM SET x").unwrap_err().code, "42601");
    }
}
