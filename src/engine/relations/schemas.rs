//! Schemas made with CREATE SCHEMA: each stored under
//! `catalog/schema/<name>` and registered as a DataFusion schema of weir's
//! database, so `s.t` resolves in queries. A relation in schema `s` is
//! known in the catalog by the key `s.t` (`catalog::relation_key`); one in
//! `public` by its bare name, as before schemas existed.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use datafusion::common::TableReference;

use super::{decode_catalog_entry, Relations};
use crate::catalog::{relation_key, SchemaDefinition, DATABASE_NAME, SCHEMA_NAME};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, StateStore, WriteBatch};

/// Schemas every database has besides `public`; nothing is created in them.
pub const SYSTEM_SCHEMAS: [&str; 3] = ["pg_catalog", "information_schema", "weir_catalog"];

fn schema_key(name: &str) -> Vec<u8> {
    key(&[b"catalog", b"schema", name.as_bytes()])
}

/// The stored schemas, by name.
pub(super) fn load(store: &dyn StateStore) -> Result<BTreeMap<String, SchemaDefinition>> {
    let mut schemas = BTreeMap::new();
    for (stored_key, value) in store.scan_prefix(&key(&[b"catalog", b"schema", b""]))? {
        let definition: SchemaDefinition = decode_catalog_entry(&stored_key, &value)?;
        schemas.insert(definition.name.clone(), definition);
    }
    Ok(schemas)
}

impl Relations {
    /// Schemas made with CREATE SCHEMA, by name.
    pub fn schemas(&self) -> Vec<SchemaDefinition> {
        self.user_schemas().values().cloned().collect()
    }

    /// Whether `name` is a schema: `public`, a system schema or a user's.
    pub fn schema_exists(&self, name: &str) -> bool {
        name == SCHEMA_NAME || SYSTEM_SCHEMAS.contains(&name) || self.is_user_schema(name)
    }

    pub fn is_user_schema(&self, name: &str) -> bool {
        self.user_schemas().contains_key(name)
    }

