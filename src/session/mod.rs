//! A client session: per-connection settings and transaction state, and the
//! two steps every statement takes, `prepare` (parse-time: plan, parameter
//! and result types) and `execute` (with bound parameters). The server turns
//! `Outcome`s into protocol messages; nothing here knows about pgwire.

mod authorization;
mod changefeed;
mod copy;
mod copy_out;
mod current_setting;
mod current_user;
mod insert_template;
mod insert_values;
mod modify;
mod named_statements;
mod parameters;
mod planning;
mod privilege_functions;
mod results;
mod run_utility;
mod schemas;
mod search_path;
mod settings;
mod subscribe;
mod transaction;
mod upsert;
mod utility;
mod writes;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::execute_stream;
use datafusion::sql::sqlparser::ast;

use crate::connectors::pg_copy::CopyOptions;
pub use crate::connectors::table::CommitGate;
use crate::connectors::table::{PendingWrites, TableLog};
use crate::engine::{CommandDone, Engine};
use crate::error::{Result, WeirError};
use crate::sql;
pub use crate::sql::units::{parse_memory_size, parse_milliseconds};
pub use changefeed::CopySubscription;
pub use copy::CopyInProgress;
pub use copy_out::CopyOut;
pub use parameters::bound_type;
use planning::{PlanningCache, Purpose};
pub use settings::{Reported, Settings, SERVER_VERSION};
use transaction::TransactionBlock;
pub use transaction::TransactionStatus;
pub use utility::Utility;

pub struct Session {
    engine: Arc<Engine>,
    /// Shared with `current_setting()` in the planning state.
    settings: Arc<Mutex<Settings>>,
    transaction: Mutex<TransactionBlock>,
    /// Decides whether the running statement's write commits or is
    /// cancelled (cancel requests, statement_timeout).
    gate: Arc<CommitGate>,
    /// The rows written in a transaction block, applied at COMMIT.
    pending: Arc<PendingWrites>,
    planning: Mutex<PlanningCache>,
    /// The name the client logged in with (`current_user`).
    user: OnceLock<String>,
    /// Whether the login was trusted without a password: a name that is
    /// not a role then acts as a superuser (`crate::server` decides).
    trusted: OnceLock<bool>,
    /// Open subscription cursors (DECLARE … CURSOR FOR SUBSCRIBE).
    cursors: changefeed::Cursors,
    /// SQL-level PREPAREd statements.
    named: named_statements::NamedStatements,
}

/// A statement ready to execute, possibly many times with new parameters.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement's SQL text (recorded for CREATE statements).
    pub sql: String,
    pub action: Action,
    /// Types of `$1..$n`, as far as planning could infer them (see
    /// `bound_type` for the rest).
    pub parameter_types: Vec<Option<DataType>>,
    pub result_schema: SchemaRef,
    /// WATERMARK / APPEND ONLY of a CREATE TABLE.
    pub stream_options: Option<sql::StreamOptions>,
    /// An INSERT … VALUES with parameters, compiled on first execution.
    insert_template: Arc<insert_template::TemplateCache>,
    /// An INSERT's ON CONFLICT clause (planned without it).
    on_conflict: Option<Arc<ast::OnConflict>>,
}

