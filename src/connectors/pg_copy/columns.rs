//! Split fields gathered column by column as Arrow strings (a string
//! column per field position, each row's line for error messages), ready
//! for the vectorised cast to the table's types.

use datafusion::arrow::array::{StringArray, StringBuilder};

use super::bad_format;
use super::fields::FieldSink;
use crate::error::Result;

pub(super) struct StringColumns {
    builders: Vec<StringBuilder>,
    /// The line each row started on.
    pub lines: Vec<usize>,
    /// Fields of the current record so far.
    fields: usize,
    /// The next record is a header: its fields are not kept.
    skip_next: bool,
}

impl StringColumns {
    /// Columns for `width` fields per record, expecting about `bytes` of
    /// data.
    pub fn new(width: usize, bytes: usize, skip_header: bool) -> Self {
        let per_column = bytes / width.max(1);
        StringColumns {
            builders: (0..width)
                .map(|_| StringBuilder::with_capacity(1024, per_column))
                .collect(),
            lines: Vec::new(),
            fields: 0,
            skip_next: skip_header,
        }
    }

    pub fn finish(mut self) -> Vec<StringArray> {
        self.builders
            .iter_mut()
            .map(StringBuilder::finish)
            .collect()
    }
}

impl FieldSink for StringColumns {
    fn field(&mut self, value: Option<&str>) {
        if !self.skip_next {
            if let Some(builder) = self.builders.get_mut(self.fields) {
                builder.append_option(value);
            }
        }
        self.fields += 1;
    }

    fn end_record(&mut self, line: usize) -> Result<()> {
        let found = std::mem::take(&mut self.fields);
        if std::mem::take(&mut self.skip_next) {
            return Ok(());
        }
        let width = self.builders.len();
        if found != width {
            return Err(
                bad_format(line, format!("expected {width} columns, found {found}")).with_hint(
                    format!(
                        "Row {} of the data has the wrong number of fields.",
                        self.lines.len() + 1
                    ),
                ),
            );
        }
        self.lines.push(line);
        Ok(())
    }
}
