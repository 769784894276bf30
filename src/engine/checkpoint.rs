//! Checkpoints of the views' running state, and recovery from them. Every
//! `checkpoint_interval_ms` the coordinator takes the dataflow lock (so the
//! state is between two writes, the barrier is aligned by construction),
//! lets a barrier flow from every table, and commits what the operators
//! wrote plus the epoch record in one atomic, fsynced batch. On start the
//! engine restores every operator from the last epoch and replays each table
//! from its offset (rows after the checkpoint) without rewriting view rows.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Engine;
use crate::catalog::RelationKind;
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::checkpoint::{in_generation, EpochRecord, StateReader};
use crate::stream::checkpoint_store::{
    delete_stale_generations, into_current_generation, prepare_checkpoint, StoredState,
};
use crate::stream::dataflow::{Dataflow, SharedDataflow};

pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u64 = 1000;
const KEPT_RECORDS: usize = 100;

/// One committed checkpoint, for `weir_catalog.checkpoints`.
#[derive(Debug, Clone)]
pub struct CheckpointStats {
    pub epoch: u64,
    pub unix_ms: u64,
    /// From the snapshot (the dataflow lock taken) until durable.
    pub duration_us: u64,
    pub bytes: u64,
    /// Where its operator state is stored (`checkpoint::generation_prefix`).
    pub generation: u64,
    /// How long writers waited for it (the snapshot under the dataflow
    /// lock; the write to disk happens after).
    pub writers_blocked_us: u64,
}

/// How the last start recovered, for `weir_catalog.recovery`.
#[derive(Debug, Clone, Default)]
pub struct RecoveryStats {
    pub unix_ms: u64,
    /// None when there was no checkpoint (views rebuilt from the tables).
    pub from_epoch: Option<u64>,
    pub duration_us: u64,
    pub rows_replayed: u64,
}

#[derive(Default)]
pub struct CheckpointHistory {
    pub checkpoints: Mutex<VecDeque<CheckpointStats>>,
    pub recovery: Mutex<Option<RecoveryStats>>,
    /// Times since start the views were rebuilt from their checkpoint
    /// because a failed write could not be undone (none expected: every
    /// operator undoes its part).
    pub views_rebuilt: std::sync::atomic::AtomicU64,
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

impl Engine {
    /// Takes a checkpoint now if anything changed; returns its epoch once
    /// it is committed. Writers wait only while the barrier passes the
    /// views (the snapshot), not while it is written — unless a barrier
    /// changed view rows, which must be durable before the next write.
    pub fn checkpoint(&self) -> Result<Option<u64>> {
        let _running = self
            .checkpoint_running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let store = self.catalog.store().clone();
        let mut flow = self.dataflow.lock();
        let locked = Instant::now();
        let Some((record, batch)) = flow.checkpoint(unix_ms())? else {
            return Ok(None);
        };
        let mut commits = self.dataflow.lock_commits();
        if commits.failed {
            flow.mark_broken();
            return Err(WeirError::internal(
                "an earlier checkpoint failed; views are rebuilt first",
            ));
        }
        let epoch = record.epoch;
        let prepared = prepare_checkpoint(&*store, flow.stored_state(), record, batch)
            .inspect_err(|_| flow.mark_broken())?;
        let (bytes, generation) = (prepared.size_bytes() as u64, prepared.generation());
        let blocked_us;
        if prepared.changes_views() {
            // Incremental state is relative to the last commit: a failed
            // one means rebuilding everything.
            prepared.commit(&*store).inspect_err(|_| {
                commits.failed = true;
                flow.mark_broken();
            })?;
            flow.publish();
            blocked_us = locked.elapsed().as_micros() as u64;
            drop(flow);
        } else {
            blocked_us = locked.elapsed().as_micros() as u64;
            drop(flow);
            if let Err(error) = prepared.commit(&*store) {
                commits.failed = true;
                drop(commits);
                self.dataflow.lock().mark_broken();
                return Err(error);
            }
        }
        drop(commits);
        self.record_checkpoint(CheckpointStats {
            epoch,
            unix_ms: unix_ms(),
            duration_us: locked.elapsed().as_micros() as u64,
            bytes,
            generation,
            writers_blocked_us: blocked_us,
        });
        Ok(Some(epoch))
    }

