//! Decoding text records (CSV lines or JSON objects) into a source's rows,
//! shared by the connectors that read records written by others (file,
//! kafka). A record that does not decode is set aside with its reason so
//! the rest of the batch is kept.

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::options::{invalid, missing, Options};
use crate::connectors::pg_copy::{decode, decode_fields, CopyFormat, CopyOptions};
use crate::error::{sqlstate, Result, WeirError};

/// How records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Csv { header: bool, delimiter: char },
    Json,
}

/// The encoding from `FORMAT … ENCODE` or a `format` option, with the CSV
/// options (`csv.header` only where records come in files).
pub fn take_encoding(
    given: &mut Options,
    encode: Option<&str>,
    connector: &str,
    headers: bool,
) -> Result<Encoding> {
    let format = given
        .text(&["format", "value.format"])
        .map(|(_, value)| value.to_ascii_uppercase());
    let header = match headers.then(|| given.text(&["csv.header"])).flatten() {
        None => false,
        Some((_, value)) => match value.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(invalid("csv.header", &value, "Use 'true' or 'false'.")),
        },
    };
    let delimiter = match given.text(&["csv.delimiter", "csv.field-delimiter"]) {
        None => ',',
        Some((_, value)) => single_character(&value)?,
    };
    match format.as_deref().or(encode) {
        Some("CSV") => Ok(Encoding::Csv { header, delimiter }),
        Some("JSON") => Ok(Encoding::Json),
        Some(other) => Err(WeirError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("the {connector} connector cannot read ENCODE {other}"),
        )
        .with_hint("Use FORMAT PLAIN ENCODE CSV or ENCODE JSON (one object per record).")),
        None => Err(missing(
            "ENCODE (or format)",
            "Say how the records are written: FORMAT PLAIN ENCODE CSV (or JSON).",
        )),
    }
}

fn single_character(value: &str) -> Result<char> {
    let mut characters = value.chars();
    match (characters.next(), characters.next()) {
        (Some(character), None) if character.is_ascii() && !matches!(character, '\n' | '"') => {
            Ok(character)
        }
        _ => Err(invalid(
            "csv.delimiter",
            value,
            "Give one ASCII character, such as ',' or ';'.",
        )),
    }
}

/// The records that did not decode (their indexes), with why.
pub type Undecoded = Vec<(usize, String)>;

/// Decodes `records` into rows of `schema`: all at once when every record
/// is good, else one at a time, keeping the good ones in order.
pub fn decode_records(
    encoding: Encoding,
    schema: &SchemaRef,
    records: &[&str],
) -> Result<(RecordBatch, Undecoded)> {
    if let Ok(batch) = decode_all(encoding, schema, records) {
        return Ok((batch, Vec::new()));
    }
    let mut batches = Vec::new();
    let mut undecoded = Vec::new();
    for (index, &record) in records.iter().enumerate() {
        match decode_all(encoding, schema, &[record]) {
            Ok(batch) => batches.push(batch),
            Err(error) => undecoded.push((index, error.message)),
        }
    }
    Ok((concat_batches(schema, &batches)?, undecoded))
}

fn decode_all(encoding: Encoding, schema: &SchemaRef, records: &[&str]) -> Result<RecordBatch> {
    match encoding {
        Encoding::Csv { delimiter, .. } => {
            if records.iter().any(|record| record.contains('\n')) {
                return Err(WeirError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    "a CSV record spans several lines",
                ));
            }
            let mut options = CopyOptions::new(CopyFormat::Csv);
            options.delimiter = delimiter;
            let mut text = records.join("\n");
            text.push('\n');
            decode(&text, &options, schema)
        }
        Encoding::Json => {
            let rows = records
                .iter()
                .map(|record| json_fields(record, schema))
                .collect::<Result<Vec<_>>>()?;
            decode_fields(rows, schema, 1)
        }
    }
}

/// A JSON object's values for the columns, as text (None: null or absent).
fn json_fields(record: &str, schema: &SchemaRef) -> Result<Vec<Option<String>>> {
    let value: serde_json::Value = serde_json::from_str(record).map_err(|error| {
        WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("not JSON: {error}"),
        )
    })?;
    let serde_json::Value::Object(object) = value else {
        return Err(WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            "a JSON record must be an object",
        ));
    };
    Ok(schema
        .fields()
        .iter()
        .map(|field| match object.get(field.name()) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(other) => Some(other.to_string()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        (0..ids.len()).map(|row| ids.value(row)).collect()
    }

    #[test]
    fn json_records_keep_the_good_ones_in_order() {
        let records = [
            "{\"id\": 1, \"name\": \"a\"}",
            "{\"id\": ",
            "[1]",
            "{\"id\": 4}",
        ];
        let (batch, undecoded) = decode_records(Encoding::Json, &schema(), &records).unwrap();
        assert_eq!(ids(&batch), vec![1, 4]);
        assert!(batch.column(1).is_null(1));
        assert_eq!(undecoded.len(), 2);
        assert_eq!(undecoded[0].0, 1);
        assert!(undecoded[0].1.starts_with("not JSON"), "{}", undecoded[0].1);
        assert!(undecoded[1].1.contains("must be an object"));
    }

    #[test]
    fn csv_records_with_a_delimiter() {
        let csv = Encoding::Csv {
            header: false,
            delimiter: ';',
        };
        let records = ["1;x", "two;y", "3;\"a;b\"", "5;\"multi\nline\""];
        let (batch, undecoded) = decode_records(csv, &schema(), &records).unwrap();
        assert_eq!(ids(&batch), vec![1, 3]);
        assert_eq!(batch.column(1).as_string::<i32>().value(1), "a;b");
        assert_eq!(undecoded.len(), 2);
        assert!(undecoded[1].1.contains("several lines"));
    }
}
