//! CREATE / DROP / EXPLAIN of materialized views, and bringing their
//! pipelines back on start: DataFusion plans the query, `sql::streaming`
//! turns it into stream nodes, the `Dataflow` runs them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::catalog::TableProvider;
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DataFusionStatement;
use datafusion::sql::sqlparser::ast;

use super::backfill::{backfill_and_commit, NewView, NewViewFiring, NewViewInput};
use super::{CommandDone, Engine, Notice};
use crate::catalog::{side_output_name, RelationDefinition, RelationKind};
use crate::connectors::table::{CommitGate, DurableTable};
use crate::connectors::view_result::RowLayout;
use crate::engine::relations::ViewResults;
use crate::error::{Result, WeirError};
use crate::sql::streaming::{self, Sources, StreamInfo, StreamPlan};
use crate::sql::MaterializedView;
use crate::state::WriteBatch;
use crate::stream::checkpoint::view_prefix;
use crate::stream::checkpoint_store::into_current_generation;
use crate::stream::dataflow::ViewPipeline;
use crate::stream::pipeline::{Branch, LateSink};
use crate::stream::LateRows;

/// The change streams of materialized views, for the views that read them.
pub(super) type ViewStreams = Mutex<HashMap<String, StreamInfo>>;

struct EngineSources<'a> {
    engine: &'a Engine,
    state: &'a SessionState,
}

impl Sources for EngineSources<'_> {
    fn stream(&self, name: &str) -> Option<StreamInfo> {
        if self.engine.catalog.side_output_of(name).is_some() {
            // Late rows: append-only, no watermark.
            return Some(StreamInfo::default());
        }
        let definition = self.engine.catalog.get(name)?;
        match definition.kind {
            RelationKind::Table => Some(StreamInfo {
                watermark: definition
                    .stream
                    .and_then(|stream| stream.watermark)
                    .map(|watermark| watermark.column),
                // UPDATE and DELETE retract rows.
                updating: self.engine.catalog.provider(name).is_some_and(|provider| {
                    provider
                        .downcast_ref::<DurableTable>()
                        .is_some_and(|table| table.log().accepts_updates())
                }),
            }),
            RelationKind::MaterializedView => self.engine.view_streams().get(name).cloned(),
            RelationKind::View => None,
        }
    }

    fn provider(&self, name: &str) -> Result<Arc<dyn TableProvider>> {
        self.engine
            .catalog
            .provider(name)
            .ok_or_else(|| WeirError::undefined_table(name))
    }

    fn analyze(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        Ok(self
            .state
            .analyzer()
            .execute_and_check(plan, self.state.config_options(), |_, _| {})?)
    }
}

