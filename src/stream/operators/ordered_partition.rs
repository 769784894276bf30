//! A partition's rows in ORDER BY order with their multiplicities, shared by
//! the operators that rank or frame rows (top-N, OVER windows). An entry is
//! the row's ORDER BY key and then the whole row, both in Arrow's row
//! format: the key sorts as the ORDER BY does (ASC/DESC, NULLS FIRST/LAST)
//! and the row breaks ties, so rows with equal keys have one fixed order.

use std::collections::{btree_map, BTreeMap};

use datafusion::common::{HashMap, HashSet};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::row::{RowConverter, Rows};

use crate::error::{sqlstate, Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};

/// A partition's entry: its ORDER BY key and the whole row, row format.
pub type Entry = (Box<[u8]>, Box<[u8]>);

/// A partition's rows, in order, with their multiplicities.
pub type Partition = BTreeMap<Entry, i64>;

/// An operator's partitions by key, and which changed since the last
/// checkpoint (each checkpointed as an entry `partition/<key>`).
#[derive(Debug, Default)]
pub struct Partitions {
    pub by_key: HashMap<Box<[u8]>, Partition>,
    changed: HashSet<Box<[u8]>>,
    /// What the write group running now changed.
    undo: ChangeLog,
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

    /// Adds `diff` copies of `entry` to partition `key`, noted.
    pub fn apply(&mut self, key: &[u8], entry: Entry, diff: i64) {
        self.note(key, &entry, diff);
        match self.by_key.get_mut(key) {
            Some(partition) => apply(partition, entry, diff),
            None => {
                let mut partition = Partition::new();
                apply(&mut partition, entry, diff);
                self.by_key.insert(key.into(), partition);
            }
        }
    }

    /// Removes every copy of `entry` from partition `key`, noted.
    pub fn remove_entry(&mut self, key: &[u8], entry: &Entry) {
        let Some(count) = self.by_key.get(key).and_then(|p| p.get(entry)).copied() else {
            return;
        };
        self.note(key, entry, -count);
        if let Some(partition) = self.by_key.get_mut(key) {
            partition.remove(entry);
        }
    }

