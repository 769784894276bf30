//! `LIKE … ESCAPE 'c'` with an escape character other than backslash, as
//! Postgres allows (SQLAlchemy's schema listing writes `ESCAPE '/'`):
//! DataFusion only escapes with backslash, so a literal pattern is
//! rewritten into the backslash form and the ESCAPE clause dropped; any
//! other pattern (`$1`, `'pg/_' || '%'`) is wrapped in `weir_like_pattern`,
//! which rewrites it when the query runs. `ESCAPE ''` (no escape
//! character) works the same way.

use std::ops::ControlFlow;

use std::sync::Arc;

use crate::sql::dialect::WeirDialect;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};
use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

/// The function a non-literal pattern goes through.
const PATTERN_FUNCTION: &str = "weir_like_pattern";

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut EscapeRewriter);
}

struct EscapeRewriter;

impl VisitorMut for EscapeRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let (pattern, escape_char) = match expr {
            Expr::Like {
                pattern,
                escape_char,
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char,
                ..
            } => (pattern, escape_char),
            _ => return ControlFlow::Continue(()),
        };
        let escape = match escape_char.as_ref().map(|value| &value.value) {
            Some(Value::SingleQuotedString(escape)) if escape != "\\" => escape.clone(),
            _ => return ControlFlow::Continue(()),
        };
        let mut characters = escape.chars();
        let escape_character = match (characters.next(), characters.next()) {
            (None, _) => None,
            (Some(escape), None) => Some(escape),
            _ => return ControlFlow::Continue(()),
        };
        match pattern.as_mut() {
            Expr::Value(value) => match &value.value {
                Value::SingleQuotedString(text) => {
                    value.value = Value::SingleQuotedString(with_backslash(text, escape_character));
                }
                _ => return ControlFlow::Continue(()),
            },
            other => match pattern_call(other.clone(), &escape) {
                Some(call) => *other = call,
                None => return ControlFlow::Continue(()),
            },
        }
        *escape_char = None;
        ControlFlow::Continue(())
    }
}

/// `weir_like_pattern(pattern, 'escape')`.
fn pattern_call(pattern: Expr, escape: &str) -> Option<Expr> {
    let quoted = escape.replace('\'', "''");
    let sql = format!("{PATTERN_FUNCTION}(NULL, '{quoted}')");
    let mut call = Parser::new(&WeirDialect::new())
        .try_with_sql(&sql)
        .ok()?
        .parse_expr()
        .ok()?;
    let Expr::Function(function) = &mut call else {
        return None;
    };
    let FunctionArguments::List(list) = &mut function.args else {
        return None;
    };
    *list.args.first_mut()? = FunctionArg::Unnamed(FunctionArgExpr::Expr(pattern));
    Some(call)
}

/// `weir_like_pattern(pattern, escape)`: the pattern escaped with
/// backslash instead of `escape` ('' for none).
pub fn pattern_function() -> ScalarUDF {
    create_udf(
        PATTERN_FUNCTION,
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let patterns = cast(&arrays[0], &DataType::Utf8)?;
            let escapes = cast(&arrays[1], &DataType::Utf8)?;
            let (patterns, escapes) = (patterns.as_string::<i32>(), escapes.as_string::<i32>());
            let rewritten: StringArray = (0..patterns.len())
                .map(|row| {
                    let pattern = patterns.is_valid(row).then(|| patterns.value(row))?;
                    let escape = escapes.is_valid(row).then(|| escapes.value(row))?;
                    Some(with_backslash(pattern, escape.chars().next()))
                })
                .collect();
            let array: ArrayRef = Arc::new(rewritten);
            Ok(
                match arguments
                    .iter()
                    .all(|a| matches!(a, ColumnarValue::Scalar(_)))
                {
                    true => ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?),
                    false => ColumnarValue::Array(array),
                },
            )
        }),
    )
}

/// `pattern` (escaped with `escape`, or not at all) escaped with backslash.
fn with_backslash(pattern: &str, escape: Option<char>) -> String {
    let mut rewritten = String::with_capacity(pattern.len() + 4);
    let mut characters = pattern.chars();
    while let Some(character) = characters.next() {
        if Some(character) == escape {
            // The next character stands for itself.
            if let Some(next) = characters.next() {
                if matches!(next, '%' | '_' | '\\') {
                    rewritten.push('\\');
                }
                rewritten.push(next);
            }
        } else if character == '\\' {
            rewritten.push_str("\\\\");
        } else {
            rewritten.push(character);
        }
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_escape_characters_become_backslashes() {
        assert_eq!(with_backslash("pg/_%", Some('/')), "pg\\_%");
        assert_eq!(with_backslash("a//b", Some('/')), "a/b");
        assert_eq!(
            with_backslash("back\\slash!%", Some('!')),
            "back\\\\slash\\%"
        );
        assert_eq!(with_backslash("no\\escape_", None), "no\\\\escape_");
    }
}
