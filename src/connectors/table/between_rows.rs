//! Entries a table logs between its rows, keyed by the row count they came
//! at (`<kind>/<table id>/<row count>`, both numbers big-endian): clock
//! watermark raises (`ticks`) and `EMIT EVERY` firings (`firings`). Replay
//! meets them where they happened; those a checkpoint covers may go.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::Result;
use crate::state::{key, StateStore, WriteBatch};

/// One kind of entry.
pub struct BetweenRows(&'static [u8]);

pub const TICKS: BetweenRows = BetweenRows(b"ticks");
pub const FIRINGS: BetweenRows = BetweenRows(b"firings");

impl BetweenRows {
    /// The prefix of every entry of table `table_id`.
    pub fn prefix(&self, table_id: u64) -> Vec<u8> {
        let mut prefix = key(&[self.0, &table_id.to_be_bytes()]);
        prefix.push(b'/');
        prefix
    }

    pub fn key(&self, table_id: u64, row: u64) -> Vec<u8> {
        let mut entry = self.prefix(table_id);
        entry.extend_from_slice(&row.to_be_bytes());
        entry
    }

    /// Every stored entry of table `table_id` as (row count, value).
    pub fn load(&self, store: &dyn StateStore, table_id: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let prefix = self.prefix(table_id);
        Ok(store
            .scan_prefix(&prefix)?
            .into_iter()
            .map(|(stored_key, value)| (row_of(&stored_key[prefix.len()..]), value))
            .collect())
    }

    /// Deletes the entries at `rows` from the store, then from `entries`
    /// (new entries come at the row count, never at these rows).
    pub fn forget<V>(
        &self,
        store: &dyn StateStore,
        table_id: u64,
        entries: &Mutex<BTreeMap<u64, V>>,
        rows: Vec<u64>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut write = WriteBatch::new();
        for &row in &rows {
            write.delete(self.key(table_id, row));
        }
        store.commit(write)?;
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            entries.remove(&row);
        }
        Ok(())
    }
}

/// A row count from the tail of a key (short tails are zero-padded).
fn row_of(tail: &[u8]) -> u64 {
    let tail = &tail[tail.len().saturating_sub(8)..];
    let mut bytes = [0u8; 8];
    bytes[8 - tail.len()..].copy_from_slice(tail);
    u64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_layout() {
        let key = FIRINGS.key(7, 300);
        assert!(key.starts_with(&FIRINGS.prefix(7)));
        assert_eq!(row_of(&key[FIRINGS.prefix(7).len()..]), 300);
        assert_ne!(TICKS.prefix(7), FIRINGS.prefix(7));
        assert_eq!(row_of(&[1, 0]), 256);
    }
}
