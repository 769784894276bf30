//! The keyed layout of a view's rows: the rows of a GROUP BY view by key
//! (its group columns), as sorted runs (`runs`). A statement's changes are
//! gathered in memory, each key's last row only; when the statement's
//! writes are sealed they become one run — several runs merged with it
//! when they are small next to it — and the view's head lists the runs.
//! A group updated a hundred times in a statement is written once, and a
//! commit's changes are a few large writes instead of a read and a write
//! per key (docs/decisions.md). Readers keep the run list they started
//! with; a run merged away goes once no list holds it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::HashMap;

use super::{encode_head, view_head_key, view_rows_prefix, ViewHead, ViewResult};
use crate::error::{Result, WeirError};
use crate::state::runs::{self, Combine, Entry, Merge, Run, RunCursor, RunList, Source};
use crate::state::{StateStore, WriteBatch};
use crate::stream::message::Chunk;

/// A statement's changes held in memory up to this many bytes; past it
/// they are written as a run of their own (read back only by queries
/// after the commit), so memory holds a bounded part of a big statement.
/// (A few kB in unit tests, so that they cover it.)
const STAGED_BYTES: usize = if cfg!(test) { 4 << 10 } else { 64 << 20 };
/// Per staged key, beyond its bytes: the map entry and vectors' headers.
pub(super) const STAGED_ENTRY_BYTES: usize = 80;

