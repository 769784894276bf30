//! Decoding of Postgres `COPY ... FROM STDIN` data in the text and CSV
//! formats into Arrow record batches of a table's column types.
//!
//! Fields are first split into strings (the two formats differ only there),
//! then cast column by column with Arrow's vectorised cast; a value that does
//! not parse is reported with its line and column.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{sqlstate, Result, WeirError};
use crate::stream::time_columns::with_seconds;
use columns::StringColumns;
use fields::{split_csv, split_text, FieldSink};
use values::{decode_array, decode_bytea};

pub use chunks::CopyDecoder;
pub use encode::{encode_rows, header_line};

mod chunks;
mod columns;
mod encode;
mod fields;
mod values;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub delimiter: char,
    /// The string that stands for NULL (`\N` in text, empty in CSV).
    pub null: String,
    pub header: bool,
    pub quote: char,
    pub escape: char,
}

impl CopyOptions {
    pub fn new(format: CopyFormat) -> Self {
        match format {
            CopyFormat::Text => CopyOptions {
                format,
                delimiter: '\t',
                null: "\\N".to_string(),
                header: false,
                quote: '"',
                escape: '\\',
            },
            CopyFormat::Csv => CopyOptions {
                format,
                delimiter: ',',
                null: String::new(),
                header: false,
                quote: '"',
                escape: '"',
            },
        }
    }
}

fn bad_format(line: usize, message: impl Into<String>) -> WeirError {
    WeirError::new(
        sqlstate::BAD_COPY_FILE_FORMAT,
        format!("COPY data line {line}: {}", message.into()),
    )
}

/// Decodes `data` into a batch with `schema`'s columns (in that order).
pub fn decode(data: &str, options: &CopyOptions, schema: &SchemaRef) -> Result<RecordBatch> {
    decode_from_line(data, options, schema, 1, options.header)
}

/// Decodes rows already split into fields (None is NULL), one per line
/// from `first_line`: a connector's JSON objects, say.
pub fn decode_fields(
    rows: Vec<Vec<Option<String>>>,
    schema: &SchemaRef,
    first_line: usize,
) -> Result<RecordBatch> {
    let mut columns = StringColumns::new(schema.fields().len(), 0, false);
    for (index, fields) in rows.iter().enumerate() {
        for field in fields {
            columns.field(field.as_deref());
        }
        columns.end_record(first_line + index)?;
    }
    let lines = std::mem::take(&mut columns.lines);
    columns_to_batch(columns.finish(), &lines, schema)
}

/// Decodes a piece of the data that starts at line `first_line`.
fn decode_from_line(
    data: &str,
    options: &CopyOptions,
    schema: &SchemaRef,
    first_line: usize,
    skip_header: bool,
) -> Result<RecordBatch> {
    let mut columns = StringColumns::new(schema.fields().len(), data.len(), skip_header);
    match options.format {
        CopyFormat::Text => split_text(data, options, first_line, &mut columns)?,
        CopyFormat::Csv => split_csv(data, options, first_line, &mut columns)?,
    };
    let lines = std::mem::take(&mut columns.lines);
    columns_to_batch(columns.finish(), &lines, schema)
}

