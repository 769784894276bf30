//! Indexes made with CREATE INDEX, stored under `catalog/index/<id>`.
//! An index's name is a key in its table's schema, beside the relations'
//! (Postgres keeps both in pg_class); it goes when its table goes.

use std::collections::BTreeMap;

use super::{decode_catalog_entry, Relations};
use crate::catalog::IndexDefinition;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, WriteBatch};

fn index_key(id: u64) -> Vec<u8> {
    key(&[b"catalog", b"index", &id.to_be_bytes()])
}

/// The stored indexes, by key.
pub(super) fn load(store: &dyn StateStore) -> Result<BTreeMap<String, IndexDefinition>> {
    let mut indexes = BTreeMap::new();
    for (stored_key, value) in store.scan_prefix(&key(&[b"catalog", b"index", b""]))? {
        let definition: IndexDefinition = decode_catalog_entry(&stored_key, &value)?;
        indexes.insert(definition.name.clone(), definition);
    }
    Ok(indexes)
}

impl Relations {
    /// Every index, in creation order.
    pub fn indexes(&self) -> Vec<IndexDefinition> {
        let mut all: Vec<_> = self.indexes_read().values().cloned().collect();
        all.sort_by_key(|index| index.id);
        all
    }

    pub fn index(&self, name: &str) -> Option<IndexDefinition> {
        self.indexes_read().get(name).cloned()
    }

    /// Records a new index on an existing table or materialized view;
    /// `columns` and `method`
    /// are checked by the caller.
    pub fn create_index(
        &self,
        name: &str,
        table: &str,
        columns: Vec<String>,
        method: String,
    ) -> Result<()> {
        self.check_name_free(name)?;
        if self.get(table).is_none() {
            return Err(WeirError::undefined_table(table));
        }
        let definition = IndexDefinition {
            id: self.allocate_ids(1)?,
            name: name.to_string(),
            table: table.to_string(),
            columns,
            method,
        };
        let value = serde_json::to_vec(&definition)
            .map_err(|error| WeirError::internal(format!("cannot encode index: {error}")))?;
        let mut batch = WriteBatch::new();
        batch.put(index_key(definition.id), value);
        self.store.commit(batch)?;
        self.indexes_write().insert(name.to_string(), definition);
        Ok(())
    }

    pub fn drop_index(&self, name: &str) -> Result<()> {
        let Some(definition) = self.index(name) else {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("index \"{name}\" does not exist"),
            ));
        };
        let mut batch = WriteBatch::new();
        batch.delete(index_key(definition.id));
        self.store.commit(batch)?;
        self.indexes_write().remove(name);
        Ok(())
    }

    /// Deletes `table`'s indexes in `batch`; `forget_indexes_of` drops
    /// them from memory once it is committed.
    pub(super) fn delete_indexes_of(&self, table: &str, batch: &mut WriteBatch) {
        for index in self.indexes_read().values() {
            if index.table == table {
                batch.delete(index_key(index.id));
            }
        }
    }

    pub(super) fn forget_indexes_of(&self, table: &str) {
        self.indexes_write().retain(|_, index| index.table != table);
    }

    pub(super) fn is_index(&self, name: &str) -> bool {
        self.indexes_read().contains_key(name)
    }

    fn indexes_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, IndexDefinition>> {
        self.indexes.read().unwrap_or_else(|p| p.into_inner())
    }

    fn indexes_write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, IndexDefinition>> {
        self.indexes.write().unwrap_or_else(|p| p.into_inner())
    }
}
