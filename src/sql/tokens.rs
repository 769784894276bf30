//! Helpers for the token-level rewrites weir's parser makes before
//! sqlparser sees a statement.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

/// `token` is the unquoted word `keyword` (any case).
pub fn is_word(token: &Token, keyword: &str) -> bool {
    matches!(token, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(keyword))
}

/// Positions of the tokens that are not whitespace.
pub fn significant(tokens: &[TokenWithSpan]) -> Vec<usize> {
    tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(index, _)| index)
        .collect()
}

/// The tokens that are not whitespace.
pub fn words(tokens: &[TokenWithSpan]) -> Vec<&Token> {
    tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect()
}
