//! CREATE / DROP of tables and views: what DataFusion plans, weir executes
//! against its durable catalog (DataFusion's own DDL execution would keep
//! everything in memory).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DFSchema, TableReference};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{CreateMemoryTable, CreateView, DdlStatement, LogicalPlan};
use datafusion::physical_plan::collect;

use super::relations::NewTable;
use super::sql_types::create_table_sql;
use super::Engine;
use crate::catalog::{
    rejected_name, RelationDefinition, RelationKind, SourceDefinition, StreamDefinition,
    TableParts, WatermarkDefinition, BLANK_PADDED_METADATA, MAX_CHARACTERS_METADATA,
    REJECTED_COLUMNS, REJECTED_CONNECTOR,
};
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::StreamOptions;

/// The outcome of a command that returns no rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDone {
    /// The CommandComplete tag, e.g. `CREATE TABLE` or `INSERT`.
    pub tag: String,
    /// Row count for tags that carry one (`INSERT 0 n`, `SELECT n`, `COPY n`).
    pub rows: Option<u64>,
    /// A notice to send before completing, e.g. for IF NOT EXISTS.
    pub notice: Option<Notice>,
}

/// A NoticeResponse: severity `NOTICE` or `WARNING`, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub severity: &'static str,
    pub message: String,
}

impl Notice {
    pub fn info(message: &str) -> Self {
        Notice {
            severity: "NOTICE",
            message: message.to_string(),
        }
    }

    pub fn warning(message: &str) -> Self {
        Notice {
            severity: "WARNING",
            message: message.to_string(),
        }
    }
}

impl CommandDone {
    pub fn new(tag: &str) -> Self {
        CommandDone {
            tag: tag.to_string(),
            rows: None,
            notice: None,
        }
    }

    pub fn with_rows(mut self, rows: u64) -> Self {
        self.rows = Some(rows);
        self
    }

    pub fn with_notice(mut self, notice: Notice) -> Self {
        self.notice = Some(notice);
        self
    }
}

impl Engine {
    /// Executes a DDL plan; `sql` is the statement text to record.
    pub async fn execute_ddl(
        &self,
        state: &SessionState,
        ddl: &DdlStatement,
        sql: &str,
        stream: Option<&StreamOptions>,
    ) -> Result<CommandDone> {
        match ddl {
            DdlStatement::CreateMemoryTable(create) => {
                self.create_table(state, create, sql, stream).await
            }
            DdlStatement::CreateView(create) => self.create_view(create, sql),
            DdlStatement::DropTable(drop) => self.drop_table(&drop.name, drop.if_exists).await,
            DdlStatement::DropView(drop) => {
                self.drop_relation(&drop.name, drop.if_exists, RelationKind::View)
            }
            DdlStatement::CreateCatalog(_) => {
                Err(WeirError::unsupported("CREATE DATABASE is not supported")
                    .with_hint("weir has one database, weir."))
            }
            DdlStatement::CreateExternalTable(_) => Err(WeirError::unsupported(
                "CREATE EXTERNAL TABLE is not supported",
            )
            .with_hint("Create a table and load it with COPY ... FROM STDIN.")),
            other => Err(WeirError::unsupported(format!(
                "{} is not supported",
                other.name()
            ))),
        }
    }

