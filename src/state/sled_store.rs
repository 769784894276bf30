//! `StateStore` on sled 0.34: one tree, atomic batches, fsync on commit.

use std::path::Path;

use super::envelope;
use super::{Entries, StateStore, WriteBatch, WriteOperation};
use crate::error::{Result, WeirError};

pub struct SledStore {
    database: sled::Db,
}

/// sled's page cache when nothing else is asked for (sled's own default is
/// 1 GiB, which would dominate a server whose live state is small).
pub const DEFAULT_CACHE_BYTES: u64 = 128 * 1024 * 1024;

impl SledStore {
    pub fn open(directory: &Path) -> Result<Self> {
        SledStore::open_with_cache(directory, DEFAULT_CACHE_BYTES)
    }

    /// Opens the store with a page cache of about `cache_bytes`.
    pub fn open_with_cache(directory: &Path, cache_bytes: u64) -> Result<Self> {
        let database = sled::Config::new()
            .path(directory)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|error| {
                WeirError::io(format!(
                    "cannot open the data directory {}: {error}",
                    directory.display()
                ))
            })?;
        Ok(SledStore { database })
    }
}

fn io_error(error: sled::Error) -> WeirError {
    WeirError::io(format!("storage error: {error}"))
}

/// Operations per sled batch when staging (see `stage`).
const STAGE_PIECE_OPERATIONS: usize = 64;

impl SledStore {
    fn apply_atomically(&self, batch: WriteBatch) -> Result<()> {
        let mut sled_batch = sled::Batch::default();
        for operation in batch.operations {
            match operation {
                WriteOperation::Put(key, value) => sled_batch.insert(key, envelope::seal(&value)),
                WriteOperation::Delete(key) => sled_batch.remove(key),
                WriteOperation::DeletePrefix(prefix) => {
                    for key in self.database.scan_prefix(&prefix).keys() {
                        sled_batch.remove(key.map_err(io_error)?);
                    }
                }
            }
        }
        self.database.apply_batch(sled_batch).map_err(io_error)
    }
}

impl StateStore for SledStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.database.get(key).map_err(io_error)? {
            Some(sealed) => Ok(Some(envelope::open(key, &sealed)?)),
            None => Ok(None),
        }
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.database
            .scan_prefix(prefix)
            .map(|entry| {
                let (key, sealed) = entry.map_err(io_error)?;
                let payload = envelope::open(&key, &sealed)?;
                Ok((key.to_vec(), payload))
            })
            .collect()
    }

    fn commit(&self, batch: WriteBatch) -> Result<()> {
        self.apply_atomically(batch)?;
        // The acknowledgement promise: nothing is reported done before fsync.
        self.database.flush().map_err(io_error)?;
        Ok(())
    }

    fn stage(&self, batch: WriteBatch) -> Result<()> {
        // sled frees the node versions a batch replaces only when the batch
        // ends (one epoch guard spans it), so a big batch holds a copy of
        // every node it touched: apply it in small pieces instead.
        let mut piece = WriteBatch::new();
        for operation in batch.operations {
            piece.operations.push(operation);
            if piece.operations.len() >= STAGE_PIECE_OPERATIONS {
                self.apply_atomically(std::mem::take(&mut piece))?;
            }
        }
        self.apply_atomically(piece)
    }

    fn scan_range(&self, start: &[u8], end: &[u8]) -> Entries {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        Box::new(
            self.database
                .range(start.to_vec()..end.to_vec())
                .map(|entry| {
                    let (key, sealed) = entry.map_err(io_error)?;
                    let payload = envelope::open(&key, &sealed)?;
                    Ok((key.to_vec(), payload))
                }),
        )
    }

    fn last_at_or_before(&self, start: &[u8], at: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if start > at {
            return Ok(None);
        }
        match self
            .database
            .range(start.to_vec()..=at.to_vec())
            .next_back()
        {
            Some(entry) => {
                let (key, sealed) = entry.map_err(io_error)?;
                let payload = envelope::open(&key, &sealed)?;
                Ok(Some((key.to_vec(), payload)))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_get_scan_and_delete_prefix() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"a/1".to_vec(), b"one".to_vec());
        batch.put(b"a/2".to_vec(), b"two".to_vec());
        batch.put(b"b/1".to_vec(), b"other".to_vec());
        store.commit(batch).unwrap();
        assert_eq!(store.get(b"a/1").unwrap().unwrap(), b"one");
        assert_eq!(store.scan_prefix(b"a/").unwrap().len(), 2);

        let mut batch = WriteBatch::new();
        batch.delete_prefix(b"a/".to_vec());
        store.commit(batch).unwrap();
        assert!(store.scan_prefix(b"a/").unwrap().is_empty());
        assert_eq!(store.get(b"b/1").unwrap().unwrap(), b"other");
    }

    #[test]
    fn ranges_and_the_last_entry_before_a_key() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        for key in [b"r/1", b"r/3", b"r/5", b"s/0"] {
            batch.put(key.to_vec(), key.to_vec());
        }
        store.stage(batch).unwrap();
        let keys = |start: &[u8], end: &[u8]| -> Vec<Vec<u8>> {
            store
                .scan_range(start, end)
                .map(|entry| entry.unwrap().0)
                .collect()
        };
        assert_eq!(keys(b"r/1", b"r/5"), vec![b"r/1".to_vec(), b"r/3".to_vec()]);
        assert!(keys(b"r/5", b"r/1").is_empty());
        let last = |at: &[u8]| store.last_at_or_before(b"r/", at).unwrap().map(|e| e.0);
        assert_eq!(last(b"r/4"), Some(b"r/3".to_vec()));
        assert_eq!(last(b"r/5"), Some(b"r/5".to_vec()));
        assert_eq!(last(b"r/0"), None);
    }

    #[test]
    fn values_survive_reopen() {
        let directory = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(directory.path()).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(b"k".to_vec(), b"v".to_vec());
            store.commit(batch).unwrap();
        }
        let store = SledStore::open(directory.path()).unwrap();
        assert_eq!(store.get(b"k").unwrap().unwrap(), b"v");
    }

    #[test]
    fn corrupted_value_is_a_clear_error() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        // Write a damaged envelope underneath the trait, as disk damage would.
        let mut sealed = envelope::seal(b"payload");
        let last = sealed.len() - 1;
        sealed[last] ^= 0xff;
        store.database.insert(b"k", sealed).unwrap();
        let error = store.get(b"k").unwrap_err();
        assert_eq!(error.code, crate::error::sqlstate::DATA_CORRUPTED);
        assert!(store.scan_prefix(b"k").is_err());
    }
}
