//! What a role that is not a superuser may run: SELECT on what a
//! statement reads, INSERT/UPDATE/DELETE on what it writes, ownership of
//! what it drops or alters, CREATE on the schema to create. Checked each
//! time a statement runs (not when prepared), so a REVOKE holds for
//! statements prepared before it. Views are read with their owner's
//! rights, as in Postgres: reading a view needs SELECT on the view only.

use std::ops::ControlFlow;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::sql::sqlparser::ast;

use super::{Action, Prepared, Session, Utility};
use crate::catalog::{Privilege, SCHEMA_NAME};
use crate::engine::Engine;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql;

impl Session {
    /// Fails with 42501 when the session's role may not run `prepared`.
    pub(super) fn authorize(&self, prepared: &Prepared) -> Result<()> {
        let actor = self.actor();
        if actor.superuser {
            return Ok(());
        }
        let check = Checker {
            engine: &self.engine,
            role: &actor.name,
        };
        match &prepared.action {
            Action::Plan(plan) => check.plan(plan),
            Action::Utility(utility) => check.utility(utility),
            Action::MaterializedView(view) => {
                if !view.explain {
                    check.create()?;
                }
                check.statement_reads(&view.statement)
            }
            Action::Changefeed(
                sql::subscribe::Changefeed::Subscribe(subscribe)
                | sql::subscribe::Changefeed::Declare { subscribe, .. }
                | sql::subscribe::Changefeed::Copy { subscribe, .. },
            ) => check.relation(&subscribe.view, Privilege::Select),
            Action::Changefeed(_) => Ok(()),
        }
    }

    /// Fails with 42501 when the session's role may not read what `plan`
    /// reads (COPY (query) TO, planned when it runs).
    pub(super) fn authorize_reads(&self, plan: &LogicalPlan) -> Result<()> {
        let actor = self.actor();
        if actor.superuser {
            return Ok(());
        }
        let check = Checker {
            engine: &self.engine,
            role: &actor.name,
        };
        check.reads(plan, None)
    }
}

impl Session {
    /// The relations `prepared` would create that do not exist yet (a
    /// source's `_errors` relation with it): after it succeeds they are
    /// the session's role's. One that exists already (IF NOT EXISTS)
    /// keeps its owner.
    pub(super) fn new_relations(&self, prepared: &Prepared) -> Vec<String> {
        let name = match &prepared.action {
            Action::Plan(plan) => match plan.as_ref() {
                LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
                    key(&self.engine, &create.name)
                }
                LogicalPlan::Ddl(DdlStatement::CreateView(create)) => {
                    key(&self.engine, &create.name)
                }
                LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)) => {
                    key(&self.engine, &create.name)
                }
                _ => return Vec::new(),
            },
            Action::MaterializedView(view) if !view.explain => match &view.statement {
                ast::Statement::CreateView(create) => {
                    key(&self.engine, &sql::names::object_reference(&create.name))
                }
                _ => return Vec::new(),
            },
            Action::Utility(Utility::Sink(sql::sink_ddl::SinkStatement::Create(create))) => {
                create.name.clone()
            }
            _ => return Vec::new(),
        };
        [crate::catalog::rejected_name(&name), name]
            .into_iter()
            .filter(|name| subject(&self.engine, name).is_none())
            .collect()
    }

    /// Makes the session's role the owner of those of `names` that now
    /// exist. A name that is not a role (trusted on loopback) owns
    /// nothing: its relations stay the bootstrap superuser's.
    pub(super) fn record_owner(&self, names: &[String]) -> Result<()> {
        let role = self.actor().name;
        if names.is_empty()
            || role == crate::catalog::BOOTSTRAP_SUPERUSER
            || self.engine.roles().get(&role).is_none()
        {
            return Ok(());
        }
        let ids: Vec<u64> = names
            .iter()
            .filter_map(|name| subject(&self.engine, name).map(|(id, _)| id))
            .collect();
        self.engine.privileges().set_owner(&ids, &role)
    }
}

