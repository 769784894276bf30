//! A double and a numeric together are a double, as in Postgres
//! (`COALESCE(x::float8, 0.5)`, `CASE … THEN x::float8 ELSE 0.5 END`,
//! `ARRAY[x::float8, 20.0]`, `x::float8 = 0.3`): DataFusion unifies them
//! as `Decimal128(30, 15)`, which rounds the double to 15 places (so
//! `0.1::float8 + 0.2::float8 = 0.3` was true) and prints `1.500000000000000`.
//! Where SQL becomes a plan (before type coercion), the numeric operands of
//! such an expression are cast to double precision.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::{Case, InList};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable};

/// Functions whose arguments are unified into one type.
const UNIFYING_FUNCTIONS: [&str; 6] = [
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "make_array",
    "nvl",
];

/// One expression rewritten (`literal_types::postgres_types` walks the plan).
pub fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let mut operands = [*left, *right];
            let changed = as_doubles(&mut operands, schema)?;
            let [left, right] = operands;
            let expr = Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)));
            Ok(transformed(expr, changed))
        }
        Expr::ScalarFunction(mut call) if UNIFYING_FUNCTIONS.contains(&call.name()) => {
            let changed = as_doubles(&mut call.args, schema)?;
            Ok(transformed(Expr::ScalarFunction(call), changed))
        }
        Expr::Case(case) => case_as_doubles(case, schema),
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            let mut operands: Vec<Expr> = std::iter::once(*expr).chain(list).collect();
            let changed = as_doubles(&mut operands, schema)?;
            let expr = operands.remove(0);
            let list = Expr::InList(InList::new(Box::new(expr), operands, negated));
            Ok(transformed(list, changed))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn transformed(expr: Expr, changed: bool) -> Transformed<Expr> {
    match changed {
        true => Transformed::yes(expr),
        false => Transformed::no(expr),
    }
}

/// The results of a CASE (THEN and ELSE values) unified.
fn case_as_doubles(case: Case, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Case {
        expr,
        when_then_expr,
        else_expr,
    } = case;
    let (whens, thens): (Vec<Box<Expr>>, Vec<Box<Expr>>) = when_then_expr.into_iter().unzip();
    let mut results: Vec<Expr> = thens.into_iter().map(|then| *then).collect();
    let has_else = else_expr.is_some();
    results.extend(else_expr.map(|otherwise| *otherwise));
    let changed = as_doubles(&mut results, schema)?;
    let else_expr = match has_else {
        true => results.pop().map(Box::new),
        false => None,
    };
    let when_then_expr = whens
        .into_iter()
        .zip(results.into_iter().map(Box::new))
        .collect();
    let case = Expr::Case(Case::new(expr, when_then_expr, else_expr));
    Ok(transformed(case, changed))
}

/// Casts the numeric operands to double precision when another operand
/// is a float; whether any changed.
fn as_doubles(operands: &mut [Expr], schema: &DFSchema) -> Result<bool> {
    let types: Vec<Option<DataType>> = operands
        .iter()
        .map(|operand| operand.get_type(schema).ok())
        .collect();
    let has_float = types.iter().flatten().any(DataType::is_floating);
    let is_numeric = |data_type: &DataType| {
        matches!(
            data_type,
            DataType::Decimal128(..) | DataType::Decimal256(..)
        )
    };
    if !has_float || !types.iter().flatten().any(is_numeric) {
        return Ok(false);
    }
    for (operand, data_type) in operands.iter_mut().zip(&types) {
        if data_type.as_ref().is_some_and(is_numeric) {
            let numeric = std::mem::replace(
                operand,
                Expr::Literal(datafusion::common::ScalarValue::Null, None),
            );
            *operand = numeric.cast_to(&DataType::Float64, schema)?;
        }
    }
    Ok(true)
}
