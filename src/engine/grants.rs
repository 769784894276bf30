//! GRANT and REVOKE, and the role statements that depend on privileges
//! (a role that owns relations or holds grants cannot be dropped).

use super::privileges::PUBLIC;
use super::roles::Actor;
use super::{CommandDone, Engine};
use crate::catalog::Privilege;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::privilege_ddl::{PrivilegeStatement, PrivilegeTarget};
use crate::sql::role_ddl::RoleStatement;

impl Engine {
    /// Runs a GRANT or REVOKE for `actor`: privileges on relations are
    /// given by their owner or a superuser, CREATE on the schema by a
    /// superuser.
    pub fn execute_privilege_statement(
        &self,
        statement: &PrivilegeStatement,
        actor: &Actor,
    ) -> Result<CommandDone> {
        for grantee in &statement.grantees {
            if grantee != PUBLIC && self.roles().get(grantee).is_none() {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("role \"{grantee}\" does not exist"),
                ));
            }
        }
        let done = CommandDone::new(statement.tag());
        match &statement.target {
            PrivilegeTarget::CreateOnSchema => {
                if !actor.superuser {
                    return Err(WeirError::new(
                        sqlstate::INSUFFICIENT_PRIVILEGE,
                        "permission denied for schema public",
                    )
                    .with_hint("Only superusers grant CREATE ON SCHEMA public."));
                }
                for grantee in &statement.grantees {
                    self.privileges().set_may_create(grantee, statement.grant)?;
                }
            }
            PrivilegeTarget::Relations { privileges, names } => {
                let ids = names
                    .iter()
                    .map(|name| self.grantable(name, actor))
                    .collect::<Result<Vec<u64>>>()?;
                self.change_grants(&ids, statement, privileges)?;
            }
            PrivilegeTarget::AllRelations { privileges } => {
                let ids: Vec<u64> = self
                    .relations()
                    .definitions()
                    .into_iter()
                    .filter(|definition| {
                        actor.superuser || self.privileges().owner(definition.id) == actor.name
                    })
                    .map(|definition| definition.id)
                    .collect();
                self.change_grants(&ids, statement, privileges)?;
            }
        }
        Ok(done)
    }

    fn change_grants(
        &self,
        ids: &[u64],
        statement: &PrivilegeStatement,
        privileges: &[Privilege],
    ) -> Result<()> {
        for grantee in &statement.grantees {
            self.privileges()
                .change_grants(ids, grantee, privileges, statement.grant)?;
        }
        Ok(())
    }

    /// The id of relation `name`, if `actor` may grant on it.
    fn grantable(&self, name: &str, actor: &Actor) -> Result<u64> {
        let relations = self.relations();
        let (id, noun) = match relations.get(name) {
            Some(definition) => (definition.id, definition.kind.noun()),
            None => match relations.side_output_of(name) {
                Some(_) => {
                    return Err(WeirError::unsupported(format!(
                        "privileges on {name} go with its view"
                    ))
                    .with_hint("GRANT on the materialized view; its _late relation follows."))
                }
                None => return Err(WeirError::undefined_table(name)),
            },
        };
        if actor.superuser || self.privileges().owner(id) == actor.name {
            return Ok(id);
        }
        Err(WeirError::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("must be owner of {noun} {name}"),
        )
        .with_hint("Only its owner or a superuser may grant privileges on it."))
    }

    /// CREATE, ALTER or DROP ROLE; a role that owns relations or holds
    /// grants on them is not dropped (2BP01), as in Postgres.
    pub fn execute_role_statement(
        &self,
        statement: &RoleStatement,
        actor: &Actor,
    ) -> Result<CommandDone> {
        if let RoleStatement::Drop { names, .. } = statement {
            let live: Vec<u64> = self
                .relations()
                .definitions()
                .iter()
                .map(|definition| definition.id)
                .chain(
                    self.relations()
                        .sinks()
                        .iter()
                        .map(|sink| sink.definition.id),
                )
                .collect();
            if let Some(name) = names
                .iter()
                .find(|name| self.privileges().mentions(name, &live))
            {
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("role \"{name}\" cannot be dropped because some objects depend on it"),
                )
                .with_hint("Drop what it owns and REVOKE what it was granted first."));
            }
        }
        self.roles().execute(statement, actor)
    }
}
