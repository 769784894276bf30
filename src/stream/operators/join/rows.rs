//! A join side's rows grouped by join key, each with its multiplicity: in
//! memory, and given a key space (`attach`), spilled past a memory budget.
//!
//! Spilled, the rows are sorted runs (`stream/spill`) of counted entries:
//! an entry's key is the join key (length first) and then the row, its
//! value a change of the row's count, and a row's count is the sum of its
//! entries. So adding or taking away a row is blind — a change noted in
//! memory (`changed`), written as a run when memory runs out or at a
//! checkpoint — and a probe reads a key's entries from the runs whose
//! filters hold the key. A batch's keys are read before it is joined
//! (`prefetch`), and kept (`groups`) until the next spill lets them go.
//!
//! While nothing has been let go, `groups` holds every key (`complete`)
//! and no probe reads the runs: a join whose state fits in memory runs as
//! it did before it could spill.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::HashMap;

use super::side::KeyGroup;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::runs::{decode_count, encode_count, Entry, INDEXED_PAGE_BYTES};
use crate::stream::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use crate::stream::spill::{SpillSpace, SpilledRuns};

/// Rows -> the change of their count since the last run (or checkpoint).
type Changes = HashMap<Box<[u8]>, i64>;

pub struct SideRows {
    /// Groups by key: every key's when `complete`, else the keys read back
    /// since the last spill (each with all its rows, maybe none).
    groups: HashMap<Box<[u8]>, KeyGroup>,
    complete: bool,
    /// Per key, the rows whose count changed since the last run was
    /// written (not spilling: since the last checkpoint).
    changed: HashMap<Box<[u8]>, Changes>,
    /// What `groups` and `changed` take (the gauge's estimate).
    bytes: usize,
    spilled: Option<SpilledRuns>,
    budget_bytes: Arc<AtomicUsize>,
    /// The checkpoint entries of rows not spilling start with it.
    state_prefix: Vec<u8>,
    /// Restored from entries per row (written before it spilled): the
    /// next checkpoint deletes them, writing the rows as a run.
    restored_entries: bool,
    /// Whether spilling lets groups go. A side whose rows expire keeps
    /// every group (forgetting a row needs its count) and only writes its
    /// changes out past the budget.
    evicts: bool,
    /// What `changed` takes (part of `bytes`).
    changed_bytes: usize,
}

impl SideRows {
    pub fn new(state_prefix: Vec<u8>) -> Self {
        SideRows {
            groups: HashMap::default(),
            complete: true,
            changed: HashMap::default(),
            bytes: 0,
            spilled: None,
            budget_bytes: Arc::new(AtomicUsize::new(usize::MAX)),
            state_prefix,
            restored_entries: false,
            evicts: true,
            changed_bytes: 0,
        }
    }

    /// Spills to `space` past its budget (before `restore`), listing its
    /// runs in checkpoint entry `head`; letting its groups go if it
    /// `evicts`, else only writing its changes out.
    pub fn attach(&mut self, space: SpillSpace, head: Vec<u8>, evicts: bool) {
        self.evicts = evicts;
        self.budget_bytes = space.budget_bytes.clone();
        self.spilled = Some(SpilledRuns::counted(space, join_key_prefix, head));
    }

    /// Key `key`'s rows, if any are there now. Spilled, the key must have
    /// been read (`prefetch`) since the last spill.
    pub fn group(&self, key: &[u8]) -> Option<&KeyGroup> {
        debug_assert!(self.complete || self.groups.contains_key(key));
        self.groups.get(key).filter(|group| group.total > 0)
    }

    /// Rows of `key` present now (read as `group` is).
    pub fn total(&self, key: &[u8]) -> i64 {
        debug_assert!(self.complete || self.groups.contains_key(key));
        self.groups.get(key).map_or(0, |group| group.total)
    }

    /// The multiplicity of `row` under `key` (read as `group` is).
    pub fn count(&self, key: &[u8], row: &[u8]) -> Option<i64> {
        let group = self.groups.get(key)?;
        group.rows.get(row).copied()
    }