fn lock_streams(streams: &ViewStreams) -> std::sync::MutexGuard<'_, HashMap<String, StreamInfo>> {
    streams
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Engine {
    fn view_streams(&self) -> std::sync::MutexGuard<'_, HashMap<String, StreamInfo>> {
        lock_streams(&self.view_streams)
    }

    /// Plans the view's query as a stream; returns its name and plan.
    async fn stream_plan(
        &self,
        state: &SessionState,
        view: &MaterializedView,
    ) -> Result<(String, StreamPlan)> {
        // Postgres's constructs rewritten as in a query, from SQL edition 3
        // on (sql::postgres_rewrites).
        let mut statement = view.statement.clone();
        let edition = crate::sql::edition::of(state.config_options());
        if edition >= 3 {
            crate::sql::postgres_rewrites(&mut statement, edition)?;
        }
        let ast::Statement::CreateView(create) = &statement else {
            return Err(WeirError::internal("not a CREATE MATERIALIZED VIEW"));
        };
        let name = view_name(&self.catalog, &create.name)?;
        let query = ast::Statement::Query(create.query.clone());
        let mut joined = query.clone();
        crate::sql::using_joins::rewrite(&mut joined, state).await?;
        let plan = state
            .statement_to_plan(DataFusionStatement::Statement(Box::new(joined)))
            .await?;
        let plan = crate::sql::literal_types::postgres_types(plan, state.config_options())?;
        let sources = EngineSources {
            engine: self,
            state,
        };
        let analyzed = sources.analyze(plan)?;
        let mut stream = streaming::plan(
            &analyzed,
            view.emit,
            view.options.clone(),
            &sources,
            state.execution_props(),
        )?;
        stream.schema = output_schema(&stream, &query)?;
        Ok((name, stream))
    }

    pub async fn explain_materialized_view(
        &self,
        state: &SessionState,
        view: &MaterializedView,
    ) -> Result<Vec<String>> {
        let (name, plan) = self.stream_plan(state, view).await?;
        plan.check_deterministic()?;
        Ok(plan.explain(&name))
    }

    /// Creates the view, backfilled from its input's history. With a
    /// `gate`, a cancel before the view commits stops it (nothing is
    /// created); the backfill runs on even if the statement goes away.
    pub async fn create_materialized_view(
        &self,
        state: &SessionState,
        view: &MaterializedView,
        gate: Option<Arc<CommitGate>>,
    ) -> Result<CommandDone> {
        if let ast::Statement::CreateView(create) = &view.statement {
            let name = view_name(&self.catalog, &create.name)?;
            if create.if_not_exists && self.catalog.get(&name).is_some() {
                return Ok(
                    CommandDone::new("CREATE MATERIALIZED VIEW").with_notice(Notice::info(
                        &format!("relation \"{name}\" already exists, skipping"),
                    )),
                );
            }
        }
        let (name, plan) = self.stream_plan(state, view).await?;
        plan.check_deterministic()?;
        let firing = match self.firing_table(&plan)? {
            Some(table) => Some(NewViewFiring {
                table,
                interval_ns: plan.firing_interval_ns.unwrap_or(i64::MAX),
                unix_ns: self.emit_clock_ns(),
                offset: None,
            }),
            None => None,
        };
        let (definition, results) = self.catalog.new_materialized_view(
            &name,
            &view.text,
            plan.reads.clone(),
            plan.schema.clone(),
            plan.side_output.clone(),
            row_layout(&plan),
        )?;
        let input_names = plan.inputs();
        let output = plan.output.clone();
        let pipeline = pipeline(definition.id, &name, plan, &results)?;
        // A table's history is read with its writes paused (in name order,
        // as every statement pausing several does); a view's under the
        // dataflow lock (views change only under it).
        let mut tables: Vec<_> = input_names
            .iter()
            .filter_map(|input| Some((input.clone(), self.catalog.table(input)?)))
            .collect();
        tables.sort_by(|a, b| a.0.cmp(&b.0));
        let mut paused = Vec::new();
        for (_, log) in &tables {
            paused.push(log.pause_writes().await);
        }
        // A lookup join's table goes first: rows that were there before
        // the view meet the table as it is when the view is created.
        let mut input_names = input_names;
        input_names.sort_by_key(|input| !view.options.lookup_tables.contains(input));
        let mut inputs = Vec::new();
        for input in input_names {
            let table = tables.iter().find(|(name, _)| *name == input);
            inputs.push(NewViewInput {
                table_history: table.map(|(_, log)| log.backfill_history()).transpose()?,
                table_rows: table.map(|(_, log)| log.row_count()),
                name: input,
            });
        }
        let view_id = definition.id;
        let new_view = NewView {
            name: name.clone(),
            definition,
            results,
            pipeline,
            inputs,
            firing,
        };
        let dataflow = self.dataflow.clone();
        let catalog = self.catalog.clone();
        let view_streams = self.view_streams.clone();
        let gate = gate.map(|gate| {
            let statement = gate.statement();
            (gate, statement)
        });
        // Completes even if the statement goes away: the view is then fully
        // there (its commit had started) or not at all.
        let firing = tokio::task::spawn_blocking(move || {
            let firing = backfill_and_commit(&dataflow, &catalog, new_view, gate)?;
            lock_streams(&view_streams).insert(name, output);
            Ok::<_, WeirError>(firing)
        })
        .await
        .map_err(|error| WeirError::internal(format!("backfill task failed: {error}")))??;
        if let Some(firing) = firing {
            let last = firing.offset.map(|offset| (offset, firing.unix_ns));
            self.schedule_firings(view_id, firing.table, firing.interval_ns, last);
        }
        drop(paused);
        Ok(CommandDone::new("CREATE MATERIALIZED VIEW"))
    }

    pub fn drop_materialized_view(&self, name: &str, if_exists: bool) -> Result<CommandDone> {
        let tag = "DROP MATERIALIZED VIEW";
        if let Some(view) = self.catalog.side_output_of(name) {
            return Err(WeirError::new(
                crate::error::sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is the late rows of materialized view {view}"),
            )
            .with_hint(format!(
                "It goes with the view: DROP MATERIALIZED VIEW {view};"
            )));
        }
        match self.catalog.get(name) {
            None if if_exists => {
                return Ok(CommandDone::new(tag).with_notice(Notice::info(&format!(
                    "materialized view \"{name}\" does not exist, skipping"
                ))))
            }
            None => return Err(WeirError::undefined_table(name)),
            Some(_) => {}
        }
        // Under the dataflow lock, so no write is applying changes to it.
        let mut flow = self.dataflow.lock();
        let id = self.catalog.get(name).map(|definition| definition.id);
        self.catalog
            .drop_relation(name, RelationKind::MaterializedView)?;
        flow.remove_view(name);
        if let Some(id) = id {
            self.unschedule_firings(id);
            let mut state = WriteBatch::new();
            state.delete_prefix(view_prefix(id));
            // Its operators' spilled runs (outside the checkpoint's keys).
            state.delete_prefix(crate::stream::spill::view_space(id));
            // After a checkpoint being committed, which may write the view.
            let _commits = self.dataflow.lock_commits();
            into_current_generation(flow.stored_state(), &mut state);
            self.catalog.store().commit(state)?;
        }
        drop(flow);
        self.view_streams().remove(name);
        Ok(CommandDone::new(tag))
    }

    /// Re-plans a stored materialized view and starts its pipeline with its
    /// stored rows; `replay_views` then rebuilds operator state.
    pub(super) async fn restore_materialized_view(
        &self,
        definition: RelationDefinition,
        view: &MaterializedView,
    ) -> Result<()> {
        let state = planning_state(self.state(), definition.sql_edition);
        let (name, plan) = self.stream_plan(&state, view).await?;
        if let Err(error) = plan.check_deterministic() {
            tracing::warn!(
                view = %name,
                "{}; drop it and create it again without that function (for now(), writes to its inputs fail until then)",
                error.message
            );
        }
        let id = definition.id;
        let results = self.catalog.restore_materialized_view(
            definition,
            plan.schema.clone(),
            plan.side_output.clone(),
            row_layout(&plan),
        )?;
        let output = plan.output.clone();
        let interval_ns = plan.firing_interval_ns;
        let firing_table = self.firing_table(&plan)?;
        let pipeline = pipeline(id, &name, plan, &results)?;
        self.dataflow.lock().add_view(pipeline);
        if let (Some(table), Some(interval_ns)) = (firing_table, interval_ns) {
            self.schedule_firings(id, table, interval_ns, None);
        }
        self.view_streams().insert(name, output);
        Ok(())
    }

    /// After a write failed part-way through the views, brings every view
    /// back to its committed rows and rebuilds its state.
    pub async fn repair_views(&self) {
        // Every writer of a failed group comes here: one rebuild at a time
        // (two would restore checkpointed state under each other's live
        // pipelines), and none while DDL re-plans views.
        let _catalog = self.lock_catalog().await;
        if !self.dataflow.lock().is_broken() {
            return;
        }
        if let Err(error) = self.rebuild_views().await {
            tracing::error!(%error.message, "materialized views could not be rebuilt");
        }
    }

    async fn rebuild_views(&self) -> Result<()> {
        tracing::warn!("rebuilding materialized views after a failed write");
        self.checkpoints
            .views_rebuilt
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dataflow.lock().clear_views();
        for definition in self.catalog.definitions() {
            if definition.kind != RelationKind::MaterializedView {
                continue;
            }
            let Some(crate::sql::Statement::CreateMaterializedView(view)) =
                crate::sql::parse(&definition.sql)?.pop()
            else {
                return Err(WeirError::internal(
                    "stored view is not CREATE MATERIALIZED VIEW",
                ));
            };
            self.restore_materialized_view(definition, &view).await?;
        }
        // Back to the stored rows; state from the last checkpoint.
        self.recover_views()
    }
}

