//! `timestamp - timestamp` is an interval in Postgres — the difference in
//! days and time, `justify_hours` of it (`timestamp_mi`) — and an Arrow
//! duration in DataFusion, which printed in hours and which `date +`,
//! `time +`, unary minus and `* n` refused. An expression planner sees the
//! subtraction before coercion and plans `justify_hours(CAST(a - b AS
//! interval))`. From SQL edition 4: a view made before keeps its durations
//! (`materialized::planning_state` leaves the planner out).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, IntervalUnit, TimeUnit};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{cast, BinaryExpr, Expr, ExprSchemable, Operator, ScalarUDF};
use datafusion::sql::sqlparser::ast::BinaryOperator;

const TIMESTAMP: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

/// `operand` as a timestamp when it is one: a timestamp, or `date ±
/// interval` (a timestamp in Postgres; DataFusion types it a date until
/// `interval_order` corrects it, after planning).
fn timestamp(operand: &Expr, schema: &DFSchema) -> Option<Expr> {
    match operand.get_type(schema).ok()? {
        DataType::Timestamp(_, _) => Some(operand.clone()),
        DataType::Date32 => match operand {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: op @ (Operator::Plus | Operator::Minus),
                right,
            }) if is_date(left, schema)
                && matches!(right.get_type(schema), Ok(DataType::Interval(_))) =>
            {
                Some(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(midnight(left)),
                    *op,
                    right.clone(),
                )))
            }
            _ => None,
        },
        _ => None,
    }
}

fn is_date(operand: &Expr, schema: &DFSchema) -> bool {
    matches!(operand.get_type(schema), Ok(DataType::Date32))
}

fn midnight(date: &Expr) -> Expr {
    cast(date.clone(), TIMESTAMP)
}

/// Its Debug name, which `planning_state` looks for to leave it out.
pub const PLANNER_NAME: &str = "TimestampDifferencePlanner";

#[derive(Debug)]
pub struct TimestampDifferencePlanner {
    justify_hours: Arc<ScalarUDF>,
}

impl Default for TimestampDifferencePlanner {
    fn default() -> Self {
        TimestampDifferencePlanner {
            justify_hours: Arc::new(super::justify::justify_hours()),
        }
    }
}

impl ExprPlanner for TimestampDifferencePlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if expr.op != BinaryOperator::Minus {
            return Ok(PlannerResult::Original(expr));
        }
        let (left, right) = match (
            timestamp(&expr.left, schema),
            timestamp(&expr.right, schema),
        ) {
            (Some(left), Some(right)) => (left, right),
            // A timestamp less a date: the date at midnight.
            (Some(left), None) if is_date(&expr.right, schema) => (left, midnight(&expr.right)),
            (None, Some(right)) if is_date(&expr.left, schema) => (midnight(&expr.left), right),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let difference = Expr::BinaryExpr(BinaryExpr::new(
            Box::new(left),
            Operator::Minus,
            Box::new(right),
        ));
        let interval = cast(difference, DataType::Interval(IntervalUnit::MonthDayNano));
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(self.justify_hours.clone(), vec![interval]),
        )))
    }
}
