//! A partition's rows in ORDER BY order with their multiplicities, shared by
//! the operators that rank or frame rows (top-N, OVER windows). An entry is
//! the row's ORDER BY key and then the whole row, both in Arrow's row
//! format: the key sorts as the ORDER BY does (ASC/DESC, NULLS FIRST/LAST)
//! and the row breaks ties, so rows with equal keys have one fixed order.
//!
//! A partition is changed as a `BTreeMap` (`checkout`, `checkin`), but at
//! rest one of a few entries is kept packed: its stored encoding in one
//! allocation (`encode`). Most partitions of a dedup or a top-N hold one
//! to a few rows, and a map of one entry costs a tree node of eleven slots
//! and two boxes besides (~900 bytes a partition at Nexmark q18's 9 M
//! partitions, against ~300 packed).
//!
//! Given a key space (`attach`), partitions past a memory budget are
//! spilled: those changed are written as a sorted run (`stream/spill`) and
//! all are let go from memory; one asked for again is read back from the
//! runs. Checkpoints then write changed partitions as a run too, and list
//! the runs.

use std::collections::{btree_map, BTreeMap};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::{HashMap, HashSet};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::row::{RowConverter, Rows};

use crate::error::Result;
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::spill::{SpillSpace, SpilledRuns};

/// A partition's entry: its ORDER BY key and the whole row, row format.
pub type Entry = (Box<[u8]>, Box<[u8]>);

/// A partition's rows, in order, with their multiplicities.
pub type Partition = BTreeMap<Entry, i64>;

/// A partition at rest.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    /// Its encoding (`encode`): a partition of at most `PACKED_ENTRIES`.
    Packed(Box<[u8]>),
    Tree(Partition),
}

/// Partitions of at most this many entries are kept packed: changing one
/// decodes and encodes it whole, which is cheap while it is small.
pub const PACKED_ENTRIES: usize = 16;

impl Stored {
    fn of(partition: Partition) -> Stored {
        match partition.len() <= PACKED_ENTRIES {
            true => Stored::Packed(encode(&partition).into_boxed_slice()),
            false => Stored::Tree(partition),
        }
    }

    /// The partition, decoded (a packed one was checked when it was
    /// restored, so it decodes).
    fn into_partition(self) -> Partition {
        match self {
            Stored::Packed(bytes) => decode(&bytes, "ordered").unwrap_or_default(),
            Stored::Tree(partition) => partition,
        }
    }

    /// Bytes the gauge counts: the packed bytes and their allocation, or
    /// the entries and the tree's share per entry.
    fn memory_bytes(&self) -> usize {
        match self {
            Stored::Packed(bytes) => bytes.len() + ALLOCATION_BYTES,
            Stored::Tree(partition) => memory_bytes(partition),
        }
    }
}

/// An allocation's cost beyond its bytes (allocator header and rounding).
const ALLOCATION_BYTES: usize = 16;
/// A partition's cost beyond its key and its rows: its slot in the map
/// (key and value pointers, control byte, free slots at the map's load)
/// and the key's allocation.
const PARTITION_BYTES: usize = 48 + ALLOCATION_BYTES;

/// An operator's partitions by key, and which changed since the last
/// checkpoint or spill (each checkpointed as an entry `partition/<key>`,
/// or, spilling, written to a run).
pub struct Partitions {
    by_key: HashMap<Box<[u8]>, Stored>,
    changed: HashSet<Box<[u8]>>,
    /// What the partitions take in memory (the gauge), kept as they change.
    bytes: usize,
    /// What the write group running now changed.
    undo: ChangeLog,
    /// Where partitions go past `budget_bytes` (None: all stay in memory).
    spilled: Option<SpilledRuns>,
    budget_bytes: Arc<AtomicUsize>,
    /// Restored from entries per partition (written before it spilled):
    /// the next checkpoint deletes them, writing the partitions as a run.
    restored_entries: bool,
}

impl Default for Partitions {
    fn default() -> Self {
        Partitions {
            by_key: HashMap::default(),
            changed: HashSet::default(),
            bytes: 0,
            undo: ChangeLog::default(),
            spilled: None,
            budget_bytes: Arc::new(AtomicUsize::new(usize::MAX)),
            restored_entries: false,
        }
    }
}

