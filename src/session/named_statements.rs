//! SQL-level `PREPARE name [(types)] AS statement`, `EXECUTE name [(values)]`
//! and `DEALLOCATE`, as Postgres has them. A named statement is prepared
//! once, as a driver's would be (`Session::prepare`), and kept for the
//! session; EXECUTE evaluates its values and runs it with them as `$1..$n`.
//! Declared types become casts of the parameters (`$1::int`), which is how
//! a parameter's type is inferred anyway (session::parameters).
//!
//! These live in the session, beside the protocol's prepared statements in
//! pgwire's store: DEALLOCATE looks here first and then there, and
//! DEALLOCATE ALL / DISCARD ALL empty both. Unlike Postgres, one name may
//! be used in both at once (weir's own decision, docs/decisions.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::common::{ParamValues, ScalarValue};
use datafusion::physical_plan::collect;
use datafusion::sql::sqlparser::ast::{
    self, CastKind, Expr, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;

use super::{Action, Outcome, Prepared, Session, Utility};
use crate::engine::CommandDone;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql;

/// A statement prepared by PREPARE (equal only to itself: Utility
/// compares).
#[derive(Debug, Clone)]
pub struct Statement(Arc<Prepared>);

impl PartialEq for Statement {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The session's named statements.
#[derive(Default)]
pub struct NamedStatements {
    statements: Mutex<HashMap<String, Arc<Prepared>>>,
}

impl NamedStatements {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Prepared>>> {
        self.statements
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn get(&self, name: &str) -> Result<Arc<Prepared>> {
        self.lock()
            .get(name)
            .cloned()
            .ok_or_else(|| undefined(name))
    }

    /// Forgets `name` (None: every one); whether it was here.
    pub(super) fn remove(&self, name: Option<&str>) -> bool {
        match name {
            Some(name) => self.lock().remove(name).is_some(),
            None => {
                self.lock().clear();
                true
            }
        }
    }
}

fn undefined(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_STATEMENT_NAME,
        format!("prepared statement \"{name}\" does not exist"),
    )
    .with_hint(
        "PREPARE it first; named statements last until DEALLOCATE or the end of the session.",
    )
}

impl Session {
    /// `PREPARE`: the statement prepared now; kept when this executes.
    pub(super) async fn prepare_named(
        &self,
        text: String,
        name: &ast::Ident,
        data_types: &[ast::DataType],
        statement: &ast::Statement,
    ) -> Result<Prepared> {
        if !matches!(
            statement,
            ast::Statement::Query(_)
                | ast::Statement::Insert(_)
                | ast::Statement::Update(_)
                | ast::Statement::Delete(_)
        ) {
            return Err(WeirError::syntax(format!(
                "PREPARE of {} is not allowed",
                statement_kind(statement)
            ))
            .with_hint("Postgres prepares SELECT, VALUES, INSERT, UPDATE and DELETE."));
        }
        let mut statement = statement.clone();
        let _ = statement.visit(&mut DeclaredTypes(data_types));
        let prepared =
            Box::pin(self.prepare_statement(sql::Statement::Standard(Box::new(statement)))).await?;
        Ok(Prepared::utility(
            text,
            Utility::Prepare {
                name: name.value.clone(),
                statement: Statement(Arc::new(prepared)),
            },
        ))
    }

    /// `EXECUTE`: described with the named statement's columns.
    pub(super) fn prepare_execute(
        &self,
        text: String,
        name: &str,
        values: &[Expr],
    ) -> Result<Prepared> {
        let named = self.named.get(name)?;
        let mut prepared = Prepared::utility(
            text,
            Utility::Execute {
                name: name.to_string(),
                values: values.to_vec(),
            },
        );
        prepared.result_schema = named.result_schema.clone();
        Ok(prepared)
    }

    pub(super) fn keep_named(&self, name: &str, statement: &Statement) -> Result<Outcome> {
        let mut statements = self.named.lock();
        if statements.contains_key(name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            )
            .with_hint("DEALLOCATE it first, or choose another name."));
        }
        statements.insert(name.to_string(), statement.0.clone());
        Ok(Outcome::Done(CommandDone::new("PREPARE")))
    }

    pub(super) async fn execute_named(&self, name: &str, values: &[Expr]) -> Result<Outcome> {
        let named = self.named.get(name)?;
        let expected = named.parameter_types.len();
        if values.len() != expected {
            return Err(WeirError::syntax(format!(
                "wrong number of parameters for prepared statement \"{name}\""
            ))
            .with_hint(format!("It takes {expected}; {} given.", values.len())));
        }
        let parameters = self.evaluate(values).await?;
        if matches!(named.action, Action::Utility(_)) {
            return Err(WeirError::internal("a named statement that is a utility"));
        }
        Box::pin(self.execute_action(&named, Some(&parameters))).await
    }

    /// EXECUTE's values, computed once (`SELECT v1, v2, …`).
    async fn evaluate(&self, values: &[Expr]) -> Result<ParamValues> {
        if values.is_empty() {
            return Ok(ParamValues::List(Vec::new()));
        }
        let shown: Vec<String> = values.iter().map(ToString::to_string).collect();
        let select = format!("SELECT {}", shown.join(", "));
        let Some(sql::Statement::Standard(statement)) = sql::parse(&select)?.pop() else {
            return Err(WeirError::internal("EXECUTE's values did not parse back"));
        };
        let (state, task) = self.planning(super::Purpose::Queries)?;
        let plan = self.engine.plan(&state, &statement).await?;
        let physical = state.create_physical_plan(&plan).await?;
        let batches = collect(physical, task).await?;
        let row: Vec<ScalarValue> = match batches.iter().find(|batch| batch.num_rows() > 0) {
            Some(batch) => batch
                .columns()
                .iter()
                .map(|column| ScalarValue::try_from_array(column, 0))
                .collect::<datafusion::common::Result<_>>()?,
            None => return Err(WeirError::internal("EXECUTE's values gave no row")),
        };
        Ok(ParamValues::from(row))
    }
}

/// `$n` wrapped in a cast to the n-th declared type.
struct DeclaredTypes<'a>(&'a [ast::DataType]);

impl VisitorMut for DeclaredTypes<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Value(ValueWithSpan {
            value: Value::Placeholder(name),
            ..
        }) = expr
        else {
            return ControlFlow::Continue(());
        };
        let declared = name
            .strip_prefix('$')
            .and_then(|number| number.parse::<usize>().ok())
            .and_then(|number| number.checked_sub(1))
            .and_then(|index| self.0.get(index));
        if let Some(data_type) = declared {
            *expr = Expr::Cast {
                kind: CastKind::DoubleColon,
                expr: Box::new(expr.clone()),
                data_type: data_type.clone(),
                array: false,
                format: None,
            };
        }
        ControlFlow::Continue(())
    }
}

fn statement_kind(statement: &ast::Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    words.join(" ")
}
