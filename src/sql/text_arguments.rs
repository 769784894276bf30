//! Text functions that take text only, as in Postgres. DataFusion's
//! `length` / `char_length` / `character_length` and `reverse` cast any
//! argument to text, so `length(5)` was 1; Postgres has no implicit cast
//! from a number to text and answers 42883 "function length(integer)
//! does not exist". weir registers the same functions with a signature
//! that takes text (and bytea, read as text as before) and nothing else;
//! every other string function of DataFusion already does.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::types::logical_string;
use datafusion::common::types::NativeType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    Coercion, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TypeSignature, TypeSignatureClass, Volatility,
};

/// The text-only versions of DataFusion's functions that took anything,
/// one per name, so an error names the function as the user wrote it.
pub fn functions() -> Vec<ScalarUDF> {
    let length = datafusion::functions::unicode::character_length();
    let reverse = datafusion::functions::unicode::reverse();
    [
        ("length", &length),
        ("char_length", &length),
        ("character_length", &length),
        ("reverse", &reverse),
    ]
    .into_iter()
    .map(|(name, inner)| {
        ScalarUDF::new_from_impl(TextArguments {
            name,
            inner: inner.clone(),
            signature: text_signature(),
        })
    })
    .collect()
}

fn text_signature() -> Signature {
    let text = Coercion::new_exact(TypeSignatureClass::Native(logical_string()));
    let bytes = Coercion::new_implicit(
        TypeSignatureClass::Native(logical_string()),
        vec![TypeSignatureClass::Binary],
        NativeType::String,
    );
    Signature::one_of(
        vec![
            TypeSignature::Coercible(vec![text]),
            TypeSignature::Coercible(vec![bytes]),
        ],
        Volatility::Immutable,
    )
}

/// A DataFusion function under its own names with a narrower signature.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TextArguments {
    name: &'static str,
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl ScalarUDFImpl for TextArguments {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arguments)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}
