//! `StateStore` on sled 0.34: one tree, atomic batches, fsync on commit.

use std::path::Path;

use super::envelope;
use super::{StateStore, WriteBatch, WriteOperation};
use crate::error::{Result, WeirError};

pub struct SledStore {
    database: sled::Db,
}

impl SledStore {
    pub fn open(directory: &Path) -> Result<Self> {
        let database = sled::Config::new()
            .path(directory)
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
        self.database.apply_batch(sled_batch).map_err(io_error)?;
        // The acknowledgement promise: nothing is reported done before fsync.
        self.database.flush().map_err(io_error)?;
        Ok(())
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
