//! The live relations: every table's log and every materialized view's
//! result, their DataFusion providers in the one schema, and the stored
//! definitions they were made from (`crate::catalog`). DDL goes through it
//! so a definition, its storage and its provider change together.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::datasource::{TableProvider, ViewTable};
use datafusion::logical_expr::LogicalPlan;

use crate::catalog::{
    side_output_name, IndexDefinition, RelationDefinition, RelationKind, SchemaDefinition,
    StreamDefinition, TableParts, SCHEMA_NAME, SQL_EDITION,
};
use crate::connectors::table::{DurableTable, GroupCommitter, TableLog};
use crate::connectors::view_result::{
    view_rows_prefix, MaterializedViewTable, RowLayout, ViewResult,
};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, WriteBatch};
use crate::stream::append_observer::AppendObserver;
pub use sink_entries::SinkEntry;

mod failed_views;
mod indexes;
pub mod schemas;
pub mod sink_entries;

pub struct Relations {
    store: Arc<dyn StateStore>,
    /// Weir's database in DataFusion: `public` and each user schema.
    database: Arc<dyn CatalogProvider>,
    /// `public`, where relations without a schema live.
    schema: Arc<dyn SchemaProvider>,
    /// Schemas made with CREATE SCHEMA (`schemas.rs`).
    schemas: RwLock<BTreeMap<String, SchemaDefinition>>,
    /// Indexes made with CREATE INDEX, by key (`indexes.rs`).
    indexes: RwLock<BTreeMap<String, IndexDefinition>>,
    definitions: RwLock<BTreeMap<String, RelationDefinition>>,
    table_logs: RwLock<HashMap<String, Arc<TableLog>>>,
    /// Materialized views' (and side outputs') providers, each holding
    /// the view's current rows.
    view_results: RwLock<HashMap<String, Arc<MaterializedViewTable>>>,
    /// Every table's writes commit through it, in groups.
    committer: Arc<GroupCommitter>,
    /// The next relation id. Ids are never reused, even after a DROP, and
    /// are taken under this lock, so concurrent DDL never shares one.
    next_id: std::sync::Mutex<u64>,
    /// Sinks by name, with the outbox each view commit writes to.
    sinks: RwLock<BTreeMap<String, SinkEntry>>,
    /// Views that failed to recover, with why (`failed_views.rs`).
    failed: RwLock<BTreeMap<String, String>>,
}

fn next_id_key() -> Vec<u8> {
    key(&[b"catalog", b"next_id"])
}

/// A stored catalog entry (JSON); damage is reported, naming the entry.
pub(super) fn decode_catalog_entry<T: serde::de::DeserializeOwned>(
    stored_key: &[u8],
    value: &[u8],
) -> Result<T> {
    serde_json::from_slice(value).map_err(|error| {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!(
                "catalog entry {:?} cannot be decoded: {error}",
                String::from_utf8_lossy(stored_key)
            ),
        )
    })
}

fn definition_key(id: u64) -> Vec<u8> {
    key(&[b"catalog", b"relation", &id.to_be_bytes()])
}

/// A table to create with `create_tables`.
pub struct NewTable {
    pub name: String,
    pub sql: String,
    pub parts: TableParts,
    pub stream: Option<StreamDefinition>,
}

