//! Flink's spelling of window functions, `TABLE(FN(TABLE t,
//! DESCRIPTOR(ts), ...))`, rewritten at the token level to weir's
//! `FN(t, ts, ...)` before sqlparser sees the statement.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::WINDOW_FUNCTIONS;
use crate::error::{Result, WeirError};
use crate::sql::tokens::is_word;

fn is_window_function(token: &Token) -> bool {
    WINDOW_FUNCTIONS.iter().any(|name| is_word(token, name))
}

/// Rewrites `TABLE(FN(TABLE t, DESCRIPTOR(c), ...))` to `FN(t, c, ...)`.
pub fn normalize_flink_spelling(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let significant: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(index, _)| index)
        .collect();
    let mut drop = vec![false; tokens.len()];
    for (position, &index) in significant.iter().enumerate() {
        let at = |offset: usize| {
            significant
                .get(position + offset)
                .map(|&i| &tokens[i].token)
        };
        let starts_call = is_word(&tokens[index].token, "TABLE")
            && at(1) == Some(&Token::LParen)
            && at(2).is_some_and(is_window_function)
            && at(3) == Some(&Token::LParen);
        if !starts_call {
            continue;
        }
        let outer_open = significant[position + 1];
        let outer_close = matching_paren(&tokens, outer_open).ok_or_else(unbalanced)?;
        drop[index] = true;
        drop[outer_open] = true;
        drop[outer_close] = true;
        mark_arguments(&tokens, significant[position + 3], &mut drop)?;
    }
    Ok(tokens
        .into_iter()
        .zip(drop)
        .filter_map(|(token, dropped)| (!dropped).then_some(token))
        .collect())
}

fn unbalanced() -> WeirError {
    WeirError::syntax("syntax error: unbalanced parentheses in a window function")
}

fn matching_paren(tokens: &[TokenWithSpan], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => {}
        }
    }
    None
}

/// Inside the window function's parentheses: drop `TABLE` before the input
/// and unwrap `DESCRIPTOR(col)`.
fn mark_arguments(tokens: &[TokenWithSpan], open: usize, drop: &mut [bool]) -> Result<()> {
    let close = matching_paren(tokens, open).ok_or_else(unbalanced)?;
    let mut argument_start = true;
    let mut depth = 0;
    let mut index = open + 1;
    while index < close {
        let token = &tokens[index].token;
        match token {
            Token::Whitespace(_) => {}
            Token::Comma if depth == 0 => argument_start = true,
            _ if argument_start && depth == 0 && is_word(token, "TABLE") => drop[index] = true,
            // SESSION's `PARTITION BY keys`: weir takes the key from GROUP BY.
            _ if depth == 0 && is_word(token, "PARTITION") => {
                index = drop_partition_clause(tokens, index, close, drop);
                continue;
            }
            _ if argument_start && depth == 0 && is_word(token, "DESCRIPTOR") => {
                drop[index] = true;
                let descriptor_open = (index + 1..close)
                    .find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
                    .filter(|&i| tokens[i].token == Token::LParen)
                    .ok_or_else(|| WeirError::syntax("syntax error: DESCRIPTOR needs (column)"))?;
                let descriptor_close =
                    matching_paren(tokens, descriptor_open).ok_or_else(unbalanced)?;
                drop[descriptor_open] = true;
                drop[descriptor_close] = true;
                argument_start = false;
                index = descriptor_open + 1;
                continue;
            }
            Token::LParen => {
                depth += 1;
                argument_start = false;
            }
            Token::RParen => {
                depth -= 1;
                argument_start = false;
            }
            _ => argument_start = false,
        }
        index += 1;
    }
    Ok(())
}

/// Drops `PARTITION BY ...` up to the next top-level comma; returns where
/// the argument list continues.
fn drop_partition_clause(
    tokens: &[TokenWithSpan],
    from: usize,
    close: usize,
    drop: &mut [bool],
) -> usize {
    let mut depth = 0;
    let mut index = from;
    while index < close {
        match tokens[index].token {
            Token::Comma if depth == 0 => break,
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        drop[index] = true;
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use crate::sql::parser::render;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn normalized(sql: &str) -> String {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        render(&normalize_flink_spelling(tokens).unwrap())
    }

    #[test]
    fn flink_spelling_becomes_the_short_one() {
        assert_eq!(
            normalized(
                "SELECT * FROM TABLE(TUMBLE(TABLE pv, DESCRIPTOR(ts), INTERVAL '5' MINUTE))"
            ),
            "SELECT * FROM TUMBLE( pv, ts, INTERVAL '5' MINUTE)"
        );
        assert_eq!(
            normalized("SELECT * FROM TABLE(HOP(TABLE pv, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)) AS w"),
            "SELECT * FROM HOP( pv, ts, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE) AS w"
        );
        assert_eq!(normalized("SELECT * FROM t"), "SELECT * FROM t");
        assert_eq!(
            normalized("SELECT * FROM TABLE(SESSION(TABLE bids PARTITION BY (item, shop), DESCRIPTOR(ts), INTERVAL '5' MINUTE))"),
            "SELECT * FROM SESSION( bids , ts, INTERVAL '5' MINUTE)"
        );
        assert_eq!(
            normalized("SELECT k FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '10' MINUTE)) GROUP BY k"),
            "SELECT k FROM SESSION( clicks , ts, INTERVAL '10' MINUTE) GROUP BY k"
        );
    }
}