struct Checker<'a> {
    engine: &'a Engine,
    role: &'a str,
}

impl Checker<'_> {
    fn plan(&self, plan: &LogicalPlan) -> Result<()> {
        match plan {
            LogicalPlan::Dml(dml) => {
                let privilege = match &dml.op {
                    WriteOp::Insert(_) | WriteOp::Ctas => Privilege::Insert,
                    WriteOp::Update => Privilege::Update,
                    WriteOp::Delete | WriteOp::Truncate => Privilege::Delete,
                    _ => return Err(superusers_only()),
                };
                let target = key(self.engine, &dml.table_name);
                self.relation(&target, privilege)?;
                // UPDATE and DELETE scan their own table to find the rows.
                let own_scan = matches!(privilege, Privilege::Update | Privilege::Delete);
                self.reads(&dml.input, own_scan.then_some(target.as_str()))
            }
            LogicalPlan::Ddl(ddl) => self.ddl(ddl),
            other => self.reads(other, None),
        }
    }

    fn ddl(&self, ddl: &DdlStatement) -> Result<()> {
        match ddl {
            DdlStatement::CreateMemoryTable(create) => {
                self.create()?;
                self.reads(&create.input, None)
            }
            DdlStatement::CreateView(create) => {
                self.create()?;
                self.reads(&create.input, None)
            }
            DdlStatement::CreateExternalTable(_) => self.create(),
            // Postgres: the table's owner indexes it.
            DdlStatement::CreateIndex(create) => self.owner(&key(self.engine, &create.table)),
            DdlStatement::DropTable(drop) => self.owner(&key(self.engine, &drop.name)),
            DdlStatement::DropView(drop) => self.owner(&key(self.engine, &drop.name)),
            _ => Err(superusers_only()),
        }
    }

    fn utility(&self, utility: &Utility) -> Result<()> {
        match utility {
            Utility::DropIndex { names, .. } => {
                names
                    .iter()
                    .try_for_each(|name| match self.engine.relations().index(name) {
                        Some(index) => self.owner(&index.table),
                        None => Ok(()),
                    })
            }
            Utility::DropMaterializedView { names, .. } | Utility::DropSource { names, .. } => {
                names.iter().try_for_each(|name| self.owner(name))
            }
            Utility::AlterRetention(alter) => self.owner(&alter.table),
            Utility::CopyFrom { table, .. } => self.relation(table, Privilege::Insert),
            Utility::Sink(sql::sink_ddl::SinkStatement::Create(create)) => {
                self.create()?;
                self.relation(&create.view, Privilege::Select)
            }
            Utility::Sink(sql::sink_ddl::SinkStatement::Drop { names, .. }) => {
                names.iter().try_for_each(|name| self.owner(name))
            }
            // COPY (query) TO is checked when planned; roles and grants by
            // their own rules; the rest reads no relation.
            _ => Ok(()),
        }
    }

    /// SELECT on every relation of ours `plan` reads, but `skip`.
    fn reads(&self, plan: &LogicalPlan, skip: Option<&str>) -> Result<()> {
        let mut outcome = Ok(());
        plan.apply_with_subqueries(|node| {
            let (name, next) = match node {
                // A view is inlined into the plan: reading it needs SELECT
                // on it, and what it reads is its owner's business.
                LogicalPlan::SubqueryAlias(alias) => match self.inlined_view(alias) {
                    Some(view) => (view, TreeNodeRecursion::Jump),
                    None => return Ok(TreeNodeRecursion::Continue),
                },
                LogicalPlan::TableScan(scan)
                    if scan.table_name.schema().is_none_or(|schema| {
                        schema == SCHEMA_NAME || self.engine.relations().is_user_schema(schema)
                    }) =>
                {
                    (
                        key(self.engine, &scan.table_name),
                        TreeNodeRecursion::Continue,
                    )
                }
                _ => return Ok(TreeNodeRecursion::Continue),
            };
            if Some(name.as_str()) == skip {
                return Ok(next);
            }
            outcome = self.relation(&name, Privilege::Select);
            Ok(match outcome {
                Ok(()) => next,
                Err(_) => TreeNodeRecursion::Stop,
            })
        })?;
        outcome
    }

    /// The view `alias` is, when it is one of ours inlined by the planner:
    /// named as the view and holding exactly the view's plan (a subquery
    /// merely aliased with a view's name is checked as what it reads).
    fn inlined_view(&self, alias: &datafusion::logical_expr::SubqueryAlias) -> Option<String> {
        let name = key(self.engine, &alias.alias);
        let relations = self.engine.relations();
        let is_view = relations
            .get(&name)
            .is_some_and(|definition| definition.kind == crate::catalog::RelationKind::View);
        if !is_view {
            return None;
        }
        let provider = relations.provider(&name)?;
        let plan = provider.get_logical_plan()?;
        (alias.input.as_ref() == plan.as_ref()).then_some(name)
    }

    /// SELECT on what a CREATE MATERIALIZED VIEW reads, from its syntax
    /// (it is planned only when it runs). A CTE named like a relation is
    /// checked as that relation: stricter, never looser.
    fn statement_reads(&self, statement: &ast::Statement) -> Result<()> {
        let mut outcome = Ok(());
        let _ = ast::visit_relations(statement, |name| {
            let relation = key(self.engine, &sql::names::object_reference(name));
            outcome = self.relation(&relation, Privilege::Select);
            match outcome {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => ControlFlow::Break(()),
            }
        });
        outcome
    }

    pub(super) fn relation(&self, name: &str, privilege: Privilege) -> Result<()> {
        let Some((id, noun)) = subject(self.engine, name) else {
            return Ok(());
        };
        match self.engine.privileges().allows(id, self.role, privilege) {
            true => Ok(()),
            false => Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("permission denied for {noun} {name}"),
            )
            .with_hint(format!(
                "Its owner or a superuser can GRANT {} ON {name} TO {};",
                privilege.keyword(),
                self.role
            ))),
        }
    }

    fn owner(&self, name: &str) -> Result<()> {
        let Some((id, noun)) = subject(self.engine, name) else {
            return Ok(());
        };
        match self.engine.privileges().owner(id) == self.role {
            true => Ok(()),
            false => Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("must be owner of {noun} {name}"),
            )
            .with_hint("Only its owner or a superuser may drop or alter it.")),
        }
    }

    fn create(&self) -> Result<()> {
        match self.engine.privileges().may_create(self.role) {
            true => Ok(()),
            false => Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("permission denied for schema {SCHEMA_NAME}"),
            )
            .with_hint(format!(
                "A superuser can GRANT CREATE ON SCHEMA public TO {};",
                self.role
            ))),
        }
    }
}

/// The id whose privileges govern relation or sink `name`, and its noun:
/// a view's side output (`<view>_late`) goes with its view.
pub(crate) fn subject(engine: &Engine, name: &str) -> Option<(u64, &'static str)> {
    let relations = engine.relations();
    if let Some(definition) = relations.get(name) {
        return Some((definition.id, definition.kind.noun()));
    }
    if let Some(view) = relations.side_output_of(name) {
        return relations.get(&view).map(|d| (d.id, "materialized view"));
    }
    relations
        .sink(name)
        .map(|sink| (sink.definition.id, "sink"))
}

fn superusers_only() -> WeirError {
    WeirError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        "permission denied: only superusers may run this statement",
    )
}

/// The catalog key `reference` names; one that names no schema of ours
/// stays as written (and is found nowhere).
fn key(engine: &Engine, reference: &datafusion::common::TableReference) -> String {
    engine
        .relations()
        .key_of(reference)
        .unwrap_or_else(|_| reference.to_string())
}
