//! The one bin of a GROUP BY without a window, past a memory budget: its
//! groups written out as sorted runs (`stream/spill`) and let go, then read
//! back as batches touch them. A run entry is a group: its key in row
//! format, and its row count and every call's state columns (the calls'
//! own state layout, row format); a group whose rows all went is a
//! deleted entry. The newest run's entry of a key is the group.
//!
//! Groups new to memory are looked up in the runs before a batch updates
//! them (`read_back`), unless nothing was ever let go (`complete`). Past
//! the budget, between batches, the groups changed since the last run are
//! written as one and the bin starts empty (`settle`); a checkpoint writes
//! the changed groups as a run and lists the runs, so it costs what
//! changed, not the bin.
//!
//! A write group that fails is undone in memory as before (each group as
//! it was when the group first touched it); groups a spill let go in the
//! middle of it were written with its changes, so the spill keeps how they
//! were before it (`before`), and a rollback writes those over them.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BinaryArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::HashMap;

use super::updating_bin::{UpdatingBin, UpdatingShape};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::runs::{Entry, INDEXED_PAGE_BYTES};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::spill::{SpillSpace, SpilledRuns};

/// Groups read back from the runs are decoded this many at a time.
const LOAD_BATCH_GROUPS: usize = 8192;

pub struct BinSpill {
    runs: SpilledRuns,
    budget_bytes: Arc<AtomicUsize>,
    /// The calls' state columns, in row format.
    converter: RowConverter,
    types: Vec<DataType>,
    /// No group was let go: memory holds every group.
    complete: bool,
    /// Groups the write group running now changed and a spill let go:
    /// their entries as they were before it (None: no such group).
    before: HashMap<Box<[u8]>, Option<Vec<u8>>>,
    before_bytes: usize,
}

impl BinSpill {
    /// A spill for bins of `shape` into `space`; None when the calls'
    /// state has no row format (the bin then stays in memory).
    pub fn new(space: SpillSpace, shape: &UpdatingShape) -> Result<Option<Self>> {
        let (_, states) = UpdatingBin::new(shape)?.group_states(&[])?;
        let types: Vec<DataType> = states
            .iter()
            .map(|state| state.data_type().clone())
            .collect();
        let fields = types
            .iter()
            .map(|data_type| SortField::new(data_type.clone()));
        let Ok(converter) = RowConverter::new(fields.collect()) else {
            return Ok(None);
        };
        Ok(Some(BinSpill {
            budget_bytes: space.budget_bytes.clone(),
            runs: SpilledRuns::new(space),
            converter,
            types,
            complete: true,
            before: HashMap::default(),
            before_bytes: 0,
        }))
    }

    /// Reads `groups` (new to `bin`, empty) back from the runs.
    pub fn read_back(
        &self,
        bin: &mut UpdatingBin,
        groups: Range<usize>,
        shape: &UpdatingShape,
    ) -> Result<()> {
        if self.complete || groups.is_empty() || self.runs.is_empty() {
            return Ok(());
        }
        let mut found = Vec::new();
        for group in groups {
            let key = bin.key_row(group as u32);
            if let Some(Some(value)) = self.runs.get(key)? {
                found.push((key.to_vec(), value));
            }
        }
        self.load(bin, &found, shape)
    }

    /// Merges stored groups (key, entry value) into `bin`.
    fn load(
        &self,
        bin: &mut UpdatingBin,
        groups: &[(Vec<u8>, Vec<u8>)],
        shape: &UpdatingShape,
    ) -> Result<()> {
        if groups.is_empty() {
            return Ok(());
        }
        let parser = self.converter.parser();
        let mut rows = Vec::with_capacity(groups.len());
        let mut states = Vec::with_capacity(groups.len());
        for (_, value) in groups {
            let (count, state) = value.split_at_checked(8).ok_or_else(damaged)?;
            rows.push(i64::from_le_bytes(count.try_into().map_err(|_| damaged())?));
            states.push(parser.parse(state));
        }
        let states = self.converter.convert_rows(states)?;
        let keys = BinaryArray::from_iter_values(groups.iter().map(|(key, _)| key));
        bin.merge(&keys, &states, Some(&rows), shape)
    }

