//! Schema statements as a session runs them: CREATE SCHEMA names its
//! owner (AUTHORIZATION, else the session's role).

use datafusion::logical_expr::CreateCatalogSchema;
use datafusion::sql::sqlparser::ast;

use super::Session;
use crate::engine::CommandDone;
use crate::error::Result;
use crate::sql;

impl Session {
    /// `CREATE SCHEMA`: DataFusion's plan says IF NOT EXISTS; the name and
    /// AUTHORIZATION come from the statement (the plan joins them).
    pub(super) fn create_schema(
        &self,
        create: &CreateCatalogSchema,
        sql_text: &str,
    ) -> Result<CommandDone> {
        let (name, owner) =
            schema_and_owner(sql_text).unwrap_or_else(|| (create.schema_name.clone(), None));
        let role = self.actor().name;
        self.engine
            .create_schema(&name, owner.as_deref(), create.if_not_exists, &role)
    }
}

/// The schema a CREATE SCHEMA statement names, and its AUTHORIZATION.
fn schema_and_owner(sql_text: &str) -> Option<(String, Option<String>)> {
    let Some(sql::Statement::Standard(statement)) = sql::parse(sql_text).ok()?.pop() else {
        return None;
    };
    let ast::Statement::CreateSchema { schema_name, .. } = *statement else {
        return None;
    };
    let last = |name: &ast::ObjectName| match name.0.last() {
        Some(ast::ObjectNamePart::Identifier(ident)) => Some(sql::names::identifier(ident)),
        _ => None,
    };
    match schema_name {
        ast::SchemaName::Simple(name) => Some((last(&name)?, None)),
        ast::SchemaName::UnnamedAuthorization(owner) => {
            let owner = sql::names::identifier(&owner);
            Some((owner.clone(), Some(owner)))
        }
        ast::SchemaName::NamedAuthorization(name, owner) => {
            Some((last(&name)?, Some(sql::names::identifier(&owner))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_names_the_owner() {
        assert_eq!(
            schema_and_owner("CREATE SCHEMA Sales"),
            Some(("sales".to_string(), None))
        );
        assert_eq!(
            schema_and_owner("CREATE SCHEMA IF NOT EXISTS s AUTHORIZATION Ann"),
            Some(("s".to_string(), Some("ann".to_string())))
        );
        assert_eq!(
            schema_and_owner("CREATE SCHEMA AUTHORIZATION bob"),
            Some(("bob".to_string(), Some("bob".to_string())))
        );
    }
}
