//! Text to bytea as Postgres reads it: `'\x0a0b'::bytea` is the two bytes
//! 0x0a 0x0b (the hex format), `'a\\b\101'` is `a`, a backslash, `b` and
//! `A` (the escape format). Arrow's cast takes the text's own bytes, so
//! `'\x0a0b'` became six bytes. An analyzer rule, after coercion has
//! placed the casts (a literal, an INSERT into a bytea column, a
//! comparison), gives every text-to-bytea cast `bytea_input(text)`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, ScalarUDF, TryCast};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_every_expression;
use super::text_function::array_function;
use crate::error::{sqlstate, WeirError};

#[derive(Debug)]
pub struct ByteaInputRule {
    input: Arc<ScalarUDF>,
}

impl Default for ByteaInputRule {
    fn default() -> Self {
        ByteaInputRule {
            input: Arc::new(array_function(
                "bytea_input",
                DataType::Binary,
                bytea_inputs,
            )),
        }
    }
}

impl AnalyzerRule for ByteaInputRule {
    fn name(&self) -> &str {
        "weir_bytea_input"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_every_expression(plan, |expr, schema| self.rewrite(expr, schema))
    }
}

impl ByteaInputRule {
    fn rewrite(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let (operand, field, try_cast) = match expr {
            Expr::Cast(Cast { expr, field }) if is_binary(field.data_type()) => {
                (*expr, field, false)
            }
            Expr::TryCast(TryCast { expr, field }) if is_binary(field.data_type()) => {
                (*expr, field, true)
            }
            other => return Ok(Transformed::no(other)),
        };
        let rebuild = |operand: Expr| match try_cast {
            true => Expr::TryCast(TryCast::new_from_field(Box::new(operand), field.clone())),
            false => Expr::Cast(Cast::new_from_field(Box::new(operand), field.clone())),
        };
        if !is_text(&operand.get_type(schema)?) {
            return Ok(Transformed::no(rebuild(operand)));
        }
        let call = ScalarFunction::new_udf(self.input.clone(), vec![operand]);
        Ok(Transformed::yes(rebuild(Expr::ScalarFunction(call))))
    }
}

fn is_binary(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    )
}

fn bytea_inputs(values: &ArrayRef) -> Result<ArrayRef> {
    let text = cast(values, &DataType::Utf8)?;
    let text = text
        .as_any()
        .downcast_ref::<datafusion::arrow::array::StringArray>();
    let text = text.ok_or_else(|| DataFusionError::Internal("text cast to Utf8".to_string()))?;
    let mut builder = BinaryBuilder::with_capacity(text.len(), text.value_data().len());
    let mut bytes = Vec::new();
    for row in 0..text.len() {
        if text.is_null(row) {
            builder.append_null();
            continue;
        }
        bytes.clear();
        parse_bytea(text.value(row), &mut bytes)
            .map_err(|error| DataFusionError::External(Box::new(error)))?;
        builder.append_value(&bytes);
    }
    Ok(Arc::new(builder.finish()))
}

/// Postgres's bytea input: `\x` then hex digit pairs (whitespace between
/// pairs allowed), else the escape format.
pub fn parse_bytea(text: &str, bytes: &mut Vec<u8>) -> std::result::Result<(), WeirError> {
    match text.strip_prefix("\\x") {
        Some(hex) => parse_hex(hex, bytes),
        None => parse_escaped(text, bytes),
    }
}

fn parse_hex(hex: &str, bytes: &mut Vec<u8>) -> std::result::Result<(), WeirError> {
    let mut digits = hex.chars().filter(|c| !c.is_ascii_whitespace());
    while let Some(high) = digits.next() {
        let Some(low) = digits.next() else {
            return Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "invalid hexadecimal data: odd number of digits",
            ));
        };
        bytes.push(hex_digit(high)? << 4 | hex_digit(low)?);
    }
    Ok(())
}

fn hex_digit(digit: char) -> std::result::Result<u8, WeirError> {
    digit.to_digit(16).map(|value| value as u8).ok_or_else(|| {
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid hexadecimal digit: \"{digit}\""),
        )
    })
}

fn parse_escaped(text: &str, bytes: &mut Vec<u8>) -> std::result::Result<(), WeirError> {
    let raw = text.as_bytes();
    let mut index = 0;
    while index < raw.len() {
        if raw[index] != b'\\' {
            bytes.push(raw[index]);
            index += 1;
            continue;
        }
        let octal = raw.get(index + 1..index + 4).filter(|digits| {
            matches!(digits[0], b'0'..=b'3') && digits[1..].iter().all(|d| matches!(d, b'0'..=b'7'))
        });
        if raw.get(index + 1) == Some(&b'\\') {
            bytes.push(b'\\');
            index += 2;
        } else if let Some(digits) = octal {
            bytes.push((digits[0] - b'0') << 6 | (digits[1] - b'0') << 3 | (digits[2] - b'0'));
            index += 4;
        } else {
            return Err(WeirError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                "invalid input syntax for type bytea",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> std::result::Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        parse_bytea(text, &mut bytes).map_err(|error| error.code.to_string())?;
        Ok(bytes)
    }

    #[test]
    fn hex_and_escape_formats() {
        assert_eq!(parsed("\\x0a0B"), Ok(vec![0x0a, 0x0b]));
        assert_eq!(parsed("\\xde ad"), Ok(vec![0xde, 0xad]));
        assert_eq!(parsed("\\x"), Ok(vec![]));
        assert_eq!(parsed("abc"), Ok(b"abc".to_vec()));
        assert_eq!(parsed("a\\\\b\\101"), Ok(b"a\\bA".to_vec()));
        assert_eq!(parsed("\\x0"), Err("22023".to_string()));
        assert_eq!(parsed("\\xzz"), Err("22023".to_string()));
        assert_eq!(parsed("a\\9"), Err("22P02".to_string()));
    }
}