/// The planning state for a view planned by `edition` of weir's SQL: a
/// view from before `sum(bigint)` was numeric keeps DataFusion's bigint
/// sum, and one from before Postgres's literal types keeps DataFusion's
/// (sql::literal_types): the types its stored rows and states have.
pub(super) fn planning_state(mut state: SessionState, edition: u32) -> SessionState {
    let options = state.config_mut().options_mut();
    if let Some(planning) = options.extensions.get_mut::<crate::sql::edition::Edition>() {
        planning.sql_edition = edition;
    }
    if edition == 0 {
        let _ = state.register_udaf(datafusion::functions_aggregate::sum::sum_udaf());
    }
    if edition < 2 {
        state
            .config_mut()
            .options_mut()
            .sql_parser
            .parse_float_as_decimal = false;
    }
    if edition < 4 {
        state = without_timestamp_differences(state);
    }
    state
}

/// The state without the planner that makes `timestamp - timestamp` an
/// interval (SQL edition 4): a view from before keeps its durations.
fn without_timestamp_differences(state: SessionState) -> SessionState {
    let planners: Vec<_> = state
        .expr_planners()
        .iter()
        .filter(|planner| {
            !format!("{planner:?}").starts_with(crate::sql::timestamp_difference::PLANNER_NAME)
        })
        .cloned()
        .collect();
    datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_expr_planners(planners)
        .build()
}

