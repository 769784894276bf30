//! Where the live rows of a table with retractions are: per primary key
//! the log offset of its live row, and per retracted row the offset of
//! the retraction. Scans skip rows retracted before their snapshot's end;
//! UPDATE and DELETE name the offsets of the rows they take back; a
//! commit checks those are still the keys' live rows (a concurrent write
//! may have changed them: 40001, retry).
//!
//! A table without a primary key that takes updates (Postgres's default;
//! SQL edition 3) is *keyless*: a row is known by its offset alone (like
//! Postgres's ctid), so only the retractions are kept, and UPDATE and
//! DELETE find the offsets of the rows they matched by their values
//! (TableLog::replacing).
//!
//! Kept in memory (a key and two offsets per row and per update; for a
//! keyless table two offsets per update), rebuilt from the log when the
//! table opens.

use std::collections::{HashMap, HashSet};

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use super::changes::TableChanges;
use crate::error::{sqlstate, Result, WeirError};

pub struct RowLocations {
    /// Empty for a keyless table.
    key_columns: Vec<usize>,
    converter: RowConverter,
    live: HashMap<Vec<u8>, u64>,
    /// Retracted row offset → offset of its retraction.
    retracted: HashMap<u64, u64>,
}

/// What a commit group changes, applied once it is durable.
#[derive(Default)]
pub struct LocationChanges {
    /// Key → its live row after the group (None: deleted).
    live: HashMap<Vec<u8>, Option<u64>>,
    retracted: Vec<(u64, u64)>,
    /// A keyless table's rows retracted by the group.
    taken: HashSet<u64>,
}

impl RowLocations {
    pub fn new(schema: &SchemaRef, key_columns: Vec<usize>) -> Result<Self> {
        let fields = key_columns
            .iter()
            .map(|&column| SortField::new(schema.field(column).data_type().clone()))
            .collect();
        Ok(RowLocations {
            key_columns,
            converter: RowConverter::new(fields)?,
            live: HashMap::new(),
            retracted: HashMap::new(),
        })
    }

    /// A keyless table's: rows are known by their offsets.
    pub fn keyless() -> Result<Self> {
        Ok(RowLocations {
            key_columns: Vec::new(),
            converter: RowConverter::new(Vec::new())?,
            live: HashMap::new(),
            retracted: HashMap::new(),
        })
    }

    pub fn is_keyless(&self) -> bool {
        self.key_columns.is_empty()
    }

    fn keys(&self, rows: &RecordBatch) -> Result<Rows> {
        let columns: Vec<_> = self
            .key_columns
            .iter()
            .map(|&column| rows.column(column).clone())
            .collect();
        Ok(self.converter.convert_columns(&columns)?)
    }

    /// Per row of `rows`, the offset of the live row with its key (None
    /// for every row of a keyless table).
    pub fn live_offsets(&self, rows: &RecordBatch) -> Result<Vec<Option<u64>>> {
        if self.is_keyless() {
            return Ok(vec![None; rows.num_rows()]);
        }
        let keys = self.keys(rows)?;
        Ok(keys
            .iter()
            .map(|key| self.live.get(key.as_ref()).copied())
            .collect())
    }

    /// Checks `changes`, logged from offset `at`, against the rows live
    /// before them (here and in `group`), and records them in `group`.
    pub fn place(
        &self,
        changes: &TableChanges,
        at: u64,
        group: &mut LocationChanges,
    ) -> Result<()> {
        if self.is_keyless() {
            return self.place_keyless(changes, at, group);
        }
        let keys = self.keys(&changes.rows)?;
        for (row, key) in keys.iter().enumerate() {
            let offset = at + row as u64;
            let current = match group.live.get(key.as_ref()) {
                Some(placed) => *placed,
                None => self.live.get(key.as_ref()).copied(),
            };
            match changes.retracted(row) {
                Some(retracted) if current == Some(retracted) => {
                    group.live.insert(key.as_ref().to_vec(), None);
                    group.retracted.push((retracted, offset));
                }
                Some(_) => return Err(concurrent_update()),
                None if current.is_none() => {
                    group.live.insert(key.as_ref().to_vec(), Some(offset));
                }
                None => {
                    return Err(WeirError::internal(
                        "a row was logged over a live row with its key",
                    ))
                }
            }
        }
        Ok(())
    }

    /// A keyless table's retractions must name rows logged before and
    /// not retracted yet.
    fn place_keyless(
        &self,
        changes: &TableChanges,
        at: u64,
        group: &mut LocationChanges,
    ) -> Result<()> {
        for row in 0..changes.num_rows() {
            let Some(retracted) = changes.retracted(row) else {
                continue;
            };
            let live = retracted < at
                && !self.retracted.contains_key(&retracted)
                && group.taken.insert(retracted);
            if !live {
                return Err(concurrent_update());
            }
            group.retracted.push((retracted, at + row as u64));
        }
        Ok(())
    }

