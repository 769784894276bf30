//! `EMIT EVERY` schedules: when each such view fires. The clock fires,
//! every tick, the views that are due — their interval has passed since
//! their last firing and their table took rows since — through their
//! table's log (`TableLog::fire_views`), so a replay fires them between
//! the same rows. A view fires once when it is created, so what its
//! backfill found is shown and the log says so. The schedule's clock is the
//! wall clock plus `emit_clock_offset` (ALTER SYSTEM), which moves time on
//! for tests and demonstrations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Engine;
use crate::connectors::table::{unix_now_ns, TableLog};
use crate::error::{Result, WeirError};
use crate::sql::streaming::StreamPlan;

#[derive(Default)]
pub struct FiringSchedules {
    views: Mutex<HashMap<u64, Schedule>>,
    /// `emit_clock_offset`: how far the schedules' clock is ahead of the
    /// wall clock, in nanoseconds.
    pub(super) clock_offset_ns: AtomicI64,
    /// One round of firings at a time (the clock's and ALTER SYSTEM's).
    running: tokio::sync::Mutex<()>,
}

struct Schedule {
    table: Arc<TableLog>,
    interval_ns: i64,
    /// When the view last fired (the schedules' clock) and at which row.
    last_unix_ns: i64,
    last_offset: u64,
}

impl Schedule {
    fn due(&self, now_ns: i64) -> bool {
        now_ns.saturating_sub(self.last_unix_ns) >= self.interval_ns
            && self.table.row_count() > self.last_offset
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    /// The time of the `EMIT EVERY` schedules, in nanoseconds since 1970.
    pub fn emit_clock_ns(&self) -> i64 {
        let offset = self.firings.clock_offset_ns.load(Ordering::Relaxed);
        unix_now_ns().saturating_add(offset)
    }

    /// The table an `EMIT EVERY` view fires through: its one input, which
    /// must be a table or source (replay goes table by table). None for a
    /// view without EMIT EVERY.
    pub(super) fn firing_table(&self, plan: &StreamPlan) -> Result<Option<Arc<TableLog>>> {
        if plan.firing_interval_ns.is_none() {
            return Ok(None);
        }
        let inputs = plan.inputs();
        let refused = |what: &str| {
            WeirError::unsupported(format!(
                "EMIT EVERY on a materialized view that reads {what} is not supported yet"
            ))
            .with_hint("Read one table or source in the view with EMIT EVERY; join or union in a materialized view without it first, and aggregate that in a view over a table fed by a sink, or leave out EMIT EVERY.")
        };
        let [input] = inputs.as_slice() else {
            return Err(refused("more than one relation"));
        };
        match self.catalog.table(input) {
            Some(table) => Ok(Some(table)),
            None => Err(refused("another materialized view")),
        }
    }

    /// Starts (or restarts) the schedule of view `view`, which last fired
    /// at `last` (row, time) — from the table's log when None.
    pub(super) fn schedule_firings(
        &self,
        view: u64,
        table: Arc<TableLog>,
        interval_ns: i64,
        last: Option<(u64, i64)>,
    ) {
        let (last_offset, last_unix_ns) = last
            .or_else(|| table.last_firing_of(view))
            .unwrap_or((0, self.emit_clock_ns()));
        let schedule = Schedule {
            table,
            interval_ns,
            last_unix_ns,
            last_offset,
        };
        lock(&self.firings.views).insert(view, schedule);
    }

    pub(super) fn unschedule_firings(&self, view: u64) {
        lock(&self.firings.views).remove(&view);
    }

    /// Fires every view that is due, a table's views in one firing; a
    /// table whose writes stay held for `wait` keeps its views due.
    pub async fn fire_due_views(&self, wait: Duration) {
        let _running = self.firings.running.lock().await;
        let now_ns = self.emit_clock_ns();
        let mut due: HashMap<u64, (Arc<TableLog>, Vec<u64>)> = HashMap::new();
        for (&view, schedule) in lock(&self.firings.views).iter() {
            if schedule.due(now_ns) {
                let table = schedule.table.clone();
                due.entry(table.id())
                    .or_insert_with(|| (table, Vec::new()))
                    .1
                    .push(view);
            }
        }
        for (table, mut views) in due.into_values() {
            views.sort_unstable();
            match table.fire_views(views.clone(), now_ns, wait).await {
                Ok(None) => {}
                Ok(Some(offset)) => {
                    let mut schedules = lock(&self.firings.views);
                    for view in views {
                        if let Some(schedule) = schedules.get_mut(&view) {
                            (schedule.last_offset, schedule.last_unix_ns) = (offset, now_ns);
                        }
                    }
                }
                Err(error) if error.code == crate::error::sqlstate::UNDEFINED_TABLE => {}
                Err(error) => {
                    tracing::error!(table = table.name(), %error.message, "an EMIT EVERY firing failed");
                    self.repair_views().await;
                }
            }
        }
    }
}
