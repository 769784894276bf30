//! The database a server serves: the state store, the catalog and the shared
//! DataFusion context. Opening an engine recovers every stored relation.

mod backfill;
pub mod checkpoint;
mod clock;
pub mod connections;
mod ddl;
mod firing;
mod grants;
mod index_ddl;
mod information_schema;
mod materialized;
mod output_limits;
pub mod pg_catalog;
pub mod privileges;
pub mod relations;
mod replay;
pub mod roles;
mod schema_ddl;
mod sinks;
mod sources;
pub mod sql_types;
mod system_settings;
pub mod system_tables;
mod watermark;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DataFusionStatement;
use datafusion::sql::sqlparser::ast;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::setup_pg_catalog;

use crate::catalog::{DATABASE_NAME, SCHEMA_NAME};
use crate::engine::pg_catalog::PgCatalogSchema;
use crate::engine::system_tables::{
    MaterializedViewsTable, TablesTable, WatermarksTable, SYSTEM_SCHEMA_NAME,
};
use crate::error::{Result, WeirError};
use crate::sql;
use crate::sql::streaming::window_function::{WindowFunction, WINDOW_FUNCTION_NAME};
use crate::state::{SledStore, StateStore};
use crate::stream::append_observer::AppendObserver;
use crate::stream::dataflow::SharedDataflow;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use relations::Relations;

pub use ddl::{CommandDone, Notice};

pub struct Engine {
    context: SessionContext,
    catalog: Arc<Relations>,
    data_directory: PathBuf,
    dataflow: SharedDataflow,
    view_streams: Arc<materialized::ViewStreams>,
    checkpoints: Arc<checkpoint::CheckpointHistory>,
    /// One checkpoint at a time, taken before the dataflow lock: a second
    /// one waits here, not holding the dataflow lock while the first is
    /// written (which would stop writers).
    checkpoint_running: std::sync::Mutex<()>,
    system_settings: system_settings::SystemSettings,
    /// Held by every statement that changes the catalog (CREATE, DROP), so
    /// concurrent DDL runs one statement at a time: a new view's backfill
    /// never races a DROP of what it reads or a CREATE of the same name.
    catalog_changes: tokio::sync::Mutex<()>,
    connections: connections::ConnectionCounts,
    /// The connectors feeding sources.
    sources: Arc<sources::SourceRuns>,
    /// The shippers of sinks.
    sinks: Arc<sinks::SinkRuns>,
    roles: Arc<roles::Roles>,
    privileges: Arc<privileges::Privileges>,
    /// When `EMIT EVERY` views fire.
    firings: firing::FiringSchedules,
    /// The relations' names by pg_class oid, as the catalog last answered.
    oid_names: pg_catalog::OidNames,
}

impl Engine {
    /// Opens (or creates) the database in `data_directory` and recovers it.
    pub async fn open(data_directory: &Path) -> Result<Arc<Engine>> {
        Engine::open_with_cache(data_directory, crate::state::DEFAULT_CACHE_BYTES).await
    }