/// String columns (rows starting on `lines`) cast to `schema`'s types.
fn columns_to_batch(
    strings: Vec<StringArray>,
    lines: &[usize],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .zip(&strings)
        .map(|(field, strings)| cast_column(strings, field.data_type(), field.name(), lines))
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(lines.len()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(|error| {
        WeirError::new(sqlstate::NOT_NULL_VIOLATION, error.to_string())
            .with_hint("A NOT NULL column received NULL in the COPY data.")
    })
}

/// Fills the columns `schema` has but `batch` lacks with NULLs.
pub fn widen(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| match batch.schema().index_of(field.name()) {
            Ok(index) => batch.column(index).clone(),
            Err(_) => new_null_array(field.data_type(), batch.num_rows()),
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(|error| {
        WeirError::new(sqlstate::NOT_NULL_VIOLATION, error.to_string())
            .with_hint("List every NOT NULL column in COPY's column list.")
    })
}

fn cast_column(
    strings: &StringArray,
    data_type: &DataType,
    column: &str,
    lines: &[usize],
) -> Result<ArrayRef> {
    let input: ArrayRef = Arc::new(strings.clone());
    if data_type == &DataType::Utf8 {
        return Ok(input);
    }
    let input = match data_type {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            decode_bytea(strings, column, lines)?
        }
        DataType::List(element) => return decode_array(strings, element, column, lines),
        _ => input,
    };
    let lenient = CastOptions {
        safe: true,
        ..Default::default()
    };
    let cast_input = |input: &ArrayRef| {
        cast_with_options(input, data_type, &lenient).map_err(|error| {
            WeirError::unsupported(format!("COPY into column \"{column}\": {error}"))
        })
    };
    let mut cast = cast_input(&input)?;
    let failed =
        |cast: &ArrayRef| (0..strings.len()).any(|row| strings.is_valid(row) && cast.is_null(row));
    if matches!(data_type, DataType::Timestamp(..)) && failed(&cast) {
        // Times to the minute, which Postgres accepts: only when some
        // value did not parse, so the common case pays nothing.
        let completed: StringArray = strings
            .iter()
            .map(|value| value.map(|text| with_seconds(text).unwrap_or_else(|| text.to_string())))
            .collect();
        cast = cast_input(&(Arc::new(completed) as ArrayRef))?;
    }
    // A safe cast turns bad values into NULL; find the first to report it.
    for (row, line) in lines.iter().enumerate() {
        if strings.is_valid(row) && cast.is_null(row) {
            return Err(WeirError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!(
                    "invalid input for column \"{column}\" of type {data_type}: \"{}\" (COPY data line {})",
                    strings.value(row),
                    line
                ),
            )
            .with_hint("Fix the value or the column order in the COPY data."));
        }
    }
    Ok(cast)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BinaryArray, ListArray};
    use datafusion::arrow::array::{BooleanArray, Int64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]))
    }

    #[test]
    fn text_format_with_escapes_and_nulls() {
        let data = "1\ta\\tb\tt\t2026-01-01 10:00:01\n2\t\\N\tf\t\\N\n\\.\n";
        let batch = decode(data, &CopyOptions::new(CopyFormat::Text), &schema()).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let names = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(0), "a\tb");
        assert!(names.is_null(1));
        let ok = batch
            .column(2)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap();
        assert!(ok.value(0) && !ok.value(1));
        let at = batch
            .column(3)
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap();
        assert_eq!(at.value(0), 1_767_261_601_000_000_000);
    }

    #[test]
    fn csv_with_header_quotes_and_empty_vs_null() {
        let data = "id,name,ok,at\n1,\"x, \"\"y\"\"\",true,\n2,\"\",,2026-01-01 00:00:00\n";
        let mut options = CopyOptions::new(CopyFormat::Csv);
        options.header = true;
        let batch = decode(data, &options, &schema()).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let names = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(0), "x, \"y\"");
        assert_eq!(names.value(1), "");
        assert!(names.is_valid(1));
        assert!(batch.column(3).is_null(0));
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2]);
    }

    #[test]
    fn csv_quoted_newline() {
        let data = "1,\"two\nlines\",t,\n";
        let batch = decode(data, &CopyOptions::new(CopyFormat::Csv), &schema()).unwrap();
        let names = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(0), "two\nlines");
    }

    #[test]
    fn bad_value_names_line_and_column() {
        let data = "1\ta\tt\t\\N\nx\tb\tf\t\\N\n";
        let error = decode(data, &CopyOptions::new(CopyFormat::Text), &schema()).unwrap_err();
        assert_eq!(error.code, sqlstate::INVALID_TEXT_REPRESENTATION);
        assert!(
            error.message.contains("\"id\"") && error.message.contains("line 2"),
            "{}",
            error.message
        );
    }

    #[test]
    fn arrays_and_null_arrays() {
        let element = Arc::new(Field::new("item", DataType::Int64, true));
        let schema = Arc::new(Schema::new(vec![Field::new(
            "a",
            DataType::List(element),
            true,
        )]));
        let batch = decode(
            "{1,2,NULL}\n\\N\n{}\n",
            &CopyOptions::new(CopyFormat::Text),
            &schema,
        )
        .unwrap();
        let lists = batch
            .column(0)
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        assert_eq!(lists.value_length(0), 3);
        assert!(lists.value(0).is_null(2));
        assert!(lists.is_null(1));
        assert_eq!(lists.value_length(2), 0);
        assert!(decode("{1,x}\n", &CopyOptions::new(CopyFormat::Text), &schema).is_err());
        assert!(decode("1,2\n", &CopyOptions::new(CopyFormat::Text), &schema).is_err());
    }

    #[test]
    fn bytea_hex_is_decoded() {
        let schema = Arc::new(Schema::new(vec![Field::new("b", DataType::Binary, true)]));
        let batch = decode("\\\\x01ff\n", &CopyOptions::new(CopyFormat::Text), &schema).unwrap();
        let bytes = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        assert_eq!(bytes.value(0), &[0x01, 0xff]);
        assert!(decode("\\\\x0\n", &CopyOptions::new(CopyFormat::Text), &schema).is_err());
        // The escape format too, as Postgres reads it: `a\\\\b\\101` in the
        // COPY data is the bytea text `a\\b\101`, the bytes `a`, `\`, `b`, `A`.
        let escaped = decode(
            "a\\\\\\\\b\\\\101\n",
            &CopyOptions::new(CopyFormat::Text),
            &schema,
        )
        .unwrap();
        let bytes = escaped
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        assert_eq!(bytes.value(0), b"a\\bA");
    }

    #[test]
    fn wrong_field_count_is_bad_copy_format() {
        let error = decode("1\ta\n", &CopyOptions::new(CopyFormat::Text), &schema()).unwrap_err();
        assert_eq!(error.code, sqlstate::BAD_COPY_FILE_FORMAT);
    }

    #[test]
    fn null_in_not_null_column_is_rejected() {
        let error = decode(
            "\\N\ta\tt\t\\N\n",
            &CopyOptions::new(CopyFormat::Text),
            &schema(),
        )
        .unwrap_err();
        assert_eq!(error.code, sqlstate::NOT_NULL_VIOLATION);
    }
}
