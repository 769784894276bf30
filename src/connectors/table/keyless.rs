//! UPDATE and DELETE on a keyless table: the statement hands back the old
//! rows it matched, by value; each is given the offset of a live row equal
//! to it, every copy a distinct offset. A predicate cannot tell equal rows
//! apart, so when it matched one copy it matched all of them, and the
//! statement's rows hold as many copies as the table: the matching is
//! exact. One pass over the table's live rows, as the statement's own
//! scan made (the table's writes are held off meanwhile).

use std::collections::HashMap;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use super::entries::EntryReader;
use super::{lock, TableLog};
use crate::error::Result;

impl TableLog {
    /// Per row of `old`, the offset of a distinct live row equal to it
    /// (None when the table has fewer copies than `old`).
    pub(super) fn offsets_by_value(&self, old: &RecordBatch) -> Result<Vec<Option<u64>>> {
        let fields = self
            .schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let mut wanted: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
        for (position, row) in converter.convert_columns(old.columns())?.iter().enumerate() {
            wanted
                .entry(row.as_ref().to_vec())
                .or_default()
                .push(position);
        }
        let mut offsets = vec![None; old.num_rows()];
        let mut left = old.num_rows();
        let Some(locations) = self.locations.clone() else {
            return Ok(offsets);
        };
        let to = self.row_count();
        for entry in EntryReader::new(&*self.store, self.id, self.schema.clone(), None, 0, to)? {
            if left == 0 {
                break;
            }
            let entry = entry?;
            let changes = entry.changes_from(entry.first_row);
            let shown = lock(&locations).visible(&changes, entry.first_row, to);
            let rows = converter.convert_columns(changes.rows.columns())?;
            for (index, row) in rows.iter().enumerate() {
                if !shown.value(index) {
                    continue;
                }
                let waiting = wanted.get_mut(row.as_ref()).and_then(Vec::pop);
                if let Some(position) = waiting {
                    offsets[position] = Some(entry.first_row + index as u64);
                    left -= 1;
                }
            }
        }
        Ok(offsets)
    }
}
