//! Sorted runs: how keyed and counted views keep their rows, and how
//! operators keep state that outgrows memory (`stream/spill`). A run is a
//! set of changes sorted by key, written once in pages under a key space
//! (a prefix of the store's keys) and never changed. An entry is a key and
//! its value, or no value where the key was deleted, and a key's value is
//! its entry in the newest run that has one; in a counted view an entry is
//! a row and a change of its count, and a row's count is the sum of its
//! entries (`Combine`). Reading merges the runs page by page; merging the
//! newest runs together keeps them few (an LSM tree of pages over the
//! store). A run written with an index (`write_indexed_run`) can also be
//! asked for one key (`lookup`).

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{StateStore, WriteBatch};

mod index;
use crate::error::{sqlstate, Result, WeirError};
use index::missing;
pub use index::{
    lookup, lookup_prefix, stored_entries, write_indexed_run, Found, RunIndex, INDEXED_PAGE_BYTES,
};

/// Entries per page: what a reader holds of each run at once.
const PAGE_ENTRIES: usize = 4096;
/// A page entry's row length that says "deleted".
const DELETED: u32 = u32::MAX;

/// A key and its row (Arrow's row format), None where it was deleted.
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// A stored run: its id, pages and entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: u64,
    pub pages: u32,
    pub entries: u64,
}

/// The runs a reader sees, oldest first. A run is shared by every list
/// holding it, so one nothing holds but the retired list can go.
pub type RunList = Arc<Vec<Arc<Run>>>;

/// Where run `run` of key space `space` keeps its pages (and its index).
pub fn run_prefix(space: &[u8], run: u64) -> Vec<u8> {
    let mut key = space.to_vec();
    key.extend_from_slice(&run.to_be_bytes());
    key
}

fn page_key(space: &[u8], run: u64, page: u32) -> Vec<u8> {
    let mut key = run_prefix(space, run);
    key.extend_from_slice(&page.to_be_bytes());
    key
}

/// The write that deletes every page of run `id`.
pub fn delete_run(space: &[u8], id: u64, writes: &mut WriteBatch) {
    writes.delete_prefix(run_prefix(space, id));
}

/// The ids of the runs with pages stored under key space `space`: one
/// entry read per run (the scan jumps past each run's pages).
pub fn stored_run_ids(store: &dyn StateStore, space: &[u8]) -> Result<Vec<u64>> {
    let mut end = space.to_vec();
    end.push(u8::MAX);
    let mut from = space.to_vec();
    let mut ids: Vec<u64> = Vec::new();
    while let Some(entry) = store.scan_range(&from, &end).next() {
        let key = entry?.0;
        let id = key.get(space.len()..space.len() + 8);
        let id = id
            .and_then(|bytes| bytes.try_into().ok())
            .map(u64::from_be_bytes);
        let id = id.ok_or_else(|| malformed("a run's page key"))?;
        ids.push(id);
        match id.checked_add(1) {
            Some(next) => from = run_prefix(space, next),
            None => break,
        }
    }
    Ok(ids)
}

fn malformed(what: &str) -> WeirError {
    WeirError::new(sqlstate::DATA_CORRUPTED, format!("{what} is malformed"))
}

fn encode_page(entries: &[Entry]) -> Vec<u8> {
    let bytes: usize = entries
        .iter()
        .map(|(key, row)| 8 + key.len() + row.as_ref().map_or(0, Vec::len))
        .sum();
    let mut page = Vec::with_capacity(4 + bytes);
    page.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for (key, row) in entries {
        page.extend_from_slice(&(key.len() as u32).to_be_bytes());
        page.extend_from_slice(key);
        match row {
            Some(row) => {
                page.extend_from_slice(&(row.len() as u32).to_be_bytes());
                page.extend_from_slice(row);
            }
            None => page.extend_from_slice(&DELETED.to_be_bytes()),
        }
    }
    page
}

fn take<'a>(bytes: &mut &'a [u8], length: usize) -> Result<&'a [u8]> {
    let (head, rest) = bytes
        .split_at_checked(length)
        .ok_or_else(|| malformed("a stored run's page"))?;
    *bytes = rest;
    Ok(head)
}

