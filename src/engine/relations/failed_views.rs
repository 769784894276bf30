//! Materialized views that failed to recover: their state did not
//! restore, or replaying their inputs failed in them. The rest of the
//! database starts without them; each keeps its last committed rows, but
//! a query of it fails naming the reason (as Materialize shows an errored
//! view), `weir_catalog.materialized_views` shows it as failed, and the
//! failure is stored (`viewfailed/<id>`), so a restart does not bring the
//! view back on state that no longer follows its inputs. DROP clears it.
//! A view whose stored definition no longer plans at start is held the
//! same way, without its rows (`register_unplanned_view`).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::Relations;
use crate::connectors::view_result::MaterializedViewTable;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, WriteBatch};

fn failure_key(id: u64) -> Vec<u8> {
    key(&[b"viewfailed", &id.to_be_bytes()])
}

impl Relations {
    /// Marks view `name` failed because of `reason`, durably.
    pub fn mark_view_failed(&self, name: &str, reason: &str) -> Result<()> {
        let Some(definition) = self.get(name) else {
            return Ok(());
        };
        let mut batch = WriteBatch::new();
        batch.put(failure_key(definition.id), reason.as_bytes().to_vec());
        self.store.commit(batch)?;
        self.note_failed(name, reason);
        Ok(())
    }

    fn note_failed(&self, name: &str, reason: &str) {
        self.failed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), reason.to_string());
        if let Some(provider) = self.view_provider(name) {
            provider.fail(format!(
                "materialized view \"{name}\" failed to recover: {reason}"
            ));
        }
    }

    /// Why view `name` failed, if it did.
    pub fn view_failure(&self, name: &str) -> Option<String> {
        self.failed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The views a stored failure marks, with the reason, noted as failed.
    pub fn load_failed_views(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for definition in self.definitions() {
            if let Some(reason) = self.store.get(&failure_key(definition.id))? {
                let reason = String::from_utf8_lossy(&reason).into_owned();
                self.note_failed(&definition.name, &reason);
                names.push(definition.name);
            }
        }
        Ok(names)
    }

    /// A dropped view's failure goes with it.
    pub(super) fn forget_failure(&self, id: u64, name: &str, batch: &mut WriteBatch) {
        batch.delete(failure_key(id));
        self.failed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    fn view_provider(&self, name: &str) -> Option<Arc<MaterializedViewTable>> {
        self.view_results
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}

impl Relations {
    /// A stored materialized view that no longer plans (`reason`): the
    /// database starts without it; reading it fails naming the reason,
    /// `weir_catalog.materialized_views` shows it failed, and DROP removes
    /// it. Not stored: a later start (say, after an upgrade that fixes the
    /// cause) plans it again, on its stored rows.
    pub fn register_unplanned_view(&self, name: &str, reason: &str) -> Result<()> {
        let message = format!("materialized view \"{name}\" no longer plans: {reason}");
        self.register(name, Arc::new(UnplannedView { message }))?;
        self.failed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), reason.to_string());
        Ok(())
    }
}

/// What a view that no longer plans reads as: no columns, and an error.
#[derive(Debug)]
struct UnplannedView {
    message: String,
}

#[async_trait]
impl TableProvider for UnplannedView {
    fn schema(&self) -> SchemaRef {
        Arc::new(Schema::empty())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let error = WeirError::new(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            self.message.clone(),
        )
        .with_hint("DROP the materialized view and create it again.");
        Err(datafusion::error::DataFusionError::External(Box::new(
            error,
        )))
    }
}
