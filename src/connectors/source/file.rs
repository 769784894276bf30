//! `connector = 'file'`: CSV or JSON-lines records from a file, or from
//! the files of a directory in name order (a file whose name sorts after
//! the one being read is picked up when it appears, as rotated logs are
//! named). A file being read is followed as it grows; only whole lines
//! are taken, except that a last line without its newline is taken once
//! a later file exists. The position is the file and the byte offset
//! after the last line taken. A record that does not decode is skipped,
//! counted, and reported (`rejected`); it never stops the source.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read as _, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use super::options::{missing, Options};
use super::records::{decode_records, take_encoding, Encoding};
use super::{Read, Rejected, SourceReader};
use crate::error::{sqlstate, Result, WeirError};

const KNOWN: &str = "path (posix_fs.root), match_pattern, format, csv.header, csv.delimiter";
/// Bytes read from a file at once.
const READ_BYTES: usize = 4 << 20;
/// How long to wait for a file to grow or a new one to appear.
const POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    path: PathBuf,
    pattern: String,
    encoding: Encoding,
}

impl FileOptions {
    pub fn parse(options: &BTreeMap<String, String>, encode: Option<&str>) -> Result<Self> {
        let mut given = Options::new("file", options);
        let Some((_, path)) = given.text(&["path", "posix_fs.root"]) else {
            return Err(missing(
                "path",
                "Say where the files are: WITH (connector = 'file', path = '/data/events').",
            ));
        };
        let pattern = given
            .text(&["match_pattern", "pattern"])
            .map_or("*".to_string(), |(_, value)| value);
        let encoding = take_encoding(&mut given, encode, "file", true)?;
        given.finish(KNOWN)?;
        Ok(FileOptions {
            path: PathBuf::from(path),
            pattern,
            encoding,
        })
    }
}

/// Where the reader stands: after `offset` bytes of `file`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    file: Option<String>,
    offset: u64,
}

pub struct FileReader {
    options: FileOptions,
    schema: SchemaRef,
    position: Position,
    rejected: Vec<Rejected>,
}

impl FileReader {
    pub fn new(options: FileOptions, schema: &SchemaRef, position: Option<&str>) -> Result<Self> {
        let position = match position {
            None => Position::default(),
            Some(text) => serde_json::from_str(text).map_err(|error| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!("a file source's stored position {text:?}: {error}"),
                )
            })?,
        };
        Ok(FileReader {
            options,
            schema: schema.clone(),
            position,
            rejected: Vec::new(),
        })
    }

    /// The files to read, in name order: the path itself when it is a file.
    fn files(&self) -> Result<Vec<(String, PathBuf)>> {
        let path = &self.options.path;
        if path.is_file() {
            let name = path.file_name().map(|n| n.to_string_lossy().to_string());
            return Ok(vec![(name.unwrap_or_default(), path.clone())]);
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            // Not there yet: a directory may be created after the source.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(WeirError::io(format!(
                    "cannot list {}: {error}",
                    path.display()
                )))
            }
        };
        let mut files: Vec<(String, PathBuf)> = entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_file())
            .map(|entry| {
                (
                    entry.file_name().to_string_lossy().to_string(),
                    entry.path(),
                )
            })
            .filter(|(name, _)| matches_pattern(&self.options.pattern, name))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Reads what follows the position in its file: whole lines, up to
    /// `max_rows`; a last unterminated line too when `ended`.
    fn read_lines(&self, path: &Path, max_rows: usize, ended: bool) -> Result<(String, u64)> {
        let mut file = File::open(path)
            .map_err(|error| WeirError::io(format!("cannot open {}: {error}", path.display())))?;
        file.seek(SeekFrom::Start(self.position.offset))
            .map_err(|error| WeirError::io(format!("cannot read {}: {error}", path.display())))?;
        let mut bytes = Vec::new();
        file.take(READ_BYTES as u64)
            .read_to_end(&mut bytes)
            .map_err(|error| WeirError::io(format!("cannot read {}: {error}", path.display())))?;
        let mut end = match bytes.iter().rposition(|&byte| byte == b'\n') {
            Some(last) => last + 1,
            None if ended && bytes.len() < READ_BYTES => bytes.len(),
            None => 0,
        };
        if let Some(cut) = bytes[..end]
            .iter()
            .enumerate()
            .filter(|(_, &byte)| byte == b'\n')
            .nth(max_rows.saturating_sub(1))
            .map(|(index, _)| index + 1)
        {
            end = end.min(cut);
        }
        bytes.truncate(end);
        let text = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
        Ok((text, end as u64))
    }

    fn decode(&mut self, text: &str, file: &str, first_line: bool) -> Result<RecordBatch> {
        let mut lines: Vec<&str> = text.lines().collect();
        if first_line && matches!(self.options.encoding, Encoding::Csv { header: true, .. }) {
            lines.drain(..lines.len().min(1));
        }
        lines.retain(|line| !line.trim().is_empty());
        let (batch, undecoded) = decode_records(self.options.encoding, &self.schema, &lines)?;
        self.rejected
            .extend(undecoded.into_iter().map(|(index, reason)| Rejected {
                record: lines[index].to_string(),
                reason: format!("{file}: {reason}"),
            }));
        Ok(batch)
    }
}

