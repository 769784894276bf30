//! A boolean compared with a quoted literal (`indisprimary = 'f'`,
//! `active <> 'true'`): Postgres reads the untyped literal as a boolean,
//! DataFusion's coercion refuses `Boolean = Utf8`. SQLAlchemy 1.4's index
//! reflection (Superset's table metadata) sends such a comparison. An
//! expression planner sees the comparison before coercion and casts the
//! literal to boolean; text that is no boolean then fails as the cast does
//! (22P02), as in Postgres.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{cast, Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;

#[derive(Debug, Default)]
pub struct BooleanTextPlanner;

impl ExprPlanner for BooleanTextPlanner {
    fn plan_binary_op(
        &self,
        mut expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if !is_comparison(&expr.op) {
            return Ok(PlannerResult::Original(expr));
        }
        let is_boolean = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Boolean));
        if is_boolean(&expr.left) && is_text_literal(&expr.right) {
            expr.right = cast(expr.right, DataType::Boolean);
        } else if is_boolean(&expr.right) && is_text_literal(&expr.left) {
            expr.left = cast(expr.left, DataType::Boolean);
        }
        Ok(PlannerResult::Original(expr))
    }
}

fn is_comparison(op: &BinaryOperator) -> bool {
    use BinaryOperator::*;
    matches!(op, Eq | NotEq | Lt | LtEq | Gt | GtEq)
}

fn is_text_literal(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::Literal(
            ScalarValue::Utf8(Some(_))
                | ScalarValue::Utf8View(Some(_))
                | ScalarValue::LargeUtf8(Some(_)),
            _
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::logical_expr::{col, lit};

    fn planned(left: Expr, op: BinaryOperator, right: Expr) -> RawBinaryExpr {
        let schema = Schema::new(vec![
            Field::new("flag", DataType::Boolean, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let schema = DFSchema::try_from(schema).unwrap();
        let raw = RawBinaryExpr { op, left, right };
        match BooleanTextPlanner.plan_binary_op(raw, &schema).unwrap() {
            PlannerResult::Original(expr) => expr,
            PlannerResult::Planned(_) => panic!("only operands change"),
        }
    }

    #[test]
    fn quoted_literals_compared_with_booleans_are_booleans() {
        let expr = planned(col("flag"), BinaryOperator::Eq, lit("f"));
        assert_eq!(expr.right, cast(lit("f"), DataType::Boolean));
        let expr = planned(lit("true"), BinaryOperator::NotEq, col("flag"));
        assert_eq!(expr.left, cast(lit("true"), DataType::Boolean));
    }

    #[test]
    fn text_comparisons_and_other_operators_stay() {
        let expr = planned(col("name"), BinaryOperator::Eq, lit("f"));
        assert_eq!(expr.right, lit("f"));
        let expr = planned(col("flag"), BinaryOperator::And, lit("f"));
        assert_eq!(expr.right, lit("f"));
    }
}
