//! `JOIN t FOR SYSTEM_TIME AS OF PROCTIME()` (RisingWave) or `AS OF
//! o.proc_time` (Flink, a processing-time column): a temporal lookup join,
//! where each row of the stream meets the table as it is when the row
//! arrives. sqlparser's Postgres dialect has no table versions, so the
//! clause is taken off the tokens before parsing and the tables it named
//! are handed to the streaming planner. In a query (not a view) the table
//! as it is now is what the clause means, so dropping it is the answer.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::tokens::{is_word, significant};
use crate::error::{Result, WeirError};

/// The tokens without any `FOR SYSTEM_TIME AS OF <time>`, and the tables
/// (unqualified names, as sqlparser folds them) each one followed.
pub fn strip(tokens: Vec<TokenWithSpan>) -> Result<(Vec<TokenWithSpan>, Vec<String>)> {
    let positions = significant(&tokens);
    let word = |at: usize| positions.get(at).map(|&index| &tokens[index].token);
    let mut removed = vec![false; tokens.len()];
    let mut tables = Vec::new();
    for at in 0..positions.len() {
        let clause = ["FOR", "SYSTEM_TIME", "AS", "OF"]
            .iter()
            .enumerate()
            .all(|(offset, keyword)| word(at + offset).is_some_and(|t| is_word(t, keyword)));
        if !clause {
            continue;
        }
        let table = match at.checked_sub(1).and_then(word) {
            Some(Token::Word(name)) => match name.quote_style {
                Some(_) => name.value.clone(),
                None => name.value.to_ascii_lowercase(),
            },
            _ => return Err(misplaced()),
        };
        let time_length = time_tokens(&positions[at + 4..], &tokens)?;
        let last = positions[at + 3 + time_length];
        for flag in &mut removed[positions[at]..=last] {
            *flag = true;
        }
        tables.push(table);
    }
    let kept = tokens
        .into_iter()
        .zip(removed)
        .filter(|(_, removed)| !removed)
        .map(|(token, _)| token)
        .collect();
    Ok((kept, tables))
}

/// How many significant tokens the time after `AS OF` takes: `PROCTIME()`
/// (or `NOW()`), `CURRENT_TIMESTAMP`, or a column `[relation.]name`.
fn time_tokens(positions: &[usize], tokens: &[TokenWithSpan]) -> Result<usize> {
    let token = |at: usize| positions.get(at).map(|&index| &tokens[index].token);
    match (token(0), token(1), token(2)) {
        (Some(Token::Word(_)), Some(Token::LParen), Some(Token::RParen)) => Ok(3),
        (Some(Token::Word(_)), Some(Token::Period), Some(Token::Word(_))) => Ok(3),
        (Some(Token::Word(_)), _, _) => Ok(1),
        _ => Err(
            WeirError::syntax("FOR SYSTEM_TIME AS OF takes the processing time").with_hint(
                "Write FOR SYSTEM_TIME AS OF PROCTIME(), or name the stream's PROCTIME() column.",
            ),
        ),
    }
}

fn misplaced() -> WeirError {
    WeirError::syntax("FOR SYSTEM_TIME AS OF must follow a table name")
        .with_hint("Write JOIN dimension FOR SYSTEM_TIME AS OF PROCTIME() AS d ON ...")
}

#[cfg(test)]
mod tests {
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn stripped(sql: &str) -> (String, Vec<String>) {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        let (tokens, tables) = strip(tokens).unwrap();
        let text: String = tokens.iter().map(|t| t.token.to_string()).collect();
        (
            text.split_whitespace().collect::<Vec<_>>().join(" "),
            tables,
        )
    }

    #[test]
    fn the_clause_goes_and_its_table_is_named() {
        assert_eq!(
            stripped("SELECT * FROM o JOIN Dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON o.k = d.k"),
            (
                "SELECT * FROM o JOIN Dim AS d ON o.k = d.k".to_string(),
                vec!["dim".to_string()]
            )
        );
        assert_eq!(
            stripped(
                "SELECT * FROM o JOIN s.\"Rates\" FOR SYSTEM_TIME AS OF o.proc_time r ON true"
            ),
            (
                "SELECT * FROM o JOIN s.\"Rates\" r ON true".to_string(),
                vec!["Rates".to_string()]
            )
        );
        assert_eq!(stripped("SELECT 1").1, Vec::<String>::new());
    }
}
