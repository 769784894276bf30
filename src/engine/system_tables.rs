//! System tables in schema `weir_catalog`, computed when queried.
//! `weir_catalog.watermarks`: every watermarked table, its event-time column
//! and delay, and its current watermark.
//! `weir_catalog.materialized_views`: every materialized view, its row count,
//! the rows its windows dropped as late, its output watermark, and whether
//! it runs or failed to recover (and why).
//! `weir_catalog.tables`: every table, its rows committed and kept, and the
//! entries and bytes its log takes on disk.

use std::fmt;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session as DataFusionSession;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::relations::Relations;
use crate::stream::checkpoint::stored_view_state;

pub const SYSTEM_SCHEMA_NAME: &str = "weir_catalog";

pub struct WatermarksTable {
    /// Weak: the catalog owns its schema, which owns this table.
    catalog: Weak<Relations>,
    schema: SchemaRef,
}

impl fmt::Debug for WatermarksTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WatermarksTable")
    }
}

impl WatermarksTable {
    /// The system table: rows computed from the catalog when queried.
    pub fn table(catalog: &Arc<Relations>) -> ComputedTable {
        let table = Self::new(catalog);
        ComputedTable::new(table.schema.clone(), move |_| table.rows())
    }

    fn new(catalog: &Arc<Relations>) -> Self {
        WatermarksTable {
            catalog: Arc::downgrade(catalog),
            schema: Arc::new(Schema::new(vec![
                Field::new("table_name", DataType::Utf8, false),
                Field::new("column_name", DataType::Utf8, false),
                Field::new("delay_ms", DataType::Int64, false),
                Field::new(
                    "watermark",
                    DataType::Timestamp(TimeUnit::Nanosecond, None),
                    true,
                ),
            ])),
        }
    }

    fn rows(&self) -> Result<RecordBatch> {
        let catalog = self
            .catalog
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the catalog is closed".to_string()))?;
        let mut tables = Vec::new();
        let mut columns = Vec::new();
        let mut delays = Vec::new();
        let mut watermarks = Vec::new();
        for definition in catalog.definitions() {
            let Some(watermark) = definition
                .stream
                .as_ref()
                .and_then(|s| s.watermark.as_ref())
            else {
                continue;
            };
            watermarks.push(
                catalog
                    .table(&definition.name)
                    .and_then(|log| log.watermark_ns()),
            );
            tables.push(definition.name.clone());
            columns.push(watermark.column.clone());
            delays.push(watermark.delay_ms);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(tables)),
            Arc::new(StringArray::from(columns)),
            Arc::new(Int64Array::from(delays)),
            Arc::new(TimestampNanosecondArray::from(watermarks)),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }
}

pub struct MaterializedViewsTable {
    catalog: Weak<Relations>,
    schema: SchemaRef,
}

impl fmt::Debug for MaterializedViewsTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MaterializedViewsTable")
    }
}

impl MaterializedViewsTable {
    /// The system table: rows computed from the catalog when queried.
    pub fn table(catalog: &Arc<Relations>) -> ComputedTable {
        let table = Self::new(catalog);
        ComputedTable::new(table.schema.clone(), move |_| table.rows())
    }

    fn new(catalog: &Arc<Relations>) -> Self {
        MaterializedViewsTable {
            catalog: Arc::downgrade(catalog),
            schema: Arc::new(Schema::new(vec![
                Field::new("view_name", DataType::Utf8, false),
                Field::new("source_name", DataType::Utf8, false),
                Field::new("row_count", DataType::Int64, false),
                Field::new("late_rows", DataType::Int64, false),
                Field::new(
                    "watermark",
                    DataType::Timestamp(TimeUnit::Nanosecond, None),
                    true,
                ),
                Field::new("state_entries", DataType::Int64, false),
                Field::new("state_bytes", DataType::Int64, false),
                Field::new("state_memory_bytes", DataType::Int64, false),
                Field::new("row_storage", DataType::Utf8, false),
                Field::new("changes_committed", DataType::Int64, false),
                Field::new("status", DataType::Utf8, false),
                Field::new("failure", DataType::Utf8, true),
            ])),
        }
    }

