//! Encoding rows for `COPY … TO STDOUT` in the text and CSV formats, one
//! line per row (the wire protocol sends each as one CopyData message).
//! Values are printed as Postgres prints them (`sql::postgres_text`);
//! text escapes backslash, tab, newline and carriage return and writes
//! NULL as `\N`; CSV quotes a field that holds the delimiter, a quote, a
//! line break, or that is empty (an empty unquoted field is NULL).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;

use super::{CopyFormat, CopyOptions};
use crate::error::Result;
use crate::sql::postgres_text::{array_literal, column_text, renders_array};

/// Each row of `batch` as one line of COPY data, ending in a newline.
pub fn encode_rows(batch: &RecordBatch, options: &CopyOptions) -> Result<Vec<String>> {
    let texts = batch
        .columns()
        .iter()
        .map(text_column)
        .collect::<Result<Vec<_>>>()?;
    let mut lines = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let mut line = String::new();
        for (index, column) in texts.iter().enumerate() {
            if index > 0 {
                line.push(options.delimiter);
            }
            match column.is_null(row) {
                true => line.push_str(&options.null),
                false => push_field(&mut line, column.value(row), options),
            }
        }
        line.push('\n');
        lines.push(line);
    }
    Ok(lines)
}

/// The header line of a CSV copy: the column names.
pub fn header_line(names: &[String], options: &CopyOptions) -> String {
    let mut line = String::new();
    for (index, name) in names.iter().enumerate() {
        if index > 0 {
            line.push(options.delimiter);
        }
        push_field(&mut line, name, options);
    }
    line.push('\n');
    line
}

fn push_field(line: &mut String, value: &str, options: &CopyOptions) {
    match options.format {
        CopyFormat::Text => {
            for character in value.chars() {
                match character {
                    '\\' => line.push_str("\\\\"),
                    '\n' => line.push_str("\\n"),
                    '\r' => line.push_str("\\r"),
                    '\t' => line.push_str("\\t"),
                    c if c == options.delimiter => {
                        line.push('\\');
                        line.push(c);
                    }
                    c => line.push(c),
                }
            }
        }
        CopyFormat::Csv => {
            let special =
                |c: char| c == options.delimiter || c == options.quote || c == '\n' || c == '\r';
            if !value.is_empty() && value != options.null && !value.chars().any(special) {
                line.push_str(value);
                return;
            }
            line.push(options.quote);
            for character in value.chars() {
                if character == options.quote || character == options.escape {
                    line.push(options.escape);
                }
                line.push(character);
            }
            line.push(options.quote);
        }
    }
}

/// A column's values as Postgres text.
fn text_column(column: &ArrayRef) -> Result<StringArray> {
    let text = match column.data_type() {
        DataType::Boolean => {
            let values = column.as_boolean();
            let texts: StringArray = values
                .iter()
                .map(|value| value.map(|v| if v { "t" } else { "f" }))
                .collect();
            Arc::new(texts) as ArrayRef
        }
        data_type if renders_array(data_type) => {
            array_literal(column).unwrap_or_else(|| column.clone())
        }
        _ => column_text(column).unwrap_or_else(|| column.clone()),
    };
    let text = match text.data_type() {
        DataType::Utf8 => text,
        _ => cast(&text, &DataType::Utf8)?,
    };
    Ok(text.as_string::<i32>().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BooleanArray, Float64Array, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("x", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("a\tb,\"c\""), Some("")])),
                Arc::new(BooleanArray::from(vec![Some(true), None])),
                Arc::new(Float64Array::from(vec![Some(0.1), Some(1e20)])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn text_format_escapes_and_writes_null_as_backslash_n() {
        let lines = encode_rows(&batch(), &CopyOptions::new(CopyFormat::Text)).unwrap();
        assert_eq!(
            lines,
            vec!["1\ta\\tb,\"c\"\tt\t0.1\n", "\\N\t\t\\N\t1e+20\n"]
        );
    }

    #[test]
    fn csv_quotes_what_needs_it_and_round_trips_through_copy_from() {
        let options = CopyOptions::new(CopyFormat::Csv);
        let lines = encode_rows(&batch(), &options).unwrap();
        assert_eq!(
            lines,
            vec!["1,\"a\tb,\"\"c\"\"\",t,0.1\n", ",\"\",,1e+20\n"]
        );
        let decoded = super::super::decode(&lines.concat(), &options, &batch().schema()).unwrap();
        let names = decoded.column(1).as_string::<i32>();
        assert_eq!(names.value(0), "a\tb,\"c\"");
        assert_eq!(names.value(1), "");
        assert!(decoded.column(0).is_null(1));
        assert_eq!(
            header_line(&["id".to_string(), "a,b".to_string()], &options),
            "id,\"a,b\"\n"
        );
    }
}
