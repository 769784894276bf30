//! `[EXPLAIN] CREATE MATERIALIZED VIEW name AS query [EMIT ...]`, where the
//! EMIT clause is `ON WINDOW CLOSE`, `EVERY interval` or both (in either
//! order, optionally joined by AND): the EXPLAIN prefix and the EMIT clause
//! are taken off the tokens before
//! sqlparser parses the CREATE; window functions in the query are rewritten
//! for the streaming planner.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Result, WeirError};
use crate::sql::tokens::{is_word, significant};
use crate::stream::EmitMode;

#[derive(Debug, Clone, PartialEq)]
pub struct MaterializedView {
    /// sqlparser's CREATE MATERIALIZED VIEW (a `CreateView`).
    pub statement: ast::Statement,
    /// The CREATE statement as written (without EXPLAIN), for the catalog.
    pub text: String,
    pub emit: EmitMode,
    /// `WITH (late_data = ..., allowed_lateness = ..., state_ttl = ...)`.
    pub options: crate::sql::ViewOptions,
    pub explain: bool,
}

/// What `split` finds in a CREATE MATERIALIZED VIEW.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub explain: bool,
    /// The CREATE without EMIT, for sqlparser.
    pub create: Vec<TokenWithSpan>,
    /// The whole statement without EXPLAIN, as stored in the catalog.
    pub text: Vec<TokenWithSpan>,
    pub emit: EmitMode,
    /// The interval of `EMIT EVERY interval`, as written.
    pub every: Option<Vec<TokenWithSpan>>,
}

/// Splits a CREATE MATERIALIZED VIEW into its parts; None for anything else.
pub fn split(tokens: &[TokenWithSpan]) -> Option<Split> {
    let positions = significant(tokens);
    let word = |position: usize| positions.get(position).map(|&i| &tokens[i].token);
    let explain = word(0).is_some_and(|t| is_word(t, "EXPLAIN"));
    let start = usize::from(explain);
    let mut next = start + 1;
    if !word(start).is_some_and(|t| is_word(t, "CREATE")) {
        return None;
    }
    if word(next).is_some_and(|t| is_word(t, "OR")) {
        next += 2;
    }
    if !(word(next).is_some_and(|t| is_word(t, "MATERIALIZED"))
        && word(next + 1).is_some_and(|t| is_word(t, "VIEW")))
    {
        return None;
    }
    let first = positions[start];
    let clause = emit_clause(tokens, &positions[start..]);
    let end = clause.as_ref().map_or(tokens.len(), |clause| clause.start);
    let emit = match clause.as_ref().is_some_and(|clause| clause.on_window_close) {
        true => EmitMode::OnWindowClose,
        false => EmitMode::OnUpdate,
    };
    Some(Split {
        explain,
        create: tokens[first..end].to_vec(),
        text: tokens[first..].to_vec(),
        emit,
        every: clause.and_then(|clause| clause.every),
    })
}

/// The EMIT clause ending a CREATE MATERIALIZED VIEW.
struct EmitClause {
    /// Where EMIT is (a token index).
    start: usize,
    on_window_close: bool,
    every: Option<Vec<TokenWithSpan>>,
}

/// The last EMIT outside parentheses whose words to the end form an EMIT
/// clause; None when there is none (a column named emit stays a column).
fn emit_clause(tokens: &[TokenWithSpan], positions: &[usize]) -> Option<EmitClause> {
    let mut depth = 0i64;
    let mut candidate = None;
    for (index, &position) in positions.iter().enumerate() {
        match &tokens[position].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            token if depth == 0 && is_word(token, "EMIT") => candidate = Some(index),
            _ => {}
        }
    }
    let index = candidate?;
    let words: Vec<usize> = positions[index + 1..].to_vec();
    let mut clause = EmitClause {
        start: positions[index],
        on_window_close: false,
        every: None,
    };
    let mut at = 0;
    while at < words.len() {
        let word = |offset: usize| words.get(at + offset).map(|&i| &tokens[i].token);
        if at > 0 && word(0).is_some_and(|t| is_word(t, "AND") || *t == Token::Comma) {
            at += 1;
            continue;
        }
        let on_close = ["ON", "WINDOW", "CLOSE"]
            .iter()
            .enumerate()
            .all(|(offset, keyword)| word(offset).is_some_and(|t| is_word(t, keyword)));
        if on_close && !clause.on_window_close {
            clause.on_window_close = true;
            at += 3;
        } else if word(0).is_some_and(|t| is_word(t, "EVERY")) && clause.every.is_none() {
            let interval_end = (at + 1..words.len())
                .find(|&i| {
                    let token = &tokens[words[i]].token;
                    is_word(token, "AND") || is_word(token, "ON") || *token == Token::Comma
                })
                .unwrap_or(words.len());
            if interval_end == at + 1 {
                return None;
            }
            let from = words[at + 1];
            let to = words[interval_end - 1] + 1;
            clause.every = Some(tokens[from..to].to_vec());
            at = interval_end;
        } else {
            return None;
        }
    }
    (clause.on_window_close || clause.every.is_some()).then_some(clause)
}