impl Relations {
    /// Loads the stored definitions; providers are registered by the engine
    /// as it re-plans them (`restore_table`, `restore_view`).
    pub fn open(
        store: Arc<dyn StateStore>,
        database: Arc<dyn CatalogProvider>,
        observer: Option<Arc<dyn AppendObserver>>,
    ) -> Result<Self> {
        let schema = database
            .schema(SCHEMA_NAME)
            .ok_or_else(|| WeirError::internal("the public schema is missing"))?;
        let schemas = schemas::load(&*store)?;
        let indexes = indexes::load(&*store)?;
        let mut definitions = BTreeMap::new();
        for (stored_key, value) in store.scan_prefix(&key(&[b"catalog", b"relation", b""]))? {
            let definition: RelationDefinition = decode_catalog_entry(&stored_key, &value)?;
            definitions.insert(definition.name.clone(), definition);
        }
        let stored_next_id = match store.get(&next_id_key())? {
            Some(value) => decode_id(&value)?,
            None => 1,
        };
        let next_id = definitions
            .values()
            .map(|d| d.id.max(d.side_output_id.unwrap_or(0)) + 1)
            .fold(stored_next_id, u64::max);
        let sinks = sink_entries::load(&*store)?;
        let next_id = sinks
            .values()
            .map(|entry| entry.definition.id + 1)
            .chain(indexes.values().map(|index| index.id + 1))
            .fold(next_id, u64::max);
        let relations = Relations {
            sinks: RwLock::new(sinks),
            committer: GroupCommitter::new(store.clone(), observer),
            store,
            database,
            schema,
            schemas: RwLock::new(schemas),
            indexes: RwLock::new(indexes),
            definitions: RwLock::new(definitions),
            table_logs: RwLock::new(HashMap::new()),
            view_results: RwLock::new(HashMap::new()),
            next_id: std::sync::Mutex::new(next_id),
            failed: RwLock::new(BTreeMap::new()),
        };
        relations.register_stored_schemas()?;
        Ok(relations)
    }

    /// Definitions in creation order, so each one's dependencies come first.
    pub fn definitions(&self) -> Vec<RelationDefinition> {
        let mut all: Vec<_> = self.read().values().cloned().collect();
        all.sort_by_key(|definition| definition.id);
        all
    }

    pub fn get(&self, name: &str) -> Option<RelationDefinition> {
        self.read().get(name).cloned()
    }

    /// The rows of table `name`, if it is one of ours.
    pub fn table(&self, name: &str) -> Option<Arc<TableLog>> {
        let logs = self.table_logs.read().unwrap_or_else(|p| p.into_inner());
        logs.get(name).cloned()
    }

    /// Every table's rows.
    pub fn table_logs(&self) -> Vec<Arc<TableLog>> {
        let logs = self.table_logs.read().unwrap_or_else(|p| p.into_inner());
        logs.values().cloned().collect()
    }

    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// The DataFusion provider registered for relation `name` (a key).
    pub fn provider(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        let (schema, table) = self.placement(name);
        // The in-memory schema provider answers at once.
        futures::executor::block_on(schema.table(table))
            .ok()
            .flatten()
    }