    async fn create_table(
        &self,
        state: &SessionState,
        create: &CreateMemoryTable,
        sql: &str,
        stream: Option<&StreamOptions>,
    ) -> Result<CommandDone> {
        let name = self.catalog.key_to_create(&create.name)?;
        if create.temporary {
            return Err(WeirError::unsupported("temporary tables are not supported")
                .with_hint("Create an ordinary table and drop it when done."));
        }
        if create.or_replace {
            return Err(
                WeirError::unsupported("CREATE OR REPLACE TABLE is not supported")
                    .with_hint("DROP TABLE first, then CREATE TABLE."),
            );
        }
        if create.if_not_exists && self.catalog.get(&name).is_some() {
            return Ok(
                CommandDone::new("CREATE TABLE").with_notice(Notice::info(&format!(
                    "relation \"{name}\" already exists, skipping"
                ))),
            );
        }
        distinct_columns(create.input.schema())?;
        let parts = table_parts(create, sql);
        let is_create_as = !matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(_));
        let is_source = stream.is_some_and(|options| options.source.is_some());
        if is_source && is_create_as {
            return Err(
                WeirError::unsupported("CREATE SOURCE … AS SELECT is not supported")
                    .with_hint("A source's rows come from its connector: list its columns."),
            );
        }
        if !is_create_as {
            let stream = match stream {
                Some(options) => Some(stream_definition(state, &parts, options).await?),
                None => None,
            };
            let source = stream.as_ref().and_then(|stream| stream.source.clone());
            let watermark = stream.as_ref().and_then(|stream| stream.watermark.clone());
            let Some(source) = source else {
                self.catalog.create_table(&name, sql, parts, stream)?;
                return Ok(CommandDone::new("CREATE TABLE"));
            };
            let (rejected_sql, rejected_parts, rejected_stream) =
                self.rejected_table(state, &name).await?;
            // One commit: a crash never leaves a source without the
            // relation its rejected records go to.
            self.catalog.create_tables(vec![
                NewTable {
                    name: name.clone(),
                    sql: sql.to_string(),
                    parts,
                    stream,
                },
                NewTable {
                    name: rejected_name(&name),
                    sql: rejected_sql,
                    parts: rejected_parts,
                    stream: Some(rejected_stream),
                },
            ])?;
            self.start_source(&name, source, watermark);
            return Ok(CommandDone::new("CREATE SOURCE"));
        }
        // CREATE TABLE AS: record a plain CREATE TABLE (the query may later
        // stop planning), then fill the table from the query.
        let stored_sql = create_table_sql(&name, &parts.schema)?;
        self.catalog.check_name_free(&name)?;
        let physical = state.create_physical_plan(&create.input).await?;
        let batches = collect(physical, state.task_ctx()).await?;
        let log = self.catalog.create_table(&name, &stored_sql, parts, None)?;
        let rows = log.append(batches, None).await?;
        Ok(CommandDone::new("SELECT").with_rows(rows))
    }

    fn create_view(&self, create: &CreateView, sql: &str) -> Result<CommandDone> {
        let name = self.catalog.key_to_create(&create.name)?;
        distinct_columns(create.input.schema())?;
        if create.temporary {
            return Err(WeirError::unsupported("temporary views are not supported"));
        }
        if create.or_replace && self.catalog.get(&name).is_some() {
            self.catalog.drop_relation(&name, RelationKind::View)?;
        }
        self.catalog
            .create_view(&name, sql, create.input.as_ref().clone())?;
        Ok(CommandDone::new("CREATE VIEW"))
    }

    /// DROP TABLE once the table's queued writes are in; writes waiting
    /// for it fail with 42P01 instead of writing rows nobody can read.
    pub(super) async fn drop_table(
        &self,
        reference: &TableReference,
        if_exists: bool,
    ) -> Result<CommandDone> {
        let name = self.catalog.key_of(reference)?;
        if let Some(source) = self.rejected_of(&name) {
            return Err(goes_with_source(&name, Some(source)));
        }
        if let Some(log) = self.catalog.table(&name).filter(|log| log.is_source()) {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{}\" is a source", log.name()),
            )
            .with_hint(format!("Use DROP SOURCE {name};")));
        }
        self.drop_table_log(reference, if_exists).await
    }

    async fn drop_table_log(
        &self,
        reference: &TableReference,
        if_exists: bool,
    ) -> Result<CommandDone> {
        let log = self.catalog.table(&self.catalog.key_of(reference)?);
        let paused = match &log {
            Some(log) => Some(log.pause_writes().await),
            None => None,
        };
        let done = self.drop_relation(reference, if_exists, RelationKind::Table)?;
        if let Some(log) = &log {
            log.mark_dropped();
        }
        drop(paused);
        Ok(done)
    }

    /// The `<source>_errors` relation of a new source: its statement, its
    /// columns (planned as on every start) and its definition.
    async fn rejected_table(
        &self,
        state: &SessionState,
        source: &str,
    ) -> Result<(String, TableParts, StreamDefinition)> {
        let name = rejected_name(source);
        self.catalog.check_name_free(&name)?;
        let sql = format!("CREATE TABLE {name} ({REJECTED_COLUMNS})");
        let Some(crate::sql::Statement::Standard(statement)) = crate::sql::parse(&sql)?.pop()
        else {
            return Err(WeirError::internal("the errors relation's statement"));
        };
        let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) =
            self.plan(state, &statement).await?
        else {
            return Err(WeirError::internal("the errors relation's plan"));
        };
        let stream = StreamDefinition {
            append_only: true,
            source: Some(SourceDefinition {
                connector: REJECTED_CONNECTOR.to_string(),
                options: [("source".to_string(), source.to_string())].into(),
                ..SourceDefinition::default()
            }),
            ..StreamDefinition::default()
        };
        let parts = table_parts(&create, &sql);
        Ok((sql, parts, stream))
    }

    /// The source whose rejected records `name` keeps, if it is such.
    pub(super) fn rejected_of(&self, name: &str) -> Option<String> {
        let definition = self.catalog.get(name)?;
        let source = definition.stream?.source?;
        (source.connector == REJECTED_CONNECTOR)
            .then(|| source.options.get("source").cloned())
            .flatten()
    }

    /// `DROP SOURCE [IF EXISTS] name`: stops its connector, then drops it
    /// as a table is dropped, and its `_errors` relation with it.
    pub async fn drop_source(&self, name: &str, if_exists: bool) -> Result<CommandDone> {
        let tag = "DROP SOURCE";
        match self.catalog.table(name) {
            None if self.catalog.get(name).is_some() => Err(not_a_source(name)),
            None if if_exists => Ok(CommandDone::new(tag).with_notice(Notice::info(&format!(
                "source \"{name}\" does not exist, skipping"
            )))),
            None => Err(WeirError::undefined_table(name)),
            Some(log) if !log.is_source() => Err(not_a_source(name)),
            Some(_) if self.rejected_of(name).is_some() => {
                Err(goes_with_source(name, self.rejected_of(name)))
            }
            Some(_) => {
                let rejected = rejected_name(name);
                for relation in [name, rejected.as_str()] {
                    if !self.catalog.dependents(relation).is_empty() {
                        // The relation's own error names the dependent view.
                        let reference = TableReference::bare(relation);
                        self.drop_relation(&reference, false, RelationKind::Table)?;
                    }
                }
                self.stop_source(name);
                self.drop_table_log(&TableReference::bare(name), false)
                    .await?;
                if self.rejected_of(&rejected).as_deref() == Some(name) {
                    self.drop_table_log(&TableReference::bare(rejected.as_str()), false)
                        .await?;
                }
                Ok(CommandDone::new(tag))
            }
        }
    }

    pub(super) fn drop_relation(
        &self,
        reference: &TableReference,
        if_exists: bool,
        kind: RelationKind,
    ) -> Result<CommandDone> {
        let name = self.catalog.key_of(reference)?;
        let tag = format!("DROP {}", kind.noun().to_uppercase());
        if if_exists && self.catalog.get(&name).is_none() {
            return Ok(CommandDone::new(&tag).with_notice(Notice::info(&format!(
                "{} \"{name}\" does not exist, skipping",
                kind.noun()
            ))));
        }
        self.catalog.drop_relation(&name, kind)?;
        Ok(CommandDone::new(&tag))
    }

    /// Registers a stored relation from its re-planned definition.
    pub(super) fn restore(&self, definition: RelationDefinition, plan: LogicalPlan) -> Result<()> {
        match (definition.kind, plan) {
            (RelationKind::Table, LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create))) => {
                let parts = table_parts(&create, &definition.sql);
                self.catalog.restore_table(definition, parts)?;
                Ok(())
            }
            (RelationKind::View, LogicalPlan::Ddl(DdlStatement::CreateView(create))) => self
                .catalog
                .restore_view(definition, create.input.as_ref().clone()),
            (kind, _) => Err(WeirError::internal(format!(
                "stored definition of {} {} is not a CREATE {}",
                kind.noun(),
                definition.name,
                kind.noun().to_uppercase()
            ))),
        }
    }
}