    /// Reads back the groups of `keys` that are not in memory.
    pub fn prefetch<'a>(&mut self, keys: impl Iterator<Item = &'a [u8]>) -> Result<()> {
        if self.complete {
            return Ok(());
        }
        let Some(spilled) = self.spilled.as_ref() else {
            return Ok(());
        };
        let mut prefix = Vec::new();
        for key in keys {
            if self.groups.contains_key(key) {
                continue;
            }
            let mut group = KeyGroup::default();
            entry_prefix(key, &mut prefix);
            spilled.get_prefix(&prefix, &mut |entry, value| {
                let count = decode_count(value)?;
                *group.rows.entry(entry[prefix.len()..].into()).or_default() += count;
                Ok(())
            })?;
            for (row, change) in self.changed.get(key).into_iter().flatten() {
                *group.rows.entry(row.clone()).or_default() += change;
            }
            group.rows.retain(|_, count| *count != 0);
            group.total = group.rows.values().sum();
            if group.rows.values().any(|count| *count < 0) {
                return Err(WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    "a join's spilled rows hold a row fewer than zero times",
                ));
            }
            self.bytes += group_bytes(key, &group);
            self.groups.insert(key.into(), group);
        }
        Ok(())
    }

    /// Adds `diff` to the multiplicity of `row` under `key`: in its group
    /// if memory has it (or every group), and as a change to write.
    pub fn apply(&mut self, key: &[u8], row: &[u8], diff: i64) {
        if diff == 0 {
            return;
        }
        self.note_changed(key, row, diff);
        if !self.complete && !self.groups.contains_key(key) {
            return;
        }
        let group = match self.groups.get_mut(key) {
            Some(group) => group,
            None => {
                self.bytes += key.len() + GROUP_OVERHEAD_BYTES;
                self.groups.entry(key.into()).or_default()
            }
        };
        group.total += diff;
        let count = match group.rows.get_mut(row) {
            Some(count) => {
                *count += diff;
                *count
            }
            None => {
                self.bytes += row.len() + ROW_OVERHEAD_BYTES;
                group.rows.insert(row.into(), diff);
                diff
            }
        };
        if count == 0 {
            group.rows.remove(row);
            self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
        }
        // A read-back group stays while empty: it says the runs have none.
        if group.rows.is_empty() && self.complete {
            self.groups.remove(key);
            self.bytes -= key.len() + GROUP_OVERHEAD_BYTES;
        }
    }

    fn note_changed(&mut self, key: &[u8], row: &[u8], diff: i64) {
        let before = self.bytes;
        let rows = match self.changed.get_mut(key) {
            Some(rows) => rows,
            None => {
                self.bytes += key.len() + GROUP_OVERHEAD_BYTES;
                self.changed.entry(key.into()).or_default()
            }
        };
        let change = match rows.get_mut(row) {
            Some(change) => {
                *change += diff;
                *change
            }
            None => {
                self.bytes += row.len() + ROW_OVERHEAD_BYTES;
                rows.insert(row.into(), diff);
                diff
            }
        };
        if change == 0 {
            rows.remove(row);
            self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
            if rows.is_empty() {
                self.changed.remove(key);
                self.bytes -= key.len() + GROUP_OVERHEAD_BYTES;
            }
        }
        self.changed_bytes = (self.changed_bytes + self.bytes).saturating_sub(before);
    }

    /// Past the budget, writes the changes as a run and lets every group
    /// go from memory (call it between batches). A side that keeps its
    /// groups writes its changes out once they alone pass the budget.
    pub fn settle(&mut self) -> Result<()> {
        let budget = self.budget_bytes.load(Ordering::Relaxed);
        if self.spilled.is_none() || self.bytes <= budget {
            return Ok(());
        }
        if !self.evicts {
            if self.changed_bytes > budget {
                self.spill_changed()?;
            }
            return Ok(());
        }
        self.spill_changed()?;
        self.groups = HashMap::default();
        self.complete = false;
        self.bytes = 0;
        Ok(())
    }

    /// Writes the changes as a run (each row's entry: its count change).
    fn spill_changed(&mut self) -> Result<()> {
        let Some(spilled) = self.spilled.as_mut() else {
            return Ok(());
        };
        let mut entries: Vec<Entry> = Vec::new();
        let mut prefix = Vec::new();
        self.changed_bytes = 0;
        for (key, rows) in std::mem::take(&mut self.changed) {
            entry_prefix(&key, &mut prefix);
            self.bytes -= key.len() + GROUP_OVERHEAD_BYTES;
            for (row, change) in rows {
                self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
                entries.push((
                    [prefix.as_slice(), &row].concat(),
                    Some(encode_count(change)),
                ));
            }
        }
        entries.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        spilled.spill(entries)
    }

    /// Writes the changes as a run — or, for a side that keeps every row
    /// whose runs hold half again as many entries as it has rows (a row
    /// that came and went is an entry in two runs until they merge), every
    /// row as the one run instead: each entry is then written about three
    /// times at most.
    fn compact_or_spill_changed(&mut self) -> Result<()> {
        let stored = self.spilled.as_ref().map_or(0, SpilledRuns::stored_entries);
        if self.evicts || stored < COMPACT_SLACK_ENTRIES {
            return self.spill_changed();
        }
        let rows: usize = self.groups.values().map(|group| group.rows.len()).sum();
        if stored <= (rows + rows / 2) as u64 + COMPACT_SLACK_ENTRIES {
            return self.spill_changed();
        }
        for (key, rows) in std::mem::take(&mut self.changed) {
            self.bytes -= key.len() + GROUP_OVERHEAD_BYTES;
            self.bytes -= rows
                .keys()
                .map(|row| row.len() + ROW_OVERHEAD_BYTES)
                .sum::<usize>();
        }
        self.changed_bytes = 0;
        let mut entries: Vec<Entry> = Vec::with_capacity(rows);
        let mut prefix = Vec::new();
        for (key, group) in &self.groups {
            entry_prefix(key, &mut prefix);
            for (row, count) in &group.rows {
                entries.push((
                    [prefix.as_slice(), row].concat(),
                    Some(encode_count(*count)),
                ));
            }
        }
        entries.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        match self.spilled.as_mut() {
            Some(spilled) => spilled.rewrite(entries),
            None => Ok(()),
        }
    }

    /// Writes what changed since the last checkpoint: spilling, as a run
    /// listed with the others; else each changed row's count.
    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if self.spilled.is_some() {
            self.compact_or_spill_changed()?;
            if std::mem::take(&mut self.restored_entries) {
                state.delete_prefix(&self.state_prefix);
            }
            return self
                .spilled
                .as_mut()
                .map_or(Ok(()), |spilled| spilled.checkpoint(state));
        }
        self.changed_bytes = 0;
        for (key, rows) in std::mem::take(&mut self.changed) {
            self.bytes -= key.len() + GROUP_OVERHEAD_BYTES;
            for (row, _) in rows {
                self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
                let name = [self.state_prefix.as_slice(), &row].concat();
                match self.count(&key, &row) {
                    Some(count) => state.put(&name, encode_i64(count)),
                    None => state.delete(&name),
                }
            }
        }
        Ok(())
    }

    /// Loads the list of spilled runs, and every row from them when they
    /// are small next to the budget; returns the rows of the checkpoint's
    /// entries per row with their counts (for the caller to key and
    /// `apply`; `restored` after).
    pub fn restore<'a>(&mut self, state: &'a StateReader) -> Result<Vec<(&'a [u8], i64)>> {
        if let Some(spilled) = self.spilled.as_mut() {
            spilled.restore(state)?;
            let budget = self.budget_bytes.load(Ordering::Relaxed) as u64;
            let stored_bytes = spilled.stored_pages() * INDEXED_PAGE_BYTES as u64;
            self.complete = spilled.is_empty() || !self.evicts || stored_bytes <= budget / 2;
            if !spilled.is_empty() && self.complete {
                self.load_runs()?;
            }
        }
        let prefix_length = self.state_prefix.len();
        let entries: Vec<(&'a [u8], i64)> = state
            .with_prefix(&self.state_prefix)
            .filter_map(|(name, value)| Some((&name[prefix_length..], decode_i64(value)?)))
            .collect();
        self.restored_entries = self.spilled.is_some() && !entries.is_empty();
        Ok(entries)
    }

    /// Every spilled row into memory.
    fn load_runs(&mut self) -> Result<()> {
        let Some(spilled) = self.spilled.as_ref() else {
            return Ok(());
        };
        let mut groups: HashMap<Box<[u8]>, KeyGroup> = HashMap::default();
        for entry in spilled.merged() {
            let (entry, value) = entry?;
            let count = decode_count(value.as_deref())?;
            let key = join_key_prefix(&entry);
            let (key, row) = (&key[4..], &entry[key.len()..]);
            let group = groups.entry(key.into()).or_default();
            group.rows.insert(row.into(), count);
            group.total += count;
        }
        self.bytes += groups
            .iter()
            .map(|(key, group)| group_bytes(key, group))
            .sum::<usize>();
        self.groups = groups;
        Ok(())
    }

    /// The restored entries per row were applied: they are changes to
    /// write (as a run, spilling) no more than the checkpoint has.
    pub fn restored(&mut self) {
        if !self.restored_entries {
            let bytes: usize = (self.changed.iter())
                .map(|(key, rows)| {
                    let rows: usize = rows.keys().map(|row| row.len() + ROW_OVERHEAD_BYTES).sum();
                    key.len() + GROUP_OVERHEAD_BYTES + rows
                })
                .sum();
            self.bytes -= bytes;
            self.changed.clear();
            self.changed_bytes = 0;
        }
    }

    /// Every row in memory (all of them while `complete`).
    pub fn rows(&self) -> impl Iterator<Item = &[u8]> {
        self.groups
            .values()
            .flat_map(|group| group.rows.keys().map(|row| &**row))
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.spilled.as_ref().map_or(0, SpilledRuns::memory_bytes)
    }

    /// Every row in memory with its count (every row when nothing
    /// spilled: tests and checks).
    #[cfg(test)]
    pub fn stored(&self) -> std::collections::HashSet<(Vec<u8>, i64)> {
        self.groups
            .values()
            .flat_map(|group| group.rows.iter().map(|(row, count)| (row.to_vec(), *count)))
            .collect()
    }
}

