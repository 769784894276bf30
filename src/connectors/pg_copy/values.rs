//! Column values that need more than Arrow's string cast: Postgres array
//! text (`{1,2,NULL}`) and bytea hex (`\x01ff`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BinaryArray, ListArray, StringArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::FieldRef;

use super::cast_column;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::bytea_input::parse_bytea;

/// Postgres array text, `{1,2,NULL}` or `{"a b","c"}`, into a list column.
pub(super) fn decode_array(
    strings: &StringArray,
    element: &FieldRef,
    column: &str,
    lines: &[usize],
) -> Result<ArrayRef> {
    let mut offsets = vec![0i32];
    let mut elements: Vec<Option<String>> = Vec::new();
    // Each element remembers its row's line, for error messages.
    let mut element_lines = Vec::new();
    for (value, line) in strings.iter().zip(lines) {
        if let Some(text) = value {
            let parsed = parse_array_literal(text).ok_or_else(|| {
                WeirError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    format!(
                        "malformed array literal for column \"{column}\": \"{text}\" (COPY data line {})",
                        line
                    ),
                )
                .with_hint("Arrays look like {1,2,3}; nested arrays are not supported.")
            })?;
            element_lines.extend(parsed.iter().map(|_| *line));
            elements.extend(parsed);
        }
        offsets.push(elements.len() as i32);
    }
    let element_strings: StringArray = elements.iter().map(Option::as_deref).collect();
    let values = cast_column(
        &element_strings,
        element.data_type(),
        column,
        &element_lines,
    )?;
    let nulls = NullBuffer::from_iter(strings.iter().map(|value| value.is_some()));
    let list = ListArray::try_new(
        element.clone(),
        OffsetBuffer::new(offsets.into()),
        values,
        Some(nulls),
    )
    .map_err(|error| WeirError::new(sqlstate::INVALID_TEXT_REPRESENTATION, error.to_string()))?;
    Ok(Arc::new(list))
}

fn parse_array_literal(text: &str) -> Option<Vec<Option<String>>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    let mut elements = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut element = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => element.push(chars.next()?),
                    c => element.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if c == '{' || c == '"' {
                    return None;
                }
                element.push(c);
                chars.next();
            }
            element = element.trim().to_string();
        }
        let is_null = !quoted && element.eq_ignore_ascii_case("null");
        elements.push((!is_null).then_some(element));
        match chars.next() {
            None => return Some(elements),
            Some(',') => continue,
            Some(c) if c.is_whitespace() && chars.all(char::is_whitespace) => {
                return Some(elements)
            }
            Some(_) => return None,
        }
    }
}

/// bytea text as Postgres reads it (the hex and the escape formats:
/// `sql::bytea_input`, shared with casts), with the COPY line in an error.
pub(super) fn decode_bytea(
    strings: &StringArray,
    column: &str,
    lines: &[usize],
) -> Result<ArrayRef> {
    let decoded = strings
        .iter()
        .zip(lines)
        .map(|(value, line)| {
            let Some(text) = value else {
                return Ok(None);
            };
            let mut bytes = Vec::new();
            parse_bytea(text, &mut bytes).map_err(|error| {
                WeirError::new(
                    error.code,
                    format!(
                        "{} for column \"{column}\" (COPY data line {})",
                        error.message, line
                    ),
                )
            })?;
            Ok(Some(bytes))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(BinaryArray::from_iter(decoded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_literal_quoting() {
        assert_eq!(
            parse_array_literal(r#"{"a b","c\"d",NULL,"NULL"}"#).unwrap(),
            vec![
                Some("a b".into()),
                Some("c\"d".into()),
                None,
                Some("NULL".into())
            ]
        );
        assert_eq!(parse_array_literal("{{1},{2}}"), None);
    }
}
