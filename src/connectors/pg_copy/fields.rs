//! Splitting COPY data into fields: the text format (tab-separated,
//! backslash escapes, `\N` for NULL) and CSV (quotes, embedded newlines,
//! unquoted empty for NULL). Fields go straight into a `FieldSink` — for
//! decoding, one string column per field position — as slices of the data
//! where they need no unescaping, so a row costs no allocation.
//! Delimiter, quote and escape are one-byte characters (as in Postgres),
//! so the data is scanned byte by byte.

use std::borrow::Cow;

use super::{bad_format, CopyOptions};
use crate::error::Result;

/// Where split fields go, record by record.
pub(super) trait FieldSink {
    /// The next field of the current record (None is NULL).
    fn field(&mut self, value: Option<&str>);
    /// The current record, which started on `line`, has ended.
    fn end_record(&mut self, line: usize) -> Result<()>;
}

pub(super) fn split_text(
    data: &str,
    options: &CopyOptions,
    first_line: usize,
    sink: &mut impl FieldSink,
) -> Result<()> {
    let delimiter = options.delimiter as u8;
    let lines = data.split('\n').count();
    for (index, line) in data.split('\n').enumerate() {
        let number = first_line + index;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        if line.is_empty() && index + 1 == lines {
            continue;
        }
        for raw in line.split(|c: char| c as u32 == u32::from(delimiter)) {
            if raw == options.null {
                sink.field(None);
                continue;
            }
            let value = unescape_text(raw).map_err(|message| bad_format(number, message))?;
            sink.field(Some(&value));
        }
        sink.end_record(number)?;
    }
    Ok(())
}

fn unescape_text(raw: &str) -> std::result::Result<Cow<'_, str>, String> {
    if !raw.contains('\\') {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some(digit @ '0'..='7') => {
                let mut value = digit.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(next) => {
                            value = value * 8 + next;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(value).ok_or("invalid octal escape")?);
            }
            Some(other) => out.push(other),
            None => return Err("backslash at the end of a field".to_string()),
        }
    }
    Ok(Cow::Owned(out))
}

/// The CSV options as bytes, and the field being unquoted.
struct Csv<'a> {
    data: &'a [u8],
    delimiter: u8,
    quote: u8,
    escape: u8,
    null: &'a str,
    /// The bytes that end or quote an unquoted field: the delimiter, the
    /// quote, newline and carriage return. Looking one up costs a load
    /// where comparing with each costs four branches per byte.
    special: [bool; 256],
    /// A field with quotes or a lone carriage return, unquoted.
    scratch: Vec<u8>,
}

pub(super) fn split_csv(
    data: &str,
    options: &CopyOptions,
    first_line: usize,
    sink: &mut impl FieldSink,
) -> Result<()> {
    let (delimiter, quote) = (options.delimiter as u8, options.quote as u8);
    let mut special = [false; 256];
    for byte in [delimiter, quote, b'\n', b'\r'] {
        special[usize::from(byte)] = true;
    }
    let mut csv = Csv {
        data: data.as_bytes(),
        delimiter,
        quote,
        escape: options.escape as u8,
        null: &options.null,
        special,
        scratch: Vec::new(),
    };
    let mut position = 0;
    let mut line = first_line;
    while position < csv.data.len() && !is_end_marker(&csv.data[position..]) {
        let start_line = line;
        loop {
            let (end, ended_record) = csv.field(data, position, &mut line, start_line, sink)?;
            position = end;
            if ended_record {
                break;
            }
        }
        sink.end_record(start_line)?;
    }
    Ok(())
}

/// `\.` alone on a line: the end of the data.
fn is_end_marker(rest: &[u8]) -> bool {
    matches!(
        rest,
        [b'\\', b'.']
            | [b'\\', b'.', b'\r']
            | [b'\\', b'.', b'\n', ..]
            | [b'\\', b'.', b'\r', b'\n', ..]
    )
}

