//! weir's corrections to datafusion-pg-catalog's `pg_catalog`, which knows
//! DataFusion's tables but not weir's kinds and keys: `pg_class` says `'m'`
//! for materialized views and lists one index (`'i'`) per PRIMARY KEY or
//! UNIQUE constraint, `pg_attribute` marks key columns NOT NULL and gives
//! each column the type weir's wire protocol sends (the crate's mapping
//! falls back to `text` for intervals and most arrays), and `pg_constraint`
//! and `pg_index` gain a row per key — what psql's `\d`, JDBC's
//! `getPrimaryKeys` and SQLAlchemy's `inspect()` read. Each wrapper scans
//! the crate's table and corrects or adds rows.

mod column_defaults;
mod context;
mod definitions;
mod keys;
mod pg_aggregate;
mod pg_attribute;
mod pg_class;
mod pg_namespace;
mod pg_settings;
mod roles;
mod rows;
mod sizes;
mod views;
mod visibility;

use std::fmt;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::new_null_array;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, Session as DataFusionSession, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{collect, ExecutionPlan};

use super::relations::Relations;
use context::CatalogContext;
pub use definitions::{
    expression_text_function, functions as key_definition_functions, null_functions,
};
pub use pg_settings::{SessionSettingRows, SettingsSource};
pub use roles::{user_by_id_function, SessionRole, ROLE_OID};
use rows::ListColumn;
pub use rows::PG_TYPE_METADATA;
pub use sizes::size_functions;
pub use views::{view_definition_function, OidNames};
pub use visibility::{always_visible_functions, table_is_visible_function};

/// The name `OidNames` gives pg_catalog's relations (no weir relation has
/// it: names with a dot are quoted).
const SYSTEM_NAME: &str = "pg_catalog.";

/// Who owns each relation and what was granted on it (`pg_class`'s
/// `relowner` and `relacl`).
#[derive(Clone)]
pub struct Access {
    pub roles: Arc<crate::engine::roles::Roles>,
    pub privileges: Arc<crate::engine::privileges::Privileges>,
}

/// The pg_catalog schema, with the tables weir corrects wrapped.
pub struct PgCatalogSchema {
    inner: Arc<dyn SchemaProvider>,
    catalog: Weak<Relations>,
    names: OidNames,
    access: Access,
    /// Views weir adds, planned over the others (`pg_indexes`).
    added: std::sync::RwLock<std::collections::HashMap<String, Arc<dyn TableProvider>>>,
}

impl fmt::Debug for PgCatalogSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PgCatalogSchema")
    }
}

impl PgCatalogSchema {
    /// `names` is shared with `pg_get_viewdef` (`view_definition_function`).
    pub fn new(
        inner: Arc<dyn SchemaProvider>,
        catalog: &Arc<Relations>,
        names: &OidNames,
        access: Access,
    ) -> Self {
        PgCatalogSchema {
            inner,
            catalog: Arc::downgrade(catalog),
            names: names.clone(),
            access,
            added: Default::default(),
        }
    }

    fn added(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        let added = self.added.read().unwrap_or_else(|p| p.into_inner());
        added.get(name).cloned()
    }
}

/// Which table a wrapper corrects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Correction {
    Class,
    Attribute,
    Constraint,
    Index,
    Views,
    MaterializedViews,
    Procedure,
    Settings,
    AttributeDefaults,
    Roles,
    Authid,
    Aggregate,
    Namespace,
}

impl Correction {
    fn of(name: &str) -> Option<Self> {
        Some(match name {
            "pg_class" => Correction::Class,
            "pg_attribute" => Correction::Attribute,
            "pg_constraint" => Correction::Constraint,
            "pg_index" => Correction::Index,
            "pg_views" => Correction::Views,
            "pg_matviews" => Correction::MaterializedViews,
            "pg_proc" => Correction::Procedure,
            "pg_settings" => Correction::Settings,
            "pg_attrdef" => Correction::AttributeDefaults,
            "pg_roles" => Correction::Roles,
            "pg_authid" => Correction::Authid,
            "pg_aggregate" => Correction::Aggregate,
            "pg_namespace" => Correction::Namespace,
            _ => return None,
        })
    }

    /// The columns it turns from text into arrays, their elements, and the
    /// vector type a column is sent as.
    fn lists(self) -> Vec<ListColumn> {
        let (int2, oid) = (DataType::Int16, DataType::Int32);
        let (int2vector, oidvector) = (Some("int2vector"), Some("oidvector"));
        match self {
            Correction::Constraint => vec![("conkey", int2.clone(), None), ("confkey", int2, None)],
            Correction::Index => vec![
                ("indkey", int2.clone(), int2vector),
                ("indoption", int2, int2vector),
                ("indclass", oid.clone(), oidvector),
                ("indcollation", oid, oidvector),
            ],
            // Always NULL in the crate (no privileges); psql's `\dp` passes
            // it to array_to_string.
            Correction::Attribute => vec![("attacl", DataType::Utf8, None)],
            // Likewise for psql's `\dn+`.
            Correction::Namespace => vec![("nspacl", DataType::Utf8, None)],
            // Argument type oids (pgcli casts them to regtype[]).
            Correction::Procedure => vec![
                ("proargtypes", oid.clone(), oidvector),
                ("proallargtypes", oid, None),
            ],
            _ => Vec::new(),
        }
    }

