//! `[EXPLAIN] CREATE MATERIALIZED VIEW name AS query [EMIT ON WINDOW CLOSE]`:
//! the EXPLAIN prefix and the EMIT suffix are taken off the tokens before
//! sqlparser parses the CREATE; window functions in the query are rewritten
//! for the streaming planner.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::tokenizer::TokenWithSpan;

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
    let count = positions.len();
    let emits_on_close = count >= 4
        && ["EMIT", "ON", "WINDOW", "CLOSE"]
            .iter()
            .enumerate()
            .all(|(offset, keyword)| {
                is_word(&tokens[positions[count - 4 + offset]].token, keyword)
            });
    let first = positions[start];
    let end = if emits_on_close {
        positions[count - 4]
    } else {
        tokens.len()
    };
    let emit = if emits_on_close {
        EmitMode::OnWindowClose
    } else {
        EmitMode::OnUpdate
    };
    Some(Split {
        explain,
        create: tokens[first..end].to_vec(),
        text: tokens[first..].to_vec(),
        emit,
    })
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
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        split(&tokens).map(|split| {
            // What is stored must bring the emit mode back on restart.
            let stored = render(&split.text);
            assert_eq!(
                stored
                    .to_ascii_uppercase()
                    .ends_with("EMIT ON WINDOW CLOSE"),
                split.emit == EmitMode::OnWindowClose
            );
            (split.explain, render(&split.create), split.emit)
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
}