fn take_length(bytes: &mut &[u8]) -> Result<u32> {
    let head = take(bytes, 4)?;
    Ok(u32::from_be_bytes([head[0], head[1], head[2], head[3]]))
}

fn decode_page(mut bytes: &[u8]) -> Result<VecDeque<Entry>> {
    let count = take_length(&mut bytes)? as usize;
    let mut entries = VecDeque::with_capacity(count.min(PAGE_ENTRIES));
    for _ in 0..count {
        let key_length = take_length(&mut bytes)? as usize;
        let key = take(&mut bytes, key_length)?.to_vec();
        let row = match take_length(&mut bytes)? {
            DELETED => None,
            length => Some(take(&mut bytes, length as usize)?.to_vec()),
        };
        entries.push_back((key, row));
    }
    Ok(entries)
}

/// Writes `entries` (sorted by key, each key once) as run `id` of key
/// space `space`, in pages of `PAGE_ENTRIES`, handing them to `stage` some
/// megabytes at a time.
pub fn write_run(
    space: &[u8],
    id: u64,
    entries: impl Iterator<Item = Result<Entry>>,
    stage: &mut dyn FnMut(WriteBatch) -> Result<()>,
) -> Result<Run> {
    let writer = RunWriter::new(space, id, usize::MAX, None);
    Ok(writer.write_all(entries, stage)?.0)
}

/// Writes every entry into `writes`.
pub fn into_batch(writes: &mut WriteBatch) -> impl FnMut(WriteBatch) -> Result<()> + '_ {
    |pages| {
        writes.extend(pages);
        Ok(())
    }
}

/// Pages an indexed run hands to `stage` at a time.
const STAGED_PIECE_BYTES: usize = 8 << 20;

/// Fills pages of a run and writes each as it fills.
struct RunWriter<'a> {
    space: &'a [u8],
    run: Run,
    page: Vec<Entry>,
    page_bytes: usize,
    most_page_bytes: usize,
    index: Option<RunIndex>,
    /// The part of an entry's key its index's filter holds (`FilterKey`).
    filter_key: FilterKey,
}

/// The part of an entry's key a run's filter holds: all of it for point
/// lookups, or a prefix its entries share when they are asked for by it
/// (`lookup_prefix`).
pub type FilterKey = fn(&[u8]) -> &[u8];

/// The whole key.
pub fn whole_key(key: &[u8]) -> &[u8] {
    key
}

impl<'a> RunWriter<'a> {
    fn new(
        space: &'a [u8],
        id: u64,
        most_page_bytes: usize,
        index: Option<(RunIndex, FilterKey)>,
    ) -> Self {
        let (index, filter_key) = match index {
            Some((index, filter_key)) => (Some(index), filter_key),
            None => (None, whole_key as FilterKey),
        };
        RunWriter {
            space,
            run: Run {
                id,
                pages: 0,
                entries: 0,
            },
            page: Vec::new(),
            page_bytes: 0,
            most_page_bytes,
            index,
            filter_key,
        }
    }

    fn push(&mut self, entry: Entry, writes: &mut WriteBatch) {
        if let Some(index) = self.index.as_mut() {
            if self.page.is_empty() {
                index.first_keys.push(entry.0.clone().into_boxed_slice());
            }
            index.filter.insert((self.filter_key)(&entry.0));
        }
        self.page_bytes += 8 + entry.0.len() + entry.1.as_ref().map_or(0, Vec::len);
        self.page.push(entry);
        if self.page.len() == PAGE_ENTRIES || self.page_bytes >= self.most_page_bytes {
            self.write_page(writes);
        }
    }

    fn write_page(&mut self, writes: &mut WriteBatch) {
        let key = page_key(self.space, self.run.id, self.run.pages);
        // Written once and deleted whole: a log record to the store.
        writes.put_log(key, encode_page(&self.page));
        self.run.pages += 1;
        self.run.entries += self.page.len() as u64;
        self.page.clear();
        self.page_bytes = 0;
    }

