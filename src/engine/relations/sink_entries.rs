//! The catalog's sinks: their stored definitions and the outbox each one's
//! view writes its changes to. A sink's outbox is attached to its view's
//! result whenever that result is (re)registered, so no commit of the view
//! misses it, even after a rebuild.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Relations;
use crate::catalog::SinkDefinition;
use crate::connectors::sink::outbox::outbox_writes_on_drop;
use crate::connectors::sink::Outbox;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, WriteBatch};

/// A sink as the catalog holds it.
#[derive(Clone)]
pub struct SinkEntry {
    pub definition: SinkDefinition,
    pub outbox: Arc<Outbox>,
}

fn sinks_prefix() -> Vec<u8> {
    key(&[b"catalog", b"sink", b""])
}

fn sink_key(id: u64) -> Vec<u8> {
    key(&[b"catalog", b"sink", &id.to_be_bytes()])
}

/// How far sink `id` has shipped (`SinkMark`, JSON).
pub fn sink_mark_key(id: u64) -> Vec<u8> {
    key(&[b"sinkmark", &id.to_be_bytes()])
}

/// The stored sinks, each with its outbox as committed.
pub(super) fn load(store: &dyn StateStore) -> Result<BTreeMap<String, SinkEntry>> {
    let mut sinks = BTreeMap::new();
    for (stored_key, value) in store.scan_prefix(&sinks_prefix())? {
        let definition: SinkDefinition = super::decode_catalog_entry(&stored_key, &value)?;
        let outbox = Arc::new(Outbox::open(store, definition.id)?);
        sinks.insert(definition.name.clone(), SinkEntry { definition, outbox });
    }
    Ok(sinks)
}

impl Relations {
    fn sinks_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, SinkEntry>> {
        self.sinks.read().unwrap_or_else(|p| p.into_inner())
    }

    fn sinks_write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, SinkEntry>> {
        self.sinks.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Every sink, in creation order.
    pub fn sinks(&self) -> Vec<SinkEntry> {
        let mut all: Vec<SinkEntry> = self.sinks_read().values().cloned().collect();
        all.sort_by_key(|entry| entry.definition.id);
        all
    }

    pub fn sink(&self, name: &str) -> Option<SinkEntry> {
        self.sinks_read().get(name).cloned()
    }

    /// The outboxes of the sinks reading `view`.
    pub(super) fn outboxes_of(&self, view: &str) -> Vec<Arc<Outbox>> {
        self.sinks_read()
            .values()
            .filter(|entry| entry.definition.view == view)
            .map(|entry| entry.outbox.clone())
            .collect()
    }

    /// Fails with 2BP01 when a sink ships `view`'s changes.
    pub(super) fn check_no_sinks(&self, view: &str) -> Result<()> {
        let sinks = self.sinks_read();
        let late = crate::catalog::side_output_name(view);
        let reading = sinks
            .values()
            .find(|entry| entry.definition.view == view || entry.definition.view == late);
        match reading {
            Some(entry) => Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop materialized view {view} because sink {} depends on it",
                    entry.definition.name
                ),
            )
            .with_hint(format!(
                "Drop the sink first: DROP SINK {};",
                entry.definition.name
            ))),
            None => Ok(()),
        }
    }

    /// A new sink's id (never reused).
    pub fn allocate_sink_id(&self) -> Result<u64> {
        self.allocate_ids(1)
    }

    /// Records a new sink with `writes` (its outbox's first sequence and
    /// its first mark) in one durable commit, and attaches its outbox to
    /// its view. Call it holding the dataflow, so no view commit comes
    /// between the snapshot in `writes` and the attachment.
    pub fn create_sink(&self, entry: SinkEntry, mut writes: WriteBatch) -> Result<()> {
        let name = entry.definition.name.clone();
        self.check_name_free(&name)?;
        let result = self
            .view_result(&entry.definition.view)
            .ok_or_else(|| WeirError::undefined_table(&entry.definition.view))?;
        let encoded = serde_json::to_vec(&entry.definition)
            .map_err(|error| WeirError::internal(format!("cannot encode a sink: {error}")))?;
        writes.put(sink_key(entry.definition.id), encoded);
        self.store.commit(writes)?;
        entry.outbox.publish();
        result.attach_outbox(entry.outbox.clone());
        self.sinks_write().insert(name, entry);
        Ok(())
    }

    /// Drops sink `name` with its outbox and mark, in one durable commit.
    pub fn drop_sink(&self, name: &str) -> Result<SinkEntry> {
        let entry = self.sink(name).ok_or_else(|| {
            WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("sink \"{name}\" does not exist"),
            )
            .with_hint("SHOW SINKS lists the sinks.")
        })?;
        let result = self.view_result(&entry.definition.view);
        if let Some(result) = &result {
            result.detach_outbox(&entry.outbox);
        }
        let id = entry.definition.id;
        let mut writes = outbox_writes_on_drop(id);
        writes.delete(sink_key(id));
        writes.delete(sink_mark_key(id));
        if let Err(error) = self.store.commit(writes) {
            if let Some(result) = &result {
                result.attach_outbox(entry.outbox.clone());
            }
            return Err(error);
        }
        self.sinks_write().remove(name);
        Ok(entry)
    }
}
