//! What operators write into a checkpoint and read back on recovery. Each
//! operator owns the keys under its own prefix
//! (`checkpoint/op/<view id>/<operator index>/`), so a checkpoint can write only
//! what changed (a window bin, say) and recovery hands each operator exactly
//! its own entries.

use crate::state::{key, WriteBatch};

pub fn operator_prefix(view_id: u64, operator: usize) -> Vec<u8> {
    let mut prefix = key(&[
        b"checkpoint",
        b"op",
        &view_id.to_be_bytes(),
        &(operator as u32).to_be_bytes(),
    ]);
    prefix.push(b'/');
    prefix
}

/// Every operator's state of a view, for deleting it with the view.
pub fn view_prefix(view_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"checkpoint", b"op", &view_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

/// Where one operator writes its state during a checkpoint.
pub struct StateWriter<'a> {
    prefix: Vec<u8>,
    batch: &'a mut WriteBatch,
}

impl<'a> StateWriter<'a> {
    pub fn new(prefix: Vec<u8>, batch: &'a mut WriteBatch) -> Self {
        StateWriter { prefix, batch }
    }

    fn full_key(&self, name: &[u8]) -> Vec<u8> {
        let mut full = self.prefix.clone();
        full.extend_from_slice(name);
        full
    }

    pub fn put(&mut self, name: &[u8], value: Vec<u8>) {
        let full = self.full_key(name);
        self.batch.put(full, value);
    }

    pub fn delete(&mut self, name: &[u8]) {
        let full = self.full_key(name);
        self.batch.delete(full);
    }
}

/// One operator's stored state: its entries, keys without the prefix.
#[derive(Debug, Default)]
pub struct StateReader {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl StateReader {
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_slice())
    }

    /// Entries whose name starts with `prefix`.
    pub fn with_prefix<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.entries
            .iter()
            .filter(move |(key, _)| key.starts_with(prefix))
            .map(|(key, value)| (key.as_slice(), value.as_slice()))
    }
}

/// An i64 as a stored value.
pub fn encode_i64(value: i64) -> Vec<u8> {
    value.to_be_bytes().to_vec()
}

pub fn decode_i64(value: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(value).ok().map(i64::from_be_bytes)
}

/// Operator tests: a checkpoint committed to a store and read back.
#[cfg(test)]
pub mod testing {
    use super::{StateReader, StateWriter};
    use crate::state::{StateStore, WriteBatch};
    use crate::stream::Operator;

    const PREFIX: &[u8] = b"op/";

    /// Commits `operator`'s checkpoint to `store`; returns its operation count.
    pub fn commit_checkpoint(operator: &mut dyn Operator, store: &dyn StateStore) -> usize {
        let mut batch = WriteBatch::new();
        operator
            .checkpoint(&mut StateWriter::new(PREFIX.to_vec(), &mut batch))
            .unwrap();
        let operations = batch.len();
        store.commit(batch).unwrap();
        operations
    }

    /// What the store holds for the operator, as recovery hands it over.
    pub fn stored_state(store: &dyn StateStore) -> StateReader {
        let entries = store
            .scan_prefix(PREFIX)
            .unwrap()
            .into_iter()
            .map(|(key, value)| (key[PREFIX.len()..].to_vec(), value))
            .collect();
        StateReader { entries }
    }
}
