//! Reading a table's rows by key and by log offset, for UPDATE, DELETE
//! and INSERT … ON CONFLICT.

use std::collections::HashSet;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::record_batch::RecordBatch;

use super::entries::{decode_entry, entries_prefix, entry_key};
use super::{lock, TableChanges, TableLog};
use crate::error::{sqlstate, Result, WeirError};

impl TableLog {
    /// The committed rows at log offsets `offsets`, in that order.
    pub fn rows_at(&self, offsets: &[u64]) -> Result<RecordBatch> {
        let mut order: Vec<usize> = (0..offsets.len()).collect();
        order.sort_by_key(|&position| offsets[position]);
        let prefix = entries_prefix(self.id);
        let mut parts = Vec::new();
        let mut placed = vec![0u32; offsets.len()];
        let mut taken = 0u32;
        let mut next = 0;
        while next < order.len() {
            let offset = offsets[order[next]];
            let Some((key, value)) = self
                .store
                .last_at_or_before(&prefix, &entry_key(self.id, offset))?
            else {
                return Err(missing_row(offset));
            };
            let entry = decode_entry(&key, &value, &self.schema, None)?;
            let end = entry.first_row + entry.rows.num_rows() as u64;
            let mut indices = Vec::new();
            while next < order.len() && offsets[order[next]] < end {
                let offset = offsets[order[next]];
                if offset < entry.first_row {
                    return Err(missing_row(offset));
                }
                indices.push((offset - entry.first_row) as u32);
                placed[order[next]] = taken;
                taken += 1;
                next += 1;
            }
            if indices.is_empty() {
                return Err(missing_row(offset));
            }
            parts.push(take_record_batch(&entry.rows, &UInt32Array::from(indices))?);
        }
        let all = concat_batches(&self.schema, &parts)?;
        Ok(take_record_batch(&all, &UInt32Array::from(placed))?)
    }

    /// Per row of `rows`: whether a committed row has its primary key,
    /// and whether an earlier row of `rows` has it. None without a key.
    pub fn key_conflicts(&self, rows: &RecordBatch) -> Result<Option<Vec<(bool, bool)>>> {
        let unique = lock(&self.unique);
        let Some(index) = unique.iter().find(|index| index.describe().primary) else {
            return Ok(None);
        };
        let mut seen = HashSet::new();
        index
            .each_key(rows, |key| match key {
                Some(key) => (index.contains(key), !seen.insert(key.as_ref().to_vec())),
                None => (false, false),
            })
            .map(Some)
    }

    /// Retractions of `old` (rows read from the table now) followed by
    /// the inserts `new`: an UPDATE's or DELETE's changes. Fails if a row
    /// would be changed twice (an UPDATE … FROM matching it twice).
    pub fn replacing(&self, old: &RecordBatch, new: Option<&RecordBatch>) -> Result<TableChanges> {
        let keyless = self
            .locations
            .as_ref()
            .is_some_and(|locations| lock(locations).is_keyless());
        let offsets = match keyless {
            true => self.offsets_by_value(old)?,
            false => self.live_offsets(old)?,
        };
        let mut seen = HashSet::new();
        let mut retracts = Vec::with_capacity(old.num_rows() + new.map_or(0, |n| n.num_rows()));
        for offset in offsets {
            // A keyless table has fewer copies of a row than the statement
            // matched only when it matched one row twice.
            let offset = match offset {
                Some(offset) => offset,
                None if keyless => return Err(changed_twice()),
                None => {
                    return Err(WeirError::internal(
                        "a row read for UPDATE or DELETE is not in the table",
                    ))
                }
            };
            if !seen.insert(offset) {
                return Err(changed_twice());
            }
            retracts.push(Some(offset));
        }
        let mut parts = vec![old.clone()];
        if let Some(new) = new {
            retracts.extend(std::iter::repeat_n(None, new.num_rows()));
            parts.push(new.clone());
        }
        let rows = concat_batches(&self.schema, &parts)?;
        Ok(TableChanges {
            rows,
            retracts: Some(retracts.into()),
        })
    }
}

fn changed_twice() -> WeirError {
    WeirError::new(
        sqlstate::CARDINALITY_VIOLATION,
        "a row would be changed a second time by the same statement",
    )
    .with_hint("Make the FROM clause match each row of the table at most once.")
}

fn missing_row(offset: u64) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!("the table row at log offset {offset} is missing"),
    )
}