    /// Opens `data_directory` as a new process would, once an engine of
    /// this process that used it has been dropped: sled 0.34 may hold its
    /// lock file a moment after its last handle goes, until its I/O threads
    /// finish (spacejam/sled#1234), and refuses the open until then.
    /// Retries while the store is locked, up to `timeout`; returns the
    /// engine and how long the open that succeeded took.
    pub async fn reopen(
        data_directory: &Path,
        timeout: std::time::Duration,
    ) -> Result<(Arc<Engine>, std::time::Duration)> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let started = std::time::Instant::now();
            match Engine::open(data_directory).await {
                Ok(engine) => return Ok((engine, started.elapsed())),
                Err(error)
                    if error.message.contains(crate::state::LOCKED_MESSAGE)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Like `open`, with the state store's page cache at `cache_bytes`.
    pub async fn open_with_cache(data_directory: &Path, cache_bytes: u64) -> Result<Arc<Engine>> {
        std::fs::create_dir_all(data_directory).map_err(|error| {
            WeirError::io(format!(
                "cannot create the data directory {}: {error}",
                data_directory.display()
            ))
        })?;
        let store: Arc<dyn StateStore> = Arc::new(SledStore::open_with_cache(
            &data_directory.join("state"),
            cache_bytes,
        )?);
        let context = new_context()?;
        let schema = context
            .catalog(DATABASE_NAME)
            .and_then(|catalog| catalog.schema(SCHEMA_NAME))
            .ok_or_else(|| WeirError::internal("the default schema is missing"))?;
        context.register_udtf(
            WINDOW_FUNCTION_NAME,
            Arc::new(WindowFunction::new(schema.clone())),
        );
        let dataflow = SharedDataflow::new(store.clone());
        let observer: Arc<dyn AppendObserver> = Arc::new(dataflow.clone());
        let roles = Arc::new(roles::Roles::open(store.clone())?);
        let privileges = Arc::new(privileges::Privileges::open(store.clone())?);
        let database = context
            .catalog(DATABASE_NAME)
            .ok_or_else(|| WeirError::internal("the database catalog is missing"))?;
        let catalog = Arc::new(Relations::open(store, database, Some(observer))?);
        let checkpoints = Arc::new(checkpoint::CheckpointHistory::default());
        let sources = Arc::new(sources::SourceRuns::default());
        let sinks = Arc::new(sinks::SinkRuns::default());
        let access = pg_catalog::Access {
            roles: roles.clone(),
            privileges: privileges.clone(),
        };
        let oid_names = pg_catalog::OidNames::default();
        register_system_tables(
            &context,
            &catalog,
            &checkpoints,
            &sources,
            access,
            &oid_names,
        )?;
        register_sinks_table(&context, &catalog, &sinks)?;
        information_schema::register(&context, DATABASE_NAME).await?;
        let engine = Engine {
            context,
            catalog,
            data_directory: data_directory.to_path_buf(),
            dataflow,
            view_streams: Default::default(),
            checkpoints,
            checkpoint_running: Default::default(),
            system_settings: Default::default(),
            catalog_changes: tokio::sync::Mutex::new(()),
            connections: connections::ConnectionCounts::default(),
            sources,
            sinks,
            roles,
            privileges,
            firings: Default::default(),
            oid_names,
        };
        engine.load_system_settings()?;
        engine.recover().await?;
        Ok(Arc::new(engine))
    }

    /// Waits for other catalog changes to finish; hold the guard for the
    /// whole DDL statement.
    pub async fn lock_catalog(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.catalog_changes.lock().await
    }

    /// Client connections, as the front end reports them.
    pub fn connections(&self) -> &connections::ConnectionCounts {
        &self.connections
    }

    /// The roles logins and privilege checks read.
    pub fn roles(&self) -> &Arc<roles::Roles> {
        &self.roles
    }

    /// Owners and grants of relations.
    pub fn privileges(&self) -> &privileges::Privileges {
        &self.privileges
    }

    /// Relation names by pg_class oid (system ones `pg_catalog.`-prefixed).
    pub fn oid_names(&self) -> &pg_catalog::OidNames {
        &self.oid_names
    }

    pub fn relations(&self) -> &Relations {
        &self.catalog
    }

    pub fn data_directory(&self) -> &Path {
        &self.data_directory
    }

    /// A snapshot of the shared planning state; sessions layer their own
    /// settings on top of it.
    pub fn state(&self) -> SessionState {
        self.context.state()
    }

    /// Plans a standard statement with DataFusion.
    pub async fn plan(
        &self,
        state: &SessionState,
        statement: &ast::Statement,
    ) -> Result<LogicalPlan> {
        let mut statement = statement.clone();
        sql::using_joins::rewrite(&mut statement, state).await?;
        let statement = DataFusionStatement::Statement(Box::new(statement));
        let plan = state.statement_to_plan(statement).await?;
        // Literal types and explicit text casts are already in the plan;
        // corrected here too, as clients are told the result types of this
        // plan at Describe.
        let plan = sql::literal_types::postgres_types(plan, state.config_options())?;
        Ok(sql::text_casts::TextCastRule.analyze(plan, state.config_options())?)
    }

    /// Re-plans every stored definition, in creation order.
    async fn recover(&self) -> Result<()> {
        let state = self.state();
        for definition in self.catalog.definitions() {
            let statement = match sql::parse(&definition.sql)?.pop() {
                Some(sql::Statement::Standard(statement)) => statement,
                Some(sql::Statement::CreateTable { statement, .. }) => statement,
                Some(sql::Statement::CreateMaterializedView(view)) => {
                    let name = definition.name.clone();
                    if let Err(error) = self.restore_materialized_view(definition, &view).await {
                        // The others start; this one (and views reading
                        // it, which fail the same way) shows as failed.
                        tracing::error!(view = %name, %error.message, "a materialized view no longer plans; the others serve (DROP it and create it again)");
                        self.catalog
                            .register_unplanned_view(&name, &error.message)?;
                    }
                    continue;
                }
                Some(
                    sql::Statement::Flush
                    | sql::Statement::AlterSystem { .. }
                    | sql::Statement::AlterRetention(_)
                    | sql::Statement::DropSource { .. }
                    | sql::Statement::Changefeed(_)
                    | sql::Statement::Sink(_)
                    | sql::Statement::Role(_)
                    | sql::Statement::Privilege(_),
                )
                | None => {
                    return Err(WeirError::internal(format!(
                        "stored definition of {} is not a CREATE statement",
                        definition.name
                    )))
                }
            };
            let plan = self.plan(&state, &statement).await.map_err(|error| {
                WeirError::internal(format!(
                    "cannot restore {} {}: {}",
                    definition.kind.noun(),
                    definition.name,
                    error.message
                ))
            })?;
            self.restore(definition, plan)?;
        }
        self.recover_views()?;
        let relations = self.catalog.definitions().len();
        tracing::info!(relations, "catalog recovered");
        Ok(())
    }
}

impl Drop for Engine {
    /// datafusion-pg-catalog's schema holds the catalog list that holds it;
    /// breaking that cycle lets the tables, and the state store's file lock,
    /// go when the engine does (an engine reopened in the same process).
    fn drop(&mut self) {
        if let Some(database) = self.context.catalog(DATABASE_NAME) {
            let _ = database.deregister_schema("pg_catalog", true);
            // Its views' plans hold pg_catalog's tables.
            let _ = database.deregister_schema(information_schema::SCHEMA_NAME, true);
        }
    }
}

fn register_system_tables(
    context: &SessionContext,
    catalog: &Arc<Relations>,
    checkpoints: &Arc<checkpoint::CheckpointHistory>,
    sources: &Arc<sources::SourceRuns>,
    access: pg_catalog::Access,
    names: &pg_catalog::OidNames,
) -> Result<()> {
    let system = Arc::new(MemorySchemaProvider::new());
    system.register_table(
        "sources".to_string(),
        Arc::new(sources::sources_table(sources, catalog)),
    )?;
    for (name, table) in checkpoint::system_tables(checkpoints) {
        system.register_table(name.to_string(), Arc::new(table))?;
    }
    system.register_table(
        "watermarks".to_string(),
        Arc::new(WatermarksTable::table(catalog)),
    )?;
    system.register_table("tables".to_string(), Arc::new(TablesTable::table(catalog)))?;
    system.register_table(
        "materialized_views".to_string(),
        Arc::new(MaterializedViewsTable::table(catalog)),
    )?;
    let database = context
        .catalog(DATABASE_NAME)
        .ok_or_else(|| WeirError::internal("the database catalog is missing"))?;
    database.register_schema(SYSTEM_SCHEMA_NAME, system)?;
    for function in pg_catalog::key_definition_functions(catalog) {
        context.register_udf(function);
    }
    context.register_udf(pg_catalog::view_definition_function(catalog, names));
    for function in pg_catalog::null_functions() {
        context.register_udf(function);
    }
    context.register_udf(pg_catalog::expression_text_function());
    context.register_udf(pg_catalog::table_is_visible_function(names, catalog));
    for function in pg_catalog::size_functions(catalog, names) {
        context.register_udf(function);
    }
    for function in pg_catalog::always_visible_functions() {
        context.register_udf(function);
    }
    if let Some(pg_catalog) = database.schema("pg_catalog") {
        database.register_schema(
            "pg_catalog",
            Arc::new(PgCatalogSchema::new(pg_catalog, catalog, names, access)),
        )?;
    }
    Ok(())
}

fn register_sinks_table(
    context: &SessionContext,
    catalog: &Arc<Relations>,
    sinks: &Arc<sinks::SinkRuns>,
) -> Result<()> {
    let system = context
        .catalog(DATABASE_NAME)
        .and_then(|database| database.schema(SYSTEM_SCHEMA_NAME))
        .ok_or_else(|| WeirError::internal("the system schema is missing"))?;
    system.register_table(
        "sinks".to_string(),
        Arc::new(sinks::sinks_table(sinks, catalog)),
    )?;
    Ok(())
}

fn new_context() -> Result<SessionContext> {
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(DATABASE_NAME, SCHEMA_NAME)
        .with_create_default_catalog_and_schema(true)
        // Ours, in Postgres's shape: engine::information_schema.
        .with_information_schema(false)
        .with_option_extension(sql::edition::Edition::new(crate::catalog::SQL_EDITION));
    config.options_mut().sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    // TIMESTAMPTZ columns and now() are UTC unless a session sets TimeZone.
    config.options_mut().execution.time_zone = Some("+00:00".to_string());
    // `0.1` is a numeric, as in Postgres, not a double (sql::literal_types).
    config.options_mut().sql_parser.parse_float_as_decimal = true;
    // DataFusion's physical planner refuses an aggregate whose input's
    // nullability differs from the logical plan's, which a text cast of a
    // NOT NULL catalog column under a semi join makes it do (psql's `\dd`
    // failed with "Physical input schema should be the same"). Nullability
    // is a promise, not a layout: the rows are the same either way.
    config
        .options_mut()
        .execution
        .skip_physical_aggregate_schema_check = true;
    let mut context = SessionContext::new_with_config(config);
    // DataFusion's rewrite of `count(DISTINCT a), sum(b)` into two
    // aggregations sums the partial sums into a wider decimal than the
    // plan's schema says, and a HAVING on that sum failed at run time
    // ("Invalid comparison operation: Decimal128(30, 2) > Decimal128(20, 2)",
    // found by tests/postgres_differential.rs).
    context.remove_optimizer_rule("single_distinct_aggregation_to_group_by");
    // RisingWave's and Flink's name for DataFusion's HyperLogLog aggregate.
    let approx = datafusion::functions_aggregate::approx_distinct::approx_distinct_udaf();
    context.register_udaf(
        approx
            .as_ref()
            .clone()
            .with_aliases(["approx_count_distinct"]),
    );
    context.register_udf(proctime_function());
    // Window starts in queries: date_bin, failing where it gives NULL.
    context.register_udf(sql::windows::grid_floor::GridFloor::udf());
    // Postgres's arithmetic: integer overflow is an error, sum(bigint) is
    // numeric (sql::checked_arithmetic, sql::numeric_sum).
    context.add_analyzer_rule(Arc::new(
        sql::checked_arithmetic::CheckedArithmeticRule::default(),
    ));
    context.register_udaf(sql::numeric_sum::NumericSum::udaf());
    context.register_udf(sql::age::function());
    context.register_udf(sql::chr::function());
    context.register_udf(sql::pg_typeof::function());
    context.register_udf(sql::single_row_subquery::function());
    context.register_udf(sql::to_char_pattern::template_function());
    for function in sql::justify::functions() {
        context.register_udf(function);
    }
    // to_timestamp(1e20) is 22008, not 2262 (sql::to_timestamp).
    if let Some(inner) = context
        .state()
        .scalar_functions()
        .get("to_timestamp")
        .cloned()
    {
        context.register_udf(sql::to_timestamp::function(inner));
    }
    // length(5) is 42883, as in Postgres (sql::text_arguments).
    for function in sql::text_arguments::functions() {
        context.register_udf(function);
    }
    // Timestamps written to the minute (sql::timestamp_text).
    context.add_analyzer_rule(Arc::new(sql::timestamp_text::TimestampTextRule::default()));
    // Coercion casts on integer literals folded into them (sql::literal_types).
    context.add_analyzer_rule(Arc::new(sql::literal_types::LiteralCastRule));
    // Text to bytea in Postgres's hex and escape formats (sql::bytea_input).
    context.add_analyzer_rule(Arc::new(sql::bytea_input::ByteaInputRule::default()));
    // Casts to text where Postgres and Arrow differ (sql::text_casts).
    context.add_analyzer_rule(Arc::new(sql::text_casts::TextCastRule));
    // Correlated subqueries DataFusion cannot decorrelate run per outer
    // row, as Postgres runs them (sql::per_row_subqueries).
    context.add_optimizer_rule(Arc::new(sql::per_row_subqueries::PerRowSubqueryRule));
    // Numerics and doubles round to integers, as in Postgres (sql::integer_casts).
    context.add_analyzer_rule(Arc::new(sql::integer_casts::IntegerCastRule));
    // interval * number and interval / number, planned before coercion.
    datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut context,
        Arc::new(sql::interval_arithmetic::IntervalArithmeticPlanner::default()),
    )?;
    // timestamp - timestamp is an interval, as in Postgres (SQL edition 4).
    datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut context,
        Arc::new(sql::timestamp_difference::TimestampDifferencePlanner::default()),
    )?;
    // boolean = 'f', the literal read as a boolean before coercion.
    datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut context,
        Arc::new(sql::boolean_text::BooleanTextPlanner),
    )?;
    setup_pg_catalog(&context, DATABASE_NAME, EmptyContextProvider)
        .map_err(|error| WeirError::internal(format!("cannot set up pg_catalog: {error}")))?;
    context.register_udf(sql::version::version_function());
    context.register_udf(sql::like_escape::pattern_function());
    context.register_udf(sql::json_build_object::function());
    context.register_udf(sql::format_function::function());
    // Last, so it wraps whichever implementation is registered.
    output_limits::limit_function_outputs(&context)?;
    Ok(context)
}

