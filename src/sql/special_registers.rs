//! Postgres' user registers written without parentheses: `user`,
//! `current_user`, `current_role` and `session_user` (and likewise
//! `current_catalog` and `current_schema`). sqlparser reads the
//! first three keywords as calls without an argument list, which DataFusion
//! plans as column references ("No field named user"); `current_role` is a
//! plain identifier. Each becomes a call of the session's own
//! `current_user()` / `session_user()` (registered per connection with the
//! name the client logged in with), and a select item that is only the
//! register is named as Postgres names it, so `SELECT current_user,
//! session_user` has two distinct column names.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, Function, FunctionArguments, SetExpr, VisitMut, VisitorMut,
};

use super::ast_build::{call, name_items};

/// The per-session function `current_user`, `user` and `current_role` call.
pub const CURRENT_USER_FUNCTION: &str = "current_user";
/// The per-session function `session_user` calls.
pub const SESSION_USER_FUNCTION: &str = "session_user";

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut RegisterRewriter);
}

struct RegisterRewriter;

impl VisitorMut for RegisterRewriter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            // `SELECT user` is a column named `user`, as in Postgres.
            name_items(&mut select.projection, |expr| {
                register(expr).map(|(name, _)| name)
            });
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some((_, function)) = register(expr) {
            *expr = call(function, vec![], vec![]);
        }
        ControlFlow::Continue(())
    }
}

/// The register `expr` spells (its Postgres column name) and the function
/// that answers it.
fn register(expr: &Expr) -> Option<(&'static str, &'static str)> {
    let word = match expr {
        Expr::Function(function) if bare_call(function) => match function.name.0.as_slice() {
            [part] => part.as_ident()?,
            _ => return None,
        },
        Expr::Identifier(ident) => ident,
        _ => return None,
    };
    if word.quote_style.is_some() {
        return None;
    }
    let name = word.value.to_ascii_lowercase();
    let is_function = matches!(expr, Expr::Function(_));
    match (name.as_str(), is_function) {
        ("user", true) => Some(("user", CURRENT_USER_FUNCTION)),
        ("current_user", true) => Some(("current_user", CURRENT_USER_FUNCTION)),
        ("session_user", true) => Some(("session_user", SESSION_USER_FUNCTION)),
        ("current_role", false) => Some(("current_role", CURRENT_USER_FUNCTION)),
        // Reserved words in Postgres, so never a column (Grafana, Metabase).
        ("current_catalog", _) => Some(("current_catalog", "current_database")),
        ("current_schema", _) => Some(("current_schema", "current_schema")),
        _ => None,
    }
}

/// A call written without parentheses: no argument list at all.
fn bare_call(function: &Function) -> bool {
    matches!(function.args, FunctionArguments::None)
        && matches!(function.parameters, FunctionArguments::None)
        && function.filter.is_none()
        && function.over.is_none()
        && function.within_group.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn bare_registers_become_named_calls() {
        assert_eq!(
            rewritten("SELECT user, current_user, session_user, current_role"),
            "SELECT current_user() AS user, current_user() AS current_user, \
             session_user() AS session_user, current_user() AS current_role"
        );
    }

    #[test]
    fn registers_inside_expressions_are_calls_without_a_new_name() {
        assert_eq!(
            rewritten("SELECT upper(user) AS u FROM t WHERE owner = current_user"),
            "SELECT upper(current_user()) AS u FROM t WHERE owner = current_user()"
        );
    }

    #[test]
    fn quoted_names_and_columns_stay_columns() {
        assert_eq!(
            rewritten("SELECT \"user\", current_role() FROM t"),
            "SELECT \"user\", current_role() FROM t"
        );
        assert_eq!(
            rewritten("SELECT t.user_id FROM t"),
            "SELECT t.user_id FROM t"
        );
    }
}
