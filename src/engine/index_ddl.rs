//! CREATE INDEX and DROP INDEX. weir records an index and lists it where
//! Postgres clients look (pg_index, pg_indexes, psql's `\d`), so schemas
//! and migrations written for Postgres run; queries do not use it. A
//! UNIQUE index would promise a check weir does not make, so it is
//! refused with the constraint to declare instead.

use datafusion::logical_expr::{CreateIndex, Expr};

use super::{CommandDone, Engine, Notice};
use crate::catalog::{relation_key, RelationKind};
use crate::error::{sqlstate, Result, WeirError};

/// Access methods Postgres has; an index may name any of them.
const METHODS: [&str; 6] = ["btree", "hash", "gist", "gin", "brin", "spgist"];

impl Engine {
    pub fn create_index(&self, create: &CreateIndex) -> Result<CommandDone> {
        let table = self.catalog.key_of(&create.table)?;
        let definition = self
            .catalog
            .get(&table)
            .ok_or_else(|| WeirError::undefined_table(&table))?;
        if definition.kind == RelationKind::View {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot create index on relation \"{table}\""),
            )
            .with_hint("A view has no rows of its own; index the tables it reads."));
        }
        if create.unique {
            return Err(
                WeirError::unsupported("CREATE UNIQUE INDEX is not supported").with_hint(
                    "Declare the key in CREATE TABLE: PRIMARY KEY (...) or UNIQUE (...).",
                ),
            );
        }
        let columns = index_columns(create)?;
        let table_schema = self
            .catalog
            .provider(&table)
            .ok_or_else(|| WeirError::undefined_table(&table))?
            .schema();
        if let Some(missing) = columns.iter().find(|c| table_schema.index_of(c).is_err()) {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{missing}\" does not exist"),
            ));
        }
        let method = create.using.clone().unwrap_or_else(|| "btree".to_string());
        if !METHODS.contains(&method.as_str()) {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("access method \"{method}\" does not exist"),
            ));
        }
        let reference = self.catalog.reference_of(&table);
        let schema = reference.schema().unwrap_or(crate::catalog::SCHEMA_NAME);
        let local = match &create.name {
            // Postgres puts an index in its table's schema; the name has none.
            Some(name) => name.rsplit('.').next().unwrap_or(name).to_string(),
            None => self.free_index_name(schema, reference.table(), &columns),
        };
        let key = relation_key(schema, &local);
        if create.if_not_exists && self.index_name_taken(&key) {
            return Ok(
                CommandDone::new("CREATE INDEX").with_notice(Notice::info(&format!(
                    "relation \"{local}\" already exists, skipping"
                ))),
            );
        }
        if self.is_constraint_index(&key) {
            return Err(already_exists(&local));
        }
        self.catalog.create_index(&key, &table, columns, method)?;
        Ok(CommandDone::new("CREATE INDEX"))
    }

    /// `DROP INDEX [IF EXISTS] name [, ...]`.
    pub fn drop_indexes(&self, names: &[String], if_exists: bool) -> Result<CommandDone> {
        let mut done = CommandDone::new("DROP INDEX");
        for name in names {
            if self.catalog.index(name).is_some() {
                self.catalog.drop_index(name)?;
            } else if self.is_constraint_index(name) {
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop index {name} because a key constraint requires it"),
                )
                .with_hint("The index goes with its table's PRIMARY KEY or UNIQUE constraint."));
            } else if if_exists {
                done = done.with_notice(Notice::info(&format!(
                    "index \"{name}\" does not exist, skipping"
                )));
            } else {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("index \"{name}\" does not exist"),
                ));
            }
        }
        Ok(done)
    }

    /// Postgres's default name: `table_column_idx`, then `…_idx1`, ….
    fn free_index_name(&self, schema: &str, table: &str, columns: &[String]) -> String {
        let base = format!("{table}_{}_idx", columns.join("_"));
        (0..)
            .map(|n| match n {
                0 => base.clone(),
                n => format!("{base}{n}"),
            })
            .find(|name| !self.index_name_taken(&relation_key(schema, name)))
            .unwrap_or(base)
    }

    fn index_name_taken(&self, key: &str) -> bool {
        self.catalog.check_name_free(key).is_err() || self.is_constraint_index(key)
    }

    /// Whether `key` names the index of a PRIMARY KEY or UNIQUE constraint.
    fn is_constraint_index(&self, key: &str) -> bool {
        let index = self.catalog.reference_of(key);
        self.catalog.table_logs().iter().any(|log| {
            let table = self.catalog.reference_of(log.name());
            table.schema() == index.schema()
                && log
                    .key_constraints()
                    .iter()
                    .any(|key| key.name == index.table())
        })
    }
}

/// The indexed columns' names; an expression is refused.
fn index_columns(create: &CreateIndex) -> Result<Vec<String>> {
    create
        .columns
        .iter()
        .map(|sort| match &sort.expr {
            Expr::Column(column) => Ok(column.name.clone()),
            other => Err(WeirError::unsupported(format!(
                "an index on an expression is not supported: {other}"
            ))
            .with_hint("Index columns only.")),
        })
        .collect()
}

fn already_exists(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists"),
    )
}