    /// The checkpoint a DDL commits with its own changes (under the
    /// dataflow lock; waits for a checkpoint being committed); operator
    /// state `writes` names goes to where it is stored.
    pub(super) fn checkpoint_into(
        dataflow: &SharedDataflow,
        flow: &mut Dataflow,
        writes: &mut WriteBatch,
    ) -> Result<()> {
        let commits = dataflow.lock_commits();
        if commits.failed {
            flow.mark_broken();
            return Err(WeirError::internal(
                "an earlier checkpoint failed; views are rebuilt first",
            ));
        }
        if let Some((record, batch)) = flow.checkpoint(unix_ms())? {
            writes.extend(batch);
            record.put_into(writes)?;
        }
        into_current_generation(flow.stored_state(), writes);
        Ok(())
    }

    fn record_checkpoint(&self, stats: CheckpointStats) {
        let mut kept = self
            .checkpoints
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT_RECORDS {
            kept.pop_front();
        }
        kept.push_back(stats);
    }

    /// Checkpoints every `checkpoint_interval_ms` (the flag's value unless
    /// ALTER SYSTEM set one) until the engine is dropped.
    pub fn start_checkpoints(self: &Arc<Self>, default_interval: Duration) {
        self.set_default_checkpoint_interval_ms(default_interval.as_millis() as u64);
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let interval_ms = match engine.upgrade() {
                    Some(engine) => engine.checkpoint_interval_ms(),
                    None => return,
                };
                // 0 turns periodic checkpoints off; look again later.
                let wait_ms = if interval_ms == 0 { 1000 } else { interval_ms };
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if interval_ms == 0 {
                    continue;
                }
                let outcome = tokio::task::spawn_blocking(move || {
                    engine.checkpoint()?;
                    engine.expire_tables()?;
                    engine.trim_table_logs()
                })
                .await;
                if let Ok(Err(error)) = outcome {
                    tracing::error!(%error.message, "checkpoint failed");
                }
            }
        });
    }

    /// Deletes the rows of tables with a retention that have expired; of a
    /// table that views read, only rows the last checkpoint covers (so
    /// recovery never needs a deleted row).
    pub fn expire_tables(&self) -> Result<()> {
        let record = self.last_epoch()?;
        for definition in self.catalog.definitions() {
            let retained = definition
                .stream
                .as_ref()
                .is_some_and(|stream| stream.retention_ms.is_some());
            if definition.kind != RelationKind::Table || !retained {
                continue;
            }
            let Some(log) = self.catalog.table(&definition.name) else {
                continue;
            };
            let covered = if self.dataflow.lock().has_readers(&definition.name) {
                let offsets = record.as_ref().map(|record| &record.offsets);
                offsets
                    .and_then(|offsets| offsets.get(&definition.name).copied())
                    .unwrap_or(0)
            } else {
                log.row_count()
            };
            let expired = log.expire(covered)?;
            if expired > 0 {
                tracing::debug!(table = %definition.name, expired, "expired rows deleted");
            }
        }
        Ok(())
    }

    /// Forgets what tables logged between rows (firings, a PROCTIME()
    /// table's watermark raises) that the last checkpoint covers and no
    /// replay needs.
    pub fn trim_table_logs(&self) -> Result<()> {
        let Some(record) = self.last_epoch()? else {
            return Ok(());
        };
        for (table, &covered) in &record.offsets {
            if let Some(log) = self.catalog.table(table) {
                log.trim_firings(covered)?;
                log.trim_ticks(covered)?;
            }
        }
        crate::stream::commit_order::trim(&**self.catalog.store(), record.commit_sequence)?;
        Ok(())
    }

    /// Brings every view's running state back: from the last checkpoint
    /// plus the rows after it, or from all rows when there is none.
    pub(super) fn recover_views(&self) -> Result<()> {
        let started = Instant::now();
        let mut flow = self.dataflow.lock();
        // After the checkpoint being committed, if any: its record is read
        // below, and its generation must not be taken for a stale one.
        let mut commits = self.dataflow.lock_commits();
        let record = self.last_epoch()?;
        let store = self.catalog.store().clone();
        let generation = record.as_ref().map_or(0, |record| record.generation);
        delete_stale_generations(&*store, generation)?;
        let mut entries_restored = 0;
        // A view that failed before stays failed: its state no longer
        // follows its inputs.
        for name in self.catalog.load_failed_views()? {
            flow.remove_view(&name);
        }
        if record.is_some() {
            flow.restore(|prefix| {
                let stored = in_generation(prefix, generation);
                let entries: Vec<_> = store
                    .scan_prefix(&stored)?
                    .into_iter()
                    .map(|(key, value)| (key[stored.len()..].to_vec(), value))
                    .collect();
                entries_restored += entries.len() as u64;
                Ok(StateReader { entries })
            });
        }
        flow.start_from(record.as_ref());
        *flow.stored_state() = StoredState::counted(generation, entries_restored);
        // Restored from what is committed: checkpoints may commit again.
        commits.failed = false;
        drop(commits);
        flow.set_repaired();
        flow.set_replaying(true);
        let replayed = self.replay_tables(&mut flow);
        flow.set_replaying(false);
        for (name, error) in flow.take_failed() {
            tracing::error!(view = %name, %error.message, "a materialized view failed to recover; the others serve (DROP it and create it again)");
            self.catalog.mark_view_failed(&name, &error.message)?;
        }
        let rows_replayed = replayed.inspect_err(|_| flow.mark_broken())?;
        *self
            .checkpoints
            .recovery
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(RecoveryStats {
            unix_ms: unix_ms(),
            from_epoch: record.map(|record| record.epoch),
            duration_us: started.elapsed().as_micros() as u64,
            rows_replayed,
        });
        Ok(())
    }

    fn last_epoch(&self) -> Result<Option<EpochRecord>> {
        EpochRecord::read(&**self.catalog.store())
    }
}