fn group_bytes(key: &[u8], group: &KeyGroup) -> usize {
    let rows: usize = group
        .rows
        .keys()
        .map(|row| row.len() + ROW_OVERHEAD_BYTES)
        .sum();
    key.len() + GROUP_OVERHEAD_BYTES + rows
}

/// Sets `prefix` to what a spilled entry of join key `key` starts with.
fn entry_prefix(key: &[u8], prefix: &mut Vec<u8>) {
    prefix.clear();
    prefix.extend_from_slice(&(key.len() as u32).to_be_bytes());
    prefix.extend_from_slice(key);
}

/// The join key part of a spilled entry's key (what the runs' filters
/// hold); all of it if it is malformed (no probe then finds it).
fn join_key_prefix(entry: &[u8]) -> &[u8] {
    let length = entry
        .get(..4)
        .map(|bytes| u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize);
    match length.and_then(|length| entry.get(..4 + length)) {
        Some(prefix) => prefix,
        None => entry,
    }
}

/// Runs of fewer entries than this are never rewritten whole.
const COMPACT_SLACK_ENTRIES: u64 = 16;

/// Rough per-entry costs of the hash maps, for the memory gauge.
pub const GROUP_OVERHEAD_BYTES: usize = 96;
pub const ROW_OVERHEAD_BYTES: usize = 48;
