//! The declared lengths of a CREATE TABLE's character columns
//! (`VARCHAR(n)`, `CHARACTER VARYING(n)`, `CHAR(n)`, `CHARACTER(n)`).
//! DataFusion plans them all as text and forgets n, so weir reads them from
//! the statement: the table refuses longer values, as Postgres does
//! (22001), and the catalog describes the columns as Postgres would
//! (`character varying(n)`).
//!
//! DataFusion also refuses Postgres' own spellings `CHARACTER VARYING(n)`
//! and `CHAR VARYING(n)` (what pg_dump writes); `rewrite` spells them
//! `VARCHAR(n)` in column definitions and casts.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, CharacterLength, DataType, Expr, VisitMut, VisitorMut,
};

use super::parser::{parse, Statement};

pub fn rewrite(statement: &mut ast::Statement) {
    if let ast::Statement::CreateTable(create) = statement {
        for column in &mut create.columns {
            respell(&mut column.data_type);
        }
    }
    let _ = statement.visit(&mut CastRespeller);
}

struct CastRespeller;

impl VisitorMut for CastRespeller {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Cast { data_type, .. } = expr {
            respell(data_type);
        }
        ControlFlow::Continue(())
    }
}

fn respell(data_type: &mut DataType) {
    match data_type {
        DataType::CharacterVarying(length) | DataType::CharVarying(length) => {
            *data_type = DataType::Varchar(length.take());
        }
        DataType::Character(length) => *data_type = DataType::Char(length.take()),
        DataType::Array(ast::ArrayElemTypeDef::SquareBracket(inner, _))
        | DataType::Array(ast::ArrayElemTypeDef::AngleBracket(inner)) => respell(inner),
        _ => {}
    }
}

/// A character column's limit, and whether it is `CHAR(n)` (Postgres'
/// `bpchar`) rather than `VARCHAR(n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredLength {
    pub characters: u64,
    pub blank_padded: bool,
}

/// Each limited character column of `create_sql`, by its (normalized) name.
/// Empty when the text is not a CREATE TABLE.
pub fn declared_lengths(create_sql: &str) -> Vec<(String, DeclaredLength)> {
    let Ok(mut statements) = parse(create_sql) else {
        return Vec::new();
    };
    let statement = match statements.pop() {
        Some(Statement::Standard(statement)) => *statement,
        Some(Statement::CreateTable { statement, .. }) => *statement,
        _ => return Vec::new(),
    };
    let ast::Statement::CreateTable(create) = statement else {
        return Vec::new();
    };
    create
        .columns
        .iter()
        .filter_map(|column| {
            let declared = declared_length(&column.data_type)?;
            let name = match column.name.quote_style {
                Some(_) => column.name.value.clone(),
                None => column.name.value.to_ascii_lowercase(),
            };
            Some((name, declared))
        })
        .collect()
}

fn declared_length(data_type: &DataType) -> Option<DeclaredLength> {
    let (length, blank_padded) = match data_type {
        DataType::Varchar(length)
        | DataType::CharacterVarying(length)
        | DataType::CharVarying(length) => (length.as_ref()?, false),
        DataType::Char(length) | DataType::Character(length) => (length.as_ref()?, true),
        _ => return None,
    };
    match length {
        CharacterLength::IntegerLength { length, .. } => Some(DeclaredLength {
            characters: *length,
            blank_padded,
        }),
        CharacterLength::Max => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_character_columns_are_found() {
        let lengths = declared_lengths(
            "CREATE TABLE t (a VARCHAR(3), \"B\" CHARACTER VARYING(10), c CHAR(2), d TEXT, e VARCHAR)",
        );
        let limit = |characters, blank_padded| DeclaredLength {
            characters,
            blank_padded,
        };
        assert_eq!(
            lengths,
            vec![
                ("a".to_string(), limit(3, false)),
                ("B".to_string(), limit(10, false)),
                ("c".to_string(), limit(2, true)),
            ]
        );
        assert!(declared_lengths("SELECT 1").is_empty());
    }

    #[test]
    fn postgres_spellings_become_varchar() {
        let rewritten = crate::sql::ast_build::rewritten(
            "CREATE TABLE t (a CHARACTER VARYING(3), b CHARACTER(2), c CHAR VARYING)",
            rewrite,
        );
        assert_eq!(
            rewritten,
            "CREATE TABLE t (a VARCHAR(3), b CHAR(2), c VARCHAR)"
        );
        let cast =
            crate::sql::ast_build::rewritten("SELECT CAST(x AS CHARACTER VARYING(5))", rewrite);
        assert_eq!(cast, "SELECT CAST(x AS VARCHAR(5))");
    }
}