    /// Columns Postgres has and the crate's table lacks: `relacl` (psql's
    /// `\dp` reads it; filled in by `pg_class::correct`) and storage
    /// options (always NULL).
    fn missing_columns(self) -> Vec<Field> {
        let text_list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        match self {
            // The value before anything set it (psql's `\dconfig`).
            Correction::Settings => vec![Field::new("boot_val", DataType::Utf8, true)],
            Correction::Class => vec![
                Field::new("relacl", text_list.clone(), true),
                // Storage options (SQLAlchemy's `get_indexes` reads them).
                Field::new("reloptions", text_list, true),
            ],
            _ => Vec::new(),
        }
    }

    fn apply(self, batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
        match self {
            Correction::Class => pg_class::correct(batch, context),
            Correction::Attribute => pg_attribute::correct(batch, context),
            Correction::Constraint => keys::add_constraints(batch, context),
            Correction::Index => keys::add_indexes(batch, context),
            Correction::Views => views::add_views(batch, context),
            Correction::MaterializedViews => views::add_materialized_views(batch, context),
            Correction::AttributeDefaults => column_defaults::add_defaults(batch, context),
            Correction::Namespace => pg_namespace::correct(batch, context),
            _ => Ok(batch),
        }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push(roles::USER_TABLE_NAME.to_string());
        let added = self.added.read().unwrap_or_else(|p| p.into_inner());
        names.extend(added.keys().cloned());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == roles::USER_TABLE_NAME {
            return Ok(Some(Arc::new(roles::UserTable::new())));
        }
        if let Some(added) = self.added(name) {
            return Ok(Some(added));
        }
        let table = self.inner.table(name).await?;
        Ok(match (table, Correction::of(name)) {
            (Some(inner), Some(correction)) => Some(Arc::new(CorrectedTable {
                inner,
                correction,
                schema: self.inner.clone(),
                catalog: self.catalog.clone(),
                names: self.names.clone(),
                access: self.access.clone(),
            })),
            (table, _) => table,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        name == roles::USER_TABLE_NAME || self.added(name).is_some() || self.inner.table_exist(name)
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        let mut added = self.added.write().unwrap_or_else(|p| p.into_inner());
        Ok(added.insert(name, table))
    }
}

struct CorrectedTable {
    inner: Arc<dyn TableProvider>,
    correction: Correction,
    /// datafusion-pg-catalog's schema, for the oids of relations.
    schema: Arc<dyn SchemaProvider>,
    catalog: Weak<Relations>,
    names: OidNames,
    access: Access,
}

impl fmt::Debug for CorrectedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CorrectedTable({:?})", self.correction)
    }
}

impl CorrectedTable {
    /// The crate's columns, with the text it gives for arrays as lists.
    fn listed_schema(&self) -> SchemaRef {
        rows::with_lists(&self.inner.schema(), &self.correction.lists())
    }

    /// `listed_schema`, and function references as oids.
    fn typed_schema(&self) -> SchemaRef {
        let listed = self.listed_schema();
        match self.correction {
            Correction::Aggregate => pg_aggregate::schema_with_oids(&listed),
            _ => listed,
        }
    }
}

#[async_trait]
impl TableProvider for CorrectedTable {
    fn schema(&self) -> SchemaRef {
        let listed = self.typed_schema();
        let missing = self.correction.missing_columns();
        if missing.is_empty() {
            return listed;
        }
        let fields = listed
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .chain(missing);
        Arc::new(Schema::new(fields.collect::<Vec<_>>()))
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
        let batches = collect(plan, state.task_ctx()).await?;
        let batch = datafusion::arrow::compute::concat_batches(&self.inner.schema(), &batches)?;
        let batch = rows::parse_lists(batch, &self.listed_schema())?;
        let batch = match self.correction {
            Correction::Settings => pg_settings::session_rows(batch, &self.schema(), state)?,
            Correction::Roles => roles::role_rows(batch, state)?,
            Correction::Authid => roles::named_authid(batch)?,
            Correction::Aggregate => {
                let procedures = context::scan(&self.schema, "pg_proc", state).await?;
                pg_aggregate::with_function_oids(batch, &procedures, self.typed_schema())?
            }
            // relacl is filled in by the correction.
            Correction::Class => with_missing_columns(batch, self.schema())?,
            _ => batch,
        };
        let corrected = match self.catalog.upgrade() {
            Some(catalog) => {
                let context =
                    CatalogContext::load(&self.schema, state, catalog, self.access.clone()).await?;
                let public = context.names_by_oid().into_iter();
                let system = context.system_oids.iter().map(|oid| (*oid, SYSTEM_NAME));
                *self.names.lock().unwrap_or_else(|p| p.into_inner()) = public
                    .chain(system)
                    .map(|(oid, name)| (oid, name.to_string()))
                    .collect();
                self.correction.apply(batch, &context)?
            }
            None => batch,
        };
        let corrected = with_missing_columns(corrected, self.schema())?;
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![corrected]],
            self.schema(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// `batch` with NULL columns appended up to `schema`.
fn with_missing_columns(batch: RecordBatch, schema: SchemaRef) -> Result<RecordBatch> {
    if batch.num_columns() == schema.fields().len() {
        return Ok(batch);
    }
    let rows = batch.num_rows();
    let mut columns = batch.columns().to_vec();
    for field in &schema.fields()[columns.len()..] {
        columns.push(new_null_array(field.data_type(), rows));
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}