impl Prepared {
    fn utility(sql: String, utility: Utility) -> Self {
        Prepared {
            sql,
            result_schema: utility.result_schema(),
            action: Action::Utility(utility),
            parameter_types: Vec::new(),
            stream_options: None,
            insert_template: Default::default(),
            on_conflict: None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    Plan(Box<LogicalPlan>),
    Utility(Utility),
    /// `[EXPLAIN] CREATE MATERIALIZED VIEW`, planned when executed.
    MaterializedView(Box<sql::MaterializedView>),
    /// DECLARE … CURSOR FOR SUBSCRIBE, FETCH, CLOSE, COPY (SUBSCRIBE …).
    Changefeed(sql::subscribe::Changefeed),
}

/// Whether executing `action` creates or drops a relation.
fn changes_catalog(action: &Action) -> bool {
    match action {
        Action::Plan(plan) => matches!(plan.as_ref(), LogicalPlan::Ddl(_)),
        Action::Utility(utility) => matches!(
            utility,
            Utility::DropMaterializedView { .. }
                | Utility::DropIndex { .. }
                | Utility::DropSource { .. }
                | Utility::AlterRetention(_)
                | Utility::Sink(
                    sql::sink_ddl::SinkStatement::Create(_)
                        | sql::sink_ddl::SinkStatement::Drop { .. }
                )
        ),
        Action::MaterializedView(view) => !view.explain,
        Action::Changefeed(_) => false,
    }
}

pub enum Outcome {
    Rows(SendableRecordBatchStream),
    Done(CommandDone),
    TransactionStart(CommandDone),
    TransactionEnd(CommandDone),
    /// A SET that clients must be told about with ParameterStatus.
    Set(CommandDone, Option<Reported>),
    CopyIn(CopyIn),
    /// COPY … TO STDOUT: the lines to send.
    CopyOut(copy_out::CopyOut),
    /// COPY (SUBSCRIBE …) TO STDOUT: rows to send as they come, until the
    /// client cancels.
    CopySubscribe(changefeed::CopySubscription),
    /// DEALLOCATE: the server forgets the named prepared statement (None:
    /// all of them).
    Deallocate(Option<String>, CommandDone),
}

/// A COPY FROM STDIN waiting for its data.
#[derive(Debug, Clone)]
pub struct CopyIn {
    table: Arc<TableLog>,
    /// The columns the data holds, in order.
    pub columns: SchemaRef,
    options: CopyOptions,
}

impl Session {
    pub fn new(engine: Arc<Engine>) -> Self {
        Session {
            engine,
            settings: Arc::new(Mutex::new(Settings::default())),
            transaction: Mutex::new(TransactionBlock::default()),
            gate: Arc::new(CommitGate::default()),
            pending: Arc::new(PendingWrites::default()),
            planning: Mutex::new(PlanningCache::default()),
            user: OnceLock::new(),
            trusted: OnceLock::new(),
            cursors: changefeed::Cursors::default(),
            named: Default::default(),
        }
    }

    /// Records who logged in: the startup message's user name, and
    /// whether the server trusted it without a password. The first stays.
    pub fn set_login(&self, user: &str, trusted: bool) {
        let _ = self.user.set(user.to_string());
        let _ = self.trusted.set(trusted);
    }

    /// Who runs this session's statements. A session without a login
    /// (in-process) acts as the bootstrap superuser.
    pub fn actor(&self) -> crate::engine::roles::Actor {
        let name = self.user().to_string();
        let superuser = match self.engine.roles().get(&name) {
            Some(role) => role.superuser,
            None => self.trusted.get().copied().unwrap_or(true),
        };
        let password_encryption = self.settings().password_encryption();
        crate::engine::roles::Actor {
            name,
            superuser,
            password_encryption,
        }
    }

    fn user(&self) -> &str {
        self.user
            .get()
            .map_or(current_user::DEFAULT_USER, String::as_str)
    }

    /// Where cancel requests for this session go first: a write that has
    /// started committing is not cancelled.
    pub fn commit_gate(&self) -> Arc<CommitGate> {
        self.gate.clone()
    }

    /// What the planning state's writes and functions reach back to.
    fn handles(&self) -> planning::SessionHandles<'_> {
        planning::SessionHandles {
            gate: &self.gate,
            pending: &self.pending,
            settings: &self.settings,
            user: self.user(),
        }
    }

    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn transaction(&self) -> MutexGuard<'_, TransactionBlock> {
        self.transaction
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The shared planning state with this session's settings on top, for
    /// a statement starting now.
    fn state(&self) -> Result<Arc<SessionState>> {
        Ok(self.planning(Purpose::Queries)?.0)
    }

    /// The planning state for a statement starting now, and the task
    /// context to run its plans with.
    fn planning(&self, purpose: Purpose) -> Result<(Arc<SessionState>, Arc<TaskContext>)> {
        let settings = self.settings().clone();
        self.planning_cache()
            .get(purpose, &self.engine, &settings, self.handles())
    }

    fn planning_cache(&self) -> MutexGuard<'_, PlanningCache> {
        self.planning
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub async fn prepare(&self, statement: sql::Statement) -> Result<Prepared> {
        let prepared = self.prepare_statement(statement).await;
        if prepared.is_err() {
            self.statement_failed();
        }
        prepared
    }

    async fn prepare_statement(&self, statement: sql::Statement) -> Result<Prepared> {
        let statement = self.on_search_path(statement)?;
        let (statement, sql, stream_options) = match statement {
            sql::Statement::Flush => {
                return Ok(Prepared::utility("FLUSH".to_string(), Utility::Flush))
            }
            sql::Statement::Standard(statement) => {
                let text = statement.to_string();
                (statement, text, None)
            }
            sql::Statement::CreateTable {
                statement,
                text,
                options,
            } => (statement, text, Some(options)),
            sql::Statement::AlterRetention(alter) => {
                return Ok(Prepared::utility(
                    "ALTER TABLE".to_string(),
                    Utility::AlterRetention(alter),
                ))
            }
            sql::Statement::AlterSystem { name, value } => {
                return Ok(Prepared::utility(
                    "ALTER SYSTEM".to_string(),
                    Utility::AlterSystem { name, value },
                ))
            }
            sql::Statement::Changefeed(changefeed) => {
                return self.prepare_changefeed(changefeed).await
            }
            sql::Statement::Sink(statement) => {
                let tag = match &statement {
                    sql::sink_ddl::SinkStatement::Create(_) => "CREATE SINK",
                    sql::sink_ddl::SinkStatement::Drop { .. } => "DROP SINK",
                    sql::sink_ddl::SinkStatement::ShowCreate { .. } => "SHOW",
                };
                return Ok(Prepared::utility(tag.to_string(), Utility::Sink(statement)));
            }
            sql::Statement::Role(statement) => {
                let tag = statement.tag().to_string();
                return Ok(Prepared::utility(tag, Utility::Role(statement)));
            }
            sql::Statement::Privilege(statement) => {
                let tag = statement.tag().to_string();
                return Ok(Prepared::utility(tag, Utility::Privilege(statement)));
            }
            sql::Statement::DropSource { names, if_exists } => {
                return Ok(Prepared::utility(
                    "DROP SOURCE".to_string(),
                    Utility::DropSource { names, if_exists },
                ))
            }
            sql::Statement::CreateMaterializedView(view) => {
                let fields = if view.explain {
                    vec![datafusion::arrow::datatypes::Field::new(
                        "QUERY PLAN",
                        DataType::Utf8,
                        false,
                    )]
                } else {
                    Vec::new()
                };
                return Ok(Prepared {
                    sql: view.text.clone(),
                    action: Action::MaterializedView(view),
                    parameter_types: Vec::new(),
                    result_schema: Arc::new(Schema::new(fields)),
                    stream_options: None,
                    insert_template: Default::default(),
                    on_conflict: None,
                });
            }
        };
        match statement.as_ref() {
            ast::Statement::Prepare {
                name,
                data_types,
                statement,
            } => return self.prepare_named(sql, name, data_types, statement).await,
            ast::Statement::Execute {
                name: Some(name),
                parameters,
                immediate: false,
                ..
            } => return self.prepare_execute(sql, &name.to_string(), parameters),
            _ => {}
        }
        if let Some(utility) = utility::classify(&statement)? {
            return Ok(Prepared::utility(sql, utility));
        }
        reject_unsupported(&statement)?;
        let (statement, on_conflict) = upsert::without_on_conflict(statement)?;
        let state = self.state()?;
        let plan = self.engine.plan(&state, &statement).await?;
        if let LogicalPlan::Dml(dml) = &plan {
            if let Some(log) = self
                .engine
                .relations()
                .table(&crate::catalog::reference_key(&dml.table_name))
            {
                log.check_writable()?;
            }
        }
        let parameter_types = parameter_types(&plan, &state)?;
        let plan = with_parameter_types(plan, &parameter_types);
        let result_schema = match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_) => {
                Arc::new(Schema::empty())
            }
            other => postgres_column_names(other.schema().as_arrow(), &statement),
        };
        Ok(Prepared {
            sql,
            parameter_types,
            result_schema,
            action: Action::Plan(Box::new(plan)),
            stream_options,
            insert_template: Default::default(),
            on_conflict: on_conflict.map(Arc::new),
        })
    }

    /// Parses and prepares every statement of a simple-protocol query string.
    pub fn parse(&self, sql_text: &str) -> Result<Vec<sql::Statement>> {
        let statements = sql::parse(sql_text);
        if statements.is_err() {
            self.statement_failed();
        }
        statements
    }

    /// Runs a prepared statement; an error aborts an open transaction block.
    pub async fn execute(
        &self,
        prepared: &Prepared,
        parameters: Option<&ParamValues>,
    ) -> Result<Outcome> {
        self.refuse_if_aborted(&prepared.action)?;
        let outcome = self.execute_action(prepared, parameters).await;
        match &outcome {
            Err(_) => self.statement_failed(),
            Ok(Outcome::Done(done)) if changes_catalog(&prepared.action) => self.note_ddl(done),
            Ok(_) => {}
        }
        outcome
    }

    async fn execute_action(
        &self,
        prepared: &Prepared,
        parameters: Option<&ParamValues>,
    ) -> Result<Outcome> {
        let _catalog_lock = match changes_catalog(&prepared.action) {
            true => Some(self.engine.lock_catalog().await),
            false => None,
        };
        self.authorize(prepared)?;
        let created = self.new_relations(prepared);
        let outcome = self.run_action(prepared, parameters).await;
        if outcome.is_ok() {
            self.record_owner(&created)?;
        }
        outcome
    }

    async fn run_action(
        &self,
        prepared: &Prepared,
        parameters: Option<&ParamValues>,
    ) -> Result<Outcome> {
        match &prepared.action {
            Action::Utility(Utility::Commit) => Ok(Outcome::TransactionEnd(self.commit().await?)),
            Action::Utility(Utility::Flush) => {
                // Writes reach every view before they are acknowledged;
                // sources' connectors may have read rows not yet committed.
                self.engine.flush_sources().await;
                Ok(Outcome::Done(CommandDone::new("FLUSH")))
            }
            Action::Utility(Utility::DropSource { names, if_exists }) => {
                let mut done = CommandDone::new("DROP SOURCE");
                for name in names {
                    done = self.engine.drop_source(name, *if_exists).await?;
                }
                Ok(Outcome::Done(done))
            }
            Action::Utility(Utility::Sink(sql::sink_ddl::SinkStatement::Create(create))) => {
                Ok(Outcome::Done(self.engine.create_sink(create).await?))
            }
            Action::Utility(Utility::Sink(sql::sink_ddl::SinkStatement::Drop {
                names,
                if_exists,
            })) => {
                let mut done = CommandDone::new("DROP SINK");
                for name in names {
                    done = self.engine.drop_sink(name, *if_exists).await?;
                }
                Ok(Outcome::Done(done))
            }
            Action::Utility(Utility::Role(statement)) => Ok(Outcome::Done(
                self.engine
                    .execute_role_statement(statement, &self.actor())?,
            )),
            Action::Utility(Utility::Privilege(statement)) => Ok(Outcome::Done(
                self.engine
                    .execute_privilege_statement(statement, &self.actor())?,
            )),
            Action::Utility(Utility::AlterSystem { name, value }) => {
                if !self.actor().superuser {
                    return Err(WeirError::new(
                        crate::error::sqlstate::INSUFFICIENT_PRIVILEGE,
                        format!("permission denied to set parameter \"{name}\""),
                    )
                    .with_hint("ALTER SYSTEM changes every session: only superusers may run it."));
                }
                Ok(Outcome::Done(
                    self.engine.alter_system(name, value.as_deref()).await?,
                ))
            }
            Action::Utility(Utility::CopyTo { query, options }) => {
                self.copy_out(query, options).await
            }
            Action::Utility(Utility::Prepare { name, statement }) => {
                self.keep_named(name, statement)
            }
            Action::Utility(Utility::Execute { name, values }) => {
                self.execute_named(name, values).await
            }
            Action::Utility(utility) => self.execute_utility(utility),
            Action::Changefeed(changefeed) => self.execute_changefeed(changefeed).await,
            Action::MaterializedView(view) => self.execute_materialized_view(view, prepared).await,
            Action::Plan(plan) => {
                let plan = match parameters {
                    _ if prepared.parameter_types.is_empty() => plan.as_ref().clone(),
                    Some(values)
                        if matches!(plan.as_ref(), LogicalPlan::Dml(_))
                            && prepared.on_conflict.is_none() =>
                    {
                        if let Some(done) = self.insert_prepared(prepared, plan, values).await? {
                            return Ok(done);
                        }
                        let values = coerce_parameters(values, &prepared.parameter_types)?;
                        plan.as_ref().clone().replace_params_with_values(&values)?
                    }
                    Some(values) => {
                        let values = coerce_parameters(values, &prepared.parameter_types)?;
                        plan.as_ref().clone().replace_params_with_values(&values)?
                    }
                    None => {
                        refuse_unbound(plan)?;
                        plan.as_ref().clone()
                    }
                };
                self.execute_plan(plan, prepared).await
            }
        }
    }

    async fn execute_plan(&self, plan: LogicalPlan, prepared: &Prepared) -> Result<Outcome> {
        let (state, task) = self.planning(Purpose::Queries)?;
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateCatalogSchema(create)) => {
                Ok(Outcome::Done(self.create_schema(&create, &prepared.sql)?))
            }
            LogicalPlan::Ddl(DdlStatement::CreateIndex(create)) => {
                Ok(Outcome::Done(self.engine.create_index(&create)?))
            }
            LogicalPlan::Ddl(DdlStatement::DropCatalogSchema(drop)) => Ok(Outcome::Done(
                self.engine
                    .drop_schema(drop.name.schema_name(), drop.if_exists, drop.cascade)
                    .await?,
            )),
            LogicalPlan::Ddl(ddl) => Ok(Outcome::Done(
                self.engine
                    .execute_ddl(
                        &state,
                        &ddl,
                        &prepared.sql,
                        prepared.stream_options.as_ref(),
                    )
                    .await?,
            )),
            LogicalPlan::Dml(dml) => {
                self.check_reads(&dml.input)?;
                match &prepared.on_conflict {
                    Some(on_conflict) => self.execute_upsert(dml, on_conflict).await,
                    None => self.execute_dml(dml).await,
                }
            }
            LogicalPlan::Statement(statement) => Err(WeirError::unsupported(format!(
                "{} is not supported",
                statement.name()
            ))
            .with_hint("Use your driver's prepared statements (the extended query protocol).")),
            query => {
                self.check_reads(&query)?;
                let physical = state.create_physical_plan(&query).await?;
                let batches = execute_stream(physical, task)?;
                let batches = with_schema(batches, prepared.result_schema.clone());
                Ok(Outcome::Rows(
                    match self.settings().statement_timeout()? {
                        Some(limit) => with_deadline(batches, limit),
                        None => batches,
                    },
                ))
            }
        }
    }

    async fn execute_materialized_view(
        &self,
        view: &sql::MaterializedView,
        prepared: &Prepared,
    ) -> Result<Outcome> {
        let state = self.state()?;
        if view.explain {
            let lines = self.engine.explain_materialized_view(&state, view).await?;
            return rows(
                prepared.result_schema.clone(),
                lines.into_iter().map(|line| vec![line]).collect(),
            );
        }
        let create = self
            .engine
            .create_materialized_view(&state, view, Some(self.gate.clone()));
        Ok(Outcome::Done(self.within_statement_timeout(create).await?))
    }
}

/// Statements DataFusion would plan but weir cannot honour.
fn reject_unsupported(statement: &ast::Statement) -> Result<()> {
    let (what, hint) = match statement {
        ast::Statement::Truncate { .. } => ("TRUNCATE", "DROP TABLE and CREATE TABLE again."),
        ast::Statement::Execute { .. } => (
            "EXECUTE IMMEDIATE",
            "PREPARE the statement, then EXECUTE it by name.",
        ),
        _ => return Ok(()),
    };
    Err(WeirError::unsupported(format!("{what} is not supported")).with_hint(hint))
}

use parameters::{coerce_parameters, parameter_types, refuse_unbound, with_parameter_types};
use results::{postgres_column_names, rows, with_deadline, with_schema};
