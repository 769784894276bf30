//! `GRANT` and `REVOKE` as weir has them: SELECT, INSERT, UPDATE and
//! DELETE (or ALL) on relations, to roles or PUBLIC; and CREATE on the
//! schema `public`. sqlparser parses them; this takes out what weir keeps
//! and refuses the rest with 0A000.

use datafusion::sql::sqlparser::ast;

use crate::catalog::Privilege;
use crate::error::{sqlstate, Result, WeirError};

/// A GRANT (`grant`) or REVOKE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivilegeStatement {
    pub grant: bool,
    pub target: PrivilegeTarget,
    /// Role names; `public` stands for every role.
    pub grantees: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivilegeTarget {
    Relations {
        privileges: Vec<Privilege>,
        names: Vec<String>,
    },
    /// `ON ALL TABLES IN SCHEMA public`: every relation there now.
    AllRelations { privileges: Vec<Privilege> },
    /// `CREATE ON SCHEMA public`.
    CreateOnSchema,
}

impl PrivilegeStatement {
    pub fn tag(&self) -> &'static str {
        match self.grant {
            true => "GRANT",
            false => "REVOKE",
        }
    }
}

/// Refuses role membership (`GRANT role TO role`, which has no ON) before
/// sqlparser, which reads it as a syntax error.
pub fn refuse_membership(
    tokens: &[datafusion::sql::sqlparser::tokenizer::TokenWithSpan],
) -> Result<()> {
    let words = super::tokens::words(tokens);
    let is_grant = words.first().is_some_and(|first| {
        super::tokens::is_word(first, "GRANT") || super::tokens::is_word(first, "REVOKE")
    });
    if is_grant && !words.iter().any(|word| super::tokens::is_word(word, "ON")) {
        return Err(unsupported("role membership (GRANT role TO role)"));
    }
    Ok(())
}

/// The statement as weir's, if it is a GRANT or REVOKE.
pub fn from_statement(statement: &ast::Statement) -> Option<Result<PrivilegeStatement>> {
    match statement {
        ast::Statement::Grant(grant) => {
            if grant.with_grant_option {
                return Some(Err(unsupported("WITH GRANT OPTION")));
            }
            Some(convert(
                true,
                &grant.privileges,
                grant.objects.as_ref(),
                &grant.grantees,
            ))
        }
        ast::Statement::Revoke(revoke) => Some(convert(
            false,
            &revoke.privileges,
            revoke.objects.as_ref(),
            &revoke.grantees,
        )),
        _ => None,
    }
}

fn convert(
    grant: bool,
    privileges: &ast::Privileges,
    objects: Option<&ast::GrantObjects>,
    grantees: &[ast::Grantee],
) -> Result<PrivilegeStatement> {
    let grantees = grantees.iter().map(grantee).collect::<Result<Vec<_>>>()?;
    let target = match objects {
        None => return Err(unsupported("role membership (GRANT role TO role)")),
        Some(ast::GrantObjects::Schemas(schemas)) => {
            check_public(schemas)?;
            match privileges {
                ast::Privileges::Actions(actions)
                    if actions
                        .iter()
                        .all(|action| matches!(action, ast::Action::Create { obj_type: None })) =>
                {
                    PrivilegeTarget::CreateOnSchema
                }
                ast::Privileges::All { .. } => PrivilegeTarget::CreateOnSchema,
                _ => return Err(unsupported("privileges on a schema other than CREATE")),
            }
        }
        Some(ast::GrantObjects::Tables(names) | ast::GrantObjects::Views(names)) => {
            PrivilegeTarget::Relations {
                privileges: relation_privileges(privileges)?,
                names: names.iter().map(relation_name).collect::<Result<_>>()?,
            }
        }
        Some(ast::GrantObjects::AllTablesInSchema { schemas }) => {
            check_public(schemas)?;
            PrivilegeTarget::AllRelations {
                privileges: relation_privileges(privileges)?,
            }
        }
        Some(other) => return Err(unsupported(&format!("privileges ON {other}"))),
    };
    Ok(PrivilegeStatement {
        grant,
        target,
        grantees,
    })
}