impl std::fmt::Debug for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitions")
            .field("in_memory", &self.by_key.len())
            .field("changed", &self.changed.len())
            .field("spilling", &self.spilled.is_some())
            .finish()
    }
}

/// Changes to the partitions as (partition key, entry, diff), in one byte
/// buffer (no allocation per row), to undo a failed write group. Bounded
/// (`UNDO_BYTES`, as the aggregates' and the join's): a group past it (a
/// COPY of millions of rows) keeps nothing more, and if it fails the view
/// is rebuilt from its checkpoint.
#[derive(Debug, Default)]
struct ChangeLog {
    bytes: Vec<u8>,
    /// Per change: the key's, ORDER BY key's and row's lengths, the diff.
    changes: Vec<([u32; 3], i64)>,
    given_up: bool,
}

/// The most a write group's change log may hold.
const UNDO_BYTES: usize = 64 << 20;

/// Equal when they hold the same rows and changes to checkpoint (what a
/// group could still undo is not part of it).
impl PartialEq for Partitions {
    fn eq(&self, other: &Self) -> bool {
        self.by_key == other.by_key && self.changed == other.changed
    }
}

impl Partitions {
    /// Notes that `diff` copies of `entry` are added to partition `key`
    /// (call it for every change the group makes).
    pub fn note(&mut self, key: &[u8], (order, row): &Entry, diff: i64) {
        self.note_parts(key, order, row, diff);
    }

    /// `note` of an entry in parts.
    pub fn note_parts(&mut self, key: &[u8], order: &[u8], row: &[u8], diff: i64) {
        let log = &mut self.undo;
        if log.given_up {
            return;
        }
        for part in [key, order, row] {
            log.bytes.extend_from_slice(part);
        }
        let lengths = [key.len() as u32, order.len() as u32, row.len() as u32];
        log.changes.push((lengths, diff));
        if log.bytes.len() + log.changes.len() * 24 > UNDO_BYTES {
            self.undo = ChangeLog {
                given_up: true,
                ..ChangeLog::default()
            };
        }
    }

    /// Spills to `space` past its budget (before `restore`).
    pub fn attach(&mut self, space: SpillSpace) {
        self.budget_bytes = space.budget_bytes.clone();
        self.spilled = Some(SpilledRuns::new(space));
    }

    /// Partition `key` to change (empty if there is none), out of the
    /// partitions until `checkin`. Note each change (`note`).
    pub fn checkout(&mut self, key: &[u8]) -> Result<Partition> {
        Ok(self
            .fetch(key)?
            .map(Stored::into_partition)
            .unwrap_or_default())
    }

    /// Partition `key` out of memory, or read from the spilled runs.
    fn fetch(&mut self, key: &[u8]) -> Result<Option<Stored>> {
        if let Some(stored) = self.by_key.remove(key) {
            self.bytes -= key.len() + PARTITION_BYTES + stored.memory_bytes();
            return Ok(Some(stored));
        }
        self.read_spilled(key)
    }

    /// Partition `key` as the spilled runs hold it, unless it changed
    /// since they were written (then memory has it, or it went).
    fn read_spilled(&self, key: &[u8]) -> Result<Option<Stored>> {
        let Some(spilled) = self.spilled.as_ref().filter(|spilled| !spilled.is_empty()) else {
            return Ok(None);
        };
        if self.changed.contains(key) {
            return Ok(None);
        }
        match spilled.get(key)? {
            Some(Some(bytes)) => Ok(Some(Stored::of(decode(&bytes, "spilled")?))),
            _ => Ok(None),
        }
    }

    /// Puts partition `key` back after a change (an empty one goes).
    pub fn checkin(&mut self, key: &[u8], partition: Partition) {
        self.changed.insert(key.into());
        if partition.is_empty() {
            return;
        }
        let stored = Stored::of(partition);
        self.bytes += key.len() + PARTITION_BYTES + stored.memory_bytes();
        self.by_key.insert(key.into(), stored);
    }

