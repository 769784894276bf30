//! `pg_typeof(value)`: the name of the value's type as Postgres prints a
//! regtype (`integer`, `numeric`, `timestamp without time zone`,
//! `text[]`). Users and tools ask it to see what an expression became; it
//! is text here (Postgres: regtype, which prints the same).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = args.arg_fields.first().map_or_else(
            || "unknown".to_string(),
            |field| type_name(field.data_type()),
        );
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// Postgres's name for the type weir stores as `data_type`.
pub fn type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "unknown".to_string(),
        DataType::Boolean => "boolean".to_string(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".to_string(),
        DataType::Int32 | DataType::UInt16 => "integer".to_string(),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "bigint".to_string(),
        DataType::Float16 | DataType::Float32 => "real".to_string(),
        DataType::Float64 => "double precision".to_string(),
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "numeric".to_string(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".to_string(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "bytea".to_string(),
        DataType::Date32 | DataType::Date64 => "date".to_string(),
        DataType::Timestamp(_, None) => "timestamp without time zone".to_string(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".to_string(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".to_string(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".to_string(),
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            format!("{}[]", type_name(item.data_type()))
        }
        DataType::Dictionary(_, value) => type_name(value),
        DataType::Struct(_) => "record".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, TimeUnit};
    use std::sync::Arc;

    #[test]
    fn names_are_postgres_regtype_names() {
        assert_eq!(type_name(&DataType::Int32), "integer");
        assert_eq!(type_name(&DataType::Decimal128(10, 2)), "numeric");
        assert_eq!(
            type_name(&DataType::Timestamp(TimeUnit::Nanosecond, None)),
            "timestamp without time zone"
        );
        let texts = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        assert_eq!(type_name(&texts), "text[]");
    }
}
