//! What the corrections need to know: weir's relations, and the oids
//! datafusion-pg-catalog gave them (it numbers relations as it lists them).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, Session as DataFusionSession};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::collect;

use crate::catalog::{relation_key, RelationKind, SCHEMA_NAME};
use crate::connectors::table::KeyConstraint;
use crate::engine::relations::Relations;

/// Oids of key constraints and their indexes: far above the ones
/// datafusion-pg-catalog hands out (from 16384, one per relation), and
/// fixed per table id so they stay the same between queries.
const KEY_OID_BASE: i64 = 1_000_000_000;
const KEY_OIDS_PER_TABLE: i64 = 64;

/// A key constraint's two catalog entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    Constraint,
    Index,
}

/// The oid of key `index`'s constraint or index on table `table_id`.
pub fn key_oid(table_id: u64, index: usize, part: KeyPart) -> i64 {
    let slot = 2 * index as i64 + i64::from(part == KeyPart::Index);
    KEY_OID_BASE + table_id as i64 * KEY_OIDS_PER_TABLE + slot
}

/// The table id, key number and part an oid from `key_oid` names.
pub fn decode_key_oid(oid: i64) -> Option<(u64, usize, KeyPart)> {
    let relative = oid.checked_sub(KEY_OID_BASE).filter(|r| *r >= 0)?;
    let slot = relative % KEY_OIDS_PER_TABLE;
    let part = if slot % 2 == 1 {
        KeyPart::Index
    } else {
        KeyPart::Constraint
    };
    Some((
        (relative / KEY_OIDS_PER_TABLE) as u64,
        (slot / 2) as usize,
        part,
    ))
}

pub struct CatalogContext {
    pub relations: Arc<Relations>,
    /// Owners and grants.
    pub access: super::Access,
    /// The oid of each of our relations, by catalog key (`t` in public,
    /// `s.t` in user schema `s`).
    pub oids: HashMap<String, i64>,
    /// The oids of pg_catalog's own relations.
    pub system_oids: Vec<i64>,
    /// Tables with PRIMARY KEY or UNIQUE constraints.
    pub keyed: Vec<KeyedTable>,
    /// Indexes made with CREATE INDEX.
    pub declared: Vec<DeclaredIndex>,
}

pub struct DeclaredIndex {
    pub oid: i64,
    pub table_oid: i64,
    pub namespace: i64,
    /// Its name in its schema.
    pub name: String,
    /// 1-based numbers of its columns.
    pub numbers: Vec<i64>,
    pub method: String,
}

pub struct KeyedTable {
    pub oid: i64,
    /// Its schema's oid (its keys' constraints and indexes are there too).
    pub namespace: i64,
    pub schema: SchemaRef,
    pub keys: Vec<Key>,
}

pub struct Key {
    pub constraint: KeyConstraint,
    pub constraint_oid: i64,
    pub index_oid: i64,
}

impl KeyedTable {
    /// Whether column `name` is part of the primary key.
    pub fn in_primary_key(&self, name: &str) -> bool {
        let position = self.schema.index_of(name).ok();
        self.keys.iter().any(|key| {
            key.constraint.primary && position.is_some_and(|p| key.constraint.columns.contains(&p))
        })
    }
}

impl CatalogContext {
    pub async fn load(
        schema: &Arc<dyn SchemaProvider>,
        state: &dyn DataFusionSession,
        relations: Arc<Relations>,
        access: super::Access,
    ) -> Result<Self> {
        let namespaces = rows_of(
            &scan(schema, "pg_namespace", state).await?,
            "oid",
            "nspname",
        )?;
        let namespace_oid = |wanted: &str| {
            let found = namespaces.iter().find(|(_, name)| name == wanted);
            found.map_or(-1, |(oid, _)| *oid)
        };
        let system = namespace_oid("pg_catalog");
        // Our schemas: public and the user's, each with its name.
        let ours: HashMap<i64, &str> = namespaces
            .iter()
            .filter(|(_, name)| name == SCHEMA_NAME || relations.is_user_schema(name))
            .map(|(oid, name)| (*oid, name.as_str()))
            .collect();
        let classes = scan(schema, "pg_class", state).await?;
        let spaces = int64_column(&classes, "relnamespace")?;
        let spaces = spaces.as_primitive::<Int64Type>();
        let space = |row: usize| spaces.is_valid(row).then(|| spaces.value(row));
        let classes = rows_of(&classes, "oid", "relname")?;
        let mut oids = HashMap::new();
        let mut relation_namespaces = HashMap::new();
        let mut system_oids = Vec::new();
        for (row, (oid, name)) in classes.iter().enumerate() {
            match space(row) {
                Some(namespace) if namespace == system => system_oids.push(*oid),
                Some(namespace) => {
                    if let Some(schema_name) = ours.get(&namespace) {
                        oids.insert(relation_key(schema_name, name), *oid);
                        relation_namespaces.insert(*oid, namespace);
                    }
                }
                None => {}
            }
        }
        let keyed = relations
            .table_logs()
            .into_iter()
            .filter_map(|log| {
                let oid = *oids.get(log.name())?;
                let keys: Vec<Key> = log
                    .key_constraints()
                    .into_iter()
                    .enumerate()
                    .map(|(index, constraint)| Key {
                        constraint,
                        constraint_oid: key_oid(log.id(), index, KeyPart::Constraint),
                        index_oid: key_oid(log.id(), index, KeyPart::Index),
                    })
                    .collect();
                let schema = log.schema();
                let namespace = relation_namespaces.get(&oid).copied().unwrap_or(-1);
                (!keys.is_empty()).then_some(KeyedTable {
                    oid,
                    namespace,
                    schema,
                    keys,
                })
            })
            .collect();
        let declared = declared_indexes(&relations, &oids, &relation_namespaces);
        Ok(CatalogContext {
            declared,
            relations,
            access,
            oids,
            system_oids,
            keyed,
        })
    }

