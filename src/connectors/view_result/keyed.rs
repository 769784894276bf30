//! The keyed layout of a view's rows: one stored entry per key (the view's
//! GROUP BY columns), holding the key's row per epoch. A group's change is
//! a retraction of its old row and an insertion of its new one; the
//! multiset layout writes both rows (a delete and a put, each read first),
//! this layout rewrites the key's one entry — half the store's work for
//! the updates an emit-on-update aggregate makes (docs/decisions.md).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};

use super::versions::RowVersions;
use super::{encode_head, view_head_key, view_rows_prefix, ViewHead, ViewResult};
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::message::Chunk;

/// The row-format converter of a keyed view's key columns.
pub(super) fn key_converter(schema: &SchemaRef, columns: &[usize]) -> Result<RowConverter> {
    let fields = columns
        .iter()
        .map(|&column| {
            let field = schema.fields().get(column).ok_or_else(|| {
                WeirError::internal("a keyed view's key column is past its columns")
            })?;
            Ok(SortField::new(field.data_type().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RowConverter::new(fields)?)
}

/// A key's row after `changes` (row, diff) applied to `current`: a key
/// holds at most one row, once. Anything else means the view's rows are
/// not identified by its key after all — an error, never a silent merge.
fn next_row(current: Option<Vec<u8>>, changes: &[(&[u8], i64)]) -> Result<Option<Vec<u8>>> {
    let mut rows: Vec<(Vec<u8>, i64)> = current.into_iter().map(|row| (row, 1)).collect();
    for &(row, diff) in changes {
        match rows.iter_mut().find(|(held, _)| held.as_slice() == row) {
            Some((_, count)) => *count += diff,
            None => rows.push((row.to_vec(), diff)),
        }
    }
    rows.retain(|(_, count)| *count != 0);
    match rows.len() {
        0 => Ok(None),
        1 if rows[0].1 == 1 => Ok(rows.pop().map(|(row, _)| row)),
        _ => Err(WeirError::internal(
            "a keyed materialized view would hold a key twice, or retract a row it does not hold",
        )),
    }
}

impl ViewResult {
    /// Stages a chunk of changes as key versions at the next epoch.
    pub(super) fn apply_keyed(&self, chunk: &Chunk, key_columns: &[usize]) -> Result<WriteBatch> {
        let converter = self
            .key_converter
            .as_ref()
            .ok_or_else(|| WeirError::internal("a keyed view has no key converter"))?;
        let columns: Vec<ArrayRef> = key_columns
            .iter()
            .map(|&column| chunk.rows.column(column).clone())
            .collect();
        let keys = converter.convert_columns(&columns)?;
        let rows = self.converter.convert_columns(chunk.rows.columns())?;
        let mut changes: BTreeMap<&[u8], Vec<(&[u8], i64)>> = BTreeMap::new();
        let mut total = 0;
        for row in 0..chunk.num_rows() {
            let change = (rows.row(row).data(), chunk.diff(row));
            changes
                .entry(keys.row(row).data())
                .or_default()
                .push(change);
            total += chunk.diff(row);
        }
        let prefix = view_rows_prefix(self.id);
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        staged.total += total;
        staged.changed = true;
        let (committed, oldest, aborted, epoch) = self.readers.for_write();
        staged.epoch = epoch;
        let mut writes = WriteBatch::new();
        for (key, changes) in changes {
            let mut stored_key = prefix.clone();
            stored_key.extend_from_slice(key);
            let versions = match self.store.get(&stored_key)? {
                Some(value) => RowVersions::decode(&value)?,
                None => RowVersions::default(),
            };
            let current = match staged.in_store {
                true => versions.exactly_at(epoch).cloned(),
                false => staged.keyed.get(key).cloned(),
            };
            let current = current
                .unwrap_or_else(|| versions.row_at(committed, &aborted).map(|row| row.to_vec()));
            let next = next_row(current, &changes)?;
            if !staged.in_store {
                staged.keyed.insert(key.to_vec(), next.clone());
            }
            match versions.with(epoch, next, oldest, &aborted) {
                Some(versions) => writes.put(stored_key, versions.encode()),
                None => writes.delete(stored_key),
            }
        }
        if staged.in_store {
            self.store.stage(std::mem::take(&mut writes))?;
        }
        let head = ViewHead {
            layout: self.layout.clone(),
            epoch,
            rows: self.total_rows.load(Ordering::Acquire) + staged.total,
            aborted: aborted.to_vec(),
            ..ViewHead::default()
        };
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_one_row_and_anything_else_is_an_error() {
        let old = b"old".as_slice();
        let new = b"new".as_slice();
        // An update in either order, an insertion, a deletion.
        let updated = next_row(Some(old.to_vec()), &[(new, 1), (old, -1)]).unwrap();
        assert_eq!(updated.as_deref(), Some(new));
        assert_eq!(next_row(None, &[(new, 1)]).unwrap().as_deref(), Some(new));
        assert_eq!(next_row(Some(old.to_vec()), &[(old, -1)]).unwrap(), None);
        // A second row for the key, a row twice, a retraction of a row the
        // key does not hold.
        assert!(next_row(Some(old.to_vec()), &[(new, 1)]).is_err());
        assert!(next_row(None, &[(new, 1), (new, 1)]).is_err());
        assert!(next_row(Some(old.to_vec()), &[(new, -1)]).is_err());
    }
}
