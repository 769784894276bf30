//! Runs written for point lookups: small pages and an index of them (each
//! page's first key and a filter of the keys), stored beside the pages
//! and kept in memory by whoever looks keys up (`stream/spill`).

use super::{malformed, page_key, take, take_length, Entry, FilterKey, Run, RunWriter, DELETED};
use crate::error::Result;
use crate::error::{sqlstate, WeirError};
use crate::state::key_filter::KeyFilter;
use crate::state::{StateStore, WriteBatch};

/// Bytes past which an indexed run's page ends: a lookup reads one page.
pub const INDEXED_PAGE_BYTES: usize = 16 * 1024;

/// Writes `entries` (sorted by key, each key once) as run `id` of `space`
/// in small pages, with an index of them (their first keys and a filter
/// of the keys, stored beside the pages) for `lookup`, or of the keys'
/// `filter_key` prefixes for `lookup_prefix`. The pages go to
/// `stage` some megabytes at a time, so a big run (a merge of millions of
/// entries) is never whole in memory.
pub fn write_indexed_run(
    space: &[u8],
    id: u64,
    entries: impl Iterator<Item = Result<Entry>>,
    expected_entries: usize,
    filter_key: FilterKey,
    stage: &mut dyn FnMut(WriteBatch) -> Result<()>,
) -> Result<(Run, RunIndex)> {
    let index = RunIndex::with_capacity(expected_entries);
    let writer = RunWriter::new(space, id, INDEXED_PAGE_BYTES, Some((index, filter_key)));
    let (run, index) = writer.write_all(entries, stage)?;
    let index = index.expect("an indexed writer keeps its index");
    let mut writes = WriteBatch::new();
    writes.put_log(index_key(space, id), index.encode());
    writes.put(count_key(space, id, run.entries), Vec::new());
    stage(writes)?;
    Ok((run, index))
}

/// The page number of the key that tells a run's entry count in its name
/// (so counting a space's entries reads keys only).
const COUNT_PAGE: u32 = u32::MAX - 1;

fn count_key(space: &[u8], run: u64, entries: u64) -> Vec<u8> {
    let mut key = page_key(space, run, COUNT_PAGE);
    key.extend_from_slice(&entries.to_be_bytes());
    key
}

/// How many entries the indexed runs under `space` hold, read from their
/// keys (a run written before runs told their count counts its pages).
pub fn stored_entries(store: &dyn StateStore, space: &[u8]) -> Result<u64> {
    let mut end = space.to_vec();
    end.push(u8::MAX);
    let (mut total, mut pages, mut run) = (0, 0, Vec::new());
    for key in store.scan_keys(space, &end) {
        let key = key?;
        let counted = key.len() >= space.len() + 20
            && key[key.len() - 12..key.len() - 8] == COUNT_PAGE.to_be_bytes();
        if counted {
            let count: [u8; 8] = key[key.len() - 8..].try_into().expect("eight bytes");
            total += u64::from_be_bytes(count);
            pages = 0;
            continue;
        }
        let this_run = &key[..key.len().saturating_sub(4)];
        if this_run != run.as_slice() {
            total += pages;
            pages = 0;
            run = this_run.to_vec();
        }
        if !key.ends_with(&u32::MAX.to_be_bytes()) {
            pages += 1;
        }
    }
    Ok(total + pages)
}

/// The key of an indexed run's index: after its pages.
fn index_key(space: &[u8], run: u64) -> Vec<u8> {
    page_key(space, run, u32::MAX)
}

/// What a point lookup needs of a run in memory: the first key of each
/// page, and a filter that rules out most keys the run lacks.
#[derive(Debug, Clone, PartialEq)]
pub struct RunIndex {
    pub(super) first_keys: Vec<Box<[u8]>>,
    pub(super) filter: KeyFilter,
}

impl RunIndex {
    fn with_capacity(entries: usize) -> Self {
        RunIndex {
            first_keys: Vec::new(),
            filter: KeyFilter::with_capacity(entries),
        }
    }

