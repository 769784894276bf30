//! Enforcement of PRIMARY KEY and UNIQUE constraints on a table's writes:
//! an in-memory set of the keys present, in Arrow's row format.

use std::collections::HashSet;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::{Constraint, Constraints};

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
        let key_columns: Vec<_> = self
            .columns
            .iter()
            .map(|&c| batch.column(c).clone())
            .collect();
        let rows = self
            .converter
            .convert_columns(&key_columns)
            .map_err(|error| WeirError::internal(error.to_string()))?;
        let mut added = HashSet::new();
        let mut fresh = Vec::new();
        for (index, row) in rows.iter().enumerate() {
            if key_columns.iter().any(|column| column.is_null(index)) {
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
            if self.keys.contains(&owned) || !added.insert(owned.clone()) {
                return Err(self.duplicate());
            }
            fresh.push(owned);
        }
        Ok(fresh)
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
