//! Casts to text whose Postgres text differs from what DataFusion's cast
//! gives, fixed by an analyzer rule after coercion has placed the casts:
//! - an `int2vector` / `oidvector` (`pg_index.indkey::varchar`, which
//!   SQLAlchemy 1.4 — Superset's — splits on spaces to find an index's
//!   columns): Postgres prints the elements separated by spaces, DataFusion
//!   a list as `[1, 2]`. weir keeps vectors as lists tagged with
//!   `PG_TYPE_METADATA`; the cast's input becomes `array_to_string(v, ' ')`;
//! - an array: Postgres prints an array literal (`{a,"b c"}`), DataFusion
//!   `[a, b c]`; the input becomes `array_literal(a)`;
//! - a double or real: Postgres prints the shortest text that reads back
//!   (`0`, `1e+20`), Arrow `0.0`; the input becomes `float_text(x)`;
//! - a tagged catalog column (`pg_type.typinput`, a `regproc`): DataFusion
//!   keeps the input's metadata through a cast, so `typinput::text` was
//!   still sent as a regproc; every text cast gets a field of its own,
//!   which carries no tag.
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::functions_nested::string::array_to_string_udf;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{lit, Cast, Expr, ExprSchemable, LogicalPlan, TryCast};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_every_expression;
use super::postgres_text;
use super::text_function::text_function;
use crate::catalog::PG_TYPE_METADATA;

#[derive(Debug, Default)]
pub struct TextCastRule;

impl AnalyzerRule for TextCastRule {
    fn name(&self) -> &str {
        "weir_text_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_every_expression(plan, rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Cast(Cast { expr, field }) if is_text(field.data_type()) => {
            let (expr, field) = text_cast(*expr, field, schema);
            Ok(transformed(expr, |expr| {
                Expr::Cast(Cast::new_from_field(Box::new(expr), field))
            }))
        }
        Expr::TryCast(TryCast { expr, field }) if is_text(field.data_type()) => {
            let (expr, field) = text_cast(*expr, field, schema);
            Ok(transformed(expr, |expr| {
                Expr::TryCast(TryCast::new_from_field(Box::new(expr), field))
            }))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// The input and target field of a cast to text, corrected; whether
/// anything changed is in the `Transformed`.
fn text_cast(input: Expr, field: FieldRef, schema: &DFSchema) -> (Transformed<Expr>, FieldRef) {
    if !field.name().is_empty() {
        return (Transformed::no(input), field);
    }
    // A named target field is not a "type-only" cast, so DataFusion gives
    // the result the target's (empty) metadata instead of the input's. Every
    // text cast gets one: the tags of datafusion-pg-catalog's tables are
    // not in their logical schema, only in the batches they produce.
    let untagged = Arc::new(Field::new("text", field.data_type().clone(), true));
    let input = match input.get_type(schema) {
        Ok(DataType::List(_)) if is_vector(&input, schema) => joined(input),
        Ok(list) if postgres_text::renders_array(&list) => array_literal(input),
        Ok(DataType::Float32 | DataType::Float64) => float_text(input),
        _ => input,
    };
    (Transformed::yes(input), untagged)
}

fn transformed(input: Transformed<Expr>, cast: impl FnOnce(Expr) -> Expr) -> Transformed<Expr> {
    match input.transformed {
        true => Transformed::yes(cast(input.data)),
        false => Transformed::no(cast(input.data)),
    }
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    )
}

/// A list tagged as a vector type (not a tagged scalar, nor an array).
fn is_vector(expr: &Expr, schema: &DFSchema) -> bool {
    expr.to_field(schema).is_ok_and(|(_, field)| {
        matches!(field.data_type(), DataType::List(_))
            && field.metadata().contains_key(PG_TYPE_METADATA)
    })
}

fn array_literal(array: Expr) -> Expr {
    let function = text_function("array_literal", |array| {
        postgres_text::array_literal(array)
            .ok_or_else(|| DataFusionError::Internal("array_literal takes an array".to_string()))
    });
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(function), vec![array]))
}

/// A double as Postgres prints it (`0`, `1e+20`; Arrow's cast gives `0.0`
/// and `100000000000000000000.0`).
fn float_text(value: Expr) -> Expr {
    let function = text_function("float_text", |values| {
        postgres_text::column_text(values)
            .ok_or_else(|| DataFusionError::Internal("float_text takes a double".to_string()))
    });
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(function), vec![value]))
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
    use datafusion::arrow::datatypes::Schema;
    use datafusion::logical_expr::{cast, col};
    use std::collections::HashMap;

    fn schema() -> DFSchema {
        let element = Arc::new(Field::new_list_field(DataType::Int16, true));
        let metadata = HashMap::from([(PG_TYPE_METADATA.to_string(), "int2vector".to_string())]);
        let vector =
            Field::new("indkey", DataType::List(element.clone()), true).with_metadata(metadata);
        let array = Field::new("conkey", DataType::List(element), true);
        let regproc = HashMap::from([("pg.oid_alias".to_string(), "regproc".to_string())]);
        let function = Field::new("typinput", DataType::Utf8, true).with_metadata(regproc);
        DFSchema::try_from(Schema::new(vec![vector, array, function])).unwrap()
    }

    #[test]
    fn vectors_cast_to_text_are_joined_by_spaces() {
        let rewritten = rewrite(cast(col("indkey"), DataType::Utf8), &schema()).unwrap();
        assert!(rewritten.transformed);
        assert_eq!(
            rewritten.data.to_string(),
            "CAST(array_to_string(indkey, Utf8(\" \")) AS Utf8)"
        );
        let (_, field) = rewritten.data.to_field(&schema()).unwrap();
        assert!(field.metadata().is_empty());
    }

    #[test]
    fn tagged_columns_lose_their_tag() {
        let rewritten = rewrite(cast(col("typinput"), DataType::Utf8), &schema()).unwrap();
        assert!(rewritten.transformed);
        assert_eq!(rewritten.data.to_string(), "CAST(typinput AS Utf8)");
        let (_, field) = rewritten.data.to_field(&schema()).unwrap();
        assert!(field.metadata().is_empty());
        let (_, plain) = cast(col("typinput"), DataType::Utf8)
            .to_field(&schema())
            .unwrap();
        assert!(!plain.metadata().is_empty(), "DataFusion keeps the tag");
    }

    #[test]
    fn arrays_become_array_literals() {
        let rewritten = rewrite(cast(col("conkey"), DataType::Utf8), &schema()).unwrap();
        assert_eq!(
            rewritten.data.to_string(),
            "CAST(array_literal(conkey) AS Utf8)"
        );
    }
}
