//! A numeric or a double cast to an integer type rounds as Postgres rounds
//! it, where Arrow's cast truncates (`2.7::int` was 2, `-2.5::int` was -2):
//! a numeric to the nearest integer, halves away from zero (`2.5` → 3,
//! `-2.5` → -3), a double or real to the nearest even on a tie (`rint`:
//! `2.5` → 2, `3.5` → 4). An analyzer rule after coercion, so the casts
//! coercion places (an INSERT of `2.5` into an integer column) round too.
//! The input becomes `integer_rounding(x)`, of the input's type, whose
//! value Arrow's cast then takes exactly. 256-bit numerics (past 38
//! digits) still truncate. From SQL edition 4 (catalog::SQL_EDITION).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::arity::try_unary;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, TryCast, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_every_expression;

#[derive(Debug, Default)]
pub struct IntegerCastRule;

impl AnalyzerRule for IntegerCastRule {
    fn name(&self) -> &str {
        "weir_integer_casts"
    }

    /// Views made before SQL edition 4 keep truncating: their stored rows
    /// were computed so, and their retractions must match them.
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        if super::edition::of(config) < 4 {
            return Ok(plan);
        }
        rewrite_every_expression(plan, rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Cast(Cast { expr, field })
            if is_integer(field.data_type()) && rounds(&expr, schema) =>
        {
            let rounded = Box::new(integer_rounding(*expr));
            Ok(Transformed::yes(Expr::Cast(Cast::new_from_field(
                rounded, field,
            ))))
        }
        Expr::TryCast(TryCast { expr, field })
            if is_integer(field.data_type()) && rounds(&expr, schema) =>
        {
            let rounded = Box::new(integer_rounding(*expr));
            Ok(Transformed::yes(Expr::TryCast(TryCast::new_from_field(
                rounded, field,
            ))))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn is_integer(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

/// Whether the cast's input is a type whose cast to an integer truncates
/// (and is not already rounded).
fn rounds(input: &Expr, schema: &DFSchema) -> bool {
    let already = matches!(input, Expr::ScalarFunction(f) if f.name() == NAME);
    let fractional = matches!(
        input.get_type(schema),
        Ok(DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, _))
    );
    fractional && !already
}

const NAME: &str = "integer_rounding";

fn integer_rounding(input: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(IntegerRounding::default())),
        vec![input],
    ))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntegerRounding {
    signature: Signature,
}

impl Default for IntegerRounding {
    fn default() -> Self {
        IntegerRounding {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for IntegerRounding {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        arguments
            .first()
            .cloned()
            .ok_or_else(|| DataFusionError::Plan(format!("{NAME} takes one argument")))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(input) = arrays.first() else {
            return Err(DataFusionError::Plan(format!("{NAME} takes one argument")));
        };
        Ok(ColumnarValue::Array(round(input)?))
    }
}

fn round(input: &ArrayRef) -> Result<ArrayRef> {
    Ok(match input.data_type() {
        DataType::Float64 => Arc::new(
            input
                .as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64::round_ties_even),
        ),
        DataType::Float32 => Arc::new(
            input
                .as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(f32::round_ties_even),
        ),
        DataType::Decimal128(precision, scale) => {
            let unit = 10_i128.checked_pow(u32::try_from(*scale).unwrap_or(0));
            let unit = unit.filter(|unit| *unit > 1);
            let Some(unit) = unit else {
                return Ok(input.clone());
            };
            let rounded = try_unary::<Decimal128Type, _, Decimal128Type>(
                input.as_primitive::<Decimal128Type>(),
                |value| half_away_from_zero(value, unit),
            )?;
            Arc::new(rounded.with_precision_and_scale(*precision, *scale)?)
        }
        _ => input.clone(),
    })
}

/// `value` (in units of 1/`unit`) rounded to a whole multiple of `unit`,
/// halves away from zero.
fn half_away_from_zero(
    value: i128,
    unit: i128,
) -> std::result::Result<i128, datafusion::arrow::error::ArrowError> {
    let (whole, rest) = (value / unit, value % unit);
    let away = rest.unsigned_abs() * 2 >= unit.unsigned_abs();
    let whole = if away { whole + value.signum() } else { whole };
    whole.checked_mul(unit).ok_or_else(|| {
        datafusion::arrow::error::ArrowError::ComputeError("numeric out of range".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Decimal128Array, Float64Array};

    #[test]
    fn numerics_round_halves_away_from_zero() {
        let input: ArrayRef = Arc::new(
            Decimal128Array::from(vec![25, -25, 24, -26, 5, 0])
                .with_precision_and_scale(4, 1)
                .unwrap(),
        );
        let rounded = round(&input).unwrap();
        let values: Vec<i128> = rounded.as_primitive::<Decimal128Type>().values().to_vec();
        assert_eq!(values, vec![30, -30, 20, -30, 10, 0]);
    }

    #[test]
    fn doubles_round_ties_to_even() {
        let input: ArrayRef = Arc::new(Float64Array::from(vec![2.5, 3.5, -2.5, 0.5, 2.7, -2.7]));
        let rounded = round(&input).unwrap();
        let values = rounded.as_primitive::<Float64Type>().values().to_vec();
        assert_eq!(values, vec![2.0, 4.0, -2.0, 0.0, 3.0, -3.0]);
    }
}
