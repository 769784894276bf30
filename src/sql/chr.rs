//! `chr(n)` as Postgres has it: the character with code point `n`, with
//! Postgres's errors — `chr(0)` is 54000 "null character not permitted"
//! (DataFusion returned a NUL), a negative `n` 22023, one past Unicode or
//! a surrogate 54000 (DataFusion: 22000 for all of them).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(Chr {
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Chr {
    signature: Signature,
}

impl ScalarUDFImpl for Chr {
    fn name(&self) -> &str {
        "chr"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(codes) = arrays.first() else {
            return Err(DataFusionError::Plan("chr takes a code point".to_string()));
        };
        let codes = cast(codes, &DataType::Int64)?;
        let codes = codes.as_primitive::<Int64Type>();
        let mut text = StringBuilder::with_capacity(codes.len(), codes.len() * 4);
        let mut buffer = [0u8; 4];
        for row in 0..codes.len() {
            if codes.is_null(row) {
                text.append_null();
                continue;
            }
            let character = character(codes.value(row))?;
            text.append_value(character.encode_utf8(&mut buffer));
        }
        Ok(ColumnarValue::Array(Arc::new(text.finish()) as ArrayRef))
    }
}

fn character(code: i64) -> Result<char> {
    if code == 0 {
        return Err(DataFusionError::Execution(
            "chr: null character not permitted".to_string(),
        ));
    }
    if code < 0 {
        return Err(DataFusionError::Execution(
            "chr: character number must be positive".to_string(),
        ));
    }
    u32::try_from(code)
        .ok()
        .and_then(char::from_u32)
        .ok_or_else(|| {
            DataFusionError::Execution(
                "chr: requested character too large for encoding".to_string(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_points_and_their_errors() {
        assert_eq!(character(65).unwrap(), 'A');
        assert_eq!(character(0x1F600).unwrap(), '😀');
        for bad in [0, -1, 0xD800, 0x110000, i64::MAX] {
            assert!(character(bad).is_err(), "{bad}");
        }
    }
}