    /// Bytes it holds in memory.
    pub fn memory_bytes(&self) -> usize {
        let keys: usize = self.first_keys.iter().map(|key| key.len() + 32).sum();
        keys + self.filter.memory_bytes()
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.memory_bytes() + 8);
        bytes.extend_from_slice(&(self.first_keys.len() as u32).to_be_bytes());
        for key in &self.first_keys {
            bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
            bytes.extend_from_slice(key);
        }
        self.filter.encode_into(&mut bytes);
        bytes
    }

    fn decode(mut bytes: &[u8]) -> Result<Self> {
        let pages = take_length(&mut bytes)? as usize;
        let mut first_keys = Vec::with_capacity(pages.min(1 << 20));
        for _ in 0..pages {
            let length = take_length(&mut bytes)? as usize;
            first_keys.push(take(&mut bytes, length)?.into());
        }
        let filter = KeyFilter::decode(bytes).ok_or_else(|| malformed("a run's key filter"))?;
        Ok(RunIndex { first_keys, filter })
    }

    /// Reads run `id`'s index from the store.
    pub fn read(store: &dyn StateStore, space: &[u8], id: u64) -> Result<Self> {
        let bytes = store
            .get(&index_key(space, id))?
            .ok_or_else(|| missing(space, id, "its index"))?;
        Self::decode(&bytes)
    }

    /// The page that would hold `key`, if any could.
    fn page_of(&self, key: &[u8], hash: u64) -> Option<u32> {
        if !self.filter.may_hold(hash) {
            return None;
        }
        let after = self.first_keys.partition_point(|first| **first <= *key);
        after.checked_sub(1).map(|page| page as u32)
    }
}

pub(super) fn missing(space: &[u8], id: u64, what: &str) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!(
            "stored run {id} under {} has lost {what}",
            String::from_utf8_lossy(space)
        ),
    )
}

/// A key's entry in the newest of `runs` (oldest first, each with its
/// index) that has one: Some(None) where it was deleted, None where no run
/// has it.
pub fn lookup<'a>(
    store: &dyn StateStore,
    space: &[u8],
    runs: impl DoubleEndedIterator<Item = (&'a Run, &'a RunIndex)>,
    key: &[u8],
) -> Result<Option<Option<Vec<u8>>>> {
    let hash = KeyFilter::hash(key);
    for (run, index) in runs.rev() {
        let Some(page) = index.page_of(key, hash) else {
            continue;
        };
        let bytes = store
            .get(&page_key(space, run.id, page))?
            .ok_or_else(|| missing(space, run.id, "a page"))?;
        if let Some(found) = find_in_page(&bytes, key)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// What is handed each entry a prefix lookup finds: its key and value
/// (None: deleted).
pub type Found<'a> = dyn FnMut(&[u8], Option<&[u8]>) -> Result<()> + 'a;

/// Every entry whose key starts with `prefix`, in each of `runs` whose
/// filter holds the prefix (written with a `filter_key` giving it), oldest
/// run first and in key order within a run, handed to `found`.
pub fn lookup_prefix<'a>(
    store: &dyn StateStore,
    space: &[u8],
    runs: impl Iterator<Item = (&'a Run, &'a RunIndex)>,
    prefix: &[u8],
    found: &mut Found<'_>,
) -> Result<()> {
    let hash = KeyFilter::hash(prefix);
    for (run, index) in runs {
        if !index.filter.may_hold(hash) {
            continue;
        }
        let after = index.first_keys.partition_point(|first| **first < *prefix);
        // The page before the first that starts at or past the prefix may
        // hold its first entries.
        let mut page = after.saturating_sub(1) as u32;
        while page < run.pages {
            let bytes = store
                .get(&page_key(space, run.id, page))?
                .ok_or_else(|| missing(space, run.id, "a page"))?;
            if !entries_with_prefix(&bytes, prefix, found)? {
                break;
            }
            page += 1;
        }
    }
    Ok(())
}

/// An encoded page's entries read in place: each key and its value (None:
/// deleted), in key order.
fn page_entries(mut bytes: &[u8]) -> Result<impl Iterator<Item = Result<PageEntry<'_>>>> {
    let count = take_length(&mut bytes)?;
    Ok((0..count).map(move |_| {
        let key_length = take_length(&mut bytes)? as usize;
        let stored = take(&mut bytes, key_length)?;
        let value = match take_length(&mut bytes)? {
            DELETED => None,
            length => Some(take(&mut bytes, length as usize)?),
        };
        Ok((stored, value))
    }))
}

type PageEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// Hands `found` the entries of an encoded page starting with `prefix`;
/// true if the page ends before any entry past them (the next page may
/// hold more).
fn entries_with_prefix(bytes: &[u8], prefix: &[u8], found: &mut Found<'_>) -> Result<bool> {
    for entry in page_entries(bytes)? {
        let (stored, value) = entry?;
        if stored.starts_with(prefix) {
            found(stored, value)?;
        } else if stored > prefix {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `key`'s entry in an encoded page, read in place.
fn find_in_page(bytes: &[u8], key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
    for entry in page_entries(bytes)? {
        let (stored, value) = entry?;
        match stored.cmp(key) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => return Ok(Some(value.map(<[u8]>::to_vec))),
            std::cmp::Ordering::Greater => return Ok(None),
        }
    }
    Ok(None)
}
