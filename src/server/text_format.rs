//! Text output where pgwire's encoding differs from Postgres, rendered here
//! before encoding so psql shows what Postgres would (`sql::postgres_text`
//! says how): floats (pgwire prints 20.0 as "20.0"), timestamps and times
//! (pgwire prints six fraction digits), unconstrained NUMERIC, arrays
//! (pgwire prints their elements as Arrow does and cannot send an array of
//! arrays), and int2vector / oidvector (`1 3`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, IntervalUnit, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;

use crate::sql::postgres_text::{array_literal, column_text, renders_array, UNCONSTRAINED_NUMERIC};

fn rendered_here(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float32
            | DataType::Float64
            | DataType::Timestamp(_, _)
            | DataType::Time64(_)
            | DataType::Time32(_)
            | DataType::Interval(IntervalUnit::MonthDayNano)
    ) || data_type == &UNCONSTRAINED_NUMERIC
        || renders_array(data_type)
}

/// Replaces text-format float and time columns with their Postgres text.
pub fn render_text_columns(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let needs = batch.columns().iter().zip(fields).any(|(column, field)| {
        field.format() == FieldFormat::Text
            && (rendered_here(column.data_type()) || is_vector(field.datatype()))
    });
    if !needs {
        return batch;
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(fields)
        .map(|(column, field)| {
            if field.format() != FieldFormat::Text {
                return column.clone();
            }
            if is_vector(field.datatype()) {
                return vector_text(column).unwrap_or_else(|| column.clone());
            }
            let rendered = match column.data_type() {
                DataType::List(_) => array_literal(column),
                _ => column_text(column),
            };
            rendered.unwrap_or_else(|| column.clone())
        })
        .collect();
    // Encoding goes by the field list (which keeps FLOAT4/FLOAT8), so the
    // batch only needs to carry the values.
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
        columns
            .iter()
            .zip(batch.schema().fields())
            .map(|(column, field)| {
                field
                    .as_ref()
                    .clone()
                    .with_data_type(column.data_type().clone())
            })
            .collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(schema, columns).unwrap_or(batch)
}

/// The fields rows are encoded with: an array or vector rendered as text
/// here is encoded as plain text (pgwire would quote it as an array
/// element), while the row description still announces its type.
pub fn encoding_fields(schema: &Schema, fields: &[FieldInfo]) -> Vec<FieldInfo> {
    let encoding = |field: &FieldInfo| {
        FieldInfo::new(
            field.name().to_string(),
            field.table_id(),
            field.column_id(),
            Type::TEXT,
            field.format(),
        )
        .with_format_options(field.format_options().clone())
    };
    fields
        .iter()
        .zip(schema.fields())
        .map(|(field, arrow_field)| {
            let as_text =
                is_vector(field.datatype()) || matches!(arrow_field.data_type(), DataType::List(_));
            match field.format() == FieldFormat::Text && as_text {
                true => encoding(field),
                false => field.clone(),
            }
        })
        .collect()
}

fn is_vector(pg_type: &Type) -> bool {
    pg_type == &Type::INT2_VECTOR || pg_type == &Type::OID_VECTOR
}

/// int2vector and oidvector print their elements separated by spaces
/// (`1 3`), not as an array literal.
fn vector_text(column: &ArrayRef) -> Option<ArrayRef> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let lists = column.as_list_opt::<i32>()?;
    let options = FormatOptions::default();
    let rendered: StringArray = (0..lists.len())
        .map(|row| {
            lists.is_valid(row).then(|| {
                let elements = lists.value(row);
                let formatter = ArrayFormatter::try_new(elements.as_ref(), &options).ok();
                let texts = (0..elements.len()).map(|index| match &formatter {
                    Some(formatter) => formatter.value(index).to_string(),
                    None => String::new(),
                });
                texts.collect::<Vec<_>>().join(" ")
            })
        })
        .collect();
    Some(Arc::new(rendered))
}