    /// Writes every entry, handing pages to `stage` a piece at a time.
    fn write_all(
        mut self,
        entries: impl Iterator<Item = Result<Entry>>,
        stage: &mut dyn FnMut(WriteBatch) -> Result<()>,
    ) -> Result<(Run, Option<RunIndex>)> {
        let mut writes = WriteBatch::new();
        for entry in entries {
            self.push(entry?, &mut writes);
            if writes.size_bytes() >= STAGED_PIECE_BYTES {
                stage(std::mem::take(&mut writes))?;
            }
        }
        let finished = self.finish(&mut writes);
        stage(writes)?;
        Ok(finished)
    }

    fn finish(mut self, writes: &mut WriteBatch) -> (Run, Option<RunIndex>) {
        if !self.page.is_empty() {
            self.write_page(writes);
        }
        (self.run, self.index)
    }
}

/// A run's entries in key order, a page read at a time.
pub struct RunCursor {
    store: Arc<dyn StateStore>,
    space: Vec<u8>,
    run: Arc<Run>,
    next_page: u32,
    entries: VecDeque<Entry>,
}

impl RunCursor {
    pub fn new(store: Arc<dyn StateStore>, space: &[u8], run: Arc<Run>) -> Self {
        RunCursor {
            store,
            space: space.to_vec(),
            run,
            next_page: 0,
            entries: VecDeque::new(),
        }
    }

    fn fill(&mut self) -> Result<()> {
        while self.entries.is_empty() && self.next_page < self.run.pages {
            let key = page_key(&self.space, self.run.id, self.next_page);
            let page = self
                .store
                .get(&key)?
                .ok_or_else(|| missing(&self.space, self.run.id, "a page"))?;
            self.entries = decode_page(&page)?;
            self.next_page += 1;
        }
        Ok(())
    }
}

/// Where a merge reads entries from: a stored run, or changes in memory.
pub enum Source {
    Run(RunCursor),
    Memory(std::vec::IntoIter<Entry>, Option<Entry>),
}

impl Source {
    /// Changes in memory, sorted by key (`sorted_changes`).
    pub fn memory(changes: Vec<Entry>) -> Self {
        let mut entries = changes.into_iter();
        let first = entries.next();
        Source::Memory(entries, first)
    }

    /// Reads the next page of a run whose read entries are all taken.
    fn fill(&mut self) -> Result<()> {
        match self {
            Source::Run(cursor) => cursor.fill(),
            Source::Memory(..) => Ok(()),
        }
    }

    /// The next entry's key, once `fill` has read it.
    fn front_key(&self) -> Option<&[u8]> {
        match self {
            Source::Run(cursor) => cursor.entries.front(),
            Source::Memory(_, next) => next.as_ref(),
        }
        .map(|(key, _)| key.as_slice())
    }

    fn pop(&mut self) -> Option<Entry> {
        match self {
            Source::Run(cursor) => cursor.entries.pop_front(),
            Source::Memory(entries, next) => std::mem::replace(next, entries.next()),
        }
    }
}

/// How a merge makes one entry of a key's entries in several sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// The newest source's entry (a keyed view: key -> row).
    Newest,
    /// The sum of the entries' counts (a counted view: row -> count
    /// change, `encode_count`); a key whose changes cancel is left out.
    Sum,
}

/// A count change as a counted run's entry holds it.
pub fn encode_count(count: i64) -> Vec<u8> {
    count.to_le_bytes().to_vec()
}

/// A counted run's entry's count change.
pub fn decode_count(value: Option<&[u8]>) -> Result<i64> {
    let bytes = value.and_then(|bytes| <[u8; 8]>::try_from(bytes).ok());
    let bytes = bytes.ok_or_else(|| malformed("a counted view's entry"))?;
    Ok(i64::from_le_bytes(bytes))
}

/// The entries of several sources in key order, each key once: from the
/// newest source that has it (deleted keys left out when `complete`:
/// nothing older is left to hide), or summed (`Combine`).
pub struct Merge {
    /// Newest first.
    sources: Vec<Source>,
    complete: bool,
    combine: Combine,
}

impl Merge {
    pub fn new(sources: Vec<Source>, complete: bool, combine: Combine) -> Self {
        Merge {
            sources,
            complete,
            combine,
        }
    }