/// `*` matches any run of characters, `?` any one; the rest literally.
fn matches_pattern(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

impl SourceReader for FileReader {
    fn read(&mut self, max_rows: usize) -> Result<Read> {
        let files = self.files()?;
        let current = match &self.position.file {
            Some(name) => files.iter().find(|(file, _)| file == name).cloned(),
            None => files.first().cloned(),
        };
        let Some((name, path)) = current else {
            // The file went away (or none came yet): wait for a later one.
            return match self.next_file(&files) {
                Some(next) => {
                    self.position = Position {
                        file: Some(next),
                        offset: 0,
                    };
                    Ok(Read::Rows(RecordBatch::new_empty(self.schema.clone())))
                }
                None => Ok(Read::Wait(POLL)),
            };
        };
        let later = files.iter().any(|(file, _)| *file > name);
        let (text, consumed) = self.read_lines(&path, max_rows, later)?;
        if consumed == 0 {
            return match later {
                true => {
                    let next = self.next_file(&files);
                    self.position = Position {
                        file: next,
                        offset: 0,
                    };
                    Ok(Read::Rows(RecordBatch::new_empty(self.schema.clone())))
                }
                false => Ok(Read::Wait(POLL)),
            };
        }
        let first_line = self.position.offset == 0;
        let batch = self.decode(&text, &name, first_line)?;
        self.position = Position {
            file: Some(name),
            offset: self.position.offset + consumed,
        };
        Ok(Read::Rows(batch))
    }

    fn position(&self) -> String {
        serde_json::to_string(&self.position).unwrap_or_default()
    }

    fn take_rejected(&mut self) -> Vec<Rejected> {
        std::mem::take(&mut self.rejected)
    }
}

impl FileReader {
    /// The first file after the current one.
    fn next_file(&self, files: &[(String, PathBuf)]) -> Option<String> {
        let after = self.position.file.as_deref();
        files
            .iter()
            .map(|(name, _)| name)
            .find(|name| after.is_none_or(|current| name.as_str() > current))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn reader(directory: &Path, encode: &str, position: Option<&str>) -> FileReader {
        let options: BTreeMap<String, String> = [
            ("path".to_string(), directory.display().to_string()),
            ("match_pattern".to_string(), "*.data".to_string()),
        ]
        .into_iter()
        .collect();
        let options = FileOptions::parse(&options, Some(encode)).unwrap();
        FileReader::new(options, &schema(), position).unwrap()
    }

    fn ids(reader: &mut FileReader) -> Vec<i64> {
        let mut ids = Vec::new();
        while let Read::Rows(batch) = reader.read(1000).unwrap() {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            ids.extend(column.iter().map(|id| id.unwrap_or(-1)));
        }
        ids
    }

    #[test]
    fn files_are_read_in_name_order_and_followed_as_they_grow() {
        let directory = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(directory.path().join(name))
                .unwrap();
            file.write_all(text.as_bytes()).unwrap();
        };
        write("b.data", "3,c\n4,d\n5,");
        write("a.data", "1,a\r\n2,b\n");
        write("ignored.txt", "9,z\n");
        let mut reader = reader(directory.path(), "CSV", None);
        assert_eq!(ids(&mut reader), vec![1, 2, 3, 4]);
        // The unterminated line waits for its newline.
        write("b.data", "e\n");
        assert_eq!(ids(&mut reader), vec![5]);
        write("b.data", "6,f");
        write("c.data", "7,g\n");
        let position = reader.position();
        assert_eq!(ids(&mut reader), vec![6, 7]);
        // Resumed from a stored position, the same rows again.
        let mut resumed = super::tests::reader(directory.path(), "CSV", Some(&position));
        assert_eq!(ids(&mut resumed), vec![6, 7]);
    }

    #[test]
    fn bad_records_are_rejected_and_the_rest_kept() {
        let directory = tempfile::tempdir().unwrap();
        std::fs::write(
            directory.path().join("a.data"),
            "{\"id\": 1, \"name\": \"a\"}\nnot json\n{\"id\": \"x\"}\n{\"id\": 4, \"extra\": true}\n",
        )
        .unwrap();
        let mut reader = reader(directory.path(), "JSON", None);
        assert_eq!(ids(&mut reader), vec![1, 4]);
        let rejected = reader.take_rejected();
        assert_eq!(rejected.len(), 2);
        assert_eq!(rejected[0].record, "not json");
        assert!(
            rejected[1].reason.contains("a.data"),
            "{}",
            rejected[1].reason
        );
    }

    #[test]
    fn patterns_and_options() {
        assert!(matches_pattern("*.csv", "part-1.csv"));
        assert!(matches_pattern("part-?.csv", "part-1.csv"));
        assert!(!matches_pattern("*.csv", "part-1.json"));
        assert!(matches_pattern("*", ""));
        let options: BTreeMap<String, String> = [("path".to_string(), "/x".to_string())]
            .into_iter()
            .collect();
        assert!(FileOptions::parse(&options, None).is_err());
        assert!(FileOptions::parse(&options, Some("AVRO")).is_err());
        assert!(FileOptions::parse(&BTreeMap::new(), Some("CSV")).is_err());
    }
}