/// `weir_catalog.checkpoints` and `weir_catalog.recovery`.
pub fn system_tables(
    history: &Arc<CheckpointHistory>,
) -> Vec<(&'static str, crate::engine::system_tables::ComputedTable)> {
    use crate::engine::system_tables::ComputedTable;
    use datafusion::arrow::array::{ArrayRef, Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;

    let time = || DataType::Timestamp(TimeUnit::Millisecond, None);
    let checkpoints_schema = Arc::new(Schema::new(vec![
        Field::new("epoch", DataType::Int64, false),
        Field::new("taken_at", time(), false),
        Field::new("duration_us", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("generation", DataType::Int64, false),
        Field::new("writers_blocked_us", DataType::Int64, false),
    ]));
    let recovery_schema = Arc::new(Schema::new(vec![
        Field::new("recovered_at", time(), false),
        Field::new("from_epoch", DataType::Int64, true),
        Field::new("duration_us", DataType::Int64, false),
        Field::new("rows_replayed", DataType::Int64, false),
        Field::new("views_rebuilt", DataType::Int64, false),
    ]));
    let checkpoints = history.clone();
    let recovery = history.clone();
    vec![
        (
            "checkpoints",
            ComputedTable::new(checkpoints_schema, move |schema| {
                let kept = checkpoints
                    .checkpoints
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let column =
                    |f: fn(&CheckpointStats) -> i64| -> Vec<i64> { kept.iter().map(f).collect() };
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(column(|c| c.epoch as i64))),
                    Arc::new(TimestampMillisecondArray::from(column(|c| {
                        c.unix_ms as i64
                    }))),
                    Arc::new(Int64Array::from(column(|c| c.duration_us as i64))),
                    Arc::new(Int64Array::from(column(|c| c.bytes as i64))),
                    Arc::new(Int64Array::from(column(|c| c.generation as i64))),
                    Arc::new(Int64Array::from(column(|c| c.writers_blocked_us as i64))),
                ];
                Ok(RecordBatch::try_new(schema.clone(), columns)?)
            }),
        ),
        (
            "recovery",
            ComputedTable::new(recovery_schema, move |schema| {
                let last = recovery
                    .recovery
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let rows: Vec<RecoveryStats> = last.into_iter().collect();
                let rebuilt = recovery
                    .views_rebuilt
                    .load(std::sync::atomic::Ordering::Relaxed)
                    as i64;
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        rows.iter().map(|r| r.unix_ms as i64),
                    )),
                    Arc::new(Int64Array::from_iter(
                        rows.iter().map(|r| r.from_epoch.map(|e| e as i64)),
                    )),
                    Arc::new(Int64Array::from_iter_values(
                        rows.iter().map(|r| r.duration_us as i64),
                    )),
                    Arc::new(Int64Array::from_iter_values(
                        rows.iter().map(|r| r.rows_replayed as i64),
                    )),
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|_| rebuilt))),
                ];
                Ok(RecordBatch::try_new(schema.clone(), columns)?)
            }),
        ),
    ]
}