    /// Makes partition `key`, which has none, of `entries` (in order,
    /// distinct, counts above zero, at most `PACKED_ENTRIES`), noted:
    /// packed at once, with no tree between.
    pub fn insert_new(&mut self, key: &[u8], entries: &[EntryRef<'_>]) {
        for &(order, row, count) in entries {
            self.note_parts(key, order, row, count);
        }
        self.changed.insert(key.into());
        let stored = Stored::Packed(encode_entries(entries.iter().copied()).into_boxed_slice());
        self.bytes += key.len() + PARTITION_BYTES + stored.memory_bytes();
        self.by_key.insert(key.into(), stored);
    }

    /// Whether partition `key` has rows (in memory or spilled).
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.by_key.contains_key(key) || self.read_spilled(key)?.is_some())
    }

    /// Partition `key`'s entries in order, without changing it (only one
    /// in memory: tests).
    #[cfg(test)]
    pub fn entries<'a>(&'a self, key: &[u8]) -> Box<dyn Iterator<Item = EntryRef<'a>> + 'a> {
        match self.by_key.get(key) {
            Some(Stored::Packed(bytes)) => Box::new(packed_entries(bytes)),
            Some(Stored::Tree(partition)) => Box::new(in_place(partition)),
            None => Box::new(std::iter::empty()),
        }
    }

    /// How many partitions there are in memory.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Takes partition `key` out, noted (its rows come back on a rollback).
    pub fn take(&mut self, key: &[u8]) -> Result<Option<Partition>> {
        let Some(stored) = self.fetch(key)? else {
            return Ok(None);
        };
        let partition = stored.into_partition();
        for (entry, count) in &partition {
            self.note(key, entry, -count);
        }
        Ok(Some(partition))
    }

    /// The write group committed: forget its changes.
    pub fn commit(&mut self) {
        if self.undo.bytes.capacity() > 64 * 1024 {
            self.undo = ChangeLog::default();
        }
        self.undo.bytes.clear();
        self.undo.changes.clear();
        self.undo.given_up = false;
    }

    /// The write group failed: its changes are taken back, last first
    /// (partitions it emptied come back; those it made go). False if the
    /// group outgrew its change log: the caller rebuilds the view.
    pub fn rollback(&mut self) -> Result<bool> {
        let log = std::mem::take(&mut self.undo);
        if log.given_up {
            return Ok(false);
        }
        let mut end = log.bytes.len();
        for ([key, order, row], diff) in log.changes.iter().rev() {
            let start = end - (*key + *order + *row) as usize;
            let (key, rest) = log.bytes[start..end].split_at(*key as usize);
            let (order, row) = rest.split_at(*order as usize);
            end = start;
            let mut partition = self.checkout(key)?;
            apply(&mut partition, (order.into(), row.into()), -diff);
            self.checkin(key, partition);
        }
        Ok(true)
    }

    /// Notes that partition `key` changed (or went).
    pub fn touch(&mut self, key: &[u8]) {
        self.changed.insert(key.into());
    }

    /// Past the budget, spills the changed partitions and lets all go
    /// from memory (call it between batches).
    pub fn settle(&mut self) -> Result<()> {
        if self.spilled.is_none() || self.bytes <= self.budget_bytes.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.spill_changed()?;
        self.by_key = HashMap::default();
        self.bytes = 0;
        Ok(())
    }

    /// Writes the changed partitions (an emptied one as deleted) as a run.
    fn spill_changed(&mut self) -> Result<()> {
        let Some(spilled) = self.spilled.as_mut() else {
            return Ok(());
        };
        let mut keys: Vec<Box<[u8]>> = std::mem::take(&mut self.changed).into_iter().collect();
        keys.sort_unstable();
        let entries = keys
            .into_iter()
            .map(|key| {
                let value = self.by_key.get(&key).map(|stored| match stored {
                    Stored::Packed(bytes) => bytes.to_vec(),
                    Stored::Tree(partition) => encode(partition),
                });
                (key.into_vec(), value)
            })
            .collect();
        spilled.spill(entries)
    }

    /// Writes the partitions changed since the last checkpoint.
    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if self.spilled.is_some() {
            self.spill_changed()?;
            if std::mem::take(&mut self.restored_entries) {
                state.delete_prefix(PARTITION_PREFIX);
            }
            return self
                .spilled
                .as_mut()
                .map_or(Ok(()), |spilled| spilled.checkpoint(state));
        }
        for key in std::mem::take(&mut self.changed) {
            let name = [PARTITION_PREFIX, &key].concat();
            match self.by_key.get(&key) {
                Some(Stored::Packed(bytes)) => state.put(&name, bytes.to_vec()),
                Some(Stored::Tree(partition)) => state.put(&name, encode(partition)),
                None => state.delete(&name),
            }
        }
        Ok(())
    }

    /// Loads the checkpointed partitions of `operator` (named in errors).
    pub fn restore(&mut self, state: &StateReader, operator: &str) -> Result<()> {
        if let Some(spilled) = self.spilled.as_mut() {
            spilled.restore(state)?;
        }
        for (name, value) in state.with_prefix(PARTITION_PREFIX) {
            let key = &name[PARTITION_PREFIX.len()..];
            let stored = Stored::of(decode(value, operator)?);
            self.bytes += key.len() + PARTITION_BYTES + stored.memory_bytes();
            self.by_key.insert(key.into(), stored);
            if self.spilled.is_some() {
                self.changed.insert(key.into());
                self.restored_entries = true;
            }
        }
        Ok(())
    }

    /// What the partitions take in memory (the gauge's estimate), and the
    /// keys of those changed since the last checkpoint.
    pub fn memory_bytes(&self) -> usize {
        let changed = self.changed.capacity() * (16 + 1);
        let changed_keys: usize = self.changed.iter().map(|key| key.len()).sum();
        let indexes = self.spilled.as_ref().map_or(0, SpilledRuns::memory_bytes);
        self.bytes + changed + changed_keys + self.changed.len() * ALLOCATION_BYTES + indexes
    }
}

