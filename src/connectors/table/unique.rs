//! Enforcement of PRIMARY KEY and UNIQUE constraints on a table's writes:
//! an in-memory set of the keys present, in Arrow's row format.

use std::collections::HashSet;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::{Constraint, Constraints};

use super::changes::TableChanges;
use super::locations::split;
use crate::error::{sqlstate, Result, WeirError};

/// A PRIMARY KEY or UNIQUE constraint, as catalogs list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConstraint {
    pub name: String,
    /// Column positions, from 0.
    pub columns: Vec<usize>,
    pub primary: bool,
}

pub struct UniqueIndex {
    name: String,
    columns: Vec<usize>,
    primary: bool,
    converter: RowConverter,
    keys: HashSet<OwnedRow>,
}

impl UniqueIndex {
    /// One index per PRIMARY KEY / UNIQUE constraint.
    pub fn for_constraints(
        table: &str,
        schema: &SchemaRef,
        constraints: &Constraints,
    ) -> Result<Vec<Self>> {
        // Named after the table without its schema (`s.t` has `t_pkey`,
        // as in Postgres). A table in public whose own name has a dot
        // loses the part before it: such names are rare enough.
        let table = table.split_once('.').map_or(table, |(_, name)| name);
        constraints
            .iter()
            .map(|constraint| {
                let (columns, primary, suffix) = match constraint {
                    Constraint::PrimaryKey(columns) => (columns.clone(), true, "pkey"),
                    Constraint::Unique(columns) => (columns.clone(), false, "key"),
                };
                let names: Vec<&str> = columns
                    .iter()
                    .map(|&c| schema.field(c).name().as_str())
                    .collect();
                let fields = columns
                    .iter()
                    .map(|&c| SortField::new(schema.field(c).data_type().clone()))
                    .collect();
                let converter = RowConverter::new(fields).map_err(|error| {
                    WeirError::unsupported(format!("a unique key on these column types: {error}"))
                })?;
                Ok(UniqueIndex {
                    name: if primary {
                        format!("{table}_{suffix}")
                    } else {
                        format!("{table}_{}_{suffix}", names.join("_"))
                    },
                    columns,
                    primary,
                    converter,
                    keys: HashSet::new(),
                })
            })
            .collect()
    }

    /// The keys `batch` would add; fails if one is already present (or
    /// repeated within the batch) or, for a primary key, NULL.
    pub fn check(&self, batch: &RecordBatch) -> Result<Vec<OwnedRow>> {
        self.check_replacing(batch, &HashSet::new())
    }

    /// Like `check`, for a write that also takes away the keys `removed`
    /// (an UPDATE keeping or swapping keys): those may come back.
    pub fn check_replacing(
        &self,
        batch: &RecordBatch,
        removed: &HashSet<OwnedRow>,
    ) -> Result<Vec<OwnedRow>> {
        let (rows, nulls) = self.converted(batch)?;
        let mut added = HashSet::new();
        let mut fresh = Vec::new();
        for (index, row) in rows.iter().enumerate() {
            if nulls(index) {
                if self.primary {
                    return Err(WeirError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!("null value in primary key of \"{}\"", self.name),
                    )
                    .with_hint("Every primary key column needs a value."));
                }
                // Like Postgres, NULLs never collide in a UNIQUE key.
                continue;
            }
            let owned = row.owned();
            let taken = self.keys.contains(&owned) && !removed.contains(&owned);
            if taken || !added.insert(owned.clone()) {
                return Err(self.duplicate());
            }
            fresh.push(owned);
        }
        Ok(fresh)
    }

    /// The keys of `batch`'s rows (none for a NULL key).
    pub fn keys_of(&self, batch: &RecordBatch) -> Result<Vec<OwnedRow>> {
        let (rows, nulls) = self.converted(batch)?;
        Ok(rows
            .iter()
            .enumerate()
            .filter(|(index, _)| !nulls(*index))
            .map(|(_, row)| row.owned())
            .collect())
    }

    /// The key rows of `batch` and whether row i's key has a NULL.
    fn converted(
        &self,
        batch: &RecordBatch,
    ) -> Result<(datafusion::arrow::row::Rows, impl Fn(usize) -> bool)> {
        let key_columns: Vec<_> = self
            .columns
            .iter()
            .map(|&c| batch.column(c).clone())
            .collect();
        let rows = self
            .converter
            .convert_columns(&key_columns)
            .map_err(|error| WeirError::internal(error.to_string()))?;
        let nulls = move |index: usize| key_columns.iter().any(|column| column.is_null(index));
        Ok((rows, nulls))
    }

    /// Calls `each` with every row's key bytes (None for a NULL key).
    pub fn each_key<T>(
        &self,
        batch: &RecordBatch,
        mut each: impl FnMut(Option<datafusion::arrow::row::Row<'_>>) -> T,
    ) -> Result<Vec<T>> {
        let (rows, nulls) = self.converted(batch)?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(index, row)| each((!nulls(index)).then_some(row)))
            .collect())
    }

    /// Whether a row with this key is present.
    pub fn contains(&self, key: datafusion::arrow::row::Row<'_>) -> bool {
        self.keys.contains(&key.owned())
    }

    /// What the catalog shows of it: its name, columns (positions) and
    /// whether it is the primary key.
    pub fn describe(&self) -> KeyConstraint {
        KeyConstraint {
            name: self.name.clone(),
            columns: self.columns.clone(),
            primary: self.primary,
        }
    }

    /// The error of a write repeating a key.
    pub fn duplicate(&self) -> WeirError {
        WeirError::new(
            sqlstate::UNIQUE_VIOLATION,
            format!(
                "duplicate key value violates unique constraint \"{}\"",
                self.name
            ),
        )
        .with_hint("A row with the same key already exists; nothing was written.")
    }

    pub fn insert(&mut self, keys: Vec<OwnedRow>) {
        self.keys.extend(keys);
    }

    /// Takes back keys of a write that did not commit.
    pub fn remove(&mut self, keys: &[OwnedRow]) {
        for key in keys {
            self.keys.remove(key);
        }
    }
}

