//! `CREATE/ALTER/DROP ROLE` and their `USER` spellings. sqlparser parses
//! Postgres's role options but reads `CREATE USER` and `ALTER USER` in
//! Snowflake's syntax, so the `USER` keyword becomes `ROLE` first; the two
//! differ only in whether the role may log in by default.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::tokens::{is_word, significant};
use crate::error::{sqlstate, Result, WeirError};

/// A role statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleStatement {
    Create {
        name: String,
        if_not_exists: bool,
        options: RoleOptions,
    },
    Alter {
        name: String,
        options: RoleOptions,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
}

impl RoleStatement {
    /// The CommandComplete tag.
    pub fn tag(&self) -> &'static str {
        match self {
            RoleStatement::Create { .. } => "CREATE ROLE",
            RoleStatement::Alter { .. } => "ALTER ROLE",
            RoleStatement::Drop { .. } => "DROP ROLE",
        }
    }
}

/// The options weir keeps; `None` leaves a setting as it is (ALTER) or at
/// its default (CREATE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleOptions {
    /// `PASSWORD 'text'` (`Some(Some(..))`) or `PASSWORD NULL` (`Some(None)`).
    pub password: Option<Option<String>>,
    pub superuser: Option<bool>,
    pub login: Option<bool>,
}

/// The role statement in `tokens`, if it is one.
pub fn parse(tokens: &[TokenWithSpan]) -> Result<Option<RoleStatement>> {
    let positions = significant(tokens);
    let word = |n: usize| positions.get(n).map(|&at| &tokens[at].token);
    let verb = match word(0) {
        Some(token)
            if is_word(token, "CREATE") || is_word(token, "ALTER") || is_word(token, "DROP") =>
        {
            token
        }
        _ => return Ok(None),
    };
    let is_user = word(1).is_some_and(|token| is_word(token, "USER"));
    if !is_user && !word(1).is_some_and(|token| is_word(token, "ROLE")) {
        return Ok(None);
    }
    let mut tokens = tokens.to_vec();
    tokens[positions[1]].token = Token::make_keyword("ROLE");
    let statement = super::parser::parse_tokens(tokens)?;
    let login_default = (is_user && is_word(verb, "CREATE")).then_some(true);
    from_statement(statement, login_default).map(Some)
}

fn from_statement(statement: ast::Statement, login_default: Option<bool>) -> Result<RoleStatement> {
    match statement {
        ast::Statement::CreateRole(create) => {
            let [name] = create.names.as_slice() else {
                return Err(unsupported("CREATE ROLE with more than one name"));
            };
            check_unsupported_create_clauses(&create)?;
            let mut options = RoleOptions {
                password: create.password.as_ref().map(password_text).transpose()?,
                superuser: create.superuser,
                login: create.login.or(login_default),
            };
            refuse_unsupported_flags(
                [
                    create.create_db,
                    create.create_role,
                    create.replication,
                    create.bypassrls,
                ],
                &mut options,
            )?;
            Ok(RoleStatement::Create {
                name: role_name(name)?,
                if_not_exists: create.if_not_exists,
                options,
            })
        }
        ast::Statement::AlterRole { name, operation } => Ok(RoleStatement::Alter {
            name: identifier(&name),
            options: alter_options(operation)?,
        }),
        ast::Statement::Drop {
            object_type: ast::ObjectType::Role | ast::ObjectType::User,
            if_exists,
            names,
            ..
        } => Ok(RoleStatement::Drop {
            names: names.iter().map(role_name).collect::<Result<_>>()?,
            if_exists,
        }),
        other => Err(WeirError::syntax(format!("not a role statement: {other}"))),
    }
}

fn alter_options(operation: ast::AlterRoleOperation) -> Result<RoleOptions> {
    let ast::AlterRoleOperation::WithOptions { options } = operation else {
        return Err(unsupported("ALTER ROLE other than changing its options"));
    };
    let mut result = RoleOptions::default();
    for option in options {
        match option {
            ast::RoleOption::Password(password) => {
                result.password = Some(password_text(&password)?)
            }
            ast::RoleOption::SuperUser(value) => result.superuser = Some(value),
            ast::RoleOption::Login(value) => result.login = Some(value),
            ast::RoleOption::Inherit(_) => {}
            ast::RoleOption::CreateDB(value)
            | ast::RoleOption::CreateRole(value)
            | ast::RoleOption::Replication(value)
            | ast::RoleOption::BypassRLS(value) => {
                refuse_unsupported_flags([Some(value)], &mut result)?
            }
            ast::RoleOption::ConnectionLimit(_) | ast::RoleOption::ValidUntil(_) => {
                return Err(unsupported("CONNECTION LIMIT and VALID UNTIL"))
            }
        }
    }
    Ok(result)
}

/// CREATEDB, CREATEROLE, REPLICATION and BYPASSRLS: their NO forms (what
/// pg_dump writes) are what weir does anyway; the others are refused.
fn refuse_unsupported_flags<const N: usize>(
    flags: [Option<bool>; N],
    _options: &mut RoleOptions,
) -> Result<()> {
    if flags.contains(&Some(true)) {
        return Err(unsupported(
            "CREATEDB, CREATEROLE, REPLICATION and BYPASSRLS",
        ));
    }
    Ok(())
}

