//! Data directories written before entries were keyed by row: one entry per
//! write, keyed by a sequence number, and no head. Opening such a table
//! rewrites its log once into the current layout; until the final commit
//! (new head, old entries deleted) the old entries stay authoritative, so a
//! crash part-way simply migrates again.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::changes::TableChanges;
use super::entries::{self, encode_entry, encode_head, entry_key, head_key, LogHead};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::batch_codec::decode_batches;
use crate::state::{StateStore, WriteBatch};
use crate::stream::WatermarkTracker;

/// Rewrites table `table_id`'s legacy entries (if any); returns its head.
pub fn migrate(
    store: &dyn StateStore,
    table_id: u64,
    schema: &SchemaRef,
    mut tracker: Option<WatermarkTracker>,
) -> Result<LogHead> {
    // Entries of an interrupted migration, or spilled before any commit.
    entries::delete_from(store, table_id, 0)?;
    let mut rows = 0u64;
    let legacy = entries::legacy_rows_prefix(table_id);
    let mut found = false;
    for (stored_key, value) in store.scan_prefix(&legacy)? {
        found = true;
        let what = format!("table rows at {:?}", String::from_utf8_lossy(&stored_key));
        for batch in decode_batches(&value, &what)? {
            let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(
                |error| {
                    WeirError::new(
                        sqlstate::DATA_CORRUPTED,
                        format!("{what} do not match the table: {error}"),
                    )
                },
            )?;
            if batch.num_rows() == 0 {
                continue;
            }
            let before = tracker.as_ref().and_then(WatermarkTracker::max_event_ns);
            if let Some(tracker) = tracker.as_mut() {
                tracker.advance(&batch)?;
            }
            let mut write = WriteBatch::new();
            write.put_log(
                entry_key(table_id, rows),
                encode_entry(&TableChanges::inserts(batch.clone()), before)?,
            );
            store.stage(write)?;
            rows += batch.num_rows() as u64;
        }
    }
    let head = LogHead {
        rows,
        max_event_ns: tracker.as_ref().and_then(WatermarkTracker::max_event_ns),
        position: None,
    };
    if found {
        let mut finish = WriteBatch::new();
        finish.put(head_key(table_id), encode_head(&head)?);
        finish.delete_prefix(legacy);
        store.commit(finish)?;
        tracing::info!(table_id, rows, "table log migrated to row-keyed entries");
    }
    Ok(head)
}
