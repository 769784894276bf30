//! Durable key-value state. `StateStore` is the only interface the rest of
//! weir uses; `SledStore` is the only code that names sled. Every value is
//! wrapped in an envelope with a format version and a CRC32 so corruption is
//! reported as an error instead of being decoded into wrong rows.

mod acknowledged;
pub mod batch_codec;
mod envelope;
mod key_filter;
pub mod runs;
mod sled_integrity;
mod sled_store;
mod value_log;

pub use sled_store::{SledStore, DEFAULT_CACHE_BYTES, LOCKED_MESSAGE};

use crate::error::Result;

/// One change in a `WriteBatch`.
#[derive(Debug, Clone)]
enum WriteOperation {
    /// Key, value, and whether the value is a log record (see `put_log`).
    Put(Vec<u8>, Vec<u8>, bool),
    Delete(Vec<u8>),
    DeletePrefix(Vec<u8>),
}

/// A set of changes applied atomically by `StateStore::commit`.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    operations: Vec<WriteOperation>,
    /// Bytes of keys and values, kept as operations are added.
    bytes: usize,
}

impl WriteOperation {
    fn size_bytes(&self) -> usize {
        match self {
            WriteOperation::Put(key, value, _) => key.len() + value.len(),
            WriteOperation::Delete(key) | WriteOperation::DeletePrefix(key) => key.len(),
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            WriteOperation::Put(key, _, _)
            | WriteOperation::Delete(key)
            | WriteOperation::DeletePrefix(key) => key,
        }
    }
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, operation: WriteOperation) {
        self.bytes += operation.size_bytes();
        self.operations.push(operation);
    }

    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.push(WriteOperation::Put(key.into(), value.into(), false));
    }

    /// Puts a record of an append-only log: written once, deleted oldest
    /// first or all together. A large one is kept in the store's value log
    /// (outside its cache); other values stay in the tree, since values
    /// rewritten often would leave dead bytes among live log records.
    pub fn put_log(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.push(WriteOperation::Put(key.into(), value.into(), true));
    }

    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.push(WriteOperation::Delete(key.into()));
    }

    /// Deletes every key starting with `prefix` (resolved when committed).
    pub fn delete_prefix(&mut self, prefix: impl Into<Vec<u8>>) {
        self.push(WriteOperation::DeletePrefix(prefix.into()));
    }

    /// How many operations the batch holds.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Appends `other`'s changes after this batch's own.
    pub fn extend(&mut self, other: WriteBatch) {
        self.bytes += other.bytes;
        self.operations.extend(other.operations);
    }

    /// Bytes of keys and values this batch writes.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    /// Gives every key and prefix starting with `from` the prefix `to`
    /// instead (moving a key space, such as a checkpoint generation).
    pub fn rename_prefix(&mut self, from: &[u8], to: &[u8]) {
        if from == to {
            return;
        }
        // A new key of exactly its length: splicing in a longer prefix
        // would grow each key by doubling, and a checkpoint of 600 k
        // entries held 147 MB of slack while it was renamed.
        let renamed = |key: &mut Vec<u8>| {
            if key.starts_with(from) {
                let mut new = Vec::with_capacity(to.len() + key.len() - from.len());
                new.extend_from_slice(to);
                new.extend_from_slice(&key[from.len()..]);
                *key = new;
            }
        };
        for operation in &mut self.operations {
            match operation {
                WriteOperation::Put(key, _, _)
                | WriteOperation::Delete(key)
                | WriteOperation::DeletePrefix(key) => renamed(key),
            }
        }
        self.bytes = self.operations.iter().map(WriteOperation::size_bytes).sum();
    }

    /// How many puts, and deletes of single keys, the batch holds.
    pub fn put_and_delete_counts(&self) -> (usize, usize) {
        let puts = self
            .operations
            .iter()
            .filter(|operation| matches!(operation, WriteOperation::Put(..)))
            .count();
        let deletes = self
            .operations
            .iter()
            .filter(|operation| matches!(operation, WriteOperation::Delete(_)))
            .count();
        (puts, deletes)
    }

    /// The prefixes this batch deletes.
    pub fn deleted_prefixes(&self) -> Vec<&[u8]> {
        self.operations
            .iter()
            .filter_map(|operation| match operation {
                WriteOperation::DeletePrefix(prefix) => Some(prefix.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// Takes out every change under `prefix`, prefix deletes included (in
    /// their order).
    pub fn split_off_everything_under(&mut self, prefix: &[u8]) -> WriteBatch {
        self.split_off_where(|operation| operation.key().starts_with(prefix))
    }

    /// Takes out the puts and deletes of keys starting with `prefix` (in
    /// their order); what stays keeps its order too.
    pub fn split_off_prefix(&mut self, prefix: &[u8]) -> WriteBatch {
        self.split_off_where(|operation| {
            !matches!(operation, WriteOperation::DeletePrefix(_))
                && operation.key().starts_with(prefix)
        })
    }

    fn split_off_where(&mut self, taken: impl Fn(&WriteOperation) -> bool) -> WriteBatch {
        // Both parts at their size: pushing grows them by doubling (a
        // checkpoint of 600 k entries held 58 MB of slack while split).
        let taken_count = self.operations.iter().filter(|o| taken(o)).count();
        let operations = std::mem::take(&mut self.operations);
        let mut split = WriteBatch {
            operations: Vec::with_capacity(taken_count),
            bytes: 0,
        };
        self.operations = Vec::with_capacity(operations.len() - taken_count);
        self.bytes = 0;
        for operation in operations {
            match taken(&operation) {
                true => split.push(operation),
                false => self.push(operation),
            }
        }
        split
    }
}

/// Durable, ordered key-value storage.
///
/// `commit` is atomic and durable: when it returns `Ok`, every change in the
/// batch has been flushed to disk (fsync) and survives a `kill -9`.
pub trait StateStore: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// All entries whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    fn commit(&self, batch: WriteBatch) -> Result<()>;

    /// Applies `batch` without waiting for the disk, in pieces (not
    /// atomically): it becomes durable with the next `commit`. For data
    /// nothing refers to yet (rows a statement spills before its commit
    /// makes them visible), which a crash may leave partly written.
    fn stage(&self, batch: WriteBatch) -> Result<()>;

    /// Entries with `start <= key < end`, in key order, read lazily.
    fn scan_range(&self, start: &[u8], end: &[u8]) -> Entries;

    /// The keys with `start <= key < end`, in key order, read lazily
    /// (values are not read).
    fn scan_keys(&self, start: &[u8], end: &[u8]) -> Keys;

    /// Entries and stored bytes with `start <= key < end`.
    fn stored_size(&self, start: &[u8], end: &[u8]) -> Result<StoredSize>;

    /// The last entry with `start <= key <= at`, if any.
    fn last_at_or_before(&self, start: &[u8], at: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>>;
}

/// What a key range holds, as stored (values kept out of line counted at
/// their stored length, without reading them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredSize {
    pub entries: u64,
    pub bytes: u64,
    pub first_key: Option<Vec<u8>>,
}

/// A lazy, ordered scan of stored entries.
pub type Entries = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + Send>;

/// A lazy, ordered scan of stored keys.
pub type Keys = Box<dyn Iterator<Item = Result<Vec<u8>>> + Send>;

/// Keys are built from parts joined by `/`, with integers big-endian so that
/// key order is numeric order.
pub fn key(parts: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.iter().map(|part| part.len() + 1).sum());
    for (index, part) in parts.iter().enumerate() {
        if index > 0 {
            key.push(b'/');
        }
        key.extend_from_slice(part);
    }
    key
}

/// A stored integer: 8 bytes, big-endian, so keys sort by value.
pub fn encode_i64(value: i64) -> Vec<u8> {
    value.to_be_bytes().to_vec()
}

pub fn decode_i64(value: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(value).ok().map(i64::from_be_bytes)
}

/// The prefix of every view's row keys: a view's rows (`viewrows/<id>/…`)
/// may be staged before their commit, so the dataflow that spills them
/// and the view results that write them agree on it here.
pub fn all_view_rows_prefix() -> Vec<u8> {
    key(&[b"viewrows", b""])
}
