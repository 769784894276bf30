//! `EMIT EVERY` firings in a table's log: a firing of views reading the
//! table is logged at the table's row count (`firings/<table>/<row
//! offset>` → when, and which views) and committed with the views' changes
//! it caused, so replay after a crash fires the same views between the
//! same rows. Several firings at one row count are one entry: between them
//! no row changed anything, so their order does not matter. Firings a
//! checkpoint covers are forgotten, but each view's last.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::between_rows::FIRINGS;
use super::TableLog;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::Message;

/// The views fired at one row count, and when the last of them fired.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Firing {
    /// Processing time of the firing (the engine's clock), in nanoseconds.
    pub unix_ns: i64,
    /// View ids, ascending.
    pub views: Vec<u64>,
}

impl Firing {
    fn encode(&self) -> Vec<u8> {
        let mut value = self.unix_ns.to_be_bytes().to_vec();
        for view in &self.views {
            value.extend_from_slice(&view.to_be_bytes());
        }
        value
    }

    fn decode(value: &[u8]) -> Option<Firing> {
        if value.len() < 8 || value.len() % 8 != 0 {
            return None;
        }
        let mut words = value
            .chunks_exact(8)
            .map(|chunk| u64::from_be_bytes(chunk.try_into().unwrap_or_default()));
        let unix_ns = words.next()? as i64;
        Some(Firing {
            unix_ns,
            views: words.collect(),
        })
    }

    /// This firing with `views` fired again at `unix_ns`.
    fn merged(&self, views: &[u64], unix_ns: i64) -> Firing {
        let mut merged = self.views.clone();
        merged.extend_from_slice(views);
        merged.sort_unstable();
        merged.dedup();
        Firing {
            unix_ns: unix_ns.max(self.unix_ns),
            views: merged,
        }
    }
}

pub fn firings_prefix(table_id: u64) -> Vec<u8> {
    FIRINGS.prefix(table_id)
}

/// Logged firings by the row count they happened at.
pub fn load_firings(store: &dyn StateStore, table_id: u64) -> Result<BTreeMap<u64, Firing>> {
    let mut firings = BTreeMap::new();
    for (row, value) in FIRINGS.load(store, table_id)? {
        let firing = Firing::decode(&value).ok_or_else(|| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                "a table's logged EMIT EVERY firing is malformed",
            )
        })?;
        firings.insert(row, firing);
    }
    Ok(firings)
}

impl TableLog {
    /// Fires `views` now (their aggregates publish what they held), logged
    /// at the row count; returns that row count, or None when the table's
    /// writes stayed held for `wait` (a COPY waiting for its client): the
    /// views are then still due. Like a write, it completes in its own task
    /// once started.
    pub async fn fire_views(
        self: &Arc<Self>,
        views: Vec<u64>,
        unix_ns: i64,
        wait: Duration,
    ) -> Result<Option<u64>> {
        let Some(writer) = self.writer_within(wait).await else {
            return Ok(None);
        };
        // Logged at the row count: the table's writes must be in.
        self.quiesce().await;
        self.check_not_dropped()?;
        let log = self.clone();
        tokio::task::spawn_blocking(move || {
            let (offset, write, firing) = log.firing_write(&views, unix_ns);
            let messages = views.iter().map(|&view| Message::Fire(view)).collect();
            let mut fired = Some(firing);
            let mut publish = || {
                if let Some(firing) = fired.take() {
                    log.firing_logged(offset, firing);
                }
            };
            let outcome = log.commit_between_rows(write, messages, &mut publish);
            drop(writer);
            outcome.map(|()| Some(offset))
        })
        .await
        .map_err(|error| WeirError::internal(format!("firing task failed: {error}")))?
    }

    /// The log entry of firing `views` at the current row count (with the
    /// writes held off): the row count, the write, and the entry.
    pub fn firing_write(&self, views: &[u64], unix_ns: i64) -> (u64, WriteBatch, Firing) {
        let offset = self.row_count();
        let firing = lock(&self.firings)
            .get(&offset)
            .cloned()
            .unwrap_or_default()
            .merged(views, unix_ns);
        let mut write = WriteBatch::new();
        write.put(FIRINGS.key(self.id, offset), firing.encode());
        (offset, write, firing)
    }

    /// A firing's entry is durable: replays from now on meet it.
    pub fn firing_logged(&self, offset: u64, firing: Firing) {
        lock(&self.firings).insert(offset, firing);
    }

    /// Forgets the firings before row `covered` (the row count the last
    /// checkpoint has seen: replay starts there), but the last of each
    /// view (where its schedule resumes after a restart).
    pub fn trim_firings(&self, covered: u64) -> Result<()> {
        let mut seen = BTreeSet::new();
        let mut stale = Vec::new();
        for (&offset, firing) in lock(&self.firings).iter().rev() {
            let last_of_a_view = firing.views.iter().any(|view| !seen.contains(view));
            seen.extend(firing.views.iter().copied());
            if offset < covered && !last_of_a_view {
                stale.push(offset);
            }
        }
        FIRINGS.forget(&*self.store, self.id, &self.firings, stale)
    }

    /// Where and when `view` last fired: (row count, processing time).
    pub fn last_firing_of(&self, view: u64) -> Option<(u64, i64)> {
        lock(&self.firings)
            .iter()
            .rev()
            .find(|(_, firing)| firing.views.binary_search(&view).is_ok())
            .map(|(&offset, firing)| (offset, firing.unix_ns))
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firing_entry_round_trips_and_merges() {
        let firing = Firing {
            unix_ns: -5,
            views: vec![3, 9],
        };
        assert_eq!(Firing::decode(&firing.encode()), Some(firing.clone()));
        let merged = firing.merged(&[9, 4], 7);
        assert_eq!(
            merged,
            Firing {
                unix_ns: 7,
                views: vec![3, 4, 9]
            }
        );
        assert_eq!(Firing::decode(b"short"), None);
        assert_eq!(Firing::decode(&[0; 12]), None);
    }
}
