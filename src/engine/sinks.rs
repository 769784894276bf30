//! CREATE SINK / DROP SINK, and each sink's shipper: a thread that takes
//! the view's committed changes from the sink's outbox in commit order,
//! writes them through the connector, makes them durable there, and then
//! records its mark (and deletes what it shipped) in one commit. A failed
//! write or an unreachable destination is retried every second from the
//! mark, after the writer has put the destination back to it; the trouble
//! shows in `weir_catalog.sinks`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Dependency, FunctionalDependence};
use datafusion::sql::parser::Statement as DataFusionStatement;
use datafusion::sql::sqlparser::ast;

use super::ddl::{CommandDone, Notice};
use super::relations::sink_entries::sink_mark_key;
use super::relations::{Relations, SinkEntry};
use super::system_tables::ComputedTable;
use super::Engine;
use shipper::ship;

mod shipper;
use crate::catalog::{RelationKind, SinkDefinition, SinkFormat};
use crate::connectors::sink::{
    check_options, open_writer, take_shape, Outbox, RecordFormat, SinkMark,
};
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::sink_ddl::CreateSink;
use crate::state::WriteBatch;
use crate::stream::message::Chunk;

#[derive(Default)]
pub struct SinkRuns {
    /// Set by `start_sinks`: new sinks start shipping as they are created.
    engine: std::sync::OnceLock<Weak<Engine>>,
    runs: Mutex<HashMap<String, Arc<SinkRun>>>,
}

pub struct SinkRun {
    stop: AtomicBool,
    outbox: Arc<Outbox>,
    status: Mutex<SinkStatus>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default, Clone)]