/// `SHOW CREATE MATERIALIZED VIEW v` (which sqlparser lacks) becomes
/// `SHOW CREATE VIEW v`; both show the stored statement.
pub fn show_create_as_view(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions = significant(&tokens);
    let word = |position: usize| positions.get(position).map(|&i| &tokens[i].token);
    let matches = ["SHOW", "CREATE", "MATERIALIZED", "VIEW"]
        .iter()
        .enumerate()
        .all(|(position, keyword)| word(position).is_some_and(|t| is_word(t, keyword)));
    if matches {
        tokens.remove(positions[2]);
    }
    tokens
}

/// Checks the parsed CREATE is one weir can run.
pub fn check(statement: &ast::Statement) -> Result<()> {
    let ast::Statement::CreateView(create) = statement else {
        return Err(WeirError::syntax("expected CREATE MATERIALIZED VIEW"));
    };
    if !create.columns.is_empty() {
        return Err(WeirError::unsupported(
            "a column list after the materialized view's name is not supported",
        )
        .with_hint("Name the columns with AS in the SELECT list."));
    }
    if create.or_replace {
        return Err(
            WeirError::unsupported("CREATE OR REPLACE MATERIALIZED VIEW is not supported")
                .with_hint("DROP MATERIALIZED VIEW first, then create it again."),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use crate::sql::parser::render;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn split_sql(sql: &str) -> Option<(bool, String, EmitMode)> {
        split_every(sql).map(|(explain, create, emit, _)| (explain, create, emit))
    }

    fn split_every(sql: &str) -> Option<(bool, String, EmitMode, Option<String>)> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        split(&tokens).map(|split| {
            // What is stored must bring the EMIT clause back on restart.
            let stored = render(&split.text);
            let again = Tokenizer::new(&WeirDialect::new(), &stored)
                .tokenize_with_location()
                .unwrap();
            let resplit = super::split(&again).unwrap();
            assert_eq!(resplit.emit, split.emit);
            assert_eq!(
                resplit.every.as_deref().map(render),
                split.every.as_deref().map(render)
            );
            let every = split.every.as_deref().map(render);
            (split.explain, render(&split.create), split.emit, every)
        })
    }

    #[test]
    fn emit_and_explain_are_taken_off() {
        assert_eq!(
            split_sql("EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT ON WINDOW CLOSE"),
            Some((
                true,
                "CREATE MATERIALIZED VIEW v AS SELECT * FROM t".to_string(),
                EmitMode::OnWindowClose
            ))
        );
        assert_eq!(
            split_sql("create materialized view v as select 1"),
            Some((
                false,
                "create materialized view v as select 1".to_string(),
                EmitMode::OnUpdate
            ))
        );
        assert_eq!(split_sql("CREATE VIEW v AS SELECT 1"), None);
        assert_eq!(split_sql("SELECT 1"), None);
    }

    #[test]
    fn emit_every_alone_or_with_window_close() {
        let create = "CREATE MATERIALIZED VIEW v AS SELECT * FROM t".to_string();
        let every = Some("INTERVAL '1' MINUTE".to_string());
        for (sql, emit) in [
            ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT EVERY INTERVAL '1' MINUTE", EmitMode::OnUpdate),
            ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t emit every INTERVAL '1' MINUTE on window close", EmitMode::OnWindowClose),
            ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT ON WINDOW CLOSE AND EVERY INTERVAL '1' MINUTE", EmitMode::OnWindowClose),
            ("CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT ON WINDOW CLOSE, EVERY INTERVAL '1' MINUTE", EmitMode::OnWindowClose),
        ] {
            assert_eq!(split_every(sql), Some((false, create.clone(), emit, every.clone())), "{sql}");
        }
        assert_eq!(
            split_every("CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT EVERY '30 seconds'")
                .unwrap()
                .3,
            Some("'30 seconds'".to_string())
        );
    }

    #[test]
    fn an_emit_that_is_not_a_clause_stays_in_the_query() {
        // A column named emit, and EMIT inside parentheses.
        for sql in [
            "CREATE MATERIALIZED VIEW v AS SELECT emit FROM t",
            "CREATE MATERIALIZED VIEW v AS SELECT * FROM (SELECT 1 AS x) EMIT",
            "CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT EVERY",
            "CREATE MATERIALIZED VIEW v AS SELECT * FROM t EMIT ON WINDOW CLOSE ON WINDOW CLOSE",
            "CREATE MATERIALIZED VIEW v AS SELECT f((SELECT 1 EMIT ON WINDOW CLOSE))",
        ] {
            let (_, create, emit, every) = split_every(sql).unwrap();
            assert_eq!(
                (create.as_str(), emit, every),
                (sql, EmitMode::OnUpdate, None),
                "{sql}"
            );
        }
    }
}