/// What a write does to each unique index: the keys it adds and those
/// its retractions take away.
#[derive(Debug, Default, Clone)]
pub struct KeyChanges {
    pub added: Vec<Vec<OwnedRow>>,
    pub removed: Vec<Vec<OwnedRow>>,
}

impl KeyChanges {
    /// Checks `changes` against `indexes` (nothing reserved yet).
    pub fn check(indexes: &[UniqueIndex], changes: &TableChanges) -> Result<Self> {
        if changes.retracts.is_none() {
            let added = indexes
                .iter()
                .map(|index| index.check(&changes.rows))
                .collect::<Result<_>>()?;
            return Ok(KeyChanges {
                removed: vec![Vec::new(); indexes.len()],
                added,
            });
        }
        let (retracted, inserted) = split(changes)?;
        let mut keys = KeyChanges::default();
        for index in indexes {
            let removed = index.keys_of(&retracted)?;
            let removed_set: HashSet<OwnedRow> = removed.iter().cloned().collect();
            keys.added
                .push(index.check_replacing(&inserted, &removed_set)?);
            keys.removed.push(removed);
        }
        Ok(keys)
    }

    /// Makes the changes in the indexes.
    pub fn reserve(&self, indexes: &mut [UniqueIndex]) {
        for ((index, added), removed) in indexes.iter_mut().zip(&self.added).zip(&self.removed) {
            index.remove(removed);
            index.insert(added.clone());
        }
    }

    /// Takes the changes back (a write that did not commit).
    pub fn release(&self, indexes: &mut [UniqueIndex]) {
        for ((index, added), removed) in indexes.iter_mut().zip(&self.added).zip(&self.removed) {
            index.remove(added);
            index.insert(removed.clone());
        }
    }

    /// Adds `other`'s changes after these.
    pub fn extend(&mut self, other: KeyChanges) {
        if self.added.is_empty() {
            *self = other;
            return;
        }
        for (mine, theirs) in self.added.iter_mut().zip(other.added) {
            mine.extend(theirs);
        }
        for (mine, theirs) in self.removed.iter_mut().zip(other.removed) {
            mine.extend(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("email", DataType::Utf8, true),
        ]))
    }

    fn batch(ids: Vec<Option<i64>>, emails: Vec<Option<&str>>) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(emails)),
            ],
        )
        .unwrap()
    }

    fn indexes() -> Vec<UniqueIndex> {
        let constraints = Constraints::new_unverified(vec![
            Constraint::PrimaryKey(vec![0]),
            Constraint::Unique(vec![1]),
        ]);
        UniqueIndex::for_constraints("users", &schema(), &constraints).unwrap()
    }

    #[test]
    fn duplicates_across_and_within_writes_are_rejected() {
        let mut indexes = indexes();
        let keys = indexes[0]
            .check(&batch(vec![Some(1), Some(2)], vec![None, None]))
            .unwrap();
        indexes[0].insert(keys);
        let error = indexes[0]
            .check(&batch(vec![Some(2)], vec![None]))
            .unwrap_err();
        assert_eq!(error.code, sqlstate::UNIQUE_VIOLATION);
        assert!(error.message.contains("users_pkey"));
        let error = indexes[0]
            .check(&batch(vec![Some(3), Some(3)], vec![None, None]))
            .unwrap_err();
        assert_eq!(error.code, sqlstate::UNIQUE_VIOLATION);
    }

    #[test]
    fn nulls_fail_primary_keys_but_not_unique_keys() {
        let indexes = indexes();
        let error = indexes[0]
            .check(&batch(vec![None], vec![None]))
            .unwrap_err();
        assert_eq!(error.code, sqlstate::NOT_NULL_VIOLATION);
        let keys = indexes[1]
            .check(&batch(vec![Some(1), Some(2)], vec![None, None]))
            .unwrap();
        assert!(keys.is_empty());
    }
}
