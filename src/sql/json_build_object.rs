//! `json_build_object(key, value, …)`, which catalog queries use (SQLAlchemy
//! reads identity column options with it): the object as JSON text.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(JsonBuildObject {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.len() % 2 != 0 {
            return exec_err!("json_build_object takes an even number of arguments");
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let objects = (0..args.number_rows)
            .map(|row| {
                let mut object = serde_json::Map::new();
                for pair in arrays.chunks(2) {
                    let key = ScalarValue::try_from_array(&pair[0], row)?;
                    if key.is_null() {
                        return exec_err!("json_build_object: a key is NULL");
                    }
                    let value = ScalarValue::try_from_array(&pair[1], row)?;
                    object.insert(text_of(&key), json_of(&value));
                }
                Ok(Some(serde_json::Value::Object(object).to_string()))
            })
            .collect::<Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(objects) as ArrayRef))
    }
}

fn text_of(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)) => text.clone(),
        other => other.to_string(),
    }
}

fn json_of(value: &ScalarValue) -> serde_json::Value {
    use serde_json::Value;
    if value.is_null() {
        return Value::Null;
    }
    match value {
        ScalarValue::Boolean(Some(flag)) => Value::Bool(*flag),
        ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::UInt64(_)
        | ScalarValue::Float32(_)
        | ScalarValue::Float64(_) => serde_json::from_str(&value.to_string())
            .unwrap_or_else(|_| Value::String(value.to_string())),
        other => Value::String(text_of(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_json_kinds() {
        assert_eq!(json_of(&ScalarValue::Int64(Some(3))), serde_json::json!(3));
        assert_eq!(
            json_of(&ScalarValue::Boolean(Some(true))),
            serde_json::json!(true)
        );
        assert_eq!(json_of(&ScalarValue::Utf8(None)), serde_json::Value::Null);
        assert_eq!(json_of(&ScalarValue::from("a")), serde_json::json!("a"));
    }
}
