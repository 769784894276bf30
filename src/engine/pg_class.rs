//! `pg_catalog.pg_class` with relkind `'m'` for materialized views, so psql's
//! `\dm` lists them and `\dt` does not. datafusion-pg-catalog derives relkind
//! from DataFusion's `TableType`, which has no materialized view kind; this
//! wraps its schema and rewrites that one column.

use std::fmt;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, Session as DataFusionSession, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{collect, ExecutionPlan};

use super::relations::Relations;
use crate::catalog::RelationKind;

/// The pg_catalog schema, with pg_class replaced.
pub struct PgCatalogSchema {
    inner: Arc<dyn SchemaProvider>,
    catalog: Weak<Relations>,
}

impl fmt::Debug for PgCatalogSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PgCatalogSchema")
    }
}

impl PgCatalogSchema {
    pub fn new(inner: Arc<dyn SchemaProvider>, catalog: &Arc<Relations>) -> Self {
        PgCatalogSchema {
            inner,
            catalog: Arc::downgrade(catalog),
        }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        Ok(match table {
            Some(inner) if name == "pg_class" => Some(Arc::new(PgClass {
                inner,
                catalog: self.catalog.clone(),
            })),
            other => other,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

struct PgClass {
    inner: Arc<dyn TableProvider>,
    catalog: Weak<Relations>,
}

impl fmt::Debug for PgClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PgClass")
    }
}

impl PgClass {
    /// Materialized views and their side outputs (`<view>_late`).
    fn is_materialized_view(&self, name: &str) -> bool {
        self.catalog.upgrade().is_some_and(|catalog| {
            catalog
                .get(name)
                .is_some_and(|definition| definition.kind == RelationKind::MaterializedView)
                || catalog.side_output_of(name).is_some()
        })
    }

    fn relabel(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let schema = batch.schema();
        let (Ok(names), Ok(kinds)) = (schema.index_of("relname"), schema.index_of("relkind"))
        else {
            return Ok(batch);
        };
        let names = batch.column(names).as_string::<i32>();
        let kinds = batch.column(kinds).as_string::<i32>();
        let relabeled: StringArray = (0..batch.num_rows())
            .map(|row| {
                if kinds.is_null(row) {
                    return None;
                }
                let kind = kinds.value(row);
                Some(
                    if kind == "r" && self.is_materialized_view(names.value(row)) {
                        "m"
                    } else {
                        kind
                    },
                )
            })
            .collect();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[schema.index_of("relkind")?] = Arc::new(relabeled);
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[async_trait]
impl TableProvider for PgClass {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn DataFusionSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.inner.scan(state, None, &[], None).await?;
        let batches = collect(plan, state.task_ctx())
            .await?
            .into_iter()
            .map(|batch| self.relabel(batch))
            .collect::<Result<Vec<_>>>()?;
        let exec =
            MemorySourceConfig::try_new_exec(&[batches], self.schema(), projection.cloned())?;
        Ok(exec)
    }
}
