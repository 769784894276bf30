//! The general layout of a view's rows: a multiset (row -> count per
//! epoch) keyed by the row, for views whose rows are retracted or updated.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::versions::Versions;
use super::{encode_head, view_head_key, view_rows_prefix, ViewHead, ViewResult};
use crate::error::Result;
use crate::state::WriteBatch;
use crate::stream::message::Chunk;

impl ViewResult {
    /// Stages a chunk of changes as row versions at the next epoch.
    pub(super) fn apply_multiset(&self, chunk: &Chunk) -> Result<WriteBatch> {
        let encoded = self.converter.convert_columns(chunk.rows.columns())?;
        let prefix = view_rows_prefix(self.id);
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let mut deltas: BTreeMap<&[u8], i64> = BTreeMap::new();
        for row in 0..chunk.num_rows() {
            *deltas.entry(encoded.row(row).data()).or_insert(0) += chunk.diff(row);
            staged.total += chunk.diff(row);
        }
        staged.changed = true;
        let (committed, oldest, aborted, epoch) = self.readers.for_write();
        staged.epoch = epoch;
        let mut writes = WriteBatch::new();
        for (bytes, delta) in deltas {
            let mut stored_key = prefix.clone();
            stored_key.extend_from_slice(bytes);
            let versions = match self.store.get(&stored_key)? {
                Some(value) => Versions::decode(&value)?,
                None => Versions::default(),
            };
            let committed_count = versions.count_at(committed, &aborted);
            let before = if staged.in_store {
                versions.exactly_at(epoch).unwrap_or(committed_count)
            } else {
                let change = staged.rows.entry(bytes.to_vec()).or_insert(0);
                let before = committed_count + *change;
                *change += delta;
                before
            };
            match versions.with(epoch, before + delta, oldest, &aborted) {
                Some(versions) => writes.put(stored_key, versions.encode()),
                None => writes.delete(stored_key),
            }
        }
        if staged.in_store {
            self.store.stage(std::mem::take(&mut writes))?;
        }
        let head = ViewHead {
            layout: self.layout.clone(),
            epoch,
            rows: self.total_rows.load(Ordering::Acquire) + staged.total,
            aborted: aborted.to_vec(),
            ..ViewHead::default()
        };
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(writes)
    }
}