/// The row-format converter of a keyed view's key columns.
pub(super) fn key_converter(schema: &SchemaRef, columns: &[usize]) -> Result<RowConverter> {
    let fields = columns
        .iter()
        .map(|&column| {
            let field = schema.fields().get(column).ok_or_else(|| {
                WeirError::internal("a keyed view's key column is past its columns")
            })?;
            Ok(SortField::new(field.data_type().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RowConverter::new(fields)?)
}

/// The committed runs of a keyed view and those waiting to be deleted.
#[derive(Default)]
pub(super) struct KeyedRuns {
    pub committed: RunList,
    pub next_run: u64,
    /// Runs merged away or left by failed statements: deleted once no
    /// reader's list holds them.
    pub retired: Vec<Arc<Run>>,
}

impl KeyedRuns {
    /// The runs `head` lists, and those it lists as retired (deleted by
    /// the next commit). A head with a statement pending was left by a
    /// crash during a big statement: runs it wrote that the head does not
    /// list are retired too.
    pub fn open(store: &dyn StateStore, view_id: u64, head: &ViewHead) -> Result<Self> {
        let committed: Vec<Arc<Run>> = head.runs.iter().cloned().map(Arc::new).collect();
        // Nothing reads the runs merged away before the restart.
        let retired = head.retired.iter().cloned().map(Arc::new).collect();
        let mut runs = KeyedRuns {
            committed: Arc::new(committed),
            next_run: head.next_run,
            retired,
        };
        if head.pending.is_some() && head.layout.has_runs() {
            for id in runs::stored_run_ids(store, &view_rows_prefix(view_id))? {
                runs.next_run = runs.next_run.max(id + 1);
                let listed = head.runs.iter().chain(&head.retired);
                if !listed.into_iter().any(|run| run.id == id) {
                    let orphan = Run {
                        id,
                        pages: 0,
                        entries: 0,
                    };
                    runs.retired.push(Arc::new(orphan));
                }
            }
        }
        Ok(runs)
    }
}

/// A statement's changes to a keyed (or counted) view.
#[derive(Default)]
pub(super) struct KeyedStaged {
    /// Each changed key's row (None: deleted) as the statement left it;
    /// sorted once, when written (`sorted_changes`).
    changes: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// A counted view's changes: each changed row's count change.
    pub(super) counts: HashMap<Vec<u8>, i64>,
    pub(super) bytes: usize,
    /// Runs the statement wrote already (oldest first).
    runs: Vec<Arc<Run>>,
    /// How many of them are in the store (spilled by the dataflow), so
    /// that a merge may read them.
    runs_in_store: usize,
    /// The run list its commit publishes, and the runs merged away.
    pub(super) sealed: Option<(RunList, Vec<Arc<Run>>)>,
    /// Retired runs its commit deletes.
    deleting: Vec<Arc<Run>>,
}

/// A key's row after `changes` (row, diff) of one chunk, given its row
/// before (`Some(None)`: no row; None: not known — not changed yet by
/// the statement). A key holds at most one row, once; anything else
/// means the view's rows are not identified by its key after all — an
/// error, never a silent merge. None: the chunk leaves the key as it was.
fn next_row(
    before: Option<&Option<Vec<u8>>>,
    changes: &[(&[u8], i64)],
) -> Result<Option<Option<Vec<u8>>>> {
    let mut net: Vec<(&[u8], i64)> = Vec::with_capacity(2);
    for &(row, diff) in changes {
        match net.iter_mut().find(|(held, _)| *held == row) {
            Some((_, count)) => *count += diff,
            None => net.push((row, diff)),
        }
    }
    net.retain(|(_, count)| *count != 0);
    let inserted: Vec<&[u8]> = net.iter().filter(|c| c.1 == 1).map(|c| c.0).collect();
    let retracted: Vec<&[u8]> = net.iter().filter(|c| c.1 == -1).map(|c| c.0).collect();
    let consistent = inserted.len() + retracted.len() == net.len()
        && inserted.len() <= 1
        && retracted.len() <= 1
        && match before {
            // The statement knows the key's row: a retraction takes it, an
            // insertion needs none.
            Some(row) => match retracted.first() {
                Some(taken) => row.as_deref() == Some(*taken),
                None => inserted.is_empty() || row.is_none(),
            },
            None => true,
        };
    if !consistent {
        return Err(WeirError::internal(
            "a keyed materialized view would hold a key twice, or retract a row it does not hold",
        ));
    }
    Ok(match (inserted.first(), retracted.first()) {
        (Some(row), _) => Some(Some(row.to_vec())),
        (None, Some(_)) => Some(None),
        (None, None) => None,
    })
}

/// Staged changes in key order, as a run holds them.
fn sorted_changes(changes: HashMap<Vec<u8>, Option<Vec<u8>>>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = changes.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries
}

impl KeyedStaged {
    /// The staged changes as a run's entries, in key order, emptied (a
    /// counted view's rows whose changes cancelled are left out).
    fn take_sorted(&mut self) -> Vec<Entry> {
        self.bytes = 0;
        if self.counts.is_empty() {
            return sorted_changes(std::mem::take(&mut self.changes));
        }
        let counts = std::mem::take(&mut self.counts).into_iter();
        let mut entries: Vec<Entry> = counts
            .filter(|(_, count)| *count != 0)
            .map(|(row, count)| (row, Some(runs::encode_count(count))))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// How many keys (or rows) the statement changed so far.
    fn staged_keys(&self) -> usize {
        self.changes.len() + self.counts.len()
    }
}

impl ViewResult {
    /// Stages a chunk of changes in memory (written when sealed).
    pub(super) fn apply_keyed(&self, chunk: &Chunk, key_columns: &[usize]) -> Result<WriteBatch> {
        let converter = self
            .key_converter
            .as_ref()
            .ok_or_else(|| WeirError::internal("a keyed view has no key converter"))?;
        let columns: Vec<ArrayRef> = key_columns
            .iter()
            .map(|&column| chunk.rows.column(column).clone())
            .collect();
        let keys = converter.convert_columns(&columns)?;
        let rows = self.converter.convert_columns(chunk.rows.columns())?;
        // Each key's changes together, in the chunk's order.
        let mut order: Vec<u32> = (0..chunk.num_rows() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let (left, right) = (keys.row(a as usize), keys.row(b as usize));
            left.cmp(&right).then(a.cmp(&b))
        });
        let total: i64 = (0..chunk.num_rows()).map(|row| chunk.diff(row)).sum();
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if staged.keyed.sealed.is_some() {
            return Err(WeirError::internal(
                "a keyed view took changes after its statement was sealed",
            ));
        }
        staged.total += total;
        staged.epoch = self.readers.for_write().3;
        let keyed = &mut staged.keyed;
        let mut changes = Vec::new();
        for same_key in order.chunk_by(|&a, &b| keys.row(a as usize) == keys.row(b as usize)) {
            let key = keys.row(same_key[0] as usize);
            let key = key.data();
            changes.clear();
            changes.extend(
                same_key
                    .iter()
                    .map(|&row| (rows.row(row as usize).data(), chunk.diff(row as usize))),
            );
            let Some(row) = next_row(keyed.changes.get(key), &changes)? else {
                continue;
            };
            let size = key.len() + row.as_ref().map_or(0, Vec::len) + STAGED_ENTRY_BYTES;
            match keyed.changes.get_mut(key) {
                Some(held) => *held = row,
                None => {
                    keyed.changes.insert(key.to_vec(), row);
                    keyed.bytes += size;
                }
            }
        }
        self.spill_when_big(&mut staged.keyed)
    }

    /// Past `STAGED_BYTES`, the staged changes become a run of their own
    /// (the writes that store it), so memory holds a bounded part of a
    /// big statement.
    pub(super) fn spill_when_big(&self, keyed: &mut KeyedStaged) -> Result<WriteBatch> {
        let mut writes = WriteBatch::new();
        if keyed.bytes > STAGED_BYTES {
            let run = self.write_staged(keyed, &mut writes)?;
            keyed.runs.push(Arc::new(run));
        }
        Ok(writes)
    }

    /// Writes the staged changes as a new run, emptying them.
    fn write_staged(&self, keyed: &mut KeyedStaged, writes: &mut WriteBatch) -> Result<Run> {
        let id = self.allocate_run();
        let changes = keyed.take_sorted();
        runs::write_run(
            &view_rows_prefix(self.id),
            id,
            changes.into_iter().map(Ok),
            &mut runs::into_batch(writes),
        )
    }

    /// How a merge combines a key's entries in this view's runs.
    fn combine(&self) -> Combine {
        match self.layout {
            super::RowLayout::Counted => Combine::Sum,
            _ => Combine::Newest,
        }
    }

    fn allocate_run(&self) -> u64 {
        let mut runs = self.keyed_runs();
        runs.next_run += 1;
        runs.next_run - 1
    }

    /// The dataflow put the statement's writes so far in the store.
    pub(super) fn spilled_keyed(&self, staged: &mut super::Staged) {
        staged.keyed.runs_in_store = staged.keyed.runs.len();
    }

    /// The committed runs, as the head lists them.
    pub(super) fn committed_runs(&self) -> Vec<Run> {
        let committed = self.keyed_runs().committed.clone();
        committed.iter().map(|run| (**run).clone()).collect()
    }

    /// The runs waiting to be deleted, as a head lists them.
    pub(super) fn retired_runs(&self) -> Vec<Run> {
        let runs = self.keyed_runs();
        runs.retired.iter().map(|run| (**run).clone()).collect()
    }

    pub(super) fn keyed_runs(&self) -> std::sync::MutexGuard<'_, KeyedRuns> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The statement's writes end: its changes become a run (merged with
    /// the newest runs when they are small next to it), and the head that
    /// lists the runs; runs no reader holds any more are deleted.
    pub(super) fn seal_keyed(&self) -> Result<WriteBatch> {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let mut writes = WriteBatch::new();
        if !staged.changed || staged.keyed.sealed.is_some() {
            return Ok(writes);
        }
        let reserved = staged.reserved && staged.keyed.runs_in_store > 0;
        let committed = self.keyed_runs().committed.clone();
        let keyed = &mut staged.keyed;
        let mut list: Vec<Arc<Run>> = committed.to_vec();
        list.extend(keyed.runs.iter().cloned());
        let mut merged_away = Vec::new();
        let space = view_rows_prefix(self.id);
        // The newest runs join the new one when they are small next to it
        // (or when there are too many) — those the statement wrote too,
        // once they are readable.
        let new = keyed.staged_keys() as u64;
        let taken = match keyed.runs_in_store == keyed.runs.len() {
            true => runs::runs_to_merge(&list, new),
            false => 0,
        };
        if new > 0 || taken > 0 {
            merged_away = list.split_off(list.len() - taken);
            let id = self.allocate_run();
            let mut sources = vec![Source::memory(keyed.take_sorted())];
            for run in merged_away.iter().rev() {
                let cursor = RunCursor::new(self.store.clone(), &space, run.clone());
                sources.push(Source::Run(cursor));
            }
            let merge = Merge::new(sources, list.is_empty(), self.combine());
            // A statement that spilled has a head saying so (`reserve`):
            // a crash leaves its unlisted runs to be deleted on open, so a
            // big merge goes to the store in pieces, never whole in memory.
            let store = self.store.clone();
            let mut pieces = WriteBatch::new();
            let mut stage = |batch: WriteBatch| match reserved {
                true => store.stage(batch),
                false => {
                    pieces.extend(batch);
                    Ok(())
                }
            };
            let run = runs::write_run(&space, id, merge, &mut stage)?;
            writes.extend(pieces);
            list.push(Arc::new(run));
        }
        list.retain(|run| run.entries > 0);
        staged.keyed.deleting = self.delete_unread_runs(&mut writes);
        let mut retired = self.retired_runs();
        retired.extend(merged_away.iter().map(|run| (**run).clone()));
        let head = ViewHead {
            layout: self.layout.clone(),
            epoch: staged.epoch,
            rows: self.total_rows.load(Ordering::Acquire) + staged.total,
            runs: list.iter().map(|run| (**run).clone()).collect(),
            next_run: self.keyed_runs().next_run,
            retired,
            ..ViewHead::default()
        };
        writes.put(view_head_key(self.id), encode_head(&head)?);
        staged.keyed.sealed = Some((Arc::new(list), merged_away));
        Ok(writes)
    }

    /// Deletes the retired runs no reader's list holds; returns them.
    fn delete_unread_runs(&self, writes: &mut WriteBatch) -> Vec<Arc<Run>> {
        let mut runs = self.keyed_runs();
        let (unread, held) = std::mem::take(&mut runs.retired)
            .into_iter()
            .partition(|run| Arc::strong_count(run) == 1);
        runs.retired = held;
        for run in &unread {
            runs::delete_run(&view_rows_prefix(self.id), run.id, writes);
        }
        unread
    }

    /// The sealed statement committed: readers see its run list.
    pub(super) fn publish_keyed(&self, staged: super::Staged) {
        let Some((list, merged_away)) = staged.keyed.sealed else {
            if staged.changed {
                tracing::error!(
                    view = self.id,
                    "a keyed view's changes were committed unsealed"
                );
            }
            return;
        };
        let mut runs = self.keyed_runs();
        runs.committed = list;
        runs.retired.extend(merged_away);
    }

    /// The statement failed: the runs it wrote are never read, and the
    /// runs its commit would have deleted wait for the next one.
    pub(super) fn discard_keyed(&self, staged: super::Staged) {
        let mut runs = self.keyed_runs();
        let keyed = staged.keyed;
        runs.retired.extend(keyed.deleting);
        let mut written = keyed.runs;
        if let Some((list, _)) = keyed.sealed {
            written.extend(list.iter().cloned());
        }
        for run in written {
            let committed = runs.committed.iter().any(|held| Arc::ptr_eq(held, &run));
            let retired = runs.retired.iter().any(|held| Arc::ptr_eq(held, &run));
            if !committed && !retired {
                runs.retired.push(run);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_one_row_and_anything_else_is_an_error() {
        let old = b"old".as_slice();
        let new = b"new".as_slice();
        let held = Some(old.to_vec());
        // An update in either order, an insertion, a deletion, no change.
        let updated = next_row(Some(&held), &[(new, 1), (old, -1)]).unwrap();
        assert_eq!(updated, Some(Some(new.to_vec())));
        assert_eq!(
            next_row(None, &[(new, 1)]).unwrap(),
            Some(Some(new.to_vec()))
        );
        assert_eq!(next_row(Some(&held), &[(old, -1)]).unwrap(), Some(None));
        assert_eq!(next_row(None, &[(old, -1), (old, 1)]).unwrap(), None);
        // A second row for the key, a row twice, a retraction of a row the
        // key does not hold.
        assert!(next_row(Some(&held), &[(new, 1)]).is_err());
        assert!(next_row(None, &[(new, 1), (new, 1)]).is_err());
        assert!(next_row(Some(&held), &[(new, -1)]).is_err());
        assert!(next_row(None, &[(new, 1), (old, 1)]).is_err());
    }
}
