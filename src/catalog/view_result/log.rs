//! The append-only layout of a view's rows: a view that never retracts a
//! row (EMIT ON WINDOW CLOSE without `late_data = 'update'`, filters and
//! projections of append-only inputs, side outputs) stores each applied
//! chunk as one Arrow batch under the next sequence number. A change costs
//! one encode per chunk instead of a read and a write per row, and a query
//! reads whole batches in the order the rows were emitted.
//!
//! Entries below the committed count never change, so a reader needs only
//! the count at its start. Entries at or past it may be garbage left by a
//! statement that spilled and then failed; the next commit overwrites them
//! and nobody reads them before that.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;

use super::{encode_head, view_head_key, view_rows_prefix, RowLayout, ViewHead, ViewResult};
use crate::error::{Result, WeirError};
use crate::state::batch_codec::{decode_batches_projected, encode_batch};
use crate::state::{Entries, StateStore, WriteBatch};
use crate::stream::message::Chunk;

/// The key of entry `sequence` of the view's log.
pub(super) fn entry_key(view_id: u64, sequence: u64) -> Vec<u8> {
    let mut key = view_rows_prefix(view_id);
    key.extend_from_slice(&sequence.to_be_bytes());
    key
}

impl ViewResult {
    /// Stages `chunk` as the log's next entry; returns the entry and the
    /// head that commits it.
    pub(super) fn apply_log(&self, chunk: &Chunk) -> Result<WriteBatch> {
        if let Some(diffs) = &chunk.diffs {
            if diffs.values().iter().any(|&diff| diff != 1) {
                return Err(WeirError::internal(format!(
                    "append-only materialized view {} received a retraction",
                    self.id
                )));
            }
        }
        let rows = RecordBatch::try_new(self.schema.clone(), chunk.rows.columns().to_vec())?;
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let sequence = self.committed_entries.load(Ordering::Acquire) + staged.entries;
        staged.entries += 1;
        staged.total += rows.num_rows() as i64;
        staged.changed = true;
        let mut writes = WriteBatch::new();
        writes.put_log(entry_key(self.id, sequence), encode_batch(&rows)?);
        let head = ViewHead {
            rows: self.total_rows.load(Ordering::Acquire) + staged.total,
            layout: RowLayout::Log,
            entries: sequence + 1,
            ..ViewHead::default()
        };
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(writes)
    }
}

/// The committed entries of a view's log, decoded one entry at a time.
pub struct LogBatches {
    entries: Entries,
    projection: Option<Vec<usize>>,
    decoded: std::vec::IntoIter<RecordBatch>,
}

impl LogBatches {
    pub(super) fn new(
        store: &Arc<dyn StateStore>,
        view_id: u64,
        committed_entries: u64,
        projection: Option<Vec<usize>>,
    ) -> Self {
        LogBatches {
            entries: store.scan_range(
                &entry_key(view_id, 0),
                &entry_key(view_id, committed_entries),
            ),
            projection,
            decoded: Vec::new().into_iter(),
        }
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.decoded.next() {
                return Ok(Some(batch));
            }
            let Some(entry) = self.entries.next() else {
                return Ok(None);
            };
            let (_, value) = entry?;
            let batches = decode_batches_projected(
                &value,
                "a materialized view's stored rows",
                self.projection.as_deref(),
            )?;
            self.decoded = batches.into_iter();
        }
    }
}

impl Iterator for LogBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.next_batch().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn schema() -> datafusion::arrow::datatypes::SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("window_end", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
        ]))
    }

    fn inserts(ends: &[i64], counts: &[i64]) -> Chunk {
        let rows = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(ends.to_vec())),
                Arc::new(Int64Array::from(counts.to_vec())),
            ],
        )
        .unwrap();
        Chunk::inserts(rows)
    }

    fn store() -> (tempfile::TempDir, Arc<dyn StateStore>) {
        let directory = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
        (directory, store)
    }

    fn column(result: &ViewResult, projection: Option<Vec<usize>>) -> (usize, Vec<i64>) {
        let mut rows = 0;
        let mut values = Vec::new();
        for batch in result.rows(projection).unwrap().read().unwrap() {
            let batch = batch.unwrap();
            rows += batch.num_rows();
            if batch.num_columns() > 0 {
                values.extend(batch.column(0).as_primitive::<Int64Type>().values());
            }
        }
        (rows, values)
    }

    fn commit(result: &ViewResult, store: &Arc<dyn StateStore>, chunk: &Chunk) {
        store.commit(result.apply(chunk).unwrap()).unwrap();
        result.publish();
    }

    #[test]
    fn entries_read_back_in_emit_order_after_reopening() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        store.commit(result.head_write().unwrap()).unwrap();
        commit(&result, &store, &inserts(&[30, 10], &[1, 2]));
        commit(&result, &store, &inserts(&[20], &[3]));
        assert_eq!(column(&result, None), (3, vec![30, 10, 20]));
        // Asked for a multiset now (as a re-planned view might be), the
        // stored head keeps it a log.
        let reopened = ViewResult::open(7, schema(), RowLayout::Multiset, store.clone()).unwrap();
        assert_eq!(reopened.layout(), RowLayout::Log);
        assert_eq!(reopened.row_count(), 3);
        assert_eq!(column(&reopened, Some(vec![1])), (3, vec![1, 2, 3]));
        assert_eq!(column(&reopened, Some(vec![])).0, 3, "count(*) reads rows");
    }

    #[test]
    fn a_retraction_is_refused() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store).unwrap();
        let mut chunk = inserts(&[10], &[1]);
        chunk.diffs = Some(Int64Array::from(vec![-1]));
        let error = result.apply(&chunk).unwrap_err();
        assert!(error.message.contains("retraction"), "{}", error.message);
    }

    #[test]
    fn readers_see_committed_entries_only() {
        let (_directory, store) = store();
        let result = ViewResult::open(7, schema(), RowLayout::Log, store.clone()).unwrap();
        commit(&result, &store, &inserts(&[10], &[1]));
        let reading = result.rows(None).unwrap().read().unwrap();
        // A spilled statement that fails leaves an entry past the count.
        assert_eq!(result.reserve().unwrap().map(|w| w.len()), None);
        let mut spilled = result.apply(&inserts(&[99], &[99])).unwrap();
        store
            .stage(spilled.split_off_prefix(&view_rows_prefix(7)))
            .unwrap();
        result.discard();
        commit(&result, &store, &inserts(&[20], &[2]));
        let seen: usize = reading.map(|batch| batch.unwrap().num_rows()).sum();
        assert_eq!(seen, 1, "the reader started before the second commit");
        assert_eq!(column(&result, None), (2, vec![10, 20]));
        let reopened = ViewResult::open(7, schema(), RowLayout::Log, store).unwrap();
        assert_eq!(column(&reopened, None), (2, vec![10, 20]));
    }
}
