//! Operator state that outgrows memory. An operator keeps its hot entries
//! in memory and, past a budget, writes the entries changed since it last
//! did as a sorted run (`state::runs`, with an index for point lookups) in
//! its own key space (`opstate/<view>/<slot>/`), then forgets them; an
//! entry not in memory is looked up in the runs, newest first. A
//! checkpoint writes what changed as one more run and lists the runs in
//! the operator's checkpoint (`spilled`), so a checkpoint of millions of
//! entries is a few pages, not millions of keys, and recovery reads the
//! list and the runs' indexes, not the entries.
//!
//! A run written between checkpoints is not listed until the next one: a
//! crash leaves it unlisted, and runs merged away stay until the
//! checkpoint that stops listing them. Both are deleted with the next
//! checkpoint of the operator that finds them (`doomed`), atomically with
//! the list that no longer names them.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::checkpoint::{StateReader, StateWriter};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::runs::{
    self, Combine, Entry, FilterKey, Merge, Run, RunCursor, RunIndex, Source,
};
use crate::state::{key, StateStore, WriteBatch};

/// Every operator's spilled state of view `view_id` (deleted with it).
pub fn view_space(view_id: u64) -> Vec<u8> {
    let mut space = key(&[b"opstate", &view_id.to_be_bytes()]);
    space.push(b'/');
    space
}

/// Where the operator in checkpoint slot `slot` of view `view_id` spills.
pub fn operator_space(view_id: u64, slot: usize) -> Vec<u8> {
    let mut space = view_space(view_id);
    space.extend_from_slice(&(slot as u32).to_be_bytes());
    space.push(b'/');
    space
}

/// A store and the key space an operator may spill to, and the memory
/// its state may take before it spills (shared by every operator, and
/// changed while they run: `--operator-cache-size`).
#[derive(Clone)]
pub struct SpillSpace {
    pub store: Arc<dyn StateStore>,
    pub space: Vec<u8>,
    pub budget_bytes: Arc<AtomicUsize>,
}

impl SpillSpace {
    /// Key space `space` of `store` with a fixed budget (tests).
    #[cfg(test)]
    pub fn for_test(store: Arc<dyn StateStore>, space: &[u8], budget_bytes: usize) -> Self {
        SpillSpace {
            store,
            space: space.to_vec(),
            budget_bytes: Arc::new(AtomicUsize::new(budget_bytes)),
        }
    }
}

/// The memory an operator's state may take before it spills, unless set.
pub const DEFAULT_BUDGET_BYTES: usize = 64 << 20;

/// The checkpoint entry listing an operator's runs.
const HEAD: &[u8] = b"spilled";

/// What the checkpoint lists: the runs, oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Head {
    runs: Vec<Run>,
}

/// An operator's runs, oldest first, with their indexes.
pub struct SpilledRuns {
    target: SpillSpace,
    /// How a key's entries in several runs make one: the newest (a key's
    /// value), or their sum (a row's count change, `runs::encode_count`).
    combine: Combine,
    /// What of a key the runs' filters hold (all of it, or the prefix
    /// `get_prefix` asks by).
    filter_key: FilterKey,
    /// The checkpoint entry that lists the runs.
    head: Vec<u8>,
    runs: Vec<(Arc<Run>, RunIndex)>,
    /// The next run's id: past every id stored in the space.
    next_run: u64,
    /// Runs stored that the next checkpoint will not list (a crash's, a
    /// rebuilt view's, or merged away): deleted with it.
    doomed: Vec<u64>,
    /// Whether the stored runs were listed (once, at restore or the first
    /// spill).
    opened: bool,
    /// The list changed since the last checkpoint.
    changed: bool,
    index_bytes: usize,
}

impl SpilledRuns {
    /// Runs of keys and their values (the newest run's value of a key is
    /// its value).
    pub fn new(target: SpillSpace) -> Self {
        Self::with(target, Combine::Newest, runs::whole_key, HEAD.to_vec())
    }

    /// Runs of rows and their count changes (a row's count is the sum of
    /// its entries), asked for by the prefix `filter_key` gives, listed in
    /// the checkpoint entry `head` (an operator may have several).
    pub fn counted(target: SpillSpace, filter_key: FilterKey, head: Vec<u8>) -> Self {
        Self::with(target, Combine::Sum, filter_key, head)
    }

    fn with(target: SpillSpace, combine: Combine, filter_key: FilterKey, head: Vec<u8>) -> Self {
        SpilledRuns {
            target,
            combine,
            filter_key,
            head,
            runs: Vec::new(),
            next_run: 0,
            doomed: Vec::new(),
            opened: false,
            changed: false,
            index_bytes: 0,
        }
    }

    /// Lists the runs stored in the space: any the restored list does not
    /// name are doomed, and new ids start past them all.
    fn open(&mut self) -> Result<()> {
        if self.opened {
            return Ok(());
        }
        self.opened = true;
        for id in runs::stored_run_ids(&*self.target.store, &self.target.space)? {
            self.next_run = self.next_run.max(id + 1);
            if !self.runs.iter().any(|(run, _)| run.id == id) {
                self.doomed.push(id);
            }
        }
        Ok(())
    }