    /// Durably records a new schema and makes it resolvable.
    pub fn create_schema(&self, definition: SchemaDefinition) -> Result<()> {
        if self.schema_exists(&definition.name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_SCHEMA,
                format!("schema \"{}\" already exists", definition.name),
            )
            .with_hint("Use CREATE SCHEMA IF NOT EXISTS to skip it."));
        }
        self.check_schema_name(&definition.name)?;
        let value = serde_json::to_vec(&definition)
            .map_err(|error| WeirError::internal(format!("cannot encode schema: {error}")))?;
        let mut batch = WriteBatch::new();
        batch.put(schema_key(&definition.name), value);
        self.store.commit(batch)?;
        self.register_schema(&definition.name)?;
        self.schemas_write()
            .insert(definition.name.clone(), definition);
        Ok(())
    }

    /// Forgets an empty user schema (the caller dropped its relations).
    pub fn drop_schema(&self, name: &str) -> Result<()> {
        if let Some(first) = self.relations_in_schema(name).first() {
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot drop schema {name} because other objects depend on it"),
            )
            .with_hint(format!(
                "{first} is in it. Use DROP SCHEMA {name} CASCADE to drop its relations too."
            )));
        }
        let mut batch = WriteBatch::new();
        batch.delete(schema_key(name));
        self.store.commit(batch)?;
        self.database.deregister_schema(name, false)?;
        self.schemas_write().remove(name);
        Ok(())
    }

    /// Keys of the relations and sinks in user schema `name`, newest first
    /// (the order to drop them in).
    pub fn relations_in_schema(&self, name: &str) -> Vec<String> {
        let prefix = format!("{name}.");
        let mut found: Vec<(u64, String)> = self
            .definitions()
            .into_iter()
            .filter(|definition| definition.name.starts_with(&prefix))
            .map(|definition| (definition.id, definition.name))
            .collect();
        found.extend(
            self.sinks()
                .into_iter()
                .filter(|sink| sink.definition.name.starts_with(&prefix))
                .map(|sink| (sink.definition.id, sink.definition.name)),
        );
        found.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        found.into_iter().map(|(_, key)| key).collect()
    }

    /// The catalog key a reference names: `t` or `public.t` is `t`,
    /// `s.t` is `s.t` when `s` is a user schema. A schema that does not
    /// exist is 3F000; a system schema's key never names one of ours.
    pub fn key_of(&self, reference: &TableReference) -> Result<String> {
        let (schema, table) = match reference {
            TableReference::Bare { table } => (None, table.as_ref()),
            TableReference::Partial { schema, table } => (Some(schema.as_ref()), table.as_ref()),
            TableReference::Full {
                catalog,
                schema,
                table,
            } => {
                if catalog.as_ref() != DATABASE_NAME {
                    return Err(WeirError::unsupported(format!(
                        "cross-database references are not implemented: {reference}"
                    ))
                    .with_hint(format!("weir has one database, {DATABASE_NAME}.")));
                }
                (Some(schema.as_ref()), table.as_ref())
            }
        };
        match schema {
            None | Some(SCHEMA_NAME) => self.public_key(table),
            Some(schema) if self.is_user_schema(schema) => Ok(relation_key(schema, table)),
            Some(schema) if SYSTEM_SCHEMAS.contains(&schema) => Ok(relation_key(schema, table)),
            Some(schema) => Err(undefined_schema(schema)),
        }
    }

    /// `key_of` for a name as text (`s.t`, `"S".t`, `t`), as weir's own
    /// statements (sinks, sources, DROP SOURCE) carry names.
    pub fn key_of_text(&self, name: &str) -> Result<String> {
        self.key_of(&TableReference::from(name))
    }

    /// `key_of` for a relation to be created: not in a system schema.
    pub fn key_to_create(&self, reference: &TableReference) -> Result<String> {
        let key = self.key_of(reference)?;
        let schema = reference.schema().unwrap_or(SCHEMA_NAME);
        if SYSTEM_SCHEMAS.contains(&schema) {
            return Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!(
                    "permission denied to create \"{schema}.{}\"",
                    reference.table()
                ),
            )
            .with_hint("System schemas are read-only; create it in public or your own schema."));
        }
        Ok(key)
    }

    /// The DataFusion schema a key's relation is registered in, and its
    /// name there.
    pub(super) fn placement<'a>(&self, key: &'a str) -> (Arc<dyn SchemaProvider>, &'a str) {
        if let Some((schema, table)) = key.split_once('.') {
            if self.is_user_schema(schema) {
                if let Some(provider) = self.database.schema(schema) {
                    return (provider, table);
                }
            }
        }
        (self.schema.clone(), key)
    }

    /// The reference a key stands for (`s.t` in user schema `s`).
    pub fn reference_of(&self, key: &str) -> TableReference {
        match key.split_once('.') {
            Some((schema, table)) if self.is_user_schema(schema) => {
                TableReference::partial(schema, table)
            }
            _ => TableReference::bare(key),
        }
    }

    /// Registers every stored schema with DataFusion (on open).
    pub(super) fn register_stored_schemas(&self) -> Result<()> {
        let names: Vec<String> = self.user_schemas().keys().cloned().collect();
        for name in names {
            self.register_schema(&name)?;
        }
        Ok(())
    }

    fn register_schema(&self, name: &str) -> Result<()> {
        self.database
            .register_schema(name, Arc::new(MemorySchemaProvider::new()))?;
        Ok(())
    }

    /// A bare name with a dot would read as `schema.name` if a schema had
    /// its prefix: refused then, so every key has one meaning.
    fn public_key(&self, table: &str) -> Result<String> {
        if let Some((prefix, _)) = table.split_once('.') {
            if self.is_user_schema(prefix) {
                return Err(ambiguous_name(table, prefix));
            }
        }
        Ok(table.to_string())
    }

    /// A schema's name may not contain a dot (it would make keys
    /// ambiguous), nor be the prefix of a public relation's dotted name.
    fn check_schema_name(&self, name: &str) -> Result<()> {
        if name.contains('.') || name.is_empty() {
            return Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema name \"{name}\" is not allowed: it may not contain a dot"),
            )
            .with_hint("Pick a name without dots."));
        }
        let prefix = format!("{name}.");
        if let Some(taken) = self.read().keys().find(|key| key.starts_with(&prefix)) {
            return Err(ambiguous_name(taken, name));
        }
        Ok(())
    }

    fn user_schemas(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, SchemaDefinition>> {
        self.schemas.read().unwrap_or_else(|p| p.into_inner())
    }

    fn schemas_write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, SchemaDefinition>> {
        self.schemas.write().unwrap_or_else(|p| p.into_inner())
    }
}

pub fn undefined_schema(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_SCHEMA_NAME,
        format!("schema \"{name}\" does not exist"),
    )
    .with_hint("CREATE SCHEMA makes one; \\dn in psql lists those that exist.")
}

fn ambiguous_name(table: &str, schema: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_SCHEMA_NAME,
        format!("relation name \"{table}\" in public would read as a relation of schema {schema}"),
    )
    .with_hint("Rename the relation, or name the schema differently.")
}
