//! Statement parameters (`$1..$n`): their types, inferred as Postgres infers
//! them, and bound values cast to those types.
//!
//! DataFusion types a placeholder itself only where it stands next to a typed
//! expression (`id = $1`, `x BETWEEN $1 AND $2`) or is an INSERT value. Postgres
//! also infers from the context an untyped parameter is used in: a cast
//! (`$1::bigint`), an operator (`$1 + 1`), a function argument. weir finds
//! those as casts: explicit ones are in the plan, and DataFusion's type
//! coercion (the analyzer) adds one wherever an operator or function needs
//! the untyped placeholder converted.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, Values};

use crate::engine::sql_types::sql_type_name;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::placeholders::{no_such_parameter, MAX_PARAMETERS};

/// The type a parameter is described and bound as: the inferred one, or
/// text where nothing says (`SELECT $1`). Postgres refuses a parameter it
/// cannot type (42P18); text is what every driver can send. Values are cast
/// to it even when the client named a type of its own, so rows always have
/// the types Describe announced.
pub fn bound_type(inferred: Option<&DataType>) -> DataType {
    inferred.cloned().unwrap_or(DataType::Utf8)
}

/// `$1..$n` types in order; None where nothing says (and for a `$k` the
/// statement does not use).
pub(super) fn parameter_types(
    plan: &LogicalPlan,
    state: &SessionState,
) -> Result<Vec<Option<DataType>>> {
    let mut types = planned_types(plan)?;
    if types.contains(&None) {
        infer_from_casts(plan, &mut types)?;
        infer_from_any(plan, &mut types)?;
    }
    if types.contains(&None) {
        // Coercion fails on some statements it would reject later anyway;
        // their parameters stay Unknown and execution reports the problem.
        let analyzed =
            state
                .analyzer()
                .execute_and_check(plan.clone(), state.config_options(), |_, _| {});
        if let Ok(analyzed) = analyzed {
            infer_from_casts(&analyzed, &mut types)?;
        }
    }
    Ok(types)
}

/// The types DataFusion gave placeholders while planning.
fn planned_types(plan: &LogicalPlan) -> Result<Vec<Option<DataType>>> {
    let mut numbered = Vec::new();
    for (name, data_type) in plan.get_parameter_types()? {
        numbered.push((parameter_index(&name)?, data_type));
    }
    let count = numbered
        .iter()
        .map(|(index, _)| index + 1)
        .max()
        .unwrap_or(0);
    let mut types = vec![None; count];
    for (index, data_type) in numbered {
        types[index] = data_type.filter(|data_type| !data_type.is_null());
    }
    Ok(types)
}

/// The plan with every untyped placeholder given its bound type, so the
/// result types announced at Describe are those of the rows later (an
/// untyped `SELECT $1` is a Null column to DataFusion, text once bound). A
/// plan that cannot be typed that way is kept as it was: executing it
/// reports the problem with the actual values.
pub(super) fn with_parameter_types(plan: LogicalPlan, types: &[Option<DataType>]) -> LogicalPlan {
    if types.is_empty() {
        return plan;
    }
    give_placeholders_types(plan.clone(), types).unwrap_or(plan)
}

fn give_placeholders_types(
    plan: LogicalPlan,
    types: &[Option<DataType>],
) -> datafusion::common::Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|expression| {
            expression.transform(|expression| match expression {
                Expr::Placeholder(Placeholder { id, field: None }) => {
                    let inferred = parameter_index(&id).ok().and_then(|index| types.get(index));
                    let data_type = bound_type(inferred.and_then(Option::as_ref));
                    let field = Arc::new(Field::new(&id, data_type, true));
                    Ok(Transformed::yes(Expr::Placeholder(Placeholder {
                        id,
                        field: Some(field),
                    })))
                }
                other => Ok(Transformed::no(other)),
            })
        })?
        .map_data(recompute_schema)
    })
    .map(|transformed| transformed.data)
}

