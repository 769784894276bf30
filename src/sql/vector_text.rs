//! An `int2vector` / `oidvector` cast to text (`pg_index.indkey::varchar`,
//! which SQLAlchemy 1.4 — Superset's — splits on spaces to find an index's
//! columns): Postgres prints the elements separated by spaces, DataFusion
//! prints a list as `[1, 2]`. weir keeps vectors as lists tagged with
//! `PG_TYPE_METADATA`; an analyzer rule, after coercion has placed the
//! casts, turns a text cast of such a column into `array_to_string(v, ' ')`.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::functions_nested::string::array_to_string_udf;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{lit, Cast, Expr, ExprSchemable, LogicalPlan, TryCast};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_every_expression;
use crate::catalog::PG_TYPE_METADATA;

#[derive(Debug, Default)]
pub struct VectorTextRule;

impl AnalyzerRule for VectorTextRule {
    fn name(&self) -> &str {
        "weir_vector_text"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_every_expression(plan, rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Cast(Cast { expr, field })
            if is_text(field.data_type()) && is_vector(&expr, schema) =>
        {
            let joined = joined(*expr);
            Ok(Transformed::yes(Expr::Cast(Cast::new_from_field(
                Box::new(joined),
                field,
            ))))
        }
        Expr::TryCast(TryCast { expr, field })
            if is_text(field.data_type()) && is_vector(&expr, schema) =>
        {
            let joined = joined(*expr);
            Ok(Transformed::yes(Expr::TryCast(TryCast::new_from_field(
                Box::new(joined),
                field,
            ))))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    )
}

fn is_vector(expr: &Expr, schema: &DFSchema) -> bool {
    expr.to_field(schema)
        .is_ok_and(|(_, field)| field.metadata().contains_key(PG_TYPE_METADATA))
}

fn joined(vector: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        array_to_string_udf(),
        vec![vector, lit(" ")],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::logical_expr::{cast, col};
    use std::collections::HashMap;
    use std::sync::Arc;

    fn schema() -> DFSchema {
        let element = Arc::new(Field::new_list_field(DataType::Int16, true));
        let metadata = HashMap::from([(PG_TYPE_METADATA.to_string(), "int2vector".to_string())]);
        let vector =
            Field::new("indkey", DataType::List(element.clone()), true).with_metadata(metadata);
        let array = Field::new("conkey", DataType::List(element), true);
        DFSchema::try_from(Schema::new(vec![vector, array])).unwrap()
    }

    #[test]
    fn vectors_cast_to_text_are_joined_by_spaces() {
        let rewritten = rewrite(cast(col("indkey"), DataType::Utf8), &schema()).unwrap();
        assert!(rewritten.transformed);
        assert_eq!(
            rewritten.data.to_string(),
            "CAST(array_to_string(indkey, Utf8(\" \")) AS Utf8)"
        );
    }

    #[test]
    fn arrays_keep_their_text() {
        let rewritten = rewrite(cast(col("conkey"), DataType::Utf8), &schema()).unwrap();
        assert!(!rewritten.transformed);
    }
}