    /// `groups`' entries, sorted by key: row count and state, or deleted.
    fn entries(&self, bin: &UpdatingBin, groups: &[u32]) -> Result<Vec<Entry>> {
        let (rows, states) = bin.group_states(groups)?;
        let states = (states.iter().zip(&self.types))
            .map(|(state, data_type)| match state.data_type() == data_type {
                true => Ok(Arc::clone(state)),
                false => Ok(cast(state, data_type)?),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let encoded = self.converter.convert_columns(&states)?;
        let mut entries: Vec<Entry> = (groups.iter().enumerate())
            .map(|(index, &group)| {
                let value = (rows[index] > 0).then(|| {
                    let state = encoded.row(index);
                    let mut value = Vec::with_capacity(8 + state.as_ref().len());
                    value.extend_from_slice(&rows[index].to_le_bytes());
                    value.extend_from_slice(state.as_ref());
                    value
                });
                (bin.key_row(group).to_vec(), value)
            })
            .collect();
        entries.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        Ok(entries)
    }

    /// Writes the groups changed since the last run as one.
    fn spill_dirty(&mut self, bin: &mut UpdatingBin) -> Result<()> {
        let groups = bin.take_dirty();
        if groups.is_empty() {
            return Ok(());
        }
        let entries = self.entries(bin, &groups)?;
        self.runs.spill(entries)
    }

    /// Past the budget, writes the changed groups and empties `bin`
    /// (between batches), keeping how the groups the write group changed
    /// were before it while it `keeps_undo`.
    pub fn settle(
        &mut self,
        bin: &mut UpdatingBin,
        shape: &UpdatingShape,
        keeps_undo: bool,
    ) -> Result<()> {
        if bin.memory_bytes() <= self.budget_bytes.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.spill_dirty(bin)?;
        if keeps_undo && bin.changed_in_write_group() {
            let saved = bin.saved_groups();
            bin.undo();
            for (key, value) in self.entries(bin, &saved)? {
                if !self.before.contains_key(key.as_slice()) {
                    self.before_bytes += key.len() + value.as_ref().map_or(0, Vec::len) + 64;
                    self.before.insert(key.into(), value);
                }
            }
        }
        *bin = UpdatingBin::new(shape)?;
        self.complete = false;
        Ok(())
    }

    /// Bytes of what a rollback would write back.
    pub fn undo_bytes(&self) -> usize {
        self.before_bytes
    }

    /// The write group committed (or gave its undo up).
    pub fn forget(&mut self) {
        self.before = HashMap::default();
        self.before_bytes = 0;
    }

    /// After `bin` was undone in memory: if a spill let groups go in the
    /// middle of the write group, writes memory out and then those groups
    /// as they were before it, and empties `bin`.
    pub fn roll_back(&mut self, bin: &mut UpdatingBin, shape: &UpdatingShape) -> Result<()> {
        if self.before.is_empty() {
            return Ok(());
        }
        self.spill_dirty(bin)?;
        let before = std::mem::take(&mut self.before);
        let mut entries: Vec<Entry> = (before.into_iter())
            .map(|(key, value)| (key.into_vec(), value))
            .collect();
        entries.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        self.runs.spill(entries)?;
        self.before_bytes = 0;
        *bin = UpdatingBin::new(shape)?;
        self.complete = false;
        Ok(())
    }

    /// Writes the groups changed since the last run as one, and lists
    /// the runs in the checkpoint.
    pub fn checkpoint(
        &mut self,
        bin: Option<&mut UpdatingBin>,
        state: &mut StateWriter,
    ) -> Result<()> {
        if let Some(bin) = bin {
            self.spill_dirty(bin)?;
        }
        self.runs.checkpoint(state)
    }

    /// The bin a checkpoint's runs hold: every group when they are small
    /// next to the budget, else none (read back as batches touch them).
    pub fn restore(&mut self, state: &StateReader, shape: &UpdatingShape) -> Result<UpdatingBin> {
        self.runs.restore(state)?;
        let mut bin = UpdatingBin::new(shape)?;
        let budget = self.budget_bytes.load(Ordering::Relaxed) as u64;
        let stored_bytes = self.runs.stored_pages() * INDEXED_PAGE_BYTES as u64;
        self.complete = self.runs.is_empty() || stored_bytes <= budget / 2;
        if self.complete && !self.runs.is_empty() {
            let mut groups = Vec::with_capacity(LOAD_BATCH_GROUPS);
            for entry in self.runs.merged() {
                let (key, value) = entry?;
                if let Some(value) = value {
                    groups.push((key, value));
                }
                if groups.len() == LOAD_BATCH_GROUPS {
                    self.load(&mut bin, &groups, shape)?;
                    groups.clear();
                }
            }
            self.load(&mut bin, &groups, shape)?;
        }
        Ok(bin)
    }

    /// Bytes held besides the bin: the runs' indexes and the undo.
    pub fn memory_bytes(&self) -> usize {
        self.runs.memory_bytes() + self.before_bytes
    }
}

fn damaged() -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        "an aggregate's spilled group is damaged",
    )
}