impl Csv<'_> {
    /// The field at `start`: sends it and returns where the next field
    /// starts and whether the record ended with it.
    fn field(
        &mut self,
        text: &str,
        start: usize,
        line: &mut usize,
        start_line: usize,
        sink: &mut impl FieldSink,
    ) -> Result<(usize, bool)> {
        let data = self.data;
        let mut position = start;
        while position < data.len() {
            let byte = data[position];
            if !self.special[usize::from(byte)] {
                position += 1;
                continue;
            }
            let ends = if byte == self.delimiter {
                Some((position + 1, false))
            } else if byte == b'\n' {
                *line += 1;
                Some((position + 1, true))
            } else if byte == b'\r' && data.get(position + 1) == Some(&b'\n') {
                *line += 1;
                Some((position + 2, true))
            } else if byte == self.quote || byte == b'\r' {
                return self.unquote(start, line, start_line, sink);
            } else {
                None
            };
            if let Some(next) = ends {
                self.send(&text[start..position], false, sink);
                return Ok(next);
            }
            position += 1;
        }
        self.send(&text[start..], false, sink);
        Ok((data.len(), true))
    }

    /// A field with quotes (or a lone carriage return), copied without
    /// them into `scratch`.
    fn unquote(
        &mut self,
        start: usize,
        line: &mut usize,
        start_line: usize,
        sink: &mut impl FieldSink,
    ) -> Result<(usize, bool)> {
        let data = self.data;
        self.scratch.clear();
        let (mut quoted, mut in_quotes) = (false, false);
        let mut position = start;
        let mut ended = None;
        while position < data.len() {
            let byte = data[position];
            position += 1;
            if in_quotes {
                let next = data.get(position).copied();
                let escapes_next = byte == self.escape
                    && next.is_some_and(|next| {
                        next == self.quote || (self.escape != self.quote && next == self.escape)
                    });
                if escapes_next {
                    self.scratch.push(data[position]);
                    position += 1;
                } else if byte == self.quote {
                    in_quotes = false;
                } else {
                    *line += usize::from(byte == b'\n');
                    self.scratch.push(byte);
                }
            } else if byte == self.quote {
                (in_quotes, quoted) = (true, true);
            } else if byte == self.delimiter {
                ended = Some(false);
                break;
            } else if byte == b'\n' {
                *line += 1;
                ended = Some(true);
                break;
            } else if byte == b'\r' && data.get(position) == Some(&b'\n') {
                continue;
            } else {
                self.scratch.push(byte);
            }
        }
        if in_quotes {
            return Err(bad_format(start_line, "unterminated quoted field"));
        }
        // Only ASCII quotes and escapes were left out of whole UTF-8 text.
        let value = String::from_utf8_lossy(&self.scratch);
        self.send(&value, quoted, sink);
        Ok((position, ended.unwrap_or(true)))
    }

    /// An unquoted field equal to the NULL string is NULL; a quoted one
    /// never is.
    fn send(&self, value: &str, quoted: bool, sink: &mut impl FieldSink) {
        match !quoted && value == self.null {
            true => sink.field(None),
            false => sink.field(Some(value)),
        }
    }
}

/// The records as owned fields (tests).
#[cfg(test)]
#[derive(Debug, Default, PartialEq)]
pub(super) struct Records(pub Vec<(usize, Vec<Option<String>>)>, Vec<Option<String>>);

#[cfg(test)]
impl FieldSink for Records {
    fn field(&mut self, value: Option<&str>) {
        self.1.push(value.map(str::to_string));
    }

    fn end_record(&mut self, line: usize) -> Result<()> {
        let fields = std::mem::take(&mut self.1);
        self.0.push((line, fields));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::pg_copy::CopyFormat;

    fn csv(data: &str, options: &CopyOptions) -> Vec<(usize, Vec<Option<String>>)> {
        let mut records = Records::default();
        split_csv(data, options, 1, &mut records).unwrap();
        records.0
    }

    fn fields(values: &[Option<&str>]) -> Vec<Option<String>> {
        values
            .iter()
            .map(|value| value.map(str::to_string))
            .collect()
    }

    #[test]
    fn csv_fields_quotes_line_ends_and_text() {
        let options = CopyOptions::new(CopyFormat::Csv);
        let data = "1,héllo,\r\n2,\"a \"\"b\"\", c\",\"\"\nx\"y,z\"w,日本\r\n3,a\rb,\"two\nlines\"\n\\.\nignored\n";
        assert_eq!(
            csv(data, &options),
            vec![
                (1, fields(&[Some("1"), Some("héllo"), None])),
                (2, fields(&[Some("2"), Some("a \"b\", c"), Some("")])),
                (3, fields(&[Some("xy,zw"), Some("日本")])),
                (4, fields(&[Some("3"), Some("a\rb"), Some("two\nlines")])),
            ]
        );
        // No newline at the end; a quoted `\.` is data.
        assert_eq!(
            csv("\"\\.\"\n5,6", &options),
            vec![
                (1, fields(&[Some("\\.")])),
                (2, fields(&[Some("5"), Some("6")]))
            ]
        );
    }

    #[test]
    fn csv_escape_other_than_quote() {
        let mut options = CopyOptions::new(CopyFormat::Csv);
        options.escape = '\\';
        options.delimiter = ';';
        options.null = "NULL".to_string();
        assert_eq!(
            csv("\"a\\\"b\\\\c\";NULL;\"NULL\"\n", &options),
            vec![(1, fields(&[Some("a\"b\\c"), None, Some("NULL")]))]
        );
    }

    #[test]
    fn csv_unterminated_quote_names_its_first_line() {
        let options = CopyOptions::new(CopyFormat::Csv);
        let mut records = Records::default();
        let error = split_csv("1,2\n3,\"open\nmore\n", &options, 10, &mut records).unwrap_err();
        assert!(error.message.contains("line 11"), "{}", error.message);
    }

    #[test]
    fn text_fields_escapes_and_nulls() {
        let options = CopyOptions::new(CopyFormat::Text);
        let mut records = Records::default();
        split_text("a\\tb\t\\N\té\r\n\\.\nx\n", &options, 3, &mut records).unwrap();
        assert_eq!(
            records.0,
            vec![(3, fields(&[Some("a\tb"), None, Some("é")]))]
        );
    }
}