/// An entry seen in place: its ORDER BY key, row and multiplicity.
pub type EntryRef<'a> = (&'a [u8], &'a [u8], i64);

/// A partition's entries seen in place.
pub fn in_place(partition: &Partition) -> impl Iterator<Item = EntryRef<'_>> + Clone {
    partition
        .iter()
        .map(|((order, row), count)| (&**order, &**row, *count))
}

const PARTITION_PREFIX: &[u8] = b"partition/";

/// Adds `diff` copies of `entry` (negative: takes them away).
pub fn apply(partition: &mut Partition, entry: Entry, diff: i64) {
    match partition.entry(entry) {
        btree_map::Entry::Occupied(mut count) => {
            *count.get_mut() += diff;
            if *count.get() == 0 {
                count.remove();
            }
        }
        btree_map::Entry::Vacant(slot) => {
            if diff != 0 {
                slot.insert(diff);
            }
        }
    }
}

/// The arrays' rows in row format; None without arrays (no PARTITION BY
/// or ORDER BY: every row has the empty key).
pub fn keys(converter: &RowConverter, arrays: &[ArrayRef]) -> Result<Option<Rows>> {
    if arrays.is_empty() {
        return Ok(None);
    }
    Ok(Some(converter.convert_columns(arrays)?))
}

pub fn key_of(keys: &Option<Rows>, index: usize) -> &[u8] {
    keys.as_ref().map_or(&[], |keys| keys.row(index).data())
}

/// Each partition a batch touches with the indices of its rows, in the
/// order partitions are first seen.
pub fn touched(partitions: &Option<Rows>, rows: usize) -> Vec<(&[u8], Vec<usize>)> {
    let mut touched: Vec<(&[u8], Vec<usize>)> = Vec::new();
    let mut positions: HashMap<&[u8], usize> = HashMap::default();
    for index in 0..rows {
        let key = key_of(partitions, index);
        let position = *positions.entry(key).or_insert_with(|| {
            touched.push((key, Vec::new()));
            touched.len() - 1
        });
        touched[position].1.push(index);
    }
    touched
}

/// A tree entry's share of memory beyond its bytes, for the gauge: its
/// slot in a node (two boxes and a count), the node's free slots, and the
/// boxes' allocations.
pub const ENTRY_OVERHEAD_BYTES: usize = 48 + 2 * ALLOCATION_BYTES + 16;

/// What a partition's entries take in memory (the gauge's estimate).
pub fn memory_bytes(partition: &Partition) -> usize {
    partition
        .keys()
        .map(|(order, row)| order.len() + row.len() + ENTRY_OVERHEAD_BYTES)
        .sum()
}

#[path = "ordered_partition_codec.rs"]
mod codec;
use codec::encode_entries;
#[cfg(test)]
use codec::packed_entries;
pub use codec::{decode, encode};

#[cfg(test)]
#[path = "ordered_partition_tests.rs"]
mod tests;