/// `PROCTIME()` in a query: the wall clock (UTC) when it runs, as Flink's
/// PROCTIME() reads in a SELECT. In a window of a materialized view it names
/// the input's PROCTIME() column instead (sql::windows).
fn proctime_function() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
    create_udf(
        "proctime",
        vec![],
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        Volatility::Volatile,
        Arc::new(|_| {
            let now = crate::connectors::table::unix_now_ns();
            Ok(ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(
                Some(now),
                None,
            )))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_engine_releases_its_data_directory() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path()).await.unwrap();
        let session = crate::session::Session::new(engine.clone());
        for sql in [
            "CREATE TABLE t (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts) APPEND ONLY",
            "CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n FROM t GROUP BY k",
            "INSERT INTO t VALUES (1, '2026-01-01 00:00:00')",
        ] {
            let statement = session.parse(sql).unwrap().remove(0);
            let prepared = session.prepare(statement).await.unwrap();
            session.execute(&prepared, None).await.unwrap();
        }
        engine.checkpoint().unwrap();
        drop(session);
        drop(engine);
        let timeout = std::time::Duration::from_secs(30);
        let (reopened, _) = Engine::reopen(directory.path(), timeout).await.unwrap();
        assert_eq!(
            reopened.relations().view_result("v").unwrap().row_count(),
            1
        );
    }

    /// A checkpoint writes its batch holding only the checkpoint-commit
    /// lock (`lock_commits`), not the dataflow lock: held here as a commit
    /// that never ends, writes into the views' tables still complete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)] // the point: a commit in progress
    async fn writes_complete_while_a_checkpoint_is_being_written() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path()).await.unwrap();
        let session = crate::session::Session::new(engine.clone());
        let run = |sql: &'static str| {
            let session = &session;
            async move {
                let statement = session.parse(sql).unwrap().remove(0);
                let prepared = session.prepare(statement).await.unwrap();
                session.execute(&prepared, None).await.unwrap();
            }
        };
        run("CREATE TABLE t (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts) APPEND ONLY").await;
        run("CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n FROM t GROUP BY k").await;
        let writing = engine.dataflow.lock_commits();
        let insert =
            run("INSERT INTO t VALUES (1, '2026-01-01 00:00:00'), (2, '2026-01-01 00:00:01')");
        tokio::time::timeout(std::time::Duration::from_secs(20), insert)
            .await
            .expect("the INSERT waited for the checkpoint being written");
        drop(writing);
        assert_eq!(engine.relations().view_result("v").unwrap().row_count(), 2);
        assert!(engine.checkpoint().unwrap().is_some());
    }
}
