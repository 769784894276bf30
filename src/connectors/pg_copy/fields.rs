//! Splitting COPY data into rows of string fields: the text format
//! (tab-separated, backslash escapes, `\N` for NULL) and CSV (quotes,
//! embedded newlines, unquoted empty for NULL).

use super::{bad_format, CopyOptions};
use crate::error::Result;

/// One row's fields (None is NULL) and the line it started on.
#[derive(Debug, PartialEq)]
pub(super) struct Record {
    pub(super) line: usize,
    pub(super) fields: Vec<Option<String>>,
}

pub(super) fn split_text(
    data: &str,
    options: &CopyOptions,
    first_line: usize,
) -> Result<Vec<Record>> {
    let mut records = Vec::new();
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
        let fields = line
            .split(options.delimiter)
            .map(|raw| {
                if raw == options.null {
                    Ok(None)
                } else {
                    unescape_text(raw)
                        .map(Some)
                        .map_err(|message| bad_format(number, message))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        records.push(Record {
            line: number,
            fields,
        });
    }
    Ok(records)
}

fn unescape_text(raw: &str) -> std::result::Result<String, String> {
    if !raw.contains('\\') {
        return Ok(raw.to_string());
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
    Ok(out)
}

pub(super) fn split_csv(
    data: &str,
    options: &CopyOptions,
    first_line: usize,
) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    let mut chars = data.chars().peekable();
    let mut line = first_line;
    while chars.peek().is_some() {
        let start_line = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut in_quotes = false;
        loop {
            let Some(c) = chars.next() else {
                if in_quotes {
                    return Err(bad_format(start_line, "unterminated quoted field"));
                }
                fields.push(csv_field(field, quoted, options));
                break;
            };
            if in_quotes {
                let escapes_next = c == options.escape
                    && chars.peek().is_some_and(|&next| {
                        next == options.quote
                            || (options.escape != options.quote && next == options.escape)
                    });
                if escapes_next {
                    field.extend(chars.next());
                } else if c == options.quote {
                    in_quotes = false;
                } else {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            } else if c == options.quote {
                in_quotes = true;
                quoted = true;
            } else if c == options.delimiter {
                fields.push(csv_field(std::mem::take(&mut field), quoted, options));
                quoted = false;
            } else if c == '\n' {
                line += 1;
                fields.push(csv_field(field, quoted, options));
                break;
            } else if c == '\r' && chars.peek() == Some(&'\n') {
                continue;
            } else {
                field.push(c);
            }
        }
        if fields.len() == 1 && fields[0].as_deref() == Some("\\.") {
            break;
        }
        records.push(Record {
            line: start_line,
            fields,
        });
    }
    Ok(records)
}

/// An unquoted field equal to the NULL string is NULL; a quoted one never is.
fn csv_field(field: String, quoted: bool, options: &CopyOptions) -> Option<String> {
    if !quoted && field == options.null {
        None
    } else {
        Some(field)
    }
}
