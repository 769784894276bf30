//! Sorted runs: how a keyed or counted view keeps its rows (`keyed`). A
//! run is a commit's changes (or a merge of several runs) sorted by key,
//! written once in pages of `PAGE_ENTRIES` and never changed. In a keyed
//! view an entry is a key and its row, or no row where the key was
//! deleted, and a key's row is its entry in the newest run that has one;
//! in a counted view an entry is a row and a change of its count, and a
//! row's count is the sum of its entries (`Combine`). Reading merges the
//! runs page by page; merging the newest runs together keeps them few (an
//! LSM tree of Arrow row-format pages over the store).

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::view_rows_prefix;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{StateStore, WriteBatch};

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

fn run_prefix(view_id: u64, run: u64) -> Vec<u8> {
    let mut key = view_rows_prefix(view_id);
    key.extend_from_slice(&run.to_be_bytes());
    key
}

fn page_key(view_id: u64, run: u64, page: u32) -> Vec<u8> {
    let mut key = run_prefix(view_id, run);
    key.extend_from_slice(&page.to_be_bytes());
    key
}

/// The write that deletes every page of `run`.
pub fn delete_run(view_id: u64, run: &Run, writes: &mut WriteBatch) {
    writes.delete_prefix(run_prefix(view_id, run.id));
}

