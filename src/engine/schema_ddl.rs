//! CREATE SCHEMA and DROP SCHEMA [CASCADE]: schemas are stored and kept
//! by `relations::schemas`; dropping one with CASCADE drops what is in it
//! and what depends on that, the way each is dropped on its own.

use std::collections::BTreeSet;

use super::relations::schemas::{undefined_schema, SYSTEM_SCHEMAS};
use super::{CommandDone, Engine, Notice};
use crate::catalog::{RelationKind, SchemaDefinition, SCHEMA_NAME};
use crate::error::{sqlstate, Result, WeirError};

impl Engine {
    /// `CREATE SCHEMA [IF NOT EXISTS] name [AUTHORIZATION owner]`; the
    /// session's role owns it unless AUTHORIZATION names another.
    pub fn create_schema(
        &self,
        name: &str,
        owner: Option<&str>,
        if_not_exists: bool,
        role: &str,
    ) -> Result<CommandDone> {
        let owner = owner.unwrap_or(role);
        if if_not_exists && self.catalog.schema_exists(name) {
            return Ok(
                CommandDone::new("CREATE SCHEMA").with_notice(Notice::info(&format!(
                    "schema \"{name}\" already exists, skipping"
                ))),
            );
        }
        if name.starts_with("pg_") {
            return Err(WeirError::new(
                sqlstate::RESERVED_NAME,
                format!("unacceptable schema name \"{name}\""),
            )
            .with_hint("The prefix \"pg_\" is reserved for system schemas."));
        }
        if self.roles.get(owner).is_none() && owner != crate::catalog::BOOTSTRAP_SUPERUSER {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("role \"{owner}\" does not exist"),
            ));
        }
        self.catalog.create_schema(SchemaDefinition {
            name: name.to_string(),
            owner: owner.to_string(),
        })?;
        Ok(CommandDone::new("CREATE SCHEMA"))
    }

    /// `DROP SCHEMA [IF EXISTS] name [CASCADE]`.
    pub async fn drop_schema(
        &self,
        name: &str,
        if_exists: bool,
        cascade: bool,
    ) -> Result<CommandDone> {
        let done = CommandDone::new("DROP SCHEMA");
        if name == SCHEMA_NAME || SYSTEM_SCHEMAS.contains(&name) {
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot drop schema {name} because the system needs it"),
            )
            .with_hint("Drop the relations in it instead."));
        }
        if !self.catalog.is_user_schema(name) {
            return match if_exists {
                true => Ok(done.with_notice(Notice::info(&format!(
                    "schema \"{name}\" does not exist, skipping"
                )))),
                false => Err(undefined_schema(name)),
            };
        }
        if cascade {
            self.drop_contents(name).await?;
        }
        self.catalog.drop_schema(name)?;
        Ok(done)
    }

    /// Drops everything in schema `name`, what depends on it (in any
    /// schema) and the sinks shipping any of it, newest first.
    async fn drop_contents(&self, name: &str) -> Result<()> {
        let doomed = self.doomed_by(name);
        for sink in self.catalog.sinks() {
            let sink = sink.definition;
            let in_schema = sink.name.starts_with(&format!("{name}."));
            if in_schema || doomed.contains(&sink.view) {
                self.drop_sink(&sink.name, true).await?;
            }
        }
        let mut ordered: Vec<(u64, String)> = doomed
            .into_iter()
            .filter_map(|key| self.catalog.get(&key).map(|d| (d.id, key)))
            .collect();
        ordered.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        for (_, key) in ordered {
            self.drop_one(&key).await?;
        }
        Ok(())
    }

    /// The relations in schema `name` and, transitively, their dependents.
    fn doomed_by(&self, name: &str) -> BTreeSet<String> {
        let mut doomed: BTreeSet<String> =
            self.catalog.relations_in_schema(name).into_iter().collect();
        let mut pending: Vec<String> = doomed.iter().cloned().collect();
        while let Some(key) = pending.pop() {
            for dependent in self.catalog.dependents(&key) {
                if doomed.insert(dependent.clone()) {
                    pending.push(dependent);
                }
            }
        }
        doomed
    }

    /// Drops one relation as its own DROP statement would. A source's
    /// `_errors` relation goes with its source, so it may be gone already.
    async fn drop_one(&self, key: &str) -> Result<()> {
        let Some(definition) = self.catalog.get(key) else {
            return Ok(());
        };
        let reference = self.catalog.reference_of(key);
        match definition.kind {
            RelationKind::MaterializedView => {
                self.drop_materialized_view(key, true)?;
            }
            RelationKind::View => {
                self.drop_relation(&reference, true, RelationKind::View)?;
            }
            RelationKind::Table if self.rejected_of(key).is_some() => {
                let source = self.rejected_of(key).unwrap_or_default();
                self.drop_source(&source, true).await?;
            }
            RelationKind::Table if self.catalog.table(key).is_some_and(|t| t.is_source()) => {
                self.drop_source(key, true).await?;
            }
            RelationKind::Table => {
                self.drop_table(&reference, true).await?;
            }
        }
        Ok(())
    }
}