fn check_unsupported_create_clauses(create: &ast::CreateRole) -> Result<()> {
    let memberships = !create.in_role.is_empty()
        || !create.in_group.is_empty()
        || !create.role.is_empty()
        || !create.user.is_empty()
        || !create.admin.is_empty();
    if memberships {
        return Err(unsupported("role membership (IN ROLE, ROLE, ADMIN)"));
    }
    if create.connection_limit.is_some() || create.valid_until.is_some() {
        return Err(unsupported("CONNECTION LIMIT and VALID UNTIL"));
    }
    Ok(())
}

fn password_text(password: &ast::Password) -> Result<Option<String>> {
    let ast::Password::Password(expression) = password else {
        return Ok(None);
    };
    match expression {
        ast::Expr::Value(value) => match &value.value {
            ast::Value::SingleQuotedString(text) | ast::Value::EscapedStringLiteral(text) => {
                Ok(Some(text.clone()))
            }
            ast::Value::Null => Ok(None),
            _ => Err(password_not_text()),
        },
        _ => Err(password_not_text()),
    }
}

fn password_not_text() -> WeirError {
    WeirError::syntax("a password must be a string literal")
        .with_hint("Write PASSWORD 'secret' (or PASSWORD NULL to remove it).")
}

fn role_name(name: &ast::ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(ident)] => Ok(identifier(ident)),
        _ => Err(WeirError::syntax(format!(
            "role name {name} must be a single name"
        ))),
    }
}

/// Unquoted names fold to lower case, as in Postgres.
fn identifier(ident: &ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

fn unsupported(what: &str) -> WeirError {
    WeirError::new(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!("{what} is not supported"),
    )
    .with_hint("weir roles have PASSWORD, SUPERUSER and LOGIN (docs/sql-reference.md, \"Roles\").")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenize(sql: &str) -> Vec<TokenWithSpan> {
        use crate::sql::dialect::WeirDialect;
        datafusion::sql::sqlparser::tokenizer::Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap()
    }

    fn parsed(sql: &str) -> RoleStatement {
        let tokens = tokenize(sql);
        parse(&tokens).unwrap().expect("a role statement")
    }

    fn refused(sql: &str) -> WeirError {
        let tokens = tokenize(sql);
        parse(&tokens).expect_err(sql)
    }

    #[test]
    fn create_user_logs_in_by_default_and_create_role_does_not() {
        let user = parsed("CREATE USER Alice WITH PASSWORD 'pw'");
        let RoleStatement::Create { name, options, .. } = user else {
            panic!()
        };
        assert_eq!(name, "alice");
        assert_eq!(options.login, Some(true));
        assert_eq!(options.password, Some(Some("pw".to_string())));
        let RoleStatement::Create { options, .. } = parsed("CREATE ROLE \"Readers\"") else {
            panic!()
        };
        assert_eq!(options.login, None);
        let RoleStatement::Create { options, .. } = parsed("CREATE USER bob NOLOGIN SUPERUSER")
        else {
            panic!()
        };
        assert_eq!(
            (options.login, options.superuser),
            (Some(false), Some(true))
        );
    }

    #[test]
    fn alter_and_drop_in_both_spellings() {
        assert_eq!(
            parsed("ALTER USER alice WITH PASSWORD NULL NOSUPERUSER"),
            RoleStatement::Alter {
                name: "alice".into(),
                options: RoleOptions {
                    password: Some(None),
                    superuser: Some(false),
                    login: None
                }
            }
        );
        assert_eq!(
            parsed("DROP USER IF EXISTS alice, \"Bob\""),
            RoleStatement::Drop {
                names: vec!["alice".into(), "Bob".into()],
                if_exists: true
            }
        );
        assert!(matches!(parsed("drop role x"), RoleStatement::Drop { .. }));
    }

    #[test]
    fn what_weir_cannot_honour_is_refused_with_0a000() {
        for sql in [
            "CREATE ROLE a CREATEDB",
            "CREATE ROLE a IN ROLE b",
            "CREATE ROLE a VALID UNTIL '2030-01-01'",
            "ALTER ROLE a RENAME TO b",
            "ALTER ROLE a SET search_path = x",
            "ALTER USER a CONNECTION LIMIT 3",
        ] {
            assert_eq!(refused(sql).code, sqlstate::FEATURE_NOT_SUPPORTED, "{sql}");
        }
        assert_eq!(
            refused("CREATE USER a PASSWORD 42").code,
            sqlstate::SYNTAX_ERROR
        );
    }

    #[test]
    fn other_statements_are_not_role_statements() {
        for sql in [
            "CREATE TABLE user_roles (a INT)",
            "SELECT user",
            "DROP TABLE role",
        ] {
            let tokens = tokenize(sql);
            assert_eq!(parse(&tokens).unwrap(), None, "{sql}");
        }
    }
}