struct SinkStatus {
    state: &'static str,
    shipped: u64,
    records: u64,
    errors: u64,
    last_error: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl SinkRun {
    fn update(&self, change: impl FnOnce(&mut SinkStatus)) {
        change(&mut lock(&self.status));
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

impl Engine {
    /// Starts every sink's shipper; later CREATE SINKs start theirs.
    pub fn start_sinks(self: &Arc<Self>) {
        let _ = self.sinks.engine.set(Arc::downgrade(self));
        for entry in self.catalog.sinks() {
            self.start_sink(entry);
        }
    }

    fn start_sink(&self, entry: SinkEntry) {
        if self.sinks.engine.get().is_none() {
            return;
        }
        let name = entry.definition.name.clone();
        let run = Arc::new(SinkRun {
            stop: AtomicBool::new(false),
            outbox: entry.outbox.clone(),
            status: Mutex::new(SinkStatus {
                state: "running",
                ..SinkStatus::default()
            }),
            thread: Mutex::new(None),
        });
        let store = Arc::downgrade(self.catalog.store());
        let format = match self.record_format(&entry.definition) {
            Ok(format) => format,
            Err(error) => {
                run.update(|status| {
                    status.state = "failed";
                    status.last_error = Some(error.message);
                });
                lock(&self.sinks.runs).insert(name, run);
                return;
            }
        };
        let shipper = run.clone();
        let definition = entry.definition;
        let thread = std::thread::Builder::new()
            .name(format!("sink {name}"))
            .spawn(move || ship(&store, &definition, &format, &shipper));
        match thread {
            Ok(handle) => *lock(&run.thread) = Some(handle),
            Err(error) => run.update(|status| {
                status.state = "failed";
                status.last_error = Some(format!("cannot start its thread: {error}"));
            }),
        }
        lock(&self.sinks.runs).insert(name, run);
    }

    /// How the sink's records are made from the view's rows.
    fn record_format(&self, definition: &SinkDefinition) -> Result<RecordFormat> {
        let result = self
            .catalog
            .view_result(&definition.view)
            .ok_or_else(|| WeirError::undefined_table(&definition.view))?;
        let schema = result.schema();
        let key_columns = definition
            .key_columns
            .iter()
            .map(|name| {
                schema.index_of(name).map_err(|_| {
                    WeirError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "column \"{name}\" of primary_key is not in {}",
                            definition.view
                        ),
                    )
                    .with_hint(format!(
                        "primary_key names columns of the view: {}.",
                        column_names(&schema)
                    ))
                })
            })
            .collect::<Result<Vec<usize>>>()?;
        Ok(RecordFormat {
            format: definition.format,
            key_columns,
            force_append_only: definition.force_append_only,
        })
    }

    /// Stops sink `name`'s shipper and waits for it to finish.
    async fn stop_sink(&self, name: &str) {
        let Some(run) = lock(&self.sinks.runs).remove(name) else {
            return;
        };
        run.stop.store(true, Ordering::Release);
        run.outbox.wake();
        let handle = lock(&run.thread).take();
        if let Some(handle) = handle {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
    }

    /// CREATE SINK: checks the view, the format and the destination, then
    /// records the sink with the view's current rows as its first change
    /// (unless `snapshot = 'false'`) and starts shipping.
    pub async fn create_sink(&self, create: &CreateSink) -> Result<CommandDone> {
        if self.catalog.sink(&create.name).is_some() && create.if_not_exists {
            return Ok(
                CommandDone::new("CREATE SINK").with_notice(Notice::info(&format!(
                    "sink \"{}\" already exists, skipping",
                    create.name
                ))),
            );
        }
        self.catalog.check_name_free(&create.name)?;
        // A view whose query does not plan now has no key to offer.
        let view_key = self.view_key(&create.view).await.ok().flatten();
        let (definition, snapshot) = self.sink_definition(create, view_key)?;
        check_options(&definition)?;
        self.record_format(&definition)?;
        let starting = definition.clone();
        let position = tokio::task::spawn_blocking(move || open_writer(&starting)?.start())
            .await
            .map_err(|_| WeirError::internal("checking the sink's destination failed"))??;
        let mark = SinkMark {
            shipped: 0,
            position,
        };
        let entry = SinkEntry {
            outbox: Arc::new(Outbox::open(&**self.catalog.store(), definition.id)?),
            definition,
        };
        {
            // No view commit between the snapshot and the attachment.
            let _flow = self.dataflow.lock();
            let mut writes = WriteBatch::new();
            if snapshot {
                writes = snapshot_writes(&self.catalog, &entry)?;
            }
            writes.put(sink_mark_key(entry.definition.id), encode_mark(&mark)?);
            self.catalog.create_sink(entry.clone(), writes)?;
        }
        self.start_sink(entry);
        Ok(CommandDone::new("CREATE SINK"))
    }

    /// The definition CREATE SINK describes, and whether it starts with a
    /// snapshot; fails on a view, format or key that cannot work.
    fn sink_definition(
        &self,
        create: &CreateSink,
        view_key: Option<Vec<String>>,
    ) -> Result<(SinkDefinition, bool)> {
        let view = &create.view;
        let result = self.catalog.view_result(view);
        let Some(result) = result else {
            return Err(match self.catalog.get(view) {
                Some(definition) => WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!(
                        "\"{view}\" is a {}, not a materialized view",
                        definition.kind.noun()
                    ),
                )
                .with_hint(format!(
                    "Create a materialized view of {view} and sink that."
                )),
                None => WeirError::undefined_table(view),
            });
        };
        let mut options: BTreeMap<String, String> = create.options.iter().cloned().collect();
        let connector = options.remove("connector").ok_or_else(|| {
            WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "a sink needs a connector",
            )
            .with_hint("Add WITH (connector = 'file' | 'kafka', ...).")
        })?;
        let snapshot = match options.remove("snapshot").as_deref() {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("snapshot = '{other}' is not valid"),
                )
                .with_hint("Use 'true' (ship the view's rows first) or 'false'."))
            }
        };
        let mut shape = take_shape(
            &mut options,
            create.format.as_deref(),
            create.encode.as_deref(),
        )?;
        if shape.key_columns.is_empty() && shape.format == SinkFormat::Upsert {
            shape.key_columns = view_key.unwrap_or_default();
        }
        let schema = result.schema();
        match shape.format {
            SinkFormat::Upsert if shape.key_columns.is_empty() => {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                    "{view} has no key weir can tell: a FORMAT UPSERT sink of it needs primary_key"
                ),
                )
                .with_hint(format!(
                    "Name the columns that identify a row: primary_key = '…' (of {}).",
                    column_names(&schema)
                )))
            }
            SinkFormat::Plain if result.layout().retracts() && !shape.force_append_only => {
                return Err(WeirError::new(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    format!("{view} updates and deletes rows; FORMAT PLAIN writes insertions only"),
                )
                .with_hint(
                    "Use FORMAT UPSERT ENCODE JSON with primary_key = '…', or \
                     force_append_only = 'true' to write insertions and leave out the rest.",
                ))
            }
            _ => {}
        }
        let definition = SinkDefinition {
            id: self.catalog.allocate_sink_id()?,
            name: create.name.clone(),
            view: view.clone(),
            sql: create.text.clone(),
            connector: connector.to_ascii_lowercase(),
            options,
            format: shape.format,
            key_columns: shape.key_columns,
            force_append_only: shape.force_append_only,
        };
        Ok((definition, snapshot))
    }

    /// The columns that identify a row of materialized view `view`, as
    /// DataFusion's functional dependencies of its query tell (the GROUP BY
    /// columns of an aggregate); None when they determine none.
    async fn view_key(&self, view: &str) -> Result<Option<Vec<String>>> {
        let definition = self.catalog.get(view);
        let Some(definition) = definition.filter(|d| d.kind == RelationKind::MaterializedView)
        else {
            return Ok(None);
        };
        let Some(crate::sql::Statement::CreateMaterializedView(parsed)) =
            crate::sql::parse(&definition.sql)?.pop()
        else {
            return Ok(None);
        };
        let ast::Statement::CreateView(create) = &parsed.statement else {
            return Ok(None);
        };
        let state = super::materialized::planning_state(self.state(), definition.sql_edition);
        let mut query = ast::Statement::Query(create.query.clone());
        crate::sql::using_joins::rewrite(&mut query, &state).await?;
        let plan = state
            .statement_to_plan(DataFusionStatement::Statement(Box::new(query)))
            .await?;
        let plan = crate::sql::literal_types::postgres_types(plan, state.config_options())?;
        let columns = plan.schema().fields().len();
        let determines_all = |dependence: &&FunctionalDependence| {
            let mut targets = dependence.target_indices.clone();
            targets.sort_unstable();
            targets.dedup();
            dependence.mode == Dependency::Single
                && !dependence.source_indices.is_empty()
                && targets.len() == columns
        };
        let key = plan
            .schema()
            .functional_dependencies()
            .iter()
            .filter(determines_all)
            .min_by_key(|dependence| dependence.source_indices.len())
            .map(|dependence| dependence.source_indices.clone());
        let schema = match self.catalog.view_result(view) {
            Some(result) if result.schema().fields().len() == columns => result.schema(),
            _ => return Ok(None),
        };
        Ok(key.map(|indices| {
            indices
                .iter()
                .map(|&i| schema.field(i).name().clone())
                .collect()
        }))
    }

    /// DROP SINK: stops its shipper, then drops it and its outbox.
    pub async fn drop_sink(&self, name: &str, if_exists: bool) -> Result<CommandDone> {
        let done = CommandDone::new("DROP SINK");
        if self.catalog.sink(name).is_none() && if_exists {
            return Ok(done.with_notice(Notice::info(&format!(
                "sink \"{name}\" does not exist, skipping"
            ))));
        }
        self.stop_sink(name).await;
        let dropped = {
            let _flow = self.dataflow.lock();
            self.catalog.drop_sink(name)
        };
        if let Err(error) = dropped {
            // Still there: it ships on.
            if let Some(entry) = self.catalog.sink(name) {
                self.start_sink(entry);
            }
            return Err(error);
        }
        Ok(done)
    }

    /// SHOW CREATE SINK: the statement as written.
    pub fn show_create_sink(&self, name: &str) -> Result<String> {
        self.catalog
            .sink(name)
            .map(|entry| entry.definition.sql)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("sink \"{name}\" does not exist"),
                )
            })
    }
}

