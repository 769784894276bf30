//! Rows weir adds to a pg_catalog table, built by column name so they fit
//! whatever types datafusion-pg-catalog gives its columns.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Builder, ListBuilder};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::error::Result;

/// The columns a row sets; the others are NULL, or zero / empty / false
/// where the column takes no NULL.
pub type Row = Vec<(&'static str, ScalarValue)>;

pub fn text(value: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(value.into()))
}

pub fn number(value: i64) -> ScalarValue {
    ScalarValue::Int64(Some(value))
}

pub fn flag(value: bool) -> ScalarValue {
    ScalarValue::Boolean(Some(value))
}

/// An array value of integers of type `element` (int2[], oid[]).
pub fn int_list(values: &[i64], element: &DataType) -> Result<ScalarValue> {
    let values = values
        .iter()
        .map(|&value| ScalarValue::Int64(Some(value)).cast_to(element))
        .collect::<Result<Vec<_>>>()?;
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &values, element,
    )))
}

pub fn list_type(element: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(element.clone(), true)))
}

pub use crate::catalog::PG_TYPE_METADATA;

/// A list column's element type and, for a vector, its Postgres type name.
pub type ListColumn = (&'static str, DataType, Option<&'static str>);

/// `schema` with the named columns as arrays of the given element types
/// (datafusion-pg-catalog keeps int2vector, oidvector and int2[] columns as
/// text, which `unnest` cannot read).
pub fn with_lists(schema: &SchemaRef, columns: &[ListColumn]) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(
            |field| match columns.iter().find(|(name, _, _)| name == field.name()) {
                Some((_, element, vector)) => {
                    let list = Field::new(field.name(), list_type(element), true);
                    match vector {
                        Some(pg_type) => list.with_metadata(
                            [(PG_TYPE_METADATA.to_string(), pg_type.to_string())].into(),
                        ),
                        None => list,
                    }
                }
                None => field.as_ref().clone(),
            },
        )
        .collect();
    Arc::new(Schema::new(fields))
}

/// `batch` under `schema` (from `with_lists`), its text arrays (`[1, 2]`,
/// `{1,2}` or `1 2`) parsed.
pub fn parse_lists(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (column, field) in batch.columns().iter().zip(schema.fields()) {
        let is_list = matches!(field.data_type(), DataType::List(_));
        if column.data_type() == field.data_type() || !is_list {
            columns.push(column.clone());
            continue;
        }
        let texts = cast(column, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let mut lists = ListBuilder::new(Int64Builder::new());
        for row in 0..texts.len() {
            if texts.is_null(row) {
                lists.append_null();
                continue;
            }
            let inner = texts.value(row).trim_matches(|c| "[]{} ".contains(c));
            for part in inner.split(|c: char| c == ',' || c.is_whitespace()) {
                if let Ok(value) = part.trim().parse::<i64>() {
                    lists.values().append_value(value);
                }
            }
            lists.append(true);
        }
        let lists: ArrayRef = Arc::new(lists.finish());
        columns.push(cast(&lists, field.data_type())?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// `batch` with `rows` after it.
pub fn append(batch: RecordBatch, rows: &[Row]) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(batch);
    }
    let schema = batch.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let values = rows
                .iter()
                .map(|row| value_for(row, field))
                .collect::<Result<Vec<_>>>()?;
            let array = ScalarValue::iter_to_array(values)?;
            Ok(match array.data_type() == field.data_type() {
                true => array,
                false => cast(&array, field.data_type())?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let added = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(concat_batches(&schema, [&batch, &added])?)
}

fn value_for(row: &Row, field: &Field) -> Result<ScalarValue> {
    let data_type = field.data_type();
    match row.iter().find(|(name, _)| name == field.name()) {
        Some((_, value)) => value.cast_to(data_type),
        None if field.is_nullable() => ScalarValue::try_from(data_type),
        None => match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                text("").cast_to(data_type)
            }
            DataType::Boolean => Ok(flag(false)),
            _ => ScalarValue::new_zero(data_type).or_else(|_| ScalarValue::try_from(data_type)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int32Array, StringArray};
    use datafusion::arrow::datatypes::{Int32Type, Schema};
    use std::sync::Arc;

    #[test]
    fn text_arrays_become_integer_lists() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
        let texts = StringArray::from(vec![Some("[1, 2]"), Some("3 4"), None, Some("{5}")]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(texts)]).unwrap();
        let listed = with_lists(&schema, &[("k", DataType::Int16, None)]);
        let parsed = parse_lists(batch, &listed).unwrap();
        let six_seven = int_list(&[6, 7], &DataType::Int16).unwrap();
        let parsed = append(parsed, &[vec![("k", six_seven)]]).unwrap();
        let lists = parsed.column(0).as_list::<i32>();
        let values = |row: usize| -> Vec<i16> {
            let list = lists.value(row);
            list.as_primitive::<datafusion::arrow::datatypes::Int16Type>()
                .values()
                .to_vec()
        };
        assert_eq!(
            (values(0), values(1), values(3), values(4)),
            (vec![1, 2], vec![3, 4], vec![5], vec![6, 7])
        );
        assert!(lists.is_null(2));
    }

    #[test]
    fn rows_fill_named_columns_and_default_the_rest() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("oid", DataType::Int32, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("note", DataType::Utf8, true),
        ]));
        let existing = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![1])),
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(StringArray::from(vec![Some("x")])),
            ],
        )
        .unwrap();
        let rows = vec![
            vec![("oid", number(7)), ("name", text("b"))],
            vec![("oid", number(8))],
        ];
        let all = append(existing, &rows).unwrap();
        let oids: Vec<i32> = all.column(0).as_primitive::<Int32Type>().values().to_vec();
        assert_eq!(oids, vec![1, 7, 8]);
        let names = all.column(1).as_string::<i32>();
        assert_eq!((names.value(1), names.value(2)), ("b", ""));
        assert_eq!(all.column(2).null_count(), 2);
    }
}