fn goes_with_source(name: &str, source: Option<String>) -> WeirError {
    let source = source.unwrap_or_default();
    WeirError::new(
        sqlstate::WRONG_OBJECT_TYPE,
        format!("\"{name}\" keeps the records source {source} rejected"),
    )
    .with_hint(format!("It goes with the source: DROP SOURCE {source};"))
}

fn not_a_source(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::WRONG_OBJECT_TYPE,
        format!("\"{name}\" is not a source"),
    )
    .with_hint("DROP TABLE, DROP VIEW or DROP MATERIALIZED VIEW drop the others.")
}

async fn stream_definition(
    state: &SessionState,
    parts: &TableParts,
    options: &StreamOptions,
) -> Result<StreamDefinition> {
    let mut watermark = match (&options.watermark, &options.proctime) {
        (Some(clause), _) => Some(super::watermark::resolve(state, &parts.schema, clause).await?),
        // Without a WATERMARK clause, a PROCTIME() column is the stream's
        // time: its watermark is the wall clock.
        (None, Some(column)) => Some(WatermarkDefinition {
            column: column.clone(),
            delay_ms: 0,
            idle_timeout_ms: None,
            processing_time: true,
        }),
        (None, None) => None,
    };
    if let (Some(column), Some(definition)) = (&options.proctime, watermark.as_mut()) {
        // A WATERMARK on the PROCTIME() column itself: still the wall clock.
        definition.processing_time |= &definition.column == column;
    }
    if let Some(column) = &options.proctime {
        let field = parts.schema.field_with_name(column)?;
        if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
            return Err(WeirError::new(
                sqlstate::DATATYPE_MISMATCH,
                format!(
                    "{column} AS PROCTIME() must be a timestamp, not {}",
                    field.data_type()
                ),
            )
            .with_hint("Leave out the type (it is TIMESTAMP) or use TIMESTAMP / TIMESTAMPTZ."));
        }
    }
    if let Some(idle_timeout_ms) = options.idle_timeout_ms {
        match watermark.as_mut() {
            Some(definition) if !definition.processing_time => {
                definition.idle_timeout_ms = Some(idle_timeout_ms)
            }
            Some(_) => {}
            None => {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    "watermark_idle_timeout needs a watermark to advance",
                )
                .with_hint("Add WATERMARK FOR <time column> to the table."))
            }
        }
    }
    if options.retention_ms.is_some() && watermark.is_none() {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "retention needs a watermark: rows expire by event time behind it",
        )
        .with_hint("Add WATERMARK FOR <time column> to the table."));
    }
    let source = options.source.as_ref().map(source_definition).transpose()?;
    if let Some(source) = &source {
        // Refuses unknown connectors, options and columns now, not later,
        // and a broker that does not answer (on a blocking thread).
        let mut reader = crate::connectors::source::open_reader(
            source,
            &parts.schema,
            watermark.as_ref(),
            None,
        )?;
        tokio::task::spawn_blocking(move || reader.check())
            .await
            .map_err(|error| WeirError::internal(format!("a source's check failed: {error}")))??;
    }
    Ok(StreamDefinition {
        watermark,
        append_only: options.append_only,
        proctime: options.proctime.clone(),
        retention_ms: options.retention_ms,
        source,
    })
}

