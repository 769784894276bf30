//! A session's planning state: the engine's DataFusion state with the
//! session's settings on top. Building one clones every function registry
//! (hundreds of names), which was the largest cost of a one-row INSERT, so
//! it is kept and built again only when the settings it depends on change.
//! The catalog is shared through an `Arc`, so tables created since are
//! seen without a rebuild.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{FunctionRegistry, SessionState, TaskContext};

use super::Settings;
use crate::connectors::table::{CommitGate, PendingWrites};
use crate::engine::Engine;
use crate::error::{Result, WeirError};

/// One planning state and its task context.
struct Planning {
    state: Arc<SessionState>,
    task: Arc<TaskContext>,
}

impl Planning {
    fn new(state: SessionState) -> Self {
        let task = state.task_ctx();
        Planning {
            state: Arc::new(state),
            task,
        }
    }

    /// The state, marked as starting a statement now (`now()` and the
    /// like read that time): in place unless an earlier statement still
    /// holds it.
    fn started(&mut self) -> Arc<SessionState> {
        match Arc::get_mut(&mut self.state) {
            Some(state) => state.mark_start_execution(),
            None => {
                let mut state = SessionState::clone(&self.state);
                state.mark_start_execution();
                self.state = Arc::new(state);
            }
        }
        self.state.clone()
    }
}

/// What a planning state is built from; a different key means a rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlanningKey {
    datafusion: BTreeMap<String, String>,
    time_zone: Option<String>,
    query_memory_limit_bytes: Option<usize>,
}

/// Planning states for queries, and for writes (one partition, so rows
/// reach the table, and so the views' late data checks, in the query's own
/// order, the same on every run).
#[derive(Default)]
pub struct PlanningCache {
    built: Option<Built>,
    /// Counts rebuilds: what was compiled under another generation (a
    /// prepared INSERT's template) is stale.
    generation: u64,
}

struct Built {
    key: PlanningKey,
    queries: Planning,
    writes: Planning,
}

/// What a session's planning state reaches back to: the gate deciding
/// whether a write commits, the transaction block's pending writes, and
/// the live settings (`current_setting`) and the user (`current_user`).
#[derive(Clone, Copy)]
pub struct SessionHandles<'a> {
    pub gate: &'a Arc<CommitGate>,
    pub pending: &'a Arc<PendingWrites>,
    pub settings: &'a Arc<Mutex<Settings>>,
    pub user: &'a str,
}

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Queries,
    Writes,
}

impl PlanningCache {
    /// The state for a statement starting now, under `settings`, and the
    /// task context to execute its plans with.
    pub fn get(
        &mut self,
        purpose: Purpose,
        engine: &Arc<Engine>,
        settings: &Settings,
        handles: SessionHandles,
    ) -> Result<(Arc<SessionState>, Arc<TaskContext>)> {
        let planning = self.built(engine, settings, handles)?.planning(purpose);
        Ok((planning.started(), planning.task.clone()))
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn built(
        &mut self,
        engine: &Arc<Engine>,
        settings: &Settings,
        handles: SessionHandles,
    ) -> Result<&mut Built> {
        let key = PlanningKey {
            datafusion: settings.datafusion_options().clone(),
            time_zone: settings.time_zone().map(str::to_string),
            query_memory_limit_bytes: settings.query_memory_limit_bytes()?,
        };
        match &mut self.built {
            Some(built) if built.key == key => {}
            stale => {
                *stale = Some(Built::new(key, engine, settings, handles)?);
                self.generation += 1;
            }
        }
        self.built
            .as_mut()
            .ok_or_else(|| WeirError::internal("no planning state"))
    }
}

impl Built {
    fn new(
        key: PlanningKey,
        engine: &Arc<Engine>,
        settings: &Settings,
        handles: SessionHandles,
    ) -> Result<Self> {
        let mut state = with_memory_limit(engine.state(), key.query_memory_limit_bytes)?;
        settings.apply(&mut state)?;
        // Writes reach the table through DataFusion's sink, which finds the
        // gate and the transaction block's pending writes here.
        state.config_mut().set_extension(handles.gate.clone());
        state.config_mut().set_extension(handles.pending.clone());
        let live = super::current_setting::LiveSettings {
            settings: handles.settings.clone(),
            engine: Arc::downgrade(engine),
        };
        let rows = crate::engine::pg_catalog::SessionSettingRows(Arc::new(live));
        state.config_mut().set_extension(Arc::new(rows));
        let current_setting = super::current_setting::function(handles.settings, engine);
        state.register_udf(Arc::new(current_setting))?;
        for function in super::current_user::functions(handles.user) {
            state.register_udf(Arc::new(function))?;
        }
        for function in super::privilege_functions::functions(handles.user, engine) {
            state.register_udf(Arc::new(function))?;
        }
        let role = crate::engine::pg_catalog::SessionRole {
            roles: engine.roles().clone(),
        };
        state.config_mut().set_extension(Arc::new(role));
        let user_by_id = crate::engine::pg_catalog::user_by_id_function(engine.roles().clone());
        state.register_udf(Arc::new(user_by_id))?;
        let mut write_state = state.clone();
        write_state
            .config_mut()
            .options_mut()
            .execution
            .target_partitions = 1;
        Ok(Built {
            key,
            queries: Planning::new(state),
            writes: Planning::new(write_state),
        })
    }

    fn planning(&mut self, purpose: Purpose) -> &mut Planning {
        match purpose {
            Purpose::Queries => &mut self.queries,
            Purpose::Writes => &mut self.writes,
        }
    }
}

/// `state` with a memory pool of its own holding `limit` bytes, so one
/// session's query fails (53200) rather than the server running out of
/// memory; sorts spill to disk before that.
fn with_memory_limit(state: SessionState, limit: Option<usize>) -> Result<SessionState> {
    let Some(limit) = limit else {
        return Ok(state);
    };
    let runtime = RuntimeEnvBuilder::from_runtime_env(state.runtime_env())
        .with_memory_limit(limit, 1.0)
        .build_arc()?;
    Ok(SessionStateBuilder::new_from_existing(state)
        .with_runtime_env(runtime)
        .build())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, TimestampNanosecondArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use futures::StreamExt;

    use crate::engine::Engine;
    use crate::session::{Outcome, Session};

    async fn run(session: &Session, sql: &str) -> Option<i64> {
        let statement = session.parse(sql).unwrap().remove(0);
        let prepared = session.prepare(statement).await.unwrap();
        let Outcome::Rows(mut rows) = session.execute(&prepared, None).await.unwrap() else {
            return None;
        };
        let batch = rows.next().await.unwrap().unwrap();
        let nanoseconds = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let column = cast(batch.column(0), &nanoseconds).unwrap();
        let times = column
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap();
        Some(times.value(0))
    }

    #[tokio::test]
    async fn each_statement_has_its_own_start_time_and_settings() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path()).await.unwrap();
        let session = Session::new(engine);
        let first = run(&session, "SELECT now()").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let second = run(&session, "SELECT now()").await.unwrap();
        assert!(second - first >= 20_000_000, "{first} then {second}");

        // A setting changes what later statements are planned with.
        let midnight = "SELECT CAST('2026-01-01 00:00:00' AS TIMESTAMPTZ)";
        let utc = run(&session, midnight).await.unwrap();
        run(&session, "SET TIME ZONE 'America/New_York'").await;
        let new_york = run(&session, midnight).await.unwrap();
        assert_eq!(new_york - utc, 5 * 3_600_000_000_000);
    }
}