fn relation_privileges(privileges: &ast::Privileges) -> Result<Vec<Privilege>> {
    let actions = match privileges {
        ast::Privileges::All { .. } => return Ok(Privilege::ALL.to_vec()),
        ast::Privileges::Actions(actions) => actions,
    };
    actions
        .iter()
        .map(|action| match action {
            ast::Action::Select { columns: None } => Ok(Privilege::Select),
            ast::Action::Insert { columns: None } => Ok(Privilege::Insert),
            ast::Action::Update { columns: None } => Ok(Privilege::Update),
            ast::Action::Delete => Ok(Privilege::Delete),
            ast::Action::Select { .. }
            | ast::Action::Insert { .. }
            | ast::Action::Update { .. } => Err(unsupported("column privileges")),
            other => Err(unsupported(&format!("the {other} privilege on a relation"))),
        })
        .collect()
}

fn grantee(grantee: &ast::Grantee) -> Result<String> {
    match (&grantee.grantee_type, &grantee.name) {
        (ast::GranteesType::Public, _) => Ok("public".to_string()),
        (
            ast::GranteesType::None | ast::GranteesType::Role | ast::GranteesType::User,
            Some(ast::GranteeName::ObjectName(name)),
        ) => relation_name(name),
        _ => Err(unsupported(&format!("grantee {grantee}"))),
    }
}

fn check_public(schemas: &[ast::ObjectName]) -> Result<()> {
    for schema in schemas {
        if relation_name(schema)? != crate::catalog::SCHEMA_NAME {
            return Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{schema}\" does not exist"),
            )
            .with_hint("weir has one schema, public."));
        }
    }
    Ok(())
}

/// A one-part name (or `public.name`), unquoted parts in lower case.
fn relation_name(name: &ast::ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|part| part.as_ident())
        .map(|ident| match ident.quote_style {
            Some(_) => ident.value.clone(),
            None => ident.value.to_lowercase(),
        })
        .collect();
    match parts.as_slice() {
        [name] => Ok(name.clone()),
        [schema, name] if schema == crate::catalog::SCHEMA_NAME => Ok(name.clone()),
        _ => Err(WeirError::syntax(format!("{name} is not a name weir has"))
            .with_hint("Name a relation of schema public, or a role.")),
    }
}

fn unsupported(what: &str) -> WeirError {
    WeirError::new(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!("{what} is not supported"),
    )
    .with_hint(
        "weir grants SELECT, INSERT, UPDATE, DELETE or ALL on relations, and CREATE ON SCHEMA public \
         (docs/sql-reference.md, \"Privileges\").",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn converted(sql: &str) -> Result<PrivilegeStatement> {
        let statement = crate::sql::parse(sql).unwrap().remove(0);
        let crate::sql::Statement::Privilege(statement) = statement else {
            panic!("{sql} is not a GRANT or REVOKE: {statement:?}")
        };
        Ok(statement)
    }

    fn refused(sql: &str) -> WeirError {
        crate::sql::parse(sql).expect_err(sql)
    }

    #[test]
    fn relation_privileges_to_roles_and_public() {
        let grant =
            converted("GRANT SELECT, INSERT ON TABLE t, public.\"V\" TO Alice, PUBLIC").unwrap();
        assert!(grant.grant);
        assert_eq!(grant.grantees, vec!["alice", "public"]);
        assert_eq!(
            grant.target,
            PrivilegeTarget::Relations {
                privileges: vec![Privilege::Select, Privilege::Insert],
                names: vec!["t".into(), "V".into()]
            }
        );
        let revoke = converted("REVOKE ALL PRIVILEGES ON t FROM bob").unwrap();
        assert!(!revoke.grant);
        assert!(
            matches!(revoke.target, PrivilegeTarget::Relations { privileges, .. } if privileges.len() == 4)
        );
        let all = converted("GRANT SELECT ON ALL TABLES IN SCHEMA public TO bob").unwrap();
        assert_eq!(
            all.target,
            PrivilegeTarget::AllRelations {
                privileges: vec![Privilege::Select]
            }
        );
        let create = converted("GRANT CREATE ON SCHEMA public TO bob").unwrap();
        assert_eq!(create.target, PrivilegeTarget::CreateOnSchema);
    }

    #[test]
    fn what_weir_does_not_keep_is_refused() {
        for sql in [
            "GRANT SELECT ON t TO bob WITH GRANT OPTION",
            "GRANT SELECT (a) ON t TO bob",
            "GRANT TRUNCATE ON t TO bob",
            "GRANT USAGE ON SCHEMA public TO bob",
            "GRANT readers TO bob",
        ] {
            assert_eq!(refused(sql).code, sqlstate::FEATURE_NOT_SUPPORTED, "{sql}");
        }
        assert_eq!(
            refused("GRANT CREATE ON SCHEMA other TO bob").code,
            sqlstate::INVALID_SCHEMA_NAME
        );
    }
}
