//! The analyzer rule that swaps integer `+`, `-`, `*` and unary minus, and
//! float `+`, `-`, `*` and `/`, for the checked functions. It runs after type coercion, when both operands
//! have one type, and before the optimizer folds constants (which would
//! otherwise wrap `9223372036854775807 + 1` at plan time).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{internal_err, DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, ScalarUDF};
use datafusion::optimizer::AnalyzerRule;

use super::function::{Arithmetic, CheckedArithmetic};
use crate::sql::expression_walk::rewrite_every_expression;

#[derive(Debug)]
pub struct CheckedArithmeticRule {
    /// One function per `Arithmetic::ALL`, shared by every rewritten call.
    functions: Vec<Arc<ScalarUDF>>,
}

impl Default for CheckedArithmeticRule {
    fn default() -> Self {
        CheckedArithmeticRule {
            functions: Arithmetic::ALL
                .into_iter()
                .map(|arithmetic| Arc::new(ScalarUDF::from(CheckedArithmetic::new(arithmetic))))
                .collect(),
        }
    }
}

impl AnalyzerRule for CheckedArithmeticRule {
    fn name(&self) -> &str {
        "weir_checked_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_every_expression(plan, |expr, schema| self.rewrite_expr(expr, schema))
    }
}

impl CheckedArithmeticRule {
    fn rewrite_expr(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let arithmetic = match &expr {
            Expr::BinaryExpr(binary) => Arithmetic::of_operator(binary.op),
            Expr::Negative(_) => Some(Arithmetic::Negate),
            _ => None,
        };
        let checked = |arithmetic: &Arithmetic| match arithmetic {
            Arithmetic::Divide => has_float_operands(&expr, schema),
            Arithmetic::Negate => has_integer_operands(&expr, schema),
            _ => has_integer_operands(&expr, schema) || has_float_operands(&expr, schema),
        };
        let Some(arithmetic) = arithmetic.filter(checked) else {
            return Ok(Transformed::no(expr));
        };
        // `functions` follows `Arithmetic::ALL`, the declaration order.
        let function = self.functions[arithmetic as usize].clone();
        let call = ScalarFunction::new_udf(function, operands(expr)?);
        Ok(Transformed::yes(Expr::ScalarFunction(call)))
    }
}

/// True when every operand is of one integer type (what coercion leaves
/// for integer arithmetic). Anything whose type cannot be resolved here
/// (an unbound parameter) stays as it is; it is analyzed again once bound.
fn has_integer_operands(expr: &Expr, schema: &DFSchema) -> bool {
    let integer = |operand: &Expr| operand_type(operand, schema).filter(DataType::is_integer);
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => match integer(left) {
            Some(left_type) => integer(right) == Some(left_type),
            None => false,
        },
        Expr::Negative(value) => integer(value).is_some_and(|t| t.is_signed_integer()),
        _ => false,
    }
}

/// True when both operands of a binary operator are of one float type.
fn has_float_operands(expr: &Expr, schema: &DFSchema) -> bool {
    let float = |operand: &Expr| operand_type(operand, schema).filter(DataType::is_floating);
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => match float(left) {
            Some(left_type) => float(right) == Some(left_type),
            None => false,
        },
        _ => false,
    }
}

/// The type of an operand. Operands below are already checked calls
/// (the rewrite goes bottom up), whose type is their first argument's:
/// following that chain in a loop keeps `1 + 1 + ... + 1` from costing a
/// deep, stack-hungry `get_type` recursion at every level.
fn operand_type(operand: &Expr, schema: &DFSchema) -> Option<DataType> {
    let mut operand = operand;
    while let Expr::ScalarFunction(call) = operand {
        match call.args.first() {
            Some(first) if Arithmetic::of_function_name(call.name()).is_some() => operand = first,
            _ => break,
        }
    }
    operand.get_type(schema).ok()
}

fn operands(expr: Expr) -> Result<Vec<Expr>> {
    match expr {
        Expr::BinaryExpr(binary) => Ok(vec![*binary.left, *binary.right]),
        Expr::Negative(value) => Ok(vec![*value]),
        other => internal_err!("not arithmetic: {other}"),
    }
}