    /// The rows of materialized view `name`.
    pub fn view_result(&self, name: &str) -> Option<Arc<ViewResult>> {
        let results = self.view_results.read().unwrap_or_else(|p| p.into_inner());
        results.get(name).map(|provider| provider.result())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, RelationDefinition>> {
        self.definitions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, RelationDefinition>> {
        self.definitions
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes `count` consecutive new relation ids, recorded durably first
    /// so that no later relation (even after a restart) gets them.
    fn allocate_ids(&self, count: u64) -> Result<u64> {
        let mut next = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
        let id = *next;
        let mut batch = WriteBatch::new();
        batch.put(next_id_key(), (id + count).to_be_bytes().to_vec());
        self.store.commit(batch)?;
        *next = id + count;
        Ok(id)
    }

    /// The materialized view whose late rows `name` holds, if it is a
    /// side output.
    pub fn side_output_of(&self, name: &str) -> Option<String> {
        let view = name.strip_suffix("_late")?;
        self.get(view)
            .filter(|definition| definition.side_output_id.is_some())
            .map(|definition| definition.name)
    }

    /// Fails with 42P07 when `name` is taken (by us or a built-in).
    pub fn check_name_free(&self, name: &str) -> Result<()> {
        let (schema, table) = self.placement(name);
        if self.read().contains_key(name)
            || schema.table_exist(table)
            || self.sink(name).is_some()
            || self.is_index(name)
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{name}\" already exists"),
            )
            .with_hint("Pick another name, or use IF NOT EXISTS."));
        }
        Ok(())
    }

    /// Creates and durably records a new table.
    pub fn create_table(
        &self,
        name: &str,
        sql: &str,
        table: TableParts,
        stream: Option<StreamDefinition>,
    ) -> Result<Arc<TableLog>> {
        self.check_name_free(name)?;
        let definition = RelationDefinition {
            id: self.allocate_ids(1)?,
            name: name.to_string(),
            kind: RelationKind::Table,
            sql: sql.to_string(),
            depends_on: Vec::new(),
            stream,
            side_output_id: None,
            sql_edition: SQL_EDITION,
        };
        self.persist(&definition)?;
        self.restore_table(definition, table)
    }

    /// Creates several tables in one durable commit: all of them, or none
    /// (a source and its `_errors` relation).
    pub fn create_tables(&self, tables: Vec<NewTable>) -> Result<Vec<Arc<TableLog>>> {
        for (position, table) in tables.iter().enumerate() {
            self.check_name_free(&table.name)?;
            if tables[..position]
                .iter()
                .any(|other| other.name == table.name)
            {
                return Err(WeirError::internal(format!(
                    "{} is created twice",
                    table.name
                )));
            }
        }
        let mut batch = WriteBatch::new();
        let mut created = Vec::with_capacity(tables.len());
        for table in tables {
            let definition = RelationDefinition {
                id: self.allocate_ids(1)?,
                name: table.name,
                kind: RelationKind::Table,
                sql: table.sql,
                depends_on: Vec::new(),
                stream: table.stream,
                side_output_id: None,
                sql_edition: SQL_EDITION,
            };
            batch.extend(self.definition_write(&definition)?);
            created.push((definition, table.parts));
        }
        self.store.commit(batch)?;
        created
            .into_iter()
            .map(|(definition, parts)| self.restore_table(definition, parts))
            .collect()
    }

    /// Registers a table whose definition is already stored.
    pub fn restore_table(
        &self,
        definition: RelationDefinition,
        table: TableParts,
    ) -> Result<Arc<TableLog>> {
        let log = Arc::new(TableLog::open(
            definition.id,
            &definition.name,
            table.schema,
            &table.constraints,
            definition.stream.as_ref(),
            self.committer.clone(),
            // Tables without a primary key take UPDATE and DELETE since
            // SQL edition 3; older ones stay append-only, as their views
            // were planned for.
            definition.sql_edition >= 3,
        )?);
        let provider = DurableTable::new(log.clone(), table.constraints, table.column_defaults);
        self.register(&definition.name, Arc::new(provider))?;
        self.table_logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(definition.name.clone(), log.clone());
        self.write().insert(definition.name.clone(), definition);
        Ok(log)
    }

    pub fn create_view(&self, name: &str, sql: &str, plan: LogicalPlan) -> Result<()> {
        self.check_name_free(name)?;
        let definition = RelationDefinition {
            id: self.allocate_ids(1)?,
            name: name.to_string(),
            kind: RelationKind::View,
            sql: sql.to_string(),
            depends_on: self.dependencies(&plan),
            stream: None,
            side_output_id: None,
            sql_edition: SQL_EDITION,
        };
        self.persist(&definition)?;
        self.restore_view(definition, plan)
    }

    pub fn restore_view(&self, definition: RelationDefinition, plan: LogicalPlan) -> Result<()> {
        let view = ViewTable::new(plan, Some(definition.sql.clone()));
        self.register(&definition.name, Arc::new(view))?;
        self.write().insert(definition.name.clone(), definition);
        Ok(())
    }

    /// A new materialized view's definition and (empty) result, not yet
    /// stored or visible: see `commit_materialized_view`.
    pub fn new_materialized_view(
        &self,
        name: &str,
        sql: &str,
        depends_on: Vec<String>,
        schema: SchemaRef,
        side_output: Option<SchemaRef>,
        layout: RowLayout,
    ) -> Result<(RelationDefinition, ViewResults)> {
        self.check_name_free(name)?;
        if side_output.is_some() {
            self.check_name_free(&side_output_name(name))?;
        }
        let id = self.allocate_ids(if side_output.is_some() { 2 } else { 1 })?;
        let definition = RelationDefinition {
            id,
            name: name.to_string(),
            kind: RelationKind::MaterializedView,
            sql: sql.to_string(),
            depends_on,
            stream: None,
            side_output_id: side_output.as_ref().map(|_| id + 1),
            sql_edition: SQL_EDITION,
        };
        let results = self.open_results(&definition, schema, side_output, layout)?;
        Ok((definition, results))
    }

    fn open_results(
        &self,
        definition: &RelationDefinition,
        schema: SchemaRef,
        side_output: Option<SchemaRef>,
        layout: RowLayout,
    ) -> Result<ViewResults> {
        let store = self.store.clone();
        let rows = Arc::new(ViewResult::open(definition.id, schema, layout, store)?);
        let late = match (definition.side_output_id, side_output) {
            (Some(id), Some(schema)) => Some(Arc::new(ViewResult::open(
                id,
                schema,
                RowLayout::Log,
                self.store.clone(),
            )?)),
            (None, None) => None,
            _ => {
                return Err(WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!(
                        "materialized view {} and its stored side output disagree",
                        definition.name
                    ),
                ))
            }
        };
        Ok(ViewResults { rows, late })
    }

    /// Stores the definition together with the view's first rows (one
    /// atomic commit), then makes the view visible.
    pub fn commit_materialized_view(
        &self,
        definition: RelationDefinition,
        results: ViewResults,
        rows: WriteBatch,
    ) -> Result<()> {
        let mut batch = self.definition_write(&definition)?;
        batch.extend(results.rows.head_write()?);
        if let Some(late) = &results.late {
            batch.extend(late.head_write()?);
        }
        batch.extend(rows);
        self.store.commit(batch)?;
        self.register_materialized_view(definition, results)
    }

    /// Registers a stored materialized view with its stored rows.
    pub fn restore_materialized_view(
        &self,
        definition: RelationDefinition,
        schema: SchemaRef,
        side_output: Option<SchemaRef>,
        layout: RowLayout,
    ) -> Result<ViewResults> {
        let results = self.open_results(&definition, schema, side_output, layout)?;
        self.register_materialized_view(definition, results.clone())?;
        Ok(results)
    }

    fn register_materialized_view(
        &self,
        definition: RelationDefinition,
        results: ViewResults,
    ) -> Result<()> {
        let mut named = vec![(definition.name.clone(), results.rows)];
        if let Some(late) = results.late {
            named.push((side_output_name(&definition.name), late));
        }
        for (name, result) in named {
            for outbox in self.outboxes_of(&name) {
                result.attach_outbox(outbox);
            }
            let existing = self
                .view_results
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&name)
                .cloned();
            // A rebuilt view keeps its provider: plans prepared over it
            // read the rebuilt rows.
            if let Some(provider) = existing {
                let replaced = provider.replace(result);
                replaced.end_subscriptions("the view was rebuilt after a failed write");
                continue;
            }
            let provider = Arc::new(MaterializedViewTable::new(result));
            self.deregister(&name)?;
            self.register(&name, provider.clone())?;
            self.view_results
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name, provider);
        }
        self.write().insert(definition.name.clone(), definition);
        Ok(())
    }

    /// Drops a relation and, for a table, its rows, in one durable commit.
    pub fn drop_relation(&self, name: &str, kind: RelationKind) -> Result<()> {
        let definition = self
            .get(name)
            .ok_or_else(|| WeirError::undefined_table(name))?;
        if definition.kind != kind {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a {}", kind.noun()),
            )
            .with_hint(format!(
                "Use DROP {}.",
                definition.kind.noun().to_uppercase()
            )));
        }
        self.check_no_sinks(name)?;
        if let Some(dependent) = self.dependents(name).first().and_then(|d| self.get(d)) {
            let noun = dependent.kind.noun();
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop {} {name} because {noun} {} depends on it",
                    kind.noun(),
                    dependent.name
                ),
            )
            .with_hint(format!(
                "Drop the {noun} first: DROP {} {};",
                noun.to_uppercase(),
                dependent.name
            )));
        }
        let mut batch = WriteBatch::new();
        batch.delete(definition_key(definition.id));
        self.delete_indexes_of(name, &mut batch);
        match kind {
            RelationKind::Table => {
                batch.delete_prefix(crate::connectors::table::entries_prefix(definition.id));
                batch.delete_prefix(crate::connectors::table::legacy_rows_prefix(definition.id));
                batch.delete(crate::connectors::table::head_key(definition.id));
                batch.delete_prefix(crate::connectors::table::ticks_prefix(definition.id));
                batch.delete_prefix(crate::connectors::table::firings_prefix(definition.id));
            }
            RelationKind::MaterializedView => {
                batch.delete_prefix(view_rows_prefix(definition.id));
                batch.delete(crate::connectors::view_result::view_head_key(definition.id));
                self.forget_failure(definition.id, name, &mut batch);
            }
            RelationKind::View => {}
        }
        if let Some(id) = definition.side_output_id {
            batch.delete_prefix(view_rows_prefix(id));
            batch.delete(crate::connectors::view_result::view_head_key(id));
        }
        self.store.commit(batch)?;
        self.forget_indexes_of(name);
        self.deregister(name)?;
        if definition.side_output_id.is_some() {
            let late = side_output_name(name);
            self.deregister(&late)?;
            self.view_results
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&late);
        }
        self.table_logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let dropped = self
            .view_results
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if let Some(dropped) = dropped {
            dropped.result().end_subscriptions("the view was dropped");
        }
        self.write().remove(name);
        Ok(())
    }

    /// Relations reading `name` (or its side output).
    pub fn dependents(&self, name: &str) -> Vec<String> {
        let late = side_output_name(name);
        self.read()
            .values()
            .filter(|definition| {
                definition
                    .depends_on
                    .iter()
                    .any(|d| d == name || *d == late)
            })
            .map(|definition| definition.name.clone())
            .collect()
    }

    /// Names of catalog relations a plan scans (including in subqueries).
    pub fn dependencies(&self, plan: &LogicalPlan) -> Vec<String> {
        let mut names = Vec::new();
        let _ = plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                let Ok(name) = self.key_of(&scan.table_name) else {
                    return Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue);
                };
                let known = self.read().contains_key(&name) || self.side_output_of(&name).is_some();
                if known && !names.contains(&name) {
                    names.push(name);
                }
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        });
        names
    }

    /// A table's new retention (None: keep every row), durable before it
    /// takes effect.
    pub fn set_retention(&self, name: &str, retention_ms: Option<i64>) -> Result<()> {
        let (Some(mut definition), Some(log)) = (self.get(name), self.table(name)) else {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_TABLE,
                format!("table \"{name}\" does not exist"),
            ));
        };
        let stream = definition.stream.get_or_insert_with(Default::default);
        stream.retention_ms = retention_ms;
        self.persist(&definition)?;
        log.set_retention_ms(retention_ms);
        self.write().insert(name.to_string(), definition);
        Ok(())
    }

    fn persist(&self, definition: &RelationDefinition) -> Result<()> {
        self.store.commit(self.definition_write(definition)?)
    }

    fn definition_write(&self, definition: &RelationDefinition) -> Result<WriteBatch> {
        let value = serde_json::to_vec(definition)
            .map_err(|error| WeirError::internal(format!("cannot encode definition: {error}")))?;
        let mut batch = WriteBatch::new();
        batch.put(definition_key(definition.id), value);
        Ok(batch)
    }

    fn register(&self, name: &str, provider: Arc<dyn TableProvider>) -> Result<()> {
        let (schema, table) = self.placement(name);
        schema.register_table(table.to_string(), provider)?;
        Ok(())
    }

    fn deregister(&self, name: &str) -> Result<()> {
        let (schema, table) = self.placement(name);
        schema.deregister_table(table)?;
        Ok(())
    }
}

fn decode_id(value: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            "the catalog's next relation id is malformed",
        )
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// A materialized view's rows and, if it keeps them, its late rows.
#[derive(Clone)]
pub struct ViewResults {
    pub rows: Arc<ViewResult>,
    pub late: Option<Arc<ViewResult>>,
}

#[cfg(test)]
#[path = "relations_tests.rs"]
mod tests;