    /// A durable group's changes.
    pub fn apply(&mut self, group: LocationChanges) {
        for (key, offset) in group.live {
            match offset {
                Some(offset) => self.live.insert(key, offset),
                None => self.live.remove(&key),
            };
        }
        self.retracted.extend(group.retracted);
    }

    /// Which rows of `changes` (from offset `first_row`) a scan of the
    /// rows before `to` shows: inserts not retracted before `to`.
    pub fn visible(&self, changes: &TableChanges, first_row: u64, to: u64) -> BooleanArray {
        (0..changes.num_rows())
            .map(|row| {
                let shown = changes.retracted(row).is_none()
                    && self
                        .retracted
                        .get(&(first_row + row as u64))
                        .is_none_or(|&retraction| retraction >= to);
                Some(shown)
            })
            .collect()
    }
}

pub fn concurrent_update() -> WeirError {
    WeirError::new(
        sqlstate::SERIALIZATION_FAILURE,
        "could not serialize access due to concurrent update",
    )
    .with_hint("Another statement changed these rows first; retry the transaction.")
}

/// Rows of `changes` that are retractions, and those that are inserts.
pub fn split(changes: &TableChanges) -> Result<(RecordBatch, RecordBatch)> {
    let retractions: BooleanArray = (0..changes.num_rows())
        .map(|row| Some(changes.retracted(row).is_some()))
        .collect();
    let inserts = datafusion::arrow::compute::not(&retractions)?;
    let pick = |mask: &BooleanArray| -> Result<RecordBatch> {
        if mask.true_count() == mask.len() {
            return Ok(changes.rows.clone());
        }
        Ok(datafusion::arrow::compute::filter_record_batch(
            &changes.rows,
            mask,
        )?)
    };
    Ok((pick(&retractions)?, pick(&inserts)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use std::sync::Arc;

    fn rows(ids: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(ids.to_vec())) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap()
    }

    fn commit(locations: &mut RowLocations, changes: TableChanges, at: u64) -> Result<()> {
        let mut group = LocationChanges::default();
        locations.place(&changes, at, &mut group)?;
        locations.apply(group);
        Ok(())
    }

    #[test]
    fn updates_move_keys_and_hide_old_rows_from_later_snapshots() {
        let inserted = rows(&[1, 2]);
        let mut locations = RowLocations::new(&inserted.schema(), vec![0]).unwrap();
        commit(&mut locations, TableChanges::inserts(inserted.clone()), 0).unwrap();
        assert_eq!(locations.live_offsets(&rows(&[2])).unwrap(), vec![Some(1)]);
        // UPDATE id 2: retract offset 1 (at 2), insert the new row at 3.
        let update = TableChanges {
            rows: rows(&[2, 2]),
            retracts: Some(UInt64Array::from(vec![Some(1), None])),
        };
        commit(&mut locations, update.clone(), 2).unwrap();
        assert_eq!(
            locations.live_offsets(&rows(&[2, 5])).unwrap(),
            vec![Some(3), None]
        );
        let first = TableChanges::inserts(inserted);
        let shown = |to| {
            locations
                .visible(&first, 0, to)
                .iter()
                .flatten()
                .collect::<Vec<_>>()
        };
        assert_eq!(shown(2), vec![true, true], "a snapshot before the update");
        assert_eq!(shown(4), vec![true, false]);
        assert_eq!(
            locations
                .visible(&update, 2, 4)
                .iter()
                .flatten()
                .collect::<Vec<_>>(),
            vec![false, true]
        );
        // The same retraction again (a concurrent writer read offset 1 too).
        let error = commit(&mut locations, update, 4).unwrap_err();
        assert_eq!(error.code, sqlstate::SERIALIZATION_FAILURE);
        assert_eq!(locations.live.len(), 2);
    }

    #[test]
    fn a_keyless_table_retracts_each_row_once() {
        let mut locations = RowLocations::keyless().unwrap();
        // Two equal rows at 0 and 1.
        commit(&mut locations, TableChanges::inserts(rows(&[7, 7])), 0).unwrap();
        let delete_first = TableChanges {
            rows: rows(&[7]),
            retracts: Some(UInt64Array::from(vec![Some(0)])),
        };
        commit(&mut locations, delete_first.clone(), 2).unwrap();
        let first = TableChanges::inserts(rows(&[7, 7]));
        let shown: Vec<_> = locations.visible(&first, 0, 3).iter().flatten().collect();
        assert_eq!(shown, vec![false, true]);
        // Offset 0 again, a row not logged yet, and one row twice in a group.
        for (retracts, at) in [
            (vec![Some(0)], 3),
            (vec![Some(9)], 3),
            (vec![Some(1), Some(1)], 3),
        ] {
            let changes = TableChanges {
                rows: rows(&vec![7; retracts.len()]),
                retracts: Some(UInt64Array::from(retracts)),
            };
            let error = commit(&mut locations, changes, at).unwrap_err();
            assert_eq!(error.code, sqlstate::SERIALIZATION_FAILURE);
        }
        assert_eq!(locations.live_offsets(&rows(&[7])).unwrap(), vec![None]);
    }
}
