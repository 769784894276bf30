//! Postgres's `format(formatstr, args…)`: `%s` (the value as text, NULL as
//! nothing), `%I` (quoted as an identifier when needed), `%L` (quoted as a
//! literal, NULL as `NULL`) and `%%`. Positions (`%2$s`) and widths are
//! refused with a clear error rather than misread.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(Format {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        if arrays.is_empty() {
            return exec_err!("format needs a format string");
        }
        let formatted = (0..args.number_rows)
            .map(|row| {
                let values = arrays
                    .iter()
                    .map(|array| ScalarValue::try_from_array(array, row).map(text_of))
                    .collect::<Result<Vec<_>>>()?;
                match values.split_first() {
                    Some((Some(format), arguments)) => format_row(format, arguments).map(Some),
                    _ => Ok(None),
                }
            })
            .collect::<Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(formatted) as ArrayRef))
    }
}

fn text_of(value: ScalarValue) -> Option<String> {
    match value {
        _ if value.is_null() => None,
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)) => Some(text),
        ScalarValue::Boolean(Some(flag)) => Some(if flag { "t" } else { "f" }.to_string()),
        other => Some(other.to_string()),
    }
}

fn format_row(format: &str, arguments: &[Option<String>]) -> Result<String> {
    let mut output = String::with_capacity(format.len());
    let mut next = arguments.iter();
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            output.push(character);
            continue;
        }
        let conversion = characters.next();
        if conversion == Some('%') {
            output.push('%');
            continue;
        }
        let Some(argument) = next.next() else {
            return Err(invalid("too few arguments for format()".to_string()));
        };
        match (conversion, argument) {
            (Some('s'), value) => output.push_str(value.as_deref().unwrap_or("")),
            (Some('I'), Some(value)) => output.push_str(&quote_identifier(value)),
            (Some('I'), None) => {
                return exec_err!("null values cannot be formatted as an SQL identifier")
            }
            (Some('L'), Some(value)) => {
                output.push_str(&format!("'{}'", value.replace('\'', "''")))
            }
            (Some('L'), None) => output.push_str("NULL"),
            (other, _) => {
                return Err(invalid(format!(
                    "unrecognized format() type specifier \"{}\"",
                    other.map(String::from).unwrap_or_default()
                )))
            }
        }
    }
    Ok(output)
}

/// 22023, as Postgres reports a bad format string.
fn invalid(message: String) -> DataFusionError {
    let error =
        crate::error::WeirError::new(crate::error::sqlstate::INVALID_PARAMETER_VALUE, message)
            .with_hint("format() takes %s, %I, %L and %% (no positions or widths).");
    DataFusionError::External(Box::new(error))
}

/// An identifier as Postgres prints it: quoted unless plain lower case.
pub fn quote_identifier(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match plain {
        true => name.to_string(),
        false => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|value| Some(value.to_string())).collect()
    }

    #[test]
    fn conversions_follow_postgres() {
        let arguments = [some(&["a b", "My Table", "it's"]), vec![None]].concat();
        assert_eq!(
            format_row("%s|%I|%L|%L|100%%", &arguments).unwrap(),
            "a b|\"My Table\"|'it''s'|NULL|100%"
        );
        assert!(format_row("%s %s", &some(&["one"])).is_err());
        assert!(format_row("%2$s", &some(&["one"])).is_err());
    }
}