/// The ids of the runs with pages stored under the view's prefix.
pub fn stored_run_ids(store: &dyn StateStore, view_id: u64) -> Result<Vec<u64>> {
    let prefix = view_rows_prefix(view_id);
    let mut ids: Vec<u64> = Vec::new();
    for entry in store.scan_prefix(&prefix)? {
        let id = entry.0.get(prefix.len()..prefix.len() + 8);
        let id = id
            .and_then(|bytes| bytes.try_into().ok())
            .map(u64::from_be_bytes);
        let id = id.ok_or_else(|| malformed("a keyed view's page key"))?;
        if ids.last() != Some(&id) {
            ids.push(id);
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
        .ok_or_else(|| malformed("a keyed view's page"))?;
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

/// Writes `entries` (sorted by key, each key once) as run `id`.
pub fn write_run(
    view_id: u64,
    id: u64,
    entries: impl Iterator<Item = Result<Entry>>,
    writes: &mut WriteBatch,
) -> Result<Run> {
    let mut run = Run {
        id,
        pages: 0,
        entries: 0,
    };
    let mut page = Vec::with_capacity(PAGE_ENTRIES);
    for entry in entries {
        page.push(entry?);
        if page.len() == PAGE_ENTRIES {
            write_page(view_id, &mut run, &mut page, writes);
        }
    }
    if !page.is_empty() {
        write_page(view_id, &mut run, &mut page, writes);
    }
    Ok(run)
}

fn write_page(view_id: u64, run: &mut Run, page: &mut Vec<Entry>, writes: &mut WriteBatch) {
    // Written once and deleted whole: a log record to the store.
    writes.put_log(page_key(view_id, run.id, run.pages), encode_page(page));
    run.pages += 1;
    run.entries += page.len() as u64;
    page.clear();
}

/// A run's entries in key order, a page read at a time.
pub struct RunCursor {
    store: Arc<dyn StateStore>,
    view_id: u64,
    run: Arc<Run>,
    next_page: u32,
    entries: VecDeque<Entry>,
}

impl RunCursor {
    pub fn new(store: Arc<dyn StateStore>, view_id: u64, run: Arc<Run>) -> Self {
        RunCursor {
            store,
            view_id,
            run,
            next_page: 0,
            entries: VecDeque::new(),
        }
    }

    fn fill(&mut self) -> Result<()> {
        while self.entries.is_empty() && self.next_page < self.run.pages {
            let key = page_key(self.view_id, self.run.id, self.next_page);
            let page = self.store.get(&key)?.ok_or_else(|| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!(
                        "materialized view {}: page {} of run {} is missing",
                        self.view_id, self.next_page, self.run.id
                    ),
                )
            })?;
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

    fn peek_key(&mut self) -> Result<Option<&[u8]>> {
        Ok(match self {
            Source::Run(cursor) => {
                cursor.fill()?;
                cursor.entries.front().map(|(key, _)| key.as_slice())
            }
            Source::Memory(_, next) => next.as_ref().map(|(key, _)| key.as_slice()),
        })
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

    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            // The smallest key, and the newest source holding it.
            let mut smallest: Option<(usize, Vec<u8>)> = None;
            for (position, source) in self.sources.iter_mut().enumerate() {
                if let Some(key) = source.peek_key()? {
                    if smallest
                        .as_ref()
                        .is_none_or(|(_, low)| key < low.as_slice())
                    {
                        smallest = Some((position, key.to_vec()));
                    }
                }
            }
            let Some((newest, key)) = smallest else {
                return Ok(None);
            };
            let entry = self.sources[newest].pop();
            let mut sum = match self.combine {
                Combine::Sum => decode_count(entry.as_ref().and_then(|e| e.1.as_deref()))?,
                Combine::Newest => 0,
            };
            for source in &mut self.sources[newest + 1..] {
                if source.peek_key()? == Some(key.as_slice()) {
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
                        "a counted materialized view would hold a row fewer than zero times",
                    ))
                }
                (Combine::Sum, _) => return Ok(Some((key, Some(encode_count(sum))))),
                (Combine::Newest, Some((_, None))) if self.complete => continue,
                (Combine::Newest, entry) => return Ok(entry),
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
/// with `new` entries: while the next older run is less than `FACTOR`
/// times what is merged so far, it joins — so each run is several times
/// bigger than the next newer one, and there are few of them.
pub fn runs_to_merge(runs: &[Arc<Run>], new: u64) -> usize {
    const FACTOR: u64 = 4;
    const MOST_RUNS: usize = 12;
    let mut merged = new;
    let mut taken = 0;
    for run in runs.iter().rev() {
        let too_many = runs.len() - taken >= MOST_RUNS;
        let small = merged > 0 && run.entries < FACTOR * merged;
        if !small && !too_many {
            break;
        }
        merged += run.entries;
        taken += 1;
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use std::collections::BTreeMap;

    fn entries(pairs: &[(&str, Option<&str>)]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        pairs
            .iter()
            .map(|(key, row)| (key.as_bytes().to_vec(), row.map(|r| r.as_bytes().to_vec())))
            .collect()
    }

    fn text(entry: Result<Entry>) -> (String, Option<String>) {
        let (key, row) = entry.unwrap();
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        (text(key), row.map(text))
    }

    #[test]
    fn the_newest_run_holding_a_key_decides_and_deletions_go_when_complete() {
        let directory = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
        let mut writes = WriteBatch::new();
        // Big enough for several pages.
        let old: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..10_000)
            .map(|i| (format!("k{i:05}").into_bytes(), Some(b"old".to_vec())))
            .collect();
        let old_run = write_run(1, 0, old.into_iter().map(Ok), &mut writes).unwrap();
        assert_eq!((old_run.pages, old_run.entries), (3, 10_000));
        store.commit(writes).unwrap();
        let newer = entries(&[
            ("k00001", None),
            ("k00002", Some("new")),
            ("zz", Some("added")),
        ]);
        let merge = |complete| {
            let cursor = RunCursor::new(store.clone(), 1, Arc::new(old_run.clone()));
            let newer = newer.clone().into_iter().collect();
            let sources = vec![Source::memory(newer), Source::Run(cursor)];
            Merge::new(sources, complete, Combine::Newest)
                .map(text)
                .collect::<Vec<_>>()
        };
        let complete = merge(true);
        assert_eq!(complete.len(), 10_000);
        assert_eq!(complete[0], ("k00000".into(), Some("old".into())));
        assert_eq!(complete[1], ("k00002".into(), Some("new".into())));
        assert_eq!(complete[9_999], ("zz".into(), Some("added".into())));
        let partial = merge(false);
        assert_eq!(
            partial[1],
            ("k00001".into(), None),
            "kept to hide older runs"
        );
        assert_eq!(stored_run_ids(&*store, 1).unwrap(), vec![0]);
    }

    #[test]
    fn runs_grow_geometrically_and_stay_few() {
        let run = |entries| {
            Arc::new(Run {
                id: 0,
                pages: 1,
                entries,
            })
        };
        // A small new run joins small runs, not a big one.
        assert_eq!(runs_to_merge(&[run(1_000_000), run(100)], 100), 1);
        assert_eq!(runs_to_merge(&[run(1_000_000), run(100_000)], 100), 0);
        assert_eq!(runs_to_merge(&[run(300), run(100)], 100), 2);
        // Nothing new: runs are merged only when there are too many.
        assert_eq!(runs_to_merge(&[run(3), run(1)], 0), 0);
        let many: Vec<_> = (0..20).map(|i| run(1 << (40 - i))).collect();
        assert!(runs_to_merge(&many, 1) >= 9, "never more than a dozen runs");
    }

    #[test]
    fn a_damaged_page_is_corruption() {
        assert_eq!(decode_page(&[0, 0, 0, 2, 0]).unwrap_err().code, "XX001");
        let page = encode_page(&[(b"k".to_vec(), None), (b"j".to_vec(), Some(b"r".to_vec()))]);
        let decoded = decode_page(&page).unwrap();
        assert_eq!(decoded[0], (b"k".to_vec(), None));
        assert_eq!(decoded[1], (b"j".to_vec(), Some(b"r".to_vec())));
    }
}
