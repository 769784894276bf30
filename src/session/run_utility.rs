//! Running the utility statements that need no planning: transaction
//! control, SET / SHOW / RESET, DEALLOCATE and DISCARD, SHOW TABLES and
//! friends, DROP MATERIALIZED VIEW, COPY FROM and SHOW CREATE.

use super::results::rows;
use super::{current_setting, Outcome, Session, Settings, Utility};
use crate::engine::CommandDone;
use crate::error::{Result, WeirError};
use crate::sql;

impl Session {
    pub(super) fn execute_utility(&self, utility: &Utility) -> Result<Outcome> {
        let schema = utility.result_schema();
        match utility {
            Utility::Begin => Ok(Outcome::TransactionStart(self.begin())),
            Utility::Commit => Err(WeirError::internal("COMMIT is not a synchronous utility")),
            Utility::Rollback => Ok(Outcome::TransactionEnd(self.rollback())),
            Utility::Savepoint { name } => Ok(Outcome::Done(self.savepoint(name)?)),
            Utility::ReleaseSavepoint { name } => Ok(Outcome::Done(self.release(name)?)),
            Utility::RollbackTo { name } => Ok(Outcome::Done(self.rollback_to(name)?)),
            Utility::Set { name, value } => {
                let reported = self.settings().set(name, value.clone())?;
                Ok(Outcome::Set(CommandDone::new("SET"), reported))
            }
            Utility::SetTransaction { default_isolation } => {
                // What SHOW transaction_isolation answers outside a block
                // follows the session's default, as in Postgres.
                if let Some(level) = default_isolation {
                    let mut settings = self.settings();
                    settings.set("default_transaction_isolation", Some(level.clone()))?;
                    settings.set("transaction_isolation", Some(level.clone()))?;
                }
                Ok(Outcome::Done(CommandDone::new("SET")))
            }
            Utility::Reset { name: Some(name) } => {
                let reported = self.settings().set(name, None)?;
                Ok(Outcome::Set(CommandDone::new("RESET"), reported))
            }
            Utility::Reset { name: None } => {
                *self.settings() = Settings::default();
                Ok(Outcome::Done(CommandDone::new("RESET")))
            }
            Utility::Sink(sql::sink_ddl::SinkStatement::ShowCreate { name }) => rows(
                schema,
                vec![vec![name.clone(), self.engine.show_create_sink(name)?]],
            ),
            Utility::ShowSinks => {
                let names = self.engine.relations().sinks().into_iter();
                let mut names: Vec<_> = names.map(|entry| vec![entry.definition.name]).collect();
                names.sort();
                rows(schema, names)
            }
            Utility::Flush
            | Utility::AlterSystem { .. }
            | Utility::DropSource { .. }
            | Utility::CopyTo { .. }
            | Utility::Sink(_)
            | Utility::Role(_)
            | Utility::Privilege(_)
            | Utility::Prepare { .. }
            | Utility::Execute { .. } => Err(WeirError::internal(
                "an asynchronous utility ran synchronously",
            )),
            Utility::Deallocate { name } => {
                let tag = if name.is_some() {
                    "DEALLOCATE"
                } else {
                    "DEALLOCATE ALL"
                };
                // A SQL-level statement of that name, else the protocol's.
                match self.named.remove(name.as_deref()) && name.is_some() {
                    true => Ok(Outcome::Done(CommandDone::new(tag))),
                    false => Ok(Outcome::Deallocate(name.clone(), CommandDone::new(tag))),
                }
            }
            Utility::Discard => {
                *self.settings() = Settings::default();
                // As DEALLOCATE ALL, too.
                self.named.remove(None);
                Ok(Outcome::Deallocate(None, CommandDone::new("DISCARD ALL")))
            }
            Utility::AlterRetention(alter) => {
                Ok(Outcome::Done(self.engine.alter_retention(alter)?))
            }
            Utility::Show { name } => {
                let value = match self.engine.system_setting(name) {
                    Some(value) => value,
                    None => self.settings().get(name)?,
                };
                rows(schema, vec![vec![value]])
            }
            Utility::ShowAll => {
                let all = current_setting::all_settings(&self.settings(), &self.engine);
                rows(
                    schema,
                    all.into_iter()
                        .map(|(name, value)| vec![name, value])
                        .collect(),
                )
            }
            Utility::ShowTables | Utility::ShowSources => {
                let sources = matches!(utility, Utility::ShowSources);
                let names = self
                    .engine
                    .relations()
                    .definitions()
                    .into_iter()
                    .filter(|definition| definition.kind == crate::catalog::RelationKind::Table)
                    .filter(|definition| {
                        let source = definition.stream.as_ref().and_then(|s| s.source.as_ref());
                        let rejected = source.is_some_and(|source| {
                            source.connector == crate::catalog::REJECTED_CONNECTOR
                        });
                        // A source's `_errors` relation is listed as a table.
                        (source.is_some() && !rejected) == sources
                    })
                    .map(|definition| vec![definition.name]);
                let mut names: Vec<_> = names.collect();
                names.sort();
                rows(schema, names)
            }
            Utility::ShowMaterializedViews => {
                let mut names: Vec<_> = self
                    .engine
                    .relations()
                    .definitions()
                    .into_iter()
                    .filter(|definition| {
                        definition.kind == crate::catalog::RelationKind::MaterializedView
                    })
                    .map(|definition| vec![definition.name])
                    .collect();
                names.sort();
                rows(schema, names)
            }
            Utility::DropIndex { names, if_exists } => {
                Ok(Outcome::Done(self.engine.drop_indexes(names, *if_exists)?))
            }
            Utility::DropMaterializedView { names, if_exists } => {
                let mut done = CommandDone::new("DROP MATERIALIZED VIEW");
                for name in names {
                    done = self.engine.drop_materialized_view(name, *if_exists)?;
                }
                Ok(Outcome::Done(done))
            }
            Utility::CopyFrom {
                table,
                columns,
                options,
            } => self.copy_in(table, columns, options),
            Utility::ShowCreate { name } => {
                let definition = self
                    .engine
                    .relations()
                    .get(name)
                    .ok_or_else(|| WeirError::undefined_table(name))?;
                rows(schema, vec![vec![definition.name, definition.sql]])
            }
        }
    }
}