    /// The position of the newest source whose next key is the smallest.
    fn smallest(&mut self) -> Result<Option<usize>> {
        for source in &mut self.sources {
            source.fill()?;
        }
        let mut smallest: Option<(usize, &[u8])> = None;
        for (position, source) in self.sources.iter().enumerate() {
            if let Some(key) = source.front_key() {
                if smallest.is_none_or(|(_, low)| key < low) {
                    smallest = Some((position, key));
                }
            }
        }
        Ok(smallest.map(|(position, _)| position))
    }

    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            let Some(newest) = self.smallest()? else {
                return Ok(None);
            };
            let Some(entry) = self.sources[newest].pop() else {
                return Ok(None);
            };
            let mut sum = match self.combine {
                Combine::Sum => decode_count(entry.1.as_deref())?,
                Combine::Newest => 0,
            };
            // Older sources were filled by `smallest` and not taken from.
            for source in &mut self.sources[newest + 1..] {
                if source.front_key() == Some(entry.0.as_slice()) {
                    let older = source.pop();
                    if self.combine == Combine::Sum {
                        sum += decode_count(older.as_ref().and_then(|e| e.1.as_deref()))?;
                    }
                }
            }
            match (self.combine, entry) {
                (Combine::Sum, _) if sum == 0 => continue,
                (Combine::Sum, _) if sum < 0 && self.complete => {
                    return Err(WeirError::internal(
                        "stored runs would hold a row fewer than zero times",
                    ))
                }
                (Combine::Sum, (key, _)) => return Ok(Some((key, Some(encode_count(sum))))),
                (Combine::Newest, (_, None)) if self.complete => continue,
                (Combine::Newest, entry) => return Ok(Some(entry)),
            }
        }
    }
}

impl Iterator for Merge {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        self.next_entry().transpose()
    }
}

/// How many of the newest of `runs` (entry counts, oldest first) to merge
/// with `new` entries: while the next older run is less than four
/// times what is merged so far, it joins — so each run is several times
/// bigger than the next newer one, and there are few of them.
pub fn runs_to_merge(runs: &[Arc<Run>], new: u64) -> usize {
    runs_to_merge_by(runs, new, 4, 12)
}

/// `runs_to_merge` with a run `factor` times the next newer one and at
/// most `most_runs` runs: a larger factor rewrites entries fewer times
/// and leaves more runs.
pub fn runs_to_merge_by(runs: &[Arc<Run>], new: u64, factor: u64, most_runs: usize) -> usize {
    let mut merged = new;
    let mut taken = 0;
    for run in runs.iter().rev() {
        let too_many = runs.len() - taken >= most_runs;
        let small = merged > 0 && run.entries < factor * merged;
        if !small && !too_many {
            break;
        }
        merged += run.entries;
        taken += 1;
    }
    taken
}

/// How many of the newest of `runs` (oldest first) to merge with `new`
/// entries, tiered: runs sit in tiers by size (a tier per power of
/// `factor`), and once `factor` runs are in the newest tier they become
/// one run of the next (cascading), so an entry is rewritten about
/// log_factor(state / run) times and a tier holds fewer than `factor` runs.
/// (`runs_to_merge_by` merges while the next older run is small next to
/// what is merged so far: with runs of equal size arriving, each merge
/// rewrites everything merged before, until it is `factor` times a run.)
/// Past `most_runs`, the newest two are merged as well.
pub fn runs_to_merge_tiered(runs: &[Arc<Run>], new: u64, factor: u64, most_runs: usize) -> usize {
    let tier = |entries: u64| {
        let (mut tier, mut entries) = (0u32, entries.max(1));
        while entries >= factor {
            entries /= factor;
            tier += 1;
        }
        tier
    };
    let mut sizes: Vec<u64> = runs.iter().map(|run| run.entries).collect();
    sizes.push(new);
    // The first of `runs` in the merge: all merges take the newest.
    let mut start = runs.len();
    loop {
        let newest = tier(sizes[sizes.len() - 1]);
        let in_tier = (sizes.iter().rev())
            .take_while(|size| tier(**size) <= newest)
            .count();
        let merged = match in_tier >= factor as usize {
            true => in_tier,
            false if sizes.len() > most_runs => 2,
            false => break,
        };
        let total: u64 = sizes.split_off(sizes.len() - merged).iter().sum();
        sizes.push(total);
        start -= merged - 1;
    }
    runs.len() - start
}

#[cfg(test)]
mod tests;
