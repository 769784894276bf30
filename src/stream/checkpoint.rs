//! What operators write into a checkpoint and read back on recovery. Each
//! operator owns the keys under its own prefix
//! (`checkpoint/op/<view id>/<operator index>/`), so a checkpoint can write only
//! what changed (a window bin, say) and recovery hands each operator exactly
//! its own entries.
//!
//! Operator state lives in one *generation* of keys at a time: generation
//! 0 is `checkpoint/op/`, generation g ≥ 1 is `checkpoint/gen/<g>/`, with the
//! same keys below. Operators and the dataflow always name keys in
//! generation 0 (`operator_prefix`); where they are stored is decided when
//! a checkpoint is committed (`in_generation`), so a checkpoint too big for
//! one atomic batch can be written as a new generation in pieces and
//! switched to by the epoch record alone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, StoredSize, WriteBatch};

/// The key of the last committed checkpoint's record.
pub fn epoch_key() -> Vec<u8> {
    key(&[b"checkpoint", b"epoch"])
}

/// Every operator's checkpointed state (generation 0, as operators name it).
pub fn operator_state_prefix() -> Vec<u8> {
    key(&[b"checkpoint", b"op", b""])
}

fn generations_prefix() -> Vec<u8> {
    key(&[b"checkpoint", b"gen", b""])
}

/// Where generation `generation` of the operator state is stored.
pub fn generation_prefix(generation: u64) -> Vec<u8> {
    if generation == 0 {
        return operator_state_prefix();
    }
    let mut prefix = generations_prefix();
    prefix.extend_from_slice(&generation.to_be_bytes());
    prefix.push(b'/');
    prefix
}

/// `name` (a key or prefix as operators name it) as stored in `generation`.
pub fn in_generation(name: &[u8], generation: u64) -> Vec<u8> {
    let canonical = operator_state_prefix();
    match name.strip_prefix(canonical.as_slice()) {
        Some(rest) => [generation_prefix(generation).as_slice(), rest].concat(),
        None => name.to_vec(),
    }
}

/// The key ranges of every stored generation but `current` (left behind by
/// a crash while one was written or deleted).
pub fn stale_generation_prefixes(store: &dyn StateStore, current: u64) -> Result<Vec<Vec<u8>>> {
    let mut stale = Vec::new();
    if current != 0 && first_key_under(store, &operator_state_prefix())?.is_some() {
        stale.push(operator_state_prefix());
    }
    let all = generations_prefix();
    let mut from = all.clone();
    while let Some(found) = first_key_under_from(store, &all, &from)? {
        let number = found
            .get(all.len()..all.len() + 8)
            .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| {
                WeirError::new(sqlstate::DATA_CORRUPTED, "a checkpoint key is malformed")
            })?;
        if number != current {
            stale.push(generation_prefix(number));
        }
        match number.checked_add(1) {
            Some(next) => from = generation_prefix(next),
            None => break,
        }
    }
    Ok(stale)
}

fn first_key_under(store: &dyn StateStore, prefix: &[u8]) -> Result<Option<Vec<u8>>> {
    first_key_under_from(store, prefix, prefix)
}

fn first_key_under_from(
    store: &dyn StateStore,
    prefix: &[u8],
    from: &[u8],
) -> Result<Option<Vec<u8>>> {
    let end = prefix_end(prefix);
    match store.scan_range(from, &end).next() {
        Some(entry) => Ok(Some(entry?.0)),
        None => Ok(None),
    }
}

/// The first key after every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![u8::MAX; prefix.len() + 1]
}

/// What a committed checkpoint covers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u64,
    /// Rows of each table the checkpointed state has seen.
    pub offsets: BTreeMap<String, u64>,
    pub unix_ms: u64,
    /// Where the operator state of this epoch is stored (absent: 0).
    #[serde(default)]
    pub generation: u64,
    /// The last write group it covers (`commit_order`; absent: 0).
    #[serde(default)]
    pub commit_sequence: u64,
}

impl EpochRecord {
    /// Adds the record to `batch`: committing it commits the checkpoint.
    pub fn put_into(&self, batch: &mut WriteBatch) -> Result<()> {
        let encoded = serde_json::to_vec(self)
            .map_err(|error| WeirError::internal(format!("cannot encode a checkpoint: {error}")))?;
        batch.put(epoch_key(), encoded);
        Ok(())
    }

    /// The last committed record, if any.
    pub fn read(store: &dyn StateStore) -> Result<Option<EpochRecord>> {
        let Some(value) = store.get(&epoch_key())? else {
            return Ok(None);
        };
        serde_json::from_slice(&value).map(Some).map_err(|error| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!("the checkpoint record cannot be decoded: {error}"),
            )
        })
    }
}

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

/// What the last checkpoint stored for a view's operators.
pub fn stored_view_state(store: &dyn StateStore, view_id: u64) -> Result<StoredSize> {
    let generation = EpochRecord::read(store)?.map_or(0, |record| record.generation);
    let prefix = in_generation(&view_prefix(view_id), generation);
    let mut size = store.stored_size(&prefix, &prefix_end(&prefix))?;
    // And its operators' spilled runs.
    let spilled = crate::stream::spill::view_space(view_id);
    let runs = store.stored_size(&spilled, &prefix_end(&spilled))?;
    size.entries += crate::state::runs::stored_entries(store, &spilled)?;
    size.bytes += runs.bytes;
    Ok(size)
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

    /// Deletes every entry whose name starts with `name`.
    pub fn delete_prefix(&mut self, name: &[u8]) {
        let full = self.full_key(name);
        self.batch.delete_prefix(full);
    }

    /// Deletes every key starting with `prefix`, a full key outside the
    /// checkpoint's (the operator's spilled runs, `spill`): committed
    /// with the checkpoint's record.
    pub fn delete_outside(&mut self, prefix: Vec<u8>) {
        self.batch.delete_prefix(prefix);
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
        prefix: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let prefix = prefix.to_vec();
        self.entries
            .iter()
            .filter(move |(key, _)| key.starts_with(&prefix))
            .map(|(key, value)| (key.as_slice(), value.as_slice()))
    }
}

/// An i64 as a stored value.
pub use crate::state::{decode_i64, encode_i64};

/// Operator tests: a checkpoint committed to a store and read back.
#[cfg(test)]
pub mod testing {
    use super::{StateReader, StateWriter};
    use crate::state::{StateStore, WriteBatch};
    use crate::stream::operator::{Operator, Stage};

    const PREFIX: &[u8] = b"op/";

    /// Commits `operator`'s checkpoint to `store`; returns its operation count.
    pub fn commit_checkpoint<O: Operator + ?Sized>(
        operator: &mut Stage<O>,
        store: &dyn StateStore,
    ) -> usize {
        let mut batch = WriteBatch::new();
        operator
            .checkpoint(&mut StateWriter::new(PREFIX.to_vec(), &mut batch))
            .unwrap();
        let operations = batch.len();
        store.commit(batch).unwrap();
        operations
    }

    /// Commits what `write` puts in a checkpoint (operators outside a
    /// `Stage`, such as a view's junction).
    pub fn commit_state(store: &dyn StateStore, write: impl FnOnce(&mut StateWriter)) {
        let mut batch = WriteBatch::new();
        write(&mut StateWriter::new(PREFIX.to_vec(), &mut batch));
        store.commit(batch).unwrap();
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
