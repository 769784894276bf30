//! The writes of a transaction block: INSERT and COPY inside BEGIN … COMMIT
//! are checked when they run (types, NOT NULL, unique keys against the
//! table and the block's own rows) but kept here, and COMMIT applies them
//! all in one group commit — one atomic, durable store batch with the
//! views' changes — or none. ROLLBACK drops them; a savepoint is a position
//! in the list, and ROLLBACK TO cuts the list back to it.
//!
//! The rows wait in memory, so a block holds at most
//! `MAX_TRANSACTION_BYTES` of them; a bigger load belongs outside a block,
//! where each statement is atomic on its own and spills to the log.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::OwnedRow;
use datafusion::common::DataFusionError;

use super::append::BulkWrite;
use super::changes::TableChanges;
use super::{CommitGate, TableLog};
use crate::error::{sqlstate, Result, WeirError};

/// Arrow memory a transaction block's pending rows may take.
pub const MAX_TRANSACTION_BYTES: usize = 64 * 1024 * 1024;

/// One session's pending writes; inactive outside a transaction block.
#[derive(Default)]
pub struct PendingWrites {
    inner: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    active: bool,
    writes: Vec<PendingWrite>,
    bytes: usize,
    /// Per table id and unique index: the keys the pending rows add.
    keys: HashMap<u64, Vec<HashSet<OwnedRow>>>,
}

struct PendingWrite {
    log: Arc<TableLog>,
    rows: TableChanges,
    /// Keys added per unique index of the table.
    keys: Vec<Vec<OwnedRow>>,
}

impl PendingWrites {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A transaction block starts: writes wait here from now on.
    pub fn activate(&self) {
        *self.lock() = Pending {
            active: true,
            ..Pending::default()
        };
    }

    pub fn is_active(&self) -> bool {
        self.lock().active
    }

    /// Whether the block has rows waiting to commit for table `table_id`.
    pub fn has_writes_for(&self, table_id: u64) -> bool {
        let pending = self.lock();
        pending
            .writes
            .iter()
            .any(|write| write.log.id() == table_id)
    }

    /// Whether the block has rows waiting to commit.
    pub fn is_empty(&self) -> bool {
        self.lock().writes.is_empty()
    }

    /// The tables the block has rows for.
    pub fn tables(&self) -> Vec<String> {
        let pending = self.lock();
        let mut names: Vec<String> = pending
            .writes
            .iter()
            .map(|write| write.log.name().to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Keeps `rows` for `log` until COMMIT; false (nothing kept) outside a
    /// transaction block. Fails as the write itself would: wrong shape, a
    /// key already present in the table or in the block.
    pub fn keep(&self, log: &Arc<TableLog>, rows: RecordBatch) -> Result<bool> {
        self.keep_changes(log, TableChanges::inserts(rows))
    }

    /// Like `keep`, for changes that may retract rows (UPDATE, DELETE).
    pub fn keep_changes(&self, log: &Arc<TableLog>, changes: TableChanges) -> Result<bool> {
        let mut pending = self.lock();
        if !pending.active {
            return Ok(false);
        }
        if changes.num_rows() == 0 {
            return Ok(true);
        }
        let rows = RecordBatch::try_new(log.schema(), changes.rows.columns().to_vec())
            .map_err(|error| WeirError::from(DataFusionError::from(error)))?;
        let rows = TableChanges {
            rows,
            retracts: changes.retracts,
        };
        let bytes = pending.bytes + rows.rows.get_array_memory_size();
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(too_big());
        }
        log.check_not_dropped()?;
        let keys = log.check_keys(&rows)?.added;
        let table_keys = pending
            .keys
            .entry(log.id())
            .or_insert_with(|| vec![HashSet::new(); keys.len()]);
        for (index, fresh) in keys.iter().enumerate() {
            if fresh.iter().any(|key| table_keys[index].contains(key)) {
                return Err(log.duplicate_key(index));
            }
        }
        for (index, fresh) in keys.iter().enumerate() {
            table_keys[index].extend(fresh.iter().cloned());
        }
        pending.bytes = bytes;
        pending.writes.push(PendingWrite {
            log: log.clone(),
            rows,
            keys,
        });
        Ok(true)
    }

    /// Where the block stands, for a savepoint.
    pub fn mark(&self) -> usize {
        self.lock().writes.len()
    }

    /// Forgets the writes kept since `mark` (ROLLBACK TO SAVEPOINT).
    pub fn truncate(&self, mark: usize) {
        let mut pending = self.lock();
        pending.writes.truncate(mark);
        pending.bytes = pending
            .writes
            .iter()
            .map(|write| write.rows.rows.get_array_memory_size())
            .sum();
        let mut keys: HashMap<u64, Vec<HashSet<OwnedRow>>> = HashMap::new();
        for write in &pending.writes {
            let table = keys
                .entry(write.log.id())
                .or_insert_with(|| vec![HashSet::new(); write.keys.len()]);
            for (index, added) in write.keys.iter().enumerate() {
                table[index].extend(added.iter().cloned());
            }
        }
        pending.keys = keys;
    }

    /// Ends the block without writing anything (ROLLBACK).
    pub fn discard(&self) {
        *self.lock() = Pending::default();
    }

    /// Ends the block: applies every kept write in one group commit, all
    /// or nothing. Returns the rows written.
    pub async fn commit(&self, gate: Option<&CommitGate>) -> Result<u64> {
        let writes = std::mem::take(&mut *self.lock()).writes;
        if writes.is_empty() {
            return Ok(0);
        }
        // One write per table, tables locked in id order so two blocks
        // committing the same tables cannot wait on each other.
        let mut by_table: Vec<(Arc<TableLog>, Vec<TableChanges>)> = Vec::new();
        for write in writes {
            match by_table
                .iter_mut()
                .find(|(log, _)| log.id() == write.log.id())
            {
                Some((_, batches)) => batches.push(write.rows),
                None => by_table.push((write.log, vec![write.rows])),
            }
        }
        by_table.sort_by_key(|(log, _)| log.id());
        let mut bulk = Vec::with_capacity(by_table.len());
        for (log, batches) in by_table {
            let mut write = BulkWrite::begin_small(log).await;
            for changes in batches {
                write.add_changes(changes)?;
            }
            bulk.push(write);
        }
        BulkWrite::commit_together(bulk, gate).await
    }
}

fn too_big() -> WeirError {
    WeirError::new(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!(
            "a transaction block holds at most {} MB of rows until COMMIT",
            MAX_TRANSACTION_BYTES / (1024 * 1024)
        ),
    )
    .with_hint(
        "Load big data outside BEGIN … COMMIT: each INSERT or COPY is atomic on its own \
         and is not held in memory.",
    )
}
