//! `VARCHAR(n)` and `CHAR(n)` limits, checked on every write into a table:
//! a value longer than n characters fails the statement with 22001, as in
//! Postgres. The limits come from the fields' metadata (`catalog`).
//! Unlike Postgres, trailing spaces past the limit are not trimmed away
//! (they fail too) and `CHAR(n)` values are not padded.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::{BLANK_PADDED_METADATA, MAX_CHARACTERS_METADATA};
use crate::error::{sqlstate, Result, WeirError};

/// Fails on the first value of `batch` longer than its column allows.
pub fn check(batch: &RecordBatch) -> Result<()> {
    let schema = batch.schema();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let Some(limit) = limit(field) else {
            continue;
        };
        let too_long = |text: &str| text.len() > limit && text.chars().count() > limit;
        let found = match column.data_type() {
            DataType::Utf8 => column.as_string::<i32>().iter().flatten().any(too_long),
            DataType::LargeUtf8 => column.as_string::<i64>().iter().flatten().any(too_long),
            DataType::Utf8View => column.as_string_view().iter().flatten().any(too_long),
            _ => false,
        };
        if found {
            return Err(too_long_error(field, limit));
        }
    }
    Ok(())
}

fn limit(field: &Field) -> Option<usize> {
    field.metadata().get(MAX_CHARACTERS_METADATA)?.parse().ok()
}

fn too_long_error(field: &Field, limit: usize) -> WeirError {
    let type_name = match field.metadata().contains_key(BLANK_PADDED_METADATA) {
        true => "character",
        false => "character varying",
    };
    WeirError::new(
        sqlstate::STRING_DATA_RIGHT_TRUNCATION,
        format!("value too long for type {type_name}({limit})"),
    )
    .with_hint(format!(
        "Column \"{}\" holds at most {limit} characters; shorten the value or widen the column.",
        field.name()
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::StringViewArray;
    use datafusion::arrow::datatypes::Schema;

    use super::*;

    fn batch(values: Vec<Option<&str>>) -> RecordBatch {
        let field = Field::new("s", DataType::Utf8View, true)
            .with_metadata([(MAX_CHARACTERS_METADATA.to_string(), "3".to_string())].into());
        let schema = Arc::new(Schema::new(vec![field]));
        RecordBatch::try_new(schema, vec![Arc::new(StringViewArray::from(values))]).unwrap()
    }

    #[test]
    fn values_up_to_the_limit_pass_and_longer_ones_fail() {
        check(&batch(vec![Some("abc"), None, Some("äöü"), Some("")])).unwrap();
        let error = check(&batch(vec![Some("ab"), Some("abcd")])).unwrap_err();
        assert_eq!(error.code, sqlstate::STRING_DATA_RIGHT_TRUNCATION);
        assert!(
            error.message.contains("character varying(3)"),
            "{}",
            error.message
        );
    }
}