    /// Takes partition `key` out, noted (its rows come back on a rollback).
    pub fn take(&mut self, key: &[u8]) -> Option<Partition> {
        let partition = self.by_key.remove(key)?;
        for (entry, count) in &partition {
            self.note(key, entry, -count);
        }
        Some(partition)
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
    pub fn rollback(&mut self) -> bool {
        let log = std::mem::take(&mut self.undo);
        if log.given_up {
            return false;
        }
        let mut end = log.bytes.len();
        for ([key, order, row], diff) in log.changes.iter().rev() {
            let start = end - (*key + *order + *row) as usize;
            let (key, rest) = log.bytes[start..end].split_at(*key as usize);
            let (order, row) = rest.split_at(*order as usize);
            end = start;
            let partition = self.by_key.entry(key.into()).or_default();
            apply(partition, (order.into(), row.into()), -diff);
            if partition.is_empty() {
                self.by_key.remove(key);
            }
            self.changed.insert(key.into());
        }
        true
    }

    /// Notes that partition `key` changed (or went).
    pub fn touch(&mut self, key: &[u8]) {
        self.changed.insert(key.into());
    }

    /// Writes the partitions changed since the last checkpoint.
    pub fn checkpoint(&mut self, state: &mut StateWriter) {
        for key in std::mem::take(&mut self.changed) {
            let name = [PARTITION_PREFIX, &key].concat();
            match self.by_key.get(&key) {
                Some(partition) => state.put(&name, encode(partition)),
                None => state.delete(&name),
            }
        }
    }

    /// Loads the checkpointed partitions of `operator` (named in errors).
    pub fn restore(&mut self, state: &StateReader, operator: &str) -> Result<()> {
        for (name, value) in state.with_prefix(PARTITION_PREFIX) {
            let key = &name[PARTITION_PREFIX.len()..];
            self.by_key.insert(key.into(), decode(value, operator)?);
        }
        Ok(())
    }

    /// What the partitions take in memory (the gauge's estimate).
    pub fn memory_bytes(&self) -> usize {
        self.by_key
            .iter()
            .map(|(key, partition)| key.len() + memory_bytes(partition) + ENTRY_OVERHEAD_BYTES)
            .sum()
    }
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

/// A map entry's share of memory beyond its bytes, for the gauge.
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

/// What a partition's entries take in memory (the gauge's estimate).
pub fn memory_bytes(partition: &Partition) -> usize {
    partition
        .keys()
        .map(|(order, row)| order.len() + row.len() + ENTRY_OVERHEAD_BYTES)
        .sum()
}

/// A partition as stored: per entry, the key's and row's lengths (u32) and
/// bytes, then the multiplicity (i64), all little-endian.
pub fn encode(partition: &Partition) -> Vec<u8> {
    let mut bytes = Vec::new();
    for ((order, row), count) in partition {
        for part in [order, row] {
            bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
            bytes.extend_from_slice(part);
        }
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    bytes
}

/// Reads a stored partition of `operator`, refusing one that ends early.
pub fn decode(bytes: &[u8], operator: &str) -> Result<Partition> {
    let mut reader = Reader {
        bytes,
        at: 0,
        operator,
    };
    let mut partition = Partition::new();
    while reader.at < bytes.len() {
        let order = reader.part()?.into();
        let row = reader.part()?.into();
        let count = i64::from_le_bytes(reader.take(8)?.try_into().expect("8 bytes"));
        partition.insert((order, row), count);
    }
    Ok(partition)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    operator: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(length)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!(
                    "a {} operator's checkpointed partition is damaged",
                    self.operator
                ),
            )
        })?;
        let part = &self.bytes[self.at..end];
        self.at = end;
        Ok(part)
    }

    /// A length (u32) and that many bytes.
    fn part(&mut self) -> Result<&'a [u8]> {
        let length = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
        self.take(length as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(order: &[u8], row: &[u8]) -> Entry {
        (order.into(), row.into())
    }

    #[test]
    fn apply_adds_and_removes_copies() {
        let mut partition = Partition::new();
        apply(&mut partition, entry(b"a", b"1"), 2);
        apply(&mut partition, entry(b"a", b"1"), -1);
        assert_eq!(partition[&entry(b"a", b"1")], 1);
        apply(&mut partition, entry(b"a", b"1"), -1);
        apply(&mut partition, entry(b"b", b"2"), 0);
        assert!(partition.is_empty());
    }

    #[test]
    fn a_rolled_back_group_leaves_the_partitions_as_they_were() {
        let mut partitions = Partitions::default();
        partitions.apply(b"p", entry(b"a", b"1"), 2);
        partitions.apply(b"q", entry(b"b", b"2"), 1);
        partitions.commit();
        let before = partitions.by_key.clone();
        partitions.apply(b"p", entry(b"a", b"1"), -2);
        partitions.by_key.remove(b"p".as_slice());
        partitions.apply(b"r", entry(b"c", b"3"), 1);
        partitions.remove_entry(b"q", &entry(b"b", b"2"));
        partitions.apply(b"q", entry(b"d", b"4"), 3);
        assert!(partitions.rollback());
        assert_eq!(partitions.by_key, before);
    }

    #[test]
    fn a_group_past_the_undo_bound_is_refused_and_the_next_is_undone() {
        let mut partitions = Partitions::default();
        let wide = vec![7u8; 4096];
        for key in 0..(UNDO_BYTES / 4096 + 10) as u32 {
            partitions.apply(&key.to_be_bytes(), entry(b"o", &wide), 1);
        }
        assert!(partitions.undo.given_up && partitions.undo.bytes.is_empty());
        assert!(!partitions.rollback(), "too much to undo");
        partitions.commit();
        let before = partitions.by_key.len();
        partitions.apply(b"new", entry(b"a", b"1"), 1);
        assert!(partitions.rollback());
        assert_eq!(partitions.by_key.len(), before);
    }

    #[test]
    fn a_partition_round_trips_and_a_damaged_one_is_refused() {
        let mut partition = Partition::new();
        apply(&mut partition, entry(b"k", b"row"), 3);
        apply(&mut partition, entry(b"", b"other"), -1);
        let bytes = encode(&partition);
        assert_eq!(decode(&bytes, "test").unwrap(), partition);
        let error = decode(&bytes[..bytes.len() - 1], "OverWindow").unwrap_err();
        assert!(error.to_string().contains("OverWindow"), "{error}");
        assert!(decode(&[1, 0, 0], "test").is_err());
    }
}