/// VALUES keeps the schema it was built with, so it is built again
/// (as DataFusion does when it binds values).
fn recompute_schema(plan: LogicalPlan) -> datafusion::common::Result<LogicalPlan> {
    match plan {
        LogicalPlan::Values(Values { values, .. }) => LogicalPlanBuilder::values(values)?.build(),
        plan => plan.recompute_schema(),
    }
}

/// `$n` → n - 1. The parser already refused numbers outside 1..=65535, so
/// the vector sized by the largest one stays small.
fn parameter_index(name: &str) -> Result<usize> {
    let number = name
        .strip_prefix('$')
        .and_then(|digits| digits.parse::<usize>().ok())
        .ok_or_else(|| WeirError::syntax(format!("parameter {name} is not of the form $n")))?;
    if !(1..=MAX_PARAMETERS).contains(&number) {
        return Err(no_such_parameter(name));
    }
    Ok(number - 1)
}

/// Gives each still untyped parameter the type of the first cast applied
/// directly to it, in plan order.
fn infer_from_casts(plan: &LogicalPlan, types: &mut [Option<DataType>]) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expression| {
            expression.apply(|expression| {
                let cast = cast_placeholder(expression);
                let index = cast.and_then(|(name, _)| parameter_index(name).ok());
                let slot = index.and_then(|index| types.get_mut(index));
                if let (Some((_, data_type)), Some(slot @ None)) = (cast, slot) {
                    *slot = Some(data_type.clone()).filter(|data_type| !data_type.is_null());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(())
}

/// `x = ANY($n)` (planned as `array_has($n, x)`): `$n` is an array of
/// `x`'s type, as Postgres infers it (pgcli sends its relation kinds so).
fn infer_from_any(plan: &LogicalPlan, types: &mut [Option<DataType>]) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        let schema = merge_schema(&node.inputs());
        node.apply_expressions(|expression| {
            expression.apply(|expression| {
                let Expr::ScalarFunction(call) = expression else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                let [Expr::Placeholder(Placeholder { id, field: None }), element] =
                    call.args.as_slice()
                else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                let slot = parameter_index(id)
                    .ok()
                    .and_then(|index| types.get_mut(index));
                if let (true, Some(slot @ None), Ok(element_type)) =
                    (call.name() == "array_has", slot, element.get_type(&schema))
                {
                    let item = Field::new("item", element_type, true);
                    *slot = Some(DataType::List(Arc::new(item)));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(())
}

/// `CAST(<untyped $n> AS type)` (or TRY_CAST) → ($n, type).
fn cast_placeholder(expression: &Expr) -> Option<(&str, &DataType)> {
    let (inner, field) = match expression {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => (expr, field),
        _ => return None,
    };
    match inner.as_ref() {
        Expr::Placeholder(Placeholder { id, field: None }) => Some((id, field.data_type())),
        _ => None,
    }
}

/// Casts a bound value to `data_type`. A value that does not fit is the
/// client's error, not an internal one; a fraction is never cut off (a
/// float8 1.5 for a bigint parameter fails as Postgres fails '1.5').
fn cast_parameter(value: &ScalarValue, data_type: &DataType) -> Result<ScalarValue> {
    if value.data_type() == *data_type {
        return Ok(value.clone());
    }
    let fraction = match value {
        ScalarValue::Float32(Some(number)) => number.fract() != 0.0,
        ScalarValue::Float64(Some(number)) => number.fract() != 0.0,
        _ => false,
    };
    if fraction && data_type.is_integer() {
        let name = sql_type_name(data_type).unwrap_or_else(|| data_type.to_string());
        return Err(WeirError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!(
                "invalid input syntax for type {}: \"{value}\"",
                name.to_lowercase()
            ),
        ));
    }
    value.cast_to(data_type).map_err(|error| {
        WeirError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!("parameter does not fit type {data_type}: {error}"),
        )
    })
}

/// Casts bound values to their parameters' types: the plan was type-checked
/// with those (a text value bound for a Utf8View column, or an int4 for an
/// int8 one, must arrive as that type), and Describe announced result
/// types that follow from them.
pub(super) fn coerce_parameters(
    values: &ParamValues,
    types: &[Option<DataType>],
) -> Result<ParamValues> {
    let ParamValues::List(list) = values else {
        return Ok(values.clone());
    };
    let coerced = list
        .iter()
        .zip(types.iter().chain(std::iter::repeat(&None)))
        .map(|(value, inferred)| {
            let mut value = value.clone();
            value.value = cast_parameter(&value.value, &bound_type(inferred.as_ref()))?;
            Ok(value)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ParamValues::List(coerced))
}

/// The simple query protocol has no parameter values: like Postgres, a `$n`
/// there is an undefined parameter (42P02), named by its lowest number.
pub(super) fn refuse_unbound(plan: &LogicalPlan) -> Result<()> {
    let names = plan.get_parameter_names()?;
    let lowest = names
        .iter()
        .filter_map(|name| parameter_index(name).ok().map(|index| (index, name)))
        .min();
    match lowest {
        Some((_, name)) => Err(no_such_parameter(name)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::session::Session;

    async fn session() -> (tempfile::TempDir, Session) {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path()).await.unwrap();
        let session = Session::new(engine);
        let create = "CREATE TABLE typed (id BIGINT, name TEXT, day DATE, score REAL)";
        let statement = session.parse(create).unwrap().remove(0);
        let prepared = session.prepare(statement).await.unwrap();
        session.execute(&prepared, None).await.unwrap();
        (directory, session)
    }

    async fn types_of(session: &Session, sql: &str) -> Vec<Option<DataType>> {
        let statement = session.parse(sql).unwrap().remove(0);
        session.prepare(statement).await.unwrap().parameter_types
    }

    #[tokio::test]
    async fn types_come_from_casts_columns_targets_and_coercion() {
        let (_directory, session) = session().await;
        let cases = [
            ("SELECT $1::bigint + 1", vec![Some(DataType::Int64)]),
            (
                "SELECT CAST($1 AS DOUBLE PRECISION)",
                vec![Some(DataType::Float64)],
            ),
            (
                "SELECT name FROM typed WHERE id = $1",
                vec![Some(DataType::Int64)],
            ),
            ("SELECT $1 + 1", vec![Some(DataType::Int64)]),
            ("SELECT upper($1)", vec![Some(DataType::Utf8View)]),
            ("SELECT $1", vec![None]),
            ("SELECT $3::date", vec![None, None, Some(DataType::Date32)]),
        ];
        for (sql, expected) in cases {
            assert_eq!(types_of(&session, sql).await, expected, "{sql}");
        }
        let insert = types_of(&session, "INSERT INTO typed VALUES ($1, $2, $3, $4)").await;
        assert_eq!(insert[0], Some(DataType::Int64));
        assert_eq!(insert[2], Some(DataType::Date32));
        assert_eq!(insert[3], Some(DataType::Float32));
    }

    #[tokio::test]
    async fn an_untyped_parameter_is_text_in_the_result_schema_too() {
        let (_directory, session) = session().await;
        let statement = session.parse("SELECT $1 AS value").unwrap().remove(0);
        let prepared = session.prepare(statement).await.unwrap();
        assert_eq!(prepared.result_schema.field(0).data_type(), &DataType::Utf8);
    }

    #[test]
    fn fractions_are_not_cut_off() {
        let error = cast_parameter(&ScalarValue::Float64(Some(1.5)), &DataType::Int64).unwrap_err();
        assert_eq!(error.code, "22P02");
        assert_eq!(
            error.message,
            "invalid input syntax for type bigint: \"1.5\""
        );
        let whole = cast_parameter(&ScalarValue::Float64(Some(2.0)), &DataType::Int64).unwrap();
        assert_eq!(whole, ScalarValue::Int64(Some(2)));
    }
}
