//! Numeric division with Postgres's precision: at least 16 digits after
//! the point. DataFusion gives `a / b` the dividend's scale plus 4, so
//! `5 / 1e6` was `0.0000` and `duration_us / 1e6` lost all but 4 places
//! (Postgres: `0.0000050000000000`). Before type coercion, the dividend of
//! a numeric division is cast to `numeric(38, s - 4)` for a result scale
//! `s` of at least 16 (or the operands' own scale, if larger). Postgres
//! picks the scale from the values (16 significant digits); a plan's
//! type must be fixed before any value is seen, so here it is 16 places.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};

/// The fewest places after the point a numeric quotient has.
const QUOTIENT_SCALE: i8 = 16;
/// What DataFusion adds to the dividend's scale for the quotient's.
const DIVISION_SCALE_INCREMENT: i8 = 4;

/// One expression rewritten (`literal_types::postgres_types` walks the plan).
pub fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return Ok(Transformed::no(expr));
    };
    let rebuilt =
        |left: Box<Expr>, right: Box<Expr>| Expr::BinaryExpr(BinaryExpr::new(left, op, right));
    if op != Operator::Divide {
        return Ok(Transformed::no(rebuilt(left, right)));
    }
    let (Ok(left_type), Ok(right_type)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(rebuilt(left, right)));
    };
    let scale = |data_type: &DataType| match data_type {
        DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale) => Some(*scale),
        data_type if data_type.is_integer() => Some(0),
        _ => None,
    };
    let is_numeric = |data_type: &DataType| {
        matches!(
            data_type,
            DataType::Decimal128(..) | DataType::Decimal256(..)
        )
    };
    let (Some(left_scale), Some(right_scale)) = (scale(&left_type), scale(&right_type)) else {
        return Ok(Transformed::no(rebuilt(left, right)));
    };
    if !is_numeric(&left_type) && !is_numeric(&right_type) {
        return Ok(Transformed::no(rebuilt(left, right)));
    }
    let quotient_scale = QUOTIENT_SCALE.max(left_scale).max(right_scale);
    let dividend_scale = quotient_scale - DIVISION_SCALE_INCREMENT;
    if dividend_scale <= left_scale || matches!(left_type, DataType::Decimal256(..)) {
        return Ok(Transformed::no(rebuilt(left, right)));
    }
    let widened = left.cast_to(&DataType::Decimal128(38, dividend_scale), schema)?;
    Ok(Transformed::yes(rebuilt(Box::new(widened), right)))
}
