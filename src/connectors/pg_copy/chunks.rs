//! COPY data arrives in pieces of any size; `CopyDecoder` cuts it into
//! chunks of whole records (a CSV record may span lines inside quotes) and
//! decodes each chunk as it fills, so memory holds one chunk, not the
//! payload. Line numbers in errors count from the start of the data.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::{decode_from_line, CopyFormat, CopyOptions};
use crate::error::{sqlstate, Result, WeirError};

/// Bytes of COPY data decoded at a time.
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;

pub struct CopyDecoder {
    options: CopyOptions,
    columns: SchemaRef,
    /// Data not decoded yet.
    buffer: Vec<u8>,
    /// Bytes of `buffer` the record scanner has looked at.
    scanned: usize,
    /// Where the last complete record in `buffer` ends.
    records_end: usize,
    in_quotes: bool,
    /// The previous byte was an escape character inside quotes.
    escaped: bool,
    /// Lines in the data before `buffer`.
    lines_before: usize,
    /// The header line is still to come.
    header_pending: bool,
    /// The end marker `\.` was seen: what follows is ignored.
    ended: bool,
    /// Decode once this many bytes of whole records wait.
    chunk_bytes: usize,
    /// Record boundaries can be found byte by byte (ASCII quote and
    /// escape); otherwise the data is decoded whole at the end.
    chunked: bool,
}

impl CopyDecoder {
    pub fn new(options: CopyOptions, columns: SchemaRef) -> Self {
        let chunked = options.quote.is_ascii() && options.escape.is_ascii();
        CopyDecoder {
            header_pending: options.header,
            options,
            columns,
            buffer: Vec::new(),
            scanned: 0,
            records_end: 0,
            in_quotes: false,
            escaped: false,
            lines_before: 0,
            ended: false,
            chunk_bytes: CHUNK_BYTES,
            chunked,
        }
    }

    /// Takes more data; returns decoded rows once a chunk is full.
    pub fn push(&mut self, data: &[u8]) -> Result<Option<RecordBatch>> {
        if self.ended {
            return Ok(None);
        }
        self.buffer.extend_from_slice(data);
        if !self.chunked {
            return Ok(None);
        }
        self.scan();
        if self.records_end >= self.chunk_bytes || (self.ended && self.records_end > 0) {
            return self.decode_records().map(Some);
        }
        Ok(None)
    }

    /// The data is complete: decodes what is left.
    pub fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if !self.ended {
            self.records_end = self.buffer.len();
        }
        if self.records_end == 0 {
            return Ok(None);
        }
        self.decode_records().map(Some)
    }

    /// Finds record ends in the bytes not scanned yet, jumping from one
    /// byte that matters (quote, escape, newline) to the next.
    fn scan(&mut self) {
        let csv = self.options.format == CopyFormat::Csv;
        let (quote, escape) = (self.options.quote as u8, self.options.escape as u8);
        let mut position = self.scanned;
        while position < self.buffer.len() {
            let rest = &self.buffer[position..];
            if csv && self.in_quotes {
                if self.escaped {
                    // The byte after an escape inside quotes is taken as is
                    // when it is a quote or the escape itself.
                    self.escaped = false;
                    if rest[0] == quote || rest[0] == escape {
                        position += 1;
                        continue;
                    }
                }
                let Some(found) = memchr::memchr2(quote, escape, rest) else {
                    position = self.buffer.len();
                    break;
                };
                let byte = rest[found];
                position += found + 1;
                if byte == escape && escape != quote {
                    self.escaped = true;
                } else if byte == quote {
                    self.in_quotes = false;
                }
                continue;
            }
            let found = match csv {
                true => memchr::memchr2(quote, b'\n', rest),
                false => memchr::memchr(b'\n', rest),
            };
            let Some(found) = found else {
                position = self.buffer.len();
                break;
            };
            position += found + 1;
            if csv && rest[found] == quote {
                self.in_quotes = true;
                continue;
            }
            if is_end_line(&self.buffer[self.records_end..position - 1]) {
                self.ended = true;
                self.buffer.truncate(position);
                break;
            }
            self.records_end = position;
        }
        self.scanned = position;
    }

    /// Decodes the complete records in the buffer and drops them from it.
    fn decode_records(&mut self) -> Result<RecordBatch> {
        // The records move out whole; only the partial record after them
        // is copied.
        let rest = self.buffer.split_off(self.records_end);
        let records = std::mem::replace(&mut self.buffer, rest);
        self.scanned -= self.records_end.min(self.scanned);
        self.records_end = 0;
        let text = std::str::from_utf8(&records).map_err(|error| {
            WeirError::new(
                sqlstate::BAD_COPY_FILE_FORMAT,
                format!("COPY data is not valid UTF-8: {error}"),
            )
        })?;
        let first_line = self.lines_before + 1;
        self.lines_before += memchr::memchr_iter(b'\n', &records).count();
        let skip_header = std::mem::take(&mut self.header_pending);
        decode_from_line(text, &self.options, &self.columns, first_line, skip_header)
    }
}

/// `\\.` alone on a line (its newline left out): the end of the data.
fn is_end_line(line: &[u8]) -> bool {
    matches!(line, [b'\\', b'.'] | [b'\\', b'.', b'\r'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    fn columns() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("note", DataType::Utf8, true),
        ]))
    }

    /// Decodes `data` fed in pieces of `piece` bytes, decoding at every
    /// record end found.
    fn decode_in_pieces(data: &str, options: CopyOptions, piece: usize) -> Result<Vec<i64>> {
        let mut decoder = CopyDecoder::new(options, columns());
        decoder.chunk_bytes = 1;
        let mut ids = Vec::new();
        let mut take = |batch: Option<RecordBatch>| {
            if let Some(batch) = batch {
                let column: &Int64Array = batch.column(0).as_primitive::<Int64Type>();
                ids.extend(column.values().iter().copied());
            }
        };
        for bytes in data.as_bytes().chunks(piece) {
            take(decoder.push(bytes)?);
        }
        take(decoder.finish()?);
        Ok(ids)
    }

    #[test]
    fn csv_records_with_quoted_newlines_survive_any_split() {
        let data = "id,note\n1,\"a\nb\"\n2,\"say \"\"hi\"\"\n\"\n3,plain\n";
        let mut options = CopyOptions::new(CopyFormat::Csv);
        options.header = true;
        for piece in 1..data.len() {
            let ids = decode_in_pieces(data, options.clone(), piece).unwrap();
            assert_eq!(ids, vec![1, 2, 3], "split every {piece} bytes");
        }
    }

    #[test]
    fn the_end_marker_stops_the_data_and_lines_count_from_the_start() {
        let options = CopyOptions::new(CopyFormat::Text);
        let ids = decode_in_pieces("1\ta\n2\tb\n\\.\n9\tignored\n", options.clone(), 3).unwrap();
        assert_eq!(ids, vec![1, 2]);
        let error = decode_in_pieces("1\ta\n2\tb\nx\tc\n", options, 4).unwrap_err();
        assert!(error.message.contains("line 3"), "{}", error.message);
    }
}