    fn rows(&self) -> Result<RecordBatch> {
        let catalog = self
            .catalog
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the catalog is closed".to_string()))?;
        let mut names = Vec::new();
        let mut sources = Vec::new();
        let mut counts = Vec::new();
        let mut late = Vec::new();
        let mut watermarks = Vec::new();
        let (mut entries, mut bytes) = (Vec::new(), Vec::new());
        let mut memory = Vec::new();
        let mut storage = Vec::new();
        let mut changes = Vec::new();
        let (mut statuses, mut failures) = (Vec::new(), Vec::new());
        for definition in catalog.definitions() {
            let failure = catalog.view_failure(&definition.name);
            let result = catalog.view_result(&definition.name);
            // The operators' state as of the last checkpoint.
            let state = || {
                stored_view_state(catalog.store().as_ref(), definition.id)
                    .map_err(|error| DataFusionError::External(Box::new(error)))
            };
            let Some(result) = result else {
                // A view that no longer plans: no rows to show.
                if definition.kind == crate::catalog::RelationKind::MaterializedView
                    && failure.is_some()
                {
                    let state = state()?;
                    entries.push(state.entries as i64);
                    bytes.push(state.bytes as i64);
                    names.push(definition.name.clone());
                    sources.push(definition.depends_on.join(", "));
                    counts.push(0);
                    late.push(0);
                    watermarks.push(None);
                    memory.push(0);
                    changes.push(0);
                    storage.push("none");
                    statuses.push("failed");
                    failures.push(failure);
                }
                continue;
            };
            let state = state()?;
            entries.push(state.entries as i64);
            bytes.push(state.bytes as i64);
            memory.push(
                result
                    .state_memory_bytes
                    .load(std::sync::atomic::Ordering::Relaxed) as i64,
            );
            names.push(definition.name.clone());
            sources.push(definition.depends_on.join(", "));
            counts.push(result.row_count());
            late.push(result.late_rows.load(std::sync::atomic::Ordering::Relaxed) as i64);
            watermarks.push(result.watermark_ns());
            changes.push(result.changes_committed() as i64);
            storage.push(result.layout().name());
            statuses.push(if failure.is_some() {
                "failed"
            } else {
                "running"
            });
            failures.push(failure);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(sources)),
            Arc::new(Int64Array::from(counts)),
            Arc::new(Int64Array::from(late)),
            Arc::new(TimestampNanosecondArray::from(watermarks)),
            Arc::new(Int64Array::from(entries)),
            Arc::new(Int64Array::from(bytes)),
            Arc::new(Int64Array::from(memory)),
            Arc::new(StringArray::from(storage)),
            Arc::new(Int64Array::from(changes)),
            Arc::new(StringArray::from(statuses)),
            Arc::new(StringArray::from(failures)),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }
}

pub struct TablesTable {
    catalog: Weak<Relations>,
    schema: SchemaRef,
}

impl TablesTable {
    /// The system table: rows computed from the catalog when queried.
    pub fn table(catalog: &Arc<Relations>) -> ComputedTable {
        let table = TablesTable {
            catalog: Arc::downgrade(catalog),
            schema: Arc::new(Schema::new(vec![
                Field::new("table_name", DataType::Utf8, false),
                Field::new("rows_committed", DataType::Int64, false),
                Field::new("rows_kept", DataType::Int64, false),
                Field::new("log_entries", DataType::Int64, false),
                Field::new("disk_bytes", DataType::Int64, false),
                Field::new("retention_ms", DataType::Int64, true),
                Field::new("copies_streamed", DataType::Int64, false),
                Field::new("copies_detached", DataType::Int64, false),
            ])),
        };
        ComputedTable::new(table.schema.clone(), move |_| table.rows())
    }

    fn rows(&self) -> Result<RecordBatch> {
        let catalog = self
            .catalog
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the catalog is closed".to_string()))?;
        let (mut names, mut committed, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        let (mut entries, mut bytes, mut retention) = (Vec::new(), Vec::new(), Vec::new());
        let (mut streamed, mut detached) = (Vec::new(), Vec::new());
        for definition in catalog.definitions() {
            let Some(log) = catalog.table(&definition.name) else {
                continue;
            };
            let storage = log
                .storage()
                .map_err(|error| DataFusionError::External(Box::new(error)))?;
            names.push(definition.name.clone());
            committed.push(log.row_count() as i64);
            kept.push(storage.kept_rows as i64);
            entries.push(storage.entries as i64);
            bytes.push(storage.disk_bytes as i64);
            retention.push(definition.stream.as_ref().and_then(|s| s.retention_ms));
            let (copies, let_go) = log.copies_streamed();
            streamed.push(copies as i64);
            detached.push(let_go as i64);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(names)),
            Arc::new(Int64Array::from(committed)),
            Arc::new(Int64Array::from(kept)),
            Arc::new(Int64Array::from(entries)),
            Arc::new(Int64Array::from(bytes)),
            Arc::new(Int64Array::from(retention)),
            Arc::new(Int64Array::from(streamed)),
            Arc::new(Int64Array::from(detached)),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }
}

/// Computes a system table's rows for its schema.
type RowsFunction = Box<dyn Fn(&SchemaRef) -> Result<RecordBatch> + Send + Sync>;

/// A system table whose rows a function computes when it is queried.
pub struct ComputedTable {
    schema: SchemaRef,
    rows: RowsFunction,
}

impl fmt::Debug for ComputedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ComputedTable")
    }
}

impl ComputedTable {
    pub fn new(
        schema: SchemaRef,
        rows: impl Fn(&SchemaRef) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Self {
        ComputedTable {
            schema,
            rows: Box::new(rows),
        }
    }
}

#[async_trait]
impl TableProvider for ComputedTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn DataFusionSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![(self.rows)(&self.schema)?]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}
