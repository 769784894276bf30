//! The rows of a materialized view: a multiset (row -> count) kept in
//! memory and in the state store, one entry per distinct row, so a change
//! costs work proportional to the change. Rows are encoded with arrow's row
//! format (order-preserving, so `SELECT * FROM v` comes back sorted); the
//! state envelope's format version pins that encoding (docs/decisions.md).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::catalog::Session as DataFusionSession;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, WriteBatch};
use crate::stream::message::Chunk;

pub struct ViewResult {
    id: u64,
    schema: SchemaRef,
    converter: RowConverter,
    rows: RwLock<BTreeMap<Vec<u8>, i64>>,
    /// Changes applied but not yet committed (row -> count change); queries
    /// see them once `publish` is called after the commit.
    staged: Mutex<BTreeMap<Vec<u8>, i64>>,
    /// The rows as one batch, rebuilt on the first query after a change.
    snapshot: Mutex<Option<RecordBatch>>,
    /// The view's output watermark, when its rows are final (EMIT ON
    /// WINDOW CLOSE) and keep a watermark column.
    watermark: Mutex<Option<i64>>,
    /// Rows dropped as late by this view's operators.
    pub late_rows: Arc<AtomicU64>,
}

impl fmt::Debug for ViewResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewResult").field("id", &self.id).finish()
    }
}

pub fn view_rows_prefix(view_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"viewrows", &view_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

impl ViewResult {
    /// Opens a view's result, loading its stored rows.
    pub fn open(id: u64, schema: SchemaRef, store: &dyn StateStore) -> Result<Self> {
        let fields = schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let prefix = view_rows_prefix(id);
        let mut rows = BTreeMap::new();
        for (stored_key, value) in store.scan_prefix(&prefix)? {
            let count = <[u8; 8]>::try_from(value.as_slice()).map_err(|_| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!("materialized view {id}: a stored row count is malformed"),
                )
            })?;
            rows.insert(
                stored_key[prefix.len()..].to_vec(),
                i64::from_be_bytes(count),
            );
        }
        Ok(ViewResult {
            id,
            schema,
            converter,
            rows: RwLock::new(rows),
            staged: Mutex::new(BTreeMap::new()),
            snapshot: Mutex::new(None),
            watermark: Mutex::new(None),
            late_rows: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Stages a chunk of changes; returns the writes that make them durable.
    /// Queries see them after `publish`, once those writes are committed.
    pub fn apply(&self, chunk: &Chunk) -> Result<WriteBatch> {
        let encoded = self.converter.convert_columns(chunk.rows.columns())?;
        let prefix = view_rows_prefix(self.id);
        let rows = self.rows.read().unwrap_or_else(|p| p.into_inner());
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = BTreeMap::new();
        for row in 0..chunk.num_rows() {
            let bytes = encoded.row(row).data();
            let change = staged.entry(bytes.to_vec()).or_insert(0);
            *change += chunk.diff(row);
            let count = rows.get(bytes).copied().unwrap_or(0) + *change;
            touched.insert(bytes.to_vec(), count);
        }
        let mut writes = WriteBatch::new();
        for (bytes, count) in touched {
            let mut stored_key = prefix.clone();
            stored_key.extend_from_slice(&bytes);
            if count == 0 {
                writes.delete(stored_key);
            } else {
                writes.put(stored_key, count.to_be_bytes().to_vec());
            }
        }
        Ok(writes)
    }

    /// The staged changes are committed: queries see them from now on.
    pub fn publish(&self) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if staged.is_empty() {
            return;
        }
        let mut rows = self.rows.write().unwrap_or_else(|p| p.into_inner());
        for (bytes, change) in std::mem::take(&mut *staged) {
            match rows.entry(bytes) {
                Entry::Occupied(mut count) => {
                    *count.get_mut() += change;
                    if *count.get() == 0 {
                        count.remove();
                    }
                }
                Entry::Vacant(slot) if change != 0 => {
                    slot.insert(change);
                }
                Entry::Vacant(_) => {}
            }
        }
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The staged changes were not committed: forget them.
    pub fn discard(&self) {
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    pub fn set_watermark(&self, watermark_ns: i64) {
        let mut watermark = self.watermark.lock().unwrap_or_else(|p| p.into_inner());
        *watermark = Some(watermark.map_or(watermark_ns, |w| w.max(watermark_ns)));
    }

    pub fn watermark_ns(&self) -> Option<i64> {
        *self.watermark.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn row_count(&self) -> i64 {
        let rows = self.rows.read().unwrap_or_else(|p| p.into_inner());
        rows.values().sum()
    }

    /// Every row (repeated by its count), in row order.
    pub fn snapshot(&self) -> Result<RecordBatch> {
        let mut cached = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(batch) = cached.as_ref() {
            return Ok(batch.clone());
        }
        let rows = self.rows.read().unwrap_or_else(|p| p.into_inner());
        let parser = self.converter.parser();
        let repeated = rows.iter().flat_map(|(bytes, count)| {
            std::iter::repeat_n(bytes, (*count).max(0) as usize).map(|bytes| parser.parse(bytes))
        });
        let total: usize = rows.values().map(|count| (*count).max(0) as usize).sum();
        let columns = self.converter.convert_rows(repeated)?;
        let options = RecordBatchOptions::new().with_row_count(Some(total));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        *cached = Some(batch.clone());
        Ok(batch)
    }
}

/// The DataFusion face of a materialized view: a scan of its current rows.
#[derive(Debug)]
pub struct MaterializedViewTable {
    result: Arc<ViewResult>,
}

impl MaterializedViewTable {
    pub fn new(result: Arc<ViewResult>) -> Self {
        MaterializedViewTable { result }
    }
}

#[async_trait]
impl TableProvider for MaterializedViewTable {
    fn schema(&self) -> SchemaRef {
        self.result.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn DataFusionSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let batch = self
            .result
            .snapshot()
            .map_err(|error| datafusion::error::DataFusionError::External(Box::new(error)))?;
        let exec =
            MemorySourceConfig::try_new_exec(&[vec![batch]], self.schema(), projection.cloned())?;
        Ok(exec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn chunk(names: &[&str], counts: &[i64], diffs: &[i64]) -> Chunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Int64Array::from(counts.to_vec())),
            ],
        )
        .unwrap();
        Chunk {
            rows,
            diffs: Some(Int64Array::from(diffs.to_vec())),
            watermarks: None,
        }
    }

    #[test]
    fn retractions_replace_rows_durably() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let schema = chunk(&[], &[], &[]).rows.schema();
        let result = ViewResult::open(3, schema.clone(), &store).unwrap();
        store
            .commit(result.apply(&chunk(&["b", "a"], &[1, 1], &[1, 1])).unwrap())
            .unwrap();
        result.publish();
        let writes = result
            .apply(&chunk(&["a", "a"], &[1, 2], &[-1, 1]))
            .unwrap();
        assert_eq!(result.row_count(), 2, "staged changes are not visible yet");
        store.commit(writes).unwrap();
        result.publish();
        assert_eq!(result.snapshot().unwrap().num_rows(), 2);
        let reopened = ViewResult::open(3, schema, &store).unwrap();
        let batch = reopened.snapshot().unwrap();
        let names: Vec<_> = batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        let counts: Vec<_> = batch
            .column(1)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(counts, vec![2, 1]);
        assert_eq!(reopened.row_count(), 2);
    }
}