fn column_names(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    names.join(", ")
}

fn encode_mark(mark: &SinkMark) -> Result<Vec<u8>> {
    serde_json::to_vec(mark)
        .map_err(|error| WeirError::internal(format!("cannot encode a sink mark: {error}")))
}

/// The view's committed rows as the outbox's first sequence.
fn snapshot_writes(catalog: &Relations, entry: &SinkEntry) -> Result<WriteBatch> {
    let result = catalog
        .view_result(&entry.definition.view)
        .ok_or_else(|| WeirError::undefined_table(&entry.definition.view))?;
    let mut writes = WriteBatch::new();
    for batch in result.rows(None)?.read()? {
        writes.extend(entry.outbox.stage(&Chunk::inserts(batch?))?);
    }
    Ok(writes)
}

/// `weir_catalog.sinks`: each sink, its view and connector, what its
/// shipper is doing, the changes committed and shipped, records written
/// since the server started, and errors.
pub fn sinks_table(runs: &Arc<SinkRuns>, relations: &Arc<Relations>) -> ComputedTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("sink_name", DataType::Utf8, false),
        Field::new("view_name", DataType::Utf8, false),
        Field::new("connector", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("committed", DataType::Int64, false),
        Field::new("shipped", DataType::Int64, false),
        Field::new("records", DataType::Int64, false),
        Field::new("errors", DataType::Int64, false),
        Field::new("last_error", DataType::Utf8, true),
    ]));
    let runs = Arc::downgrade(runs);
    let relations = Arc::downgrade(relations);
    ComputedTable::new(schema, move |schema| {
        let (Some(runs), Some(relations)) = (runs.upgrade(), relations.upgrade()) else {
            return Ok(RecordBatch::new_empty(schema.clone()));
        };
        let runs = lock(&runs.runs);
        let entries = relations.sinks();
        let rows: Vec<(&SinkEntry, SinkStatus)> = entries
            .iter()
            .map(|entry| {
                let status = runs.get(&entry.definition.name).map_or_else(
                    || SinkStatus {
                        state: "stopped",
                        ..SinkStatus::default()
                    },
                    |run| lock(&run.status).clone(),
                );
                (entry, status)
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.definition.name.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.definition.view.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.definition.connector.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.1.state),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.0.outbox.committed() as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.1.shipped as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.1.records as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.1.errors as i64),
            )),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.1.last_error.clone()),
            )),
        ];
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })
}