    pub fn is_materialized_view(&self, name: &str) -> bool {
        let catalog = &self.relations;
        catalog
            .get(name)
            .is_some_and(|definition| definition.kind == RelationKind::MaterializedView)
            || catalog.side_output_of(name).is_some()
    }

    /// The catalog key of each of our relations' oids.
    pub fn names_by_oid(&self) -> HashMap<i64, &str> {
        self.oids
            .iter()
            .map(|(name, oid)| (*oid, name.as_str()))
            .collect()
    }
}

/// The catalog rows of indexes made with CREATE INDEX: oids as a key's
/// index gets them, from the index's own id (ids are never shared).
fn declared_indexes(
    relations: &Relations,
    oids: &HashMap<String, i64>,
    namespaces: &HashMap<i64, i64>,
) -> Vec<DeclaredIndex> {
    relations
        .indexes()
        .into_iter()
        .filter_map(|index| {
            let table_oid = *oids.get(&index.table)?;
            let columns = relations.provider(&index.table)?.schema();
            let numbers = index
                .columns
                .iter()
                .map(|column| columns.index_of(column).map_or(0, |at| at as i64 + 1))
                .collect();
            Some(DeclaredIndex {
                oid: key_oid(index.id, 0, KeyPart::Index),
                table_oid,
                namespace: namespaces.get(&table_oid).copied().unwrap_or(-1),
                name: relations.reference_of(&index.name).table().to_string(),
                numbers,
                method: index.method,
            })
        })
        .collect()
}

/// All rows of the crate's relation `name`.
pub(super) async fn scan(
    schema: &Arc<dyn SchemaProvider>,
    name: &str,
    state: &dyn DataFusionSession,
) -> Result<RecordBatch> {
    let table = schema
        .table(name)
        .await?
        .ok_or_else(|| DataFusionError::Plan(format!("pg_catalog.{name} is missing")))?;
    let plan = table.scan(state, None, &[], None).await?;
    let batches = collect(plan, state.task_ctx()).await?;
    Ok(datafusion::arrow::compute::concat_batches(
        &table.schema(),
        &batches,
    )?)
}

/// The first argument of a function taking an oid, as 64-bit integers.
pub fn oid_argument(arrays: &[ArrayRef], function: &str) -> Result<Int64Array> {
    let Some(oids) = arrays.first() else {
        return Err(DataFusionError::Execution(format!(
            "{function} takes an oid"
        )));
    };
    Ok(cast(oids, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// Column `name` as 64-bit integers (oids are stored in several widths).
pub fn int64_column(batch: &RecordBatch, name: &str) -> Result<Arc<dyn Array>> {
    let column = batch.column(batch.schema().index_of(name)?);
    Ok(cast(column, &DataType::Int64)?)
}

/// Column `name` as text.
pub fn text_column(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    let column = batch.column(batch.schema().index_of(name)?);
    Ok(cast(column, &DataType::Utf8)?)
}

/// (oid, name) of each row with both.
fn rows_of(batch: &RecordBatch, oid: &str, name: &str) -> Result<Vec<(i64, String)>> {
    let oids = int64_column(batch, oid)?;
    let oids = oids.as_primitive::<Int64Type>();
    let names = text_column(batch, name)?;
    let names = names.as_string::<i32>();
    Ok((0..batch.num_rows())
        .filter(|&row| oids.is_valid(row) && names.is_valid(row))
        .map(|row| (oids.value(row), names.value(row).to_string()))
        .collect())
}
