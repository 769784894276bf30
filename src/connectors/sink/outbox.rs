//! A sink's outbox: the view's committed changes waiting to be shipped.
//! Each view commit's changes are written under the commit's sequence
//! number in the same atomic batch as the view's rows, so a crash never
//! loses a change the view kept, nor keeps one it lost. The shipper reads
//! sequences in order and deletes them once the destination has them.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use std::sync::Arc;

use crate::error::{sqlstate, Result, WeirError};
use crate::state::batch_codec::{decode_batches, encode_batch};
use crate::state::{key, StateStore, WriteBatch};
use crate::stream::message::Chunk;

/// The column that carries each row's diff in a stored part.
const DIFF_COLUMN: &str = "weir.diff";

pub struct Outbox {
    sink_id: u64,
    state: Mutex<OutboxState>,
    committed_moved: Condvar,
}

#[derive(Default)]
struct OutboxState {
    /// The last sequence committed to the store.
    committed: u64,
    /// Parts staged for sequence `committed + 1`.
    staged_parts: u32,
}

fn entries_prefix(sink_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"sinkout", &sink_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

fn sequence_prefix(sink_id: u64, sequence: u64) -> Vec<u8> {
    let mut prefix = entries_prefix(sink_id);
    prefix.extend_from_slice(&sequence.to_be_bytes());
    prefix
}

fn head_key(sink_id: u64) -> Vec<u8> {
    key(&[b"sinkhead", &sink_id.to_be_bytes()])
}

/// Everything the store holds for a sink's outbox: DROP SINK deletes it.
pub fn outbox_writes_on_drop(sink_id: u64) -> WriteBatch {
    let mut writes = WriteBatch::new();
    writes.delete_prefix(entries_prefix(sink_id));
    writes.delete(head_key(sink_id));
    writes
}

impl Outbox {
    /// The outbox as committed (a new sink's is empty).
    pub fn open(store: &dyn StateStore, sink_id: u64) -> Result<Self> {
        let committed = match store.get(&head_key(sink_id))? {
            Some(value) => <[u8; 8]>::try_from(value.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    WeirError::new(
                        sqlstate::DATA_CORRUPTED,
                        format!("sink {sink_id}: its outbox head cannot be decoded"),
                    )
                })?,
            None => 0,
        };
        Ok(Outbox {
            sink_id,
            state: Mutex::new(OutboxState {
                committed,
                staged_parts: 0,
            }),
            committed_moved: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn committed(&self) -> u64 {
        self.lock().committed
    }

    /// Stages a chunk of the commit being made; returns the writes that
    /// keep it (commit them with the view's).
    pub fn stage(&self, chunk: &Chunk) -> Result<WriteBatch> {
        let mut state = self.lock();
        let sequence = state.committed + 1;
        let mut part_key = sequence_prefix(self.sink_id, sequence);
        part_key.extend_from_slice(&state.staged_parts.to_be_bytes());
        let mut writes = WriteBatch::new();
        writes.put(part_key, encode_batch(&with_diffs(chunk)?)?);
        writes.put(head_key(self.sink_id), sequence.to_be_bytes().to_vec());
        state.staged_parts += 1;
        Ok(writes)
    }

    /// The staged commit is durable: the shipper may take it.
    pub fn publish(&self) {
        let mut state = self.lock();
        if state.staged_parts > 0 {
            state.staged_parts = 0;
            state.committed += 1;
            self.committed_moved.notify_all();
        }
    }

    /// The staged commit was not made (its writes were never committed).
    pub fn discard(&self) {
        self.lock().staged_parts = 0;
    }

    /// Waits up to `timeout` for a sequence past `shipped`; returns the
    /// last committed one.
    pub fn wait_beyond(&self, shipped: u64, timeout: Duration) -> u64 {
        let state = self.lock();
        let (state, _) = self
            .committed_moved
            .wait_timeout_while(state, timeout, |state| state.committed <= shipped)
            .unwrap_or_else(|p| p.into_inner());
        state.committed
    }

    /// Wakes a shipper waiting in `wait_beyond` (it is being stopped).
    pub fn wake(&self) {
        self.committed_moved.notify_all();
    }

    /// The changes of committed sequence `sequence`, and the keys to delete
    /// once they are shipped.
    pub fn read(
        &self,
        store: &dyn StateStore,
        sequence: u64,
    ) -> Result<(Vec<Chunk>, Vec<Vec<u8>>)> {
        let start = sequence_prefix(self.sink_id, sequence);
        let end = sequence_prefix(self.sink_id, sequence + 1);
        let mut chunks = Vec::new();
        let mut keys = Vec::new();
        for entry in store.scan_range(&start, &end) {
            let (stored_key, value) = entry?;
            for batch in decode_batches(&value, "a sink's outbox entry")? {
                chunks.push(without_diffs(batch)?);
            }
            keys.push(stored_key);
        }
        Ok((chunks, keys))
    }
}

/// The chunk's rows with their diffs as a last column.
fn with_diffs(chunk: &Chunk) -> Result<RecordBatch> {
    let diffs = match &chunk.diffs {
        Some(diffs) => diffs.clone(),
        None => Int64Array::from(vec![1; chunk.num_rows()]),
    };
    let rows = &chunk.rows;
    let mut fields: Vec<Field> = rows
        .schema()
        .fields()
        .iter()
        .map(|field| field.as_ref().clone().with_nullable(true))
        .collect();
    fields.push(Field::new(DIFF_COLUMN, DataType::Int64, false));
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(diffs));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn without_diffs(batch: RecordBatch) -> Result<Chunk> {
    let last = batch
        .num_columns()
        .checked_sub(1)
        .filter(|&last| batch.schema().field(last).name() == DIFF_COLUMN);
    let Some(last) = last else {
        return Err(WeirError::new(
            sqlstate::DATA_CORRUPTED,
            "a sink's outbox entry has no diff column",
        ));
    };
    let diffs = batch
        .column(last)
        .as_any()
        .downcast_ref::<Int64Array>()
        .cloned();
    let mut rows = batch;
    rows.remove_column(last);
    Ok(Chunk {
        rows,
        diffs,
        watermarks: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use datafusion::arrow::array::StringArray;

    fn chunk(names: &[&str], diffs: &[i64]) -> Chunk {
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(names.to_vec()))])
            .unwrap();
        Chunk {
            rows,
            diffs: Some(Int64Array::from(diffs.to_vec())),
            watermarks: None,
        }
    }

    #[test]
    fn a_committed_sequence_is_read_back_whole_and_a_discarded_one_never() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let outbox = Outbox::open(&store, 7).unwrap();
        let mut writes = outbox.stage(&chunk(&["a", "b"], &[1, 1])).unwrap();
        writes.extend(outbox.stage(&chunk(&["a"], &[-1])).unwrap());
        store.commit(writes).unwrap();
        outbox.publish();
        let discarded = outbox.stage(&chunk(&["lost"], &[1])).unwrap();
        drop(discarded);
        outbox.discard();
        store
            .commit(outbox.stage(&chunk(&["c"], &[1])).unwrap())
            .unwrap();
        outbox.publish();
        assert_eq!(outbox.wait_beyond(0, Duration::ZERO), 2);
        let reopened = Outbox::open(&store, 7).unwrap();
        assert_eq!(reopened.committed(), 2, "the head is durable");
        let (first, keys) = reopened.read(&store, 1).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(first[1].diffs.as_ref().unwrap().value(0), -1);
        assert_eq!(
            first[0].rows.num_columns(),
            1,
            "the diff column is taken off"
        );
        let (second, _) = reopened.read(&store, 2).unwrap();
        let names = second[0]
            .rows
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(0), "c");
    }
}
