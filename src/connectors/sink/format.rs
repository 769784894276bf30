//! A commit's changes as the records a sink writes (ENCODE JSON): FORMAT
//! PLAIN writes each inserted row as a JSON object; FORMAT UPSERT writes,
//! per key the commit touched, the key as a JSON object and the row the key
//! now has, or no value when the commit deleted it. A commit's retraction
//! and insertion of the same key (an updated count) become one upsert.

use std::collections::HashMap;

use datafusion::arrow::json::{writer::LineDelimited, WriterBuilder};
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::SinkFormat;
use crate::error::{sqlstate, Result, WeirError};
use crate::stream::message::Chunk;

/// One record for the destination: a Kafka message, a line of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Vec<u8>>,
    /// None: the key was deleted (a tombstone).
    pub value: Option<Vec<u8>>,
}

/// How a sink turns changes into records.
#[derive(Debug, Clone)]
pub struct RecordFormat {
    pub format: SinkFormat,
    /// Positions of the key columns in the view's rows (UPSERT).
    pub key_columns: Vec<usize>,
    /// PLAIN: retractions are left out instead of failing.
    pub force_append_only: bool,
}

impl RecordFormat {
    /// The records of one commit's changes, in order.
    pub fn records(&self, chunks: &[Chunk]) -> Result<Vec<Record>> {
        match self.format {
            SinkFormat::Plain => self.plain(chunks),
            SinkFormat::Upsert => self.upsert(chunks),
        }
    }

    fn plain(&self, chunks: &[Chunk]) -> Result<Vec<Record>> {
        let mut records = Vec::new();
        for chunk in chunks {
            let lines = json_lines(&chunk.rows)?;
            for (row, line) in lines.into_iter().enumerate() {
                let diff = chunk.diffs.as_ref().map_or(1, |diffs| diffs.value(row));
                if diff < 0 && !self.force_append_only {
                    return Err(WeirError::new(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "a FORMAT PLAIN sink received a retraction",
                    )
                    .with_hint("Use FORMAT UPSERT, or force_append_only = 'true'."));
                }
                for _ in 0..diff.max(0) {
                    records.push(Record {
                        key: None,
                        value: Some(line.clone()),
                    });
                }
            }
        }
        Ok(records)
    }

    fn upsert(&self, chunks: &[Chunk]) -> Result<Vec<Record>> {
        // Per key: when it was last changed, and its row after the commit.
        let mut latest: HashMap<Vec<u8>, (usize, Option<Vec<u8>>)> = HashMap::new();
        let mut order = 0;
        for chunk in chunks {
            let keys = json_lines(&chunk.rows.project(&self.key_columns)?)?;
            let lines = json_lines(&chunk.rows)?;
            for (row, (key, line)) in keys.into_iter().zip(lines).enumerate() {
                let diff = chunk.diffs.as_ref().map_or(1, |diffs| diffs.value(row));
                let entry = latest.entry(key).or_insert((order, None));
                entry.0 = order;
                if diff > 0 {
                    entry.1 = Some(line);
                } else if entry.1.as_ref() == Some(&line) || entry.1.is_none() {
                    entry.1 = None;
                }
                order += 1;
            }
        }
        let mut records: Vec<(usize, Record)> = latest
            .into_iter()
            .map(|(key, (order, value))| {
                (
                    order,
                    Record {
                        key: Some(key),
                        value,
                    },
                )
            })
            .collect();
        records.sort_by_key(|(order, _)| *order);
        Ok(records.into_iter().map(|(_, record)| record).collect())
    }
}

/// Each row of `rows` as one JSON object (nulls written out).
fn json_lines(rows: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(Vec::new());
    writer.write(rows)?;
    writer.finish()?;
    let buffer = writer.into_inner();
    // JSON escapes newlines inside strings: each line is one row.
    Ok(buffer
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn chunk(names: &[&str], counts: &[i64], diffs: &[i64]) -> Chunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Int64Array::from(counts.to_vec())),
            ],
        )
        .unwrap();
        Chunk {
            rows,
            diffs: Some(Int64Array::from(diffs.to_vec())),
            watermarks: None,
        }
    }

    fn text(bytes: &Option<Vec<u8>>) -> Option<&str> {
        bytes.as_deref().map(|b| std::str::from_utf8(b).unwrap())
    }

    #[test]
    fn upsert_keeps_each_keys_last_row_and_deletes_what_is_gone() {
        let format = RecordFormat {
            format: SinkFormat::Upsert,
            key_columns: vec![0],
            force_append_only: false,
        };
        let records = format
            .records(&[
                chunk(&["a", "b"], &[1, 1], &[1, 1]),
                chunk(&["a", "a", "b", "c\nd"], &[1, 2, 1, 5], &[-1, 1, -1, 1]),
            ])
            .unwrap();
        let seen: Vec<_> = records
            .iter()
            .map(|r| (text(&r.key), text(&r.value)))
            .collect();
        assert_eq!(
            seen,
            vec![
                (Some(r#"{"name":"a"}"#), Some(r#"{"name":"a","n":2}"#)),
                (Some(r#"{"name":"b"}"#), None),
                (Some(r#"{"name":"c\nd"}"#), Some(r#"{"name":"c\nd","n":5}"#)),
            ]
        );
    }

    #[test]
    fn plain_writes_insertions_and_refuses_retractions_unless_forced() {
        let mut format = RecordFormat {
            format: SinkFormat::Plain,
            key_columns: Vec::new(),
            force_append_only: false,
        };
        let inserts = format
            .records(&[chunk(&["a", "b"], &[1, 2], &[1, 1])])
            .unwrap();
        assert_eq!(text(&inserts[1].value), Some(r#"{"name":"b","n":2}"#));
        assert_eq!(inserts[1].key, None);
        let mixed = [chunk(&["a", "a"], &[1, 2], &[-1, 1])];
        assert_eq!(
            format.records(&mixed).unwrap_err().code,
            sqlstate::FEATURE_NOT_SUPPORTED
        );
        format.force_append_only = true;
        assert_eq!(format.records(&mixed).unwrap().len(), 1);
    }
}
