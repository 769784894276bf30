//! The DataFusion face of a materialized view: a table provider whose scan
//! streams the view's committed rows.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session as DataFusionSession;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::ExecutionPlan;

use super::ViewResult;
use crate::error::WeirError;

/// The DataFusion face of a materialized view: a scan of its current rows.
/// A rebuilt view gets a new `ViewResult` in the same provider, so a plan
/// prepared before (which holds the provider) reads the new one.
#[derive(Debug)]
pub struct MaterializedViewTable {
    result: std::sync::RwLock<Arc<ViewResult>>,
    /// Why the view failed to recover: queries of it fail with this.
    failure: std::sync::RwLock<Option<String>>,
}

impl MaterializedViewTable {
    pub fn new(result: Arc<ViewResult>) -> Self {
        MaterializedViewTable {
            result: std::sync::RwLock::new(result),
            failure: std::sync::RwLock::new(None),
        }
    }

    /// Queries of the view fail with `message` from now on.
    pub fn fail(&self, message: String) {
        *self.failure.write().unwrap_or_else(|p| p.into_inner()) = Some(message);
    }

    pub fn result(&self) -> Arc<ViewResult> {
        self.result
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The view's rows are `result` from now on; returns the previous.
    pub fn replace(&self, result: Arc<ViewResult>) -> Arc<ViewResult> {
        let mut current = self.result.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *current, result)
    }
}

#[async_trait]
impl TableProvider for MaterializedViewTable {
    fn schema(&self) -> SchemaRef {
        self.result().schema()
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
        let failure = self.failure.read().unwrap_or_else(|p| p.into_inner());
        if let Some(message) = failure.as_ref() {
            let error = WeirError::new(crate::error::sqlstate::INTERNAL_ERROR, message.clone())
                .with_hint("DROP the materialized view and create it again; its inputs are whole.");
            return Err(datafusion::error::DataFusionError::External(Box::new(
                error,
            )));
        }
        drop(failure);
        let rows = self
            .result()
            .rows(projection.cloned())
            .map_err(|error| datafusion::error::DataFusionError::External(Box::new(error)))?;
        let schema = datafusion::physical_plan::streaming::PartitionStream::schema(&rows).clone();
        let exec =
            StreamingTableExec::try_new(schema, vec![Arc::new(rows)], None, [], false, None)?;
        Ok(Arc::new(exec))
    }
}
