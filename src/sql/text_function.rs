//! A one-argument function computed an array at a time, returning text
//! or another type: what weir's analyzer rules call where they rewrite an
//! expression (`complete_timestamp_text`, `array_literal`, `bytea_input`).

use std::hash::{Hash, Hasher};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `name(value)`, which applies `apply` to the argument's values.
pub fn text_function(name: &'static str, apply: fn(&ArrayRef) -> Result<ArrayRef>) -> ScalarUDF {
    array_function(name, DataType::Utf8, apply)
}

/// `name(value)` of type `returns`, which `apply` computes.
pub fn array_function(
    name: &'static str,
    returns: DataType,
    apply: fn(&ArrayRef) -> Result<ArrayRef>,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(TextFunction {
        name,
        signature: Signature::any(1, Volatility::Immutable),
        returns,
        apply,
    })
}

#[derive(Debug)]
struct TextFunction {
    name: &'static str,
    signature: Signature,
    returns: DataType,
    apply: fn(&ArrayRef) -> Result<ArrayRef>,
}

// The name identifies the function (function pointers do not compare
// reliably).
impl PartialEq for TextFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for TextFunction {}

impl Hash for TextFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for TextFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args.as_slice(), [ColumnarValue::Scalar(_)]);
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [values] = arrays.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes 1 argument",
                self.name
            )));
        };
        let texts = (self.apply)(values)?;
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&texts, 0)?),
            false => ColumnarValue::Array(texts),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::common::config::ConfigOptions;
    use std::sync::Arc;

    fn upper(values: &ArrayRef) -> Result<ArrayRef> {
        let texts = values.as_string::<i32>();
        let upper: StringArray = texts.iter().map(|t| t.map(str::to_uppercase)).collect();
        Ok(Arc::new(upper))
    }

    fn call(function: &ScalarUDF, argument: ColumnarValue, rows: usize) -> ColumnarValue {
        let field = Arc::new(Field::new("a", DataType::Utf8, true));
        function
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![argument],
                arg_fields: vec![field.clone()],
                number_rows: rows,
                return_field: field,
                config_options: Arc::new(ConfigOptions::default()),
            })
            .unwrap()
    }

    #[test]
    fn arrays_give_arrays_and_scalars_scalars() {
        let function = text_function("upper_text", upper);
        assert_eq!(function.name(), "upper_text");
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None]));
        let ColumnarValue::Array(texts) = call(&function, ColumnarValue::Array(values), 2) else {
            panic!("an array gives an array");
        };
        assert_eq!(texts.as_string::<i32>().value(0), "A");
        assert!(texts.is_null(1));
        let scalar = ColumnarValue::Scalar(ScalarValue::Utf8(Some("b".into())));
        let ColumnarValue::Scalar(text) = call(&function, scalar, 3) else {
            panic!("a scalar gives a scalar");
        };
        assert_eq!(text, ScalarValue::Utf8(Some("B".into())));
    }
}