/// A view that never retracts a row keeps its rows as a log; one whose
/// rows have a key (a GROUP BY's), by key; any other, counted.
fn row_layout(plan: &StreamPlan) -> RowLayout {
    match &plan.key {
        _ if !plan.output.updating => RowLayout::Log,
        Some(columns) => RowLayout::Keyed(columns.clone()),
        None => RowLayout::Counted,
    }
}

fn pipeline(id: u64, name: &str, plan: StreamPlan, results: &ViewResults) -> Result<ViewPipeline> {
    let late_rows = LateRows::new(results.rows.late_rows.clone(), results.late.is_some());
    let root = branch(plan.root, &late_rows)?;
    let late = results
        .late
        .clone()
        .map(|result| LateSink::new(side_output_name(name), late_rows.clone(), result));
    Ok(ViewPipeline::new(
        id,
        name,
        root,
        results.rows.clone(),
        late,
    ))
}

/// The running operators of a planned branch (and of the branches
/// meeting where it starts).
fn branch(planned: streaming::Branch, late_rows: &LateRows) -> Result<Branch> {
    let operators = planned
        .nodes
        .into_iter()
        .map(|node| node.operator(late_rows))
        .collect::<Result<Vec<_>>>()?;
    let Some(meeting) = planned.meeting else {
        return Ok(Branch::new(planned.input, operators));
    };
    let branches = meeting
        .branches
        .into_iter()
        .map(|inner| branch(inner, late_rows))
        .collect::<Result<Vec<_>>>()?;
    let junction = meeting.junction.operator()?;
    Ok(Branch::meeting(branches, junction, operators))
}

fn view_name(relations: &super::relations::Relations, name: &ast::ObjectName) -> Result<String> {
    relations.key_to_create(&crate::sql::names::object_reference(name))
}

/// The view's columns with the names Postgres would give them; two columns
/// with one name are an error, as in Postgres.
fn output_schema(
    plan: &StreamPlan,
    query: &ast::Statement,
) -> Result<datafusion::arrow::datatypes::SchemaRef> {
    let schema = plan.schema.as_ref();
    let fields: Vec<_> = match crate::sql::output_names(query)
        .filter(|names| names.len() == schema.fields().len())
    {
        Some(names) => schema
            .fields()
            .iter()
            .zip(names)
            .map(|(field, name)| match name {
                Some(name) => field.as_ref().clone().with_name(name),
                None => field.as_ref().clone(),
            })
            .collect(),
        None => schema.fields().iter().map(|f| f.as_ref().clone()).collect(),
    };
    for (index, field) in fields.iter().enumerate() {
        if fields[..index]
            .iter()
            .any(|other| other.name() == field.name())
        {
            return Err(WeirError::new(
                "42701",
                format!("column \"{}\" specified more than once", field.name()),
            )
            .with_hint("Give the columns distinct names with AS."));
        }
    }
    Ok(Arc::new(datafusion::arrow::datatypes::Schema::new(fields)))
}

#[cfg(test)]
#[path = "materialized_tests.rs"]
mod tests;
