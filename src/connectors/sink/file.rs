//! `connector = 'file'`: a sink's records as JSON lines appended to one
//! file. FORMAT PLAIN writes each row's object; FORMAT UPSERT writes
//! `{"key": {…}, "value": {…} | null}`. The shipper records the file's
//! length with each mark, after an fsync; on restart the file is cut back
//! to that length, so lines written after the last mark (a crash between
//! the write and the mark) are written once more, never twice. A new sink
//! appends to a file that exists.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

use super::{Record, SinkMark, SinkWriter};
use crate::catalog::SinkFormat;
use crate::connectors::source::options::{missing, Options};
use crate::error::{sqlstate, Result, WeirError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    pub path: PathBuf,
}

impl FileOptions {
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self> {
        let mut given = Options::new("file", options);
        let Some((_, path)) = given.text(&["path"]) else {
            return Err(missing(
                "path",
                "Name the file to write: WITH (connector = 'file', path = '/data/out.jsonl').",
            ));
        };
        given.finish("path")?;
        Ok(FileOptions {
            path: PathBuf::from(path),
        })
    }
}

pub struct FileWriter {
    options: FileOptions,
    format: SinkFormat,
    file: Option<File>,
    /// The file's length as written so far.
    length: u64,
}

fn io_error(path: &std::path::Path, doing: &str, error: std::io::Error) -> WeirError {
    WeirError::new(
        sqlstate::IO_ERROR,
        format!("cannot {doing} sink file {}: {error}", path.display()),
    )
    .with_hint("Check that the directory exists and weir may write there.")
}

impl FileWriter {
    pub fn new(options: FileOptions, format: SinkFormat) -> Self {
        FileWriter {
            options,
            format,
            file: None,
            length: 0,
        }
    }

    fn open(&self) -> Result<File> {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.options.path)
            .map_err(|error| io_error(&self.options.path, "open", error))
    }

    fn line(&self, record: &Record, line: &mut Vec<u8>) {
        match self.format {
            SinkFormat::Plain => line.extend_from_slice(record.value.as_deref().unwrap_or(b"null")),
            SinkFormat::Upsert => {
                line.extend_from_slice(b"{\"key\":");
                line.extend_from_slice(record.key.as_deref().unwrap_or(b"null"));
                line.extend_from_slice(b",\"value\":");
                line.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                line.push(b'}');
            }
        }
        line.push(b'\n');
    }
}

impl SinkWriter for FileWriter {
    fn start(&mut self) -> Result<serde_json::Value> {
        let file = self.open()?;
        let length = file
            .metadata()
            .map_err(|error| io_error(&self.options.path, "read the length of", error))?
            .len();
        file.sync_all()
            .map_err(|error| io_error(&self.options.path, "sync", error))?;
        Ok(serde_json::json!({ "length": length }))
    }

    fn resume(&mut self, mark: &SinkMark) -> Result<()> {
        let path = &self.options.path;
        let mut file = self.open()?;
        let marked = mark
            .position
            .get("length")
            .and_then(|l| l.as_u64())
            .unwrap_or(0);
        let current = file
            .metadata()
            .map_err(|error| io_error(path, "read the length of", error))?
            .len();
        if current > marked {
            file.set_len(marked)
                .and_then(|()| file.sync_all())
                .map_err(|error| io_error(path, "cut back", error))?;
        } else if current < marked {
            tracing::warn!(
                path = %path.display(),
                "the sink file is shorter than weir wrote it ({current} < {marked} bytes); writing on at its end"
            );
        }
        self.length = current.min(marked);
        file.seek(SeekFrom::Start(self.length))
            .map_err(|error| io_error(path, "seek in", error))?;
        self.file = Some(file);
        Ok(())
    }

    fn write(&mut self, _sequence: u64, records: &[Record]) -> Result<()> {
        let mut lines = Vec::new();
        for record in records {
            self.line(record, &mut lines);
        }
        let path = self.options.path.clone();
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| WeirError::internal("a sink file was written before resume"))?;
        file.write_all(&lines)
            .map_err(|error| io_error(&path, "write", error))?;
        self.length += lines.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<serde_json::Value> {
        if let Some(file) = &self.file {
            file.sync_data()
                .map_err(|error| io_error(&self.options.path, "sync", error))?;
        }
        Ok(serde_json::json!({ "length": self.length }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &str) -> Record {
        Record {
            key: None,
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn lines_after_the_mark_are_cut_back_on_resume() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("out.jsonl");
        std::fs::write(&path, "old\n").unwrap();
        let options = FileOptions { path: path.clone() };
        let mut writer = FileWriter::new(options.clone(), SinkFormat::Plain);
        let position = writer.start().unwrap();
        let mut mark = SinkMark {
            shipped: 0,
            position,
        };
        writer.resume(&mark).unwrap();
        writer.write(1, &[record("{\"a\":1}")]).unwrap();
        mark = SinkMark {
            shipped: 1,
            position: writer.sync().unwrap(),
        };
        writer.write(2, &[record("{\"a\":2}")]).unwrap();
        drop(writer);
        // A crash before sequence 2 was marked: it is cut back and resent.
        let mut writer = FileWriter::new(options, SinkFormat::Plain);
        writer.resume(&mark).unwrap();
        writer.write(2, &[record("{\"a\":2}")]).unwrap();
        writer.sync().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "old\n{\"a\":1}\n{\"a\":2}\n");
    }

    #[test]
    fn upsert_lines_carry_the_key_and_a_null_value_for_deletions() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("upserts.jsonl");
        let mut writer = FileWriter::new(FileOptions { path: path.clone() }, SinkFormat::Upsert);
        let position = writer.start().unwrap();
        writer
            .resume(&SinkMark {
                shipped: 0,
                position,
            })
            .unwrap();
        let deleted = Record {
            key: Some(b"{\"k\":1}".to_vec()),
            value: None,
        };
        writer.write(1, &[deleted]).unwrap();
        writer.sync().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\"key\":{\"k\":1},\"value\":null}\n");
    }

    #[test]
    fn a_missing_path_is_refused_with_a_hint() {
        let error = FileOptions::parse(&BTreeMap::new()).unwrap_err();
        assert_eq!(error.code, sqlstate::INVALID_PARAMETER_VALUE);
        assert!(error.hint.unwrap().contains("path"));
    }
}
