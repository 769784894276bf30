//! Arrow types back to SQL type names, for definitions weir writes itself
//! (a CREATE TABLE AS is recorded as the plain CREATE TABLE it produced).

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};

use crate::error::{Result, WeirError};

/// The SQL type that DataFusion plans back into `data_type`, if there is one.
pub fn sql_type_name(data_type: &DataType) -> Option<String> {
    let name = match data_type {
        DataType::Boolean => "BOOLEAN".to_string(),
        DataType::Int8 | DataType::Int16 => "SMALLINT".to_string(),
        DataType::Int32 => "INTEGER".to_string(),
        DataType::Int64 => "BIGINT".to_string(),
        DataType::UInt8 | DataType::UInt16 => "INT UNSIGNED".to_string(),
        DataType::UInt32 | DataType::UInt64 => "BIGINT UNSIGNED".to_string(),
        DataType::Float16 | DataType::Float32 => "REAL".to_string(),
        DataType::Float64 => "DOUBLE PRECISION".to_string(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT".to_string(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTEA".to_string(),
        DataType::Date32 | DataType::Date64 => "DATE".to_string(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".to_string(),
        DataType::Timestamp(unit, zone) => {
            let precision = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            let suffix = if zone.is_some() {
                " WITH TIME ZONE"
            } else {
                ""
            };
            format!("TIMESTAMP({precision}){suffix}")
        }
        DataType::Interval(_) => "INTERVAL".to_string(),
        DataType::Decimal128(precision, scale) | DataType::Decimal256(precision, scale) => {
            format!("NUMERIC({precision}, {scale})")
        }
        DataType::List(field) | DataType::LargeList(field) => {
            format!("{}[]", sql_type_name(field.data_type())?)
        }
        _ => return None,
    };
    Some(name)
}

/// `CREATE TABLE name (...)` for a schema.
pub fn create_table_sql(name: &str, schema: &Schema) -> Result<String> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let type_name = sql_type_name(field.data_type()).ok_or_else(|| {
                WeirError::unsupported(format!(
                    "column \"{}\" has type {}, which a table cannot store",
                    field.name(),
                    field.data_type()
                ))
                .with_hint("CAST the column to a SQL type such as TEXT.")
            })?;
            let not_null = if field.is_nullable() { "" } else { " NOT NULL" };
            Ok(format!(
                "{} {type_name}{not_null}",
                quote_identifier(field.name())
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(format!(
        "CREATE TABLE {} ({})",
        quote_identifier(name),
        columns.join(", ")
    ))
}

pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;

    #[test]
    fn renders_a_create_table() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                "seen at",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                true,
            ),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ]);
        assert_eq!(
            create_table_sql("t", &schema).unwrap(),
            "CREATE TABLE \"t\" (\"id\" BIGINT NOT NULL, \"seen at\" TIMESTAMP(9), \"price\" NUMERIC(10, 2))"
        );
    }

    #[test]
    fn unrenderable_types_are_a_clear_error() {
        let schema = Schema::new(vec![Field::new("m", DataType::Null, true)]);
        let error = create_table_sql("t", &schema).unwrap_err();
        assert_eq!(error.code, crate::error::sqlstate::FEATURE_NOT_SUPPORTED);
    }
}