fn source_definition(clause: &crate::sql::SourceClause) -> Result<SourceDefinition> {
    let options: std::collections::BTreeMap<String, String> =
        clause.options.iter().cloned().collect();
    let connector = options
        .get("connector")
        .cloned()
        .ok_or_else(|| WeirError::internal("a source without a connector"))?;
    Ok(SourceDefinition {
        connector: connector.to_ascii_lowercase(),
        options,
        format: clause.format.clone(),
        encode: clause.encode.clone(),
    })
}

/// Postgres refuses a table or view whose columns repeat a name (42701);
/// DataFusion accepted `CREATE TABLE t (a INT, a TEXT)`, which no statement
/// could then read.
fn distinct_columns(schema: &DFSchema) -> Result<()> {
    let mut seen = HashSet::new();
    for field in schema.fields() {
        if !seen.insert(field.name()) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{}\" specified more than once", field.name()),
            )
            .with_hint("Give each column its own name (AS in a SELECT list)."));
        }
    }
    Ok(())
}

fn table_parts(create: &CreateMemoryTable, sql: &str) -> TableParts {
    TableParts {
        schema: with_declared_lengths(create.input.schema().as_arrow(), sql),
        constraints: create.constraints.clone(),
        column_defaults: create
            .column_defaults
            .iter()
            .cloned()
            .collect::<HashMap<_, _>>(),
    }
}

/// The schema with each `VARCHAR(n)` / `CHAR(n)` column's limit in its
/// field metadata (DataFusion plans them as plain text).
fn with_declared_lengths(schema: &Schema, sql: &str) -> SchemaRef {
    let lengths = crate::sql::character_lengths::declared_lengths(sql);
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            let Some((_, declared)) = lengths.iter().find(|(name, _)| name == field.name()) else {
                return field.as_ref().clone();
            };
            let mut metadata = field.metadata().clone();
            metadata.insert(
                MAX_CHARACTERS_METADATA.to_string(),
                declared.characters.to_string(),
            );
            if declared.blank_padded {
                metadata.insert(BLANK_PADDED_METADATA.to_string(), "true".to_string());
            }
            field.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

impl Engine {
    /// `ALTER TABLE t SET (retention = ...)` / `RESET (retention)`: rows
    /// behind the new retention go after the next checkpoint. The caller
    /// holds the catalog lock (`lock_catalog`).
    pub fn alter_retention(
        &self,
        alter: &crate::sql::alter_table::AlterRetention,
    ) -> Result<CommandDone> {
        let definition = match self.catalog.get(&alter.table) {
            Some(definition) if definition.kind == RelationKind::Table => definition,
            Some(definition) => {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("\"{}\" is not a table", definition.name),
                ))
            }
            None if alter.if_exists => return Ok(CommandDone::new("ALTER TABLE")),
            None => {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_TABLE,
                    format!("table \"{}\" does not exist", alter.table),
                ))
            }
        };
        let watermarked = definition
            .stream
            .as_ref()
            .is_some_and(|stream| stream.watermark.is_some());
        if alter.retention_ms.is_some() && !watermarked {
            return Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "retention needs a watermark: rows expire by event time behind it",
            )
            .with_hint("Only tables declared with WATERMARK FOR <time column> can expire rows."));
        }
        self.catalog
            .set_retention(&alter.table, alter.retention_ms)?;
        Ok(CommandDone::new("ALTER TABLE"))
    }
}