    /// Loads the list the last checkpoint wrote and the runs' indexes.
    pub fn restore(&mut self, state: &StateReader) -> Result<()> {
        if let Some(bytes) = state.get(&self.head) {
            let head: Head = serde_json::from_slice(bytes).map_err(|error| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!("an operator's list of spilled runs is damaged: {error}"),
                )
            })?;
            for run in head.runs {
                let index = RunIndex::read(&*self.target.store, &self.target.space, run.id)?;
                self.index_bytes += index.memory_bytes();
                self.next_run = self.next_run.max(run.id + 1);
                self.runs.push((Arc::new(run), index));
            }
        }
        self.open()
    }

    /// `key`'s value in the newest run that has it: Some(None) where it was
    /// deleted, None where no run has it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let runs = self.runs.iter().map(|(run, index)| (&**run, index));
        runs::lookup(&*self.target.store, &self.target.space, runs, key)
    }

    /// Every entry whose key starts with `prefix` (a prefix the filters
    /// hold: `counted`), oldest run first, handed to `found`.
    pub fn get_prefix(&self, prefix: &[u8], found: &mut runs::Found<'_>) -> Result<()> {
        let runs = self.runs.iter().map(|(run, index)| (&**run, index));
        runs::lookup_prefix(&*self.target.store, &self.target.space, runs, prefix, found)
    }

    /// Every run's entries merged, in key order.
    pub fn merged(&self) -> Merge {
        let sources = (self.runs.iter().rev())
            .map(|(run, _)| {
                let store = self.target.store.clone();
                Source::Run(RunCursor::new(store, &self.target.space, run.clone()))
            })
            .collect();
        Merge::new(sources, true, self.combine)
    }

    /// Pages the runs hold (about `runs::INDEXED_PAGE_BYTES` each).
    pub fn stored_pages(&self) -> u64 {
        self.runs.iter().map(|(run, _)| u64::from(run.pages)).sum()
    }

    /// Entries the runs hold (a key in several runs counts in each).
    pub fn stored_entries(&self) -> u64 {
        self.runs.iter().map(|(run, _)| run.entries).sum()
    }

    /// Writes `entries` (sorted, each once) as the only run: every run
    /// stored goes with the next checkpoint. For an operator that holds
    /// all its state in memory and whose runs outgrew it.
    pub fn rewrite(&mut self, entries: Vec<Entry>) -> Result<()> {
        self.open()?;
        for (run, index) in self.runs.drain(..) {
            self.index_bytes -= index.memory_bytes();
            self.doomed.push(run.id);
        }
        self.changed = true;
        self.spill(entries)
    }

    /// Whether any run is stored.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    #[cfg(test)]
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// The listed runs' ids, oldest first.
    #[cfg(test)]
    pub fn run_ids(&self) -> Vec<u64> {
        self.runs.iter().map(|(run, _)| run.id).collect()
    }

    /// Writes `entries` (sorted by key, each once; None: deleted) as a new
    /// run, merged with the newest runs while they are small next to it
    /// (`runs::runs_to_merge_tiered`), ahead of its listing by a checkpoint.
    pub fn spill(&mut self, entries: Vec<Entry>) -> Result<()> {
        self.open()?;
        let listed: Vec<Arc<Run>> = self.runs.iter().map(|(run, _)| run.clone()).collect();
        // Tiers of eight: an entry is rewritten about log8(state / budget)
        // times; a lookup probes each run's filter (fewer than eight a
        // tier), which costs less than the writes a smaller factor makes.
        let taken = runs::runs_to_merge_tiered(&listed, entries.len() as u64, 8, 24);
        if entries.is_empty() && taken == 0 {
            return Ok(());
        }
        let merged_away = self.runs.split_off(self.runs.len() - taken);
        let expected = entries.len()
            + merged_away
                .iter()
                .map(|(run, _)| run.entries as usize)
                .sum::<usize>();
        let mut sources = vec![Source::memory(entries)];
        for (run, _) in merged_away.iter().rev() {
            let cursor = RunCursor::new(self.target.store.clone(), &self.target.space, run.clone());
            sources.push(Source::Run(cursor));
        }
        // Nothing older is left to hide when every run is merged.
        let merge = Merge::new(sources, self.runs.is_empty(), self.combine);
        let id = self.next_run;
        self.next_run += 1;
        // Durable with the checkpoint that lists it; until then a crash
        // leaves it unlisted.
        let store = self.target.store.clone();
        let mut stage = |writes: WriteBatch| store.stage(writes);
        let (run, index) = runs::write_indexed_run(
            &self.target.space,
            id,
            merge,
            expected,
            self.filter_key,
            &mut stage,
        )?;
        for (run, index) in merged_away {
            self.index_bytes -= index.memory_bytes();
            self.doomed.push(run.id);
        }
        if run.entries > 0 {
            self.index_bytes += index.memory_bytes();
            self.runs.push((Arc::new(run), index));
        } else {
            self.doomed.push(run.id);
        }
        self.changed = true;
        Ok(())
    }

    /// Lists the runs in the checkpoint, and deletes the doomed ones with
    /// it.
    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if self.changed {
            let head = Head {
                runs: self.runs.iter().map(|(run, _)| (**run).clone()).collect(),
            };
            let encoded = serde_json::to_vec(&head).map_err(|error| {
                WeirError::internal(format!("cannot encode spilled runs: {error}"))
            })?;
            state.put(&self.head, encoded);
            self.changed = false;
        }
        for id in self.doomed.drain(..) {
            state.delete_outside(runs::run_prefix(&self.target.space, id));
        }
        Ok(())
    }

    /// Bytes the runs' indexes hold in memory.
    pub fn memory_bytes(&self) -> usize {
        self.index_bytes
    }
}
