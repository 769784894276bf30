//! Timestamps written to the minute (`TIMESTAMP '2026-01-01 10:00'`, an
//! INSERT of `'2026-01-01 10:00'` into a TIMESTAMP column, a comparison
//! with one), which Postgres accepts and Arrow's parser refuses ("error
//! parsing time"). An analyzer rule, after type coercion has placed the
//! casts, gives each text-to-timestamp cast text with seconds: a literal is
//! completed at plan time, any other text goes through
//! `complete_timestamp_text` first. COPY completes its own values
//! (`connectors::pg_copy`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, ScalarUDF, TryCast};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_every_expression;
use super::text_function::text_function;
use crate::stream::time_columns::with_seconds;

#[derive(Debug)]
pub struct TimestampTextRule {
    complete: Arc<ScalarUDF>,
}

impl Default for TimestampTextRule {
    fn default() -> Self {
        TimestampTextRule {
            complete: Arc::new(text_function(
                "complete_timestamp_text",
                complete_timestamp_texts,
            )),
        }
    }
}

impl AnalyzerRule for TimestampTextRule {
    fn name(&self) -> &str {
        "weir_timestamp_text"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_every_expression(plan, |expr, schema| self.rewrite(expr, schema))
    }
}

impl TimestampTextRule {
    fn rewrite(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        match expr {
            Expr::Cast(Cast { expr, field }) if is_timestamp(field.data_type()) => {
                let expr = self.completed(*expr, schema)?;
                Ok(
                    expr.update_data(|expr| {
                        Expr::Cast(Cast::new_from_field(Box::new(expr), field))
                    }),
                )
            }
            Expr::TryCast(TryCast { expr, field }) if is_timestamp(field.data_type()) => {
                let expr = self.completed(*expr, schema)?;
                Ok(expr.update_data(|expr| {
                    Expr::TryCast(TryCast::new_from_field(Box::new(expr), field))
                }))
            }
            other => Ok(Transformed::no(other)),
        }
    }

    /// The cast's text operand with seconds added; anything else as it is.
    fn completed(&self, operand: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        match operand {
            Expr::Literal(
                ScalarValue::Utf8(Some(text))
                | ScalarValue::Utf8View(Some(text))
                | ScalarValue::LargeUtf8(Some(text)),
                metadata,
            ) => match with_seconds(&text) {
                Some(completed) => Ok(Transformed::yes(Expr::Literal(
                    ScalarValue::Utf8(Some(completed)),
                    metadata,
                ))),
                None => Ok(Transformed::no(Expr::Literal(
                    ScalarValue::Utf8(Some(text)),
                    metadata,
                ))),
            },
            Expr::Literal(..) => Ok(Transformed::no(operand)),
            operand => {
                let is_text = matches!(
                    operand.get_type(schema),
                    Ok(DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
                );
                if !is_text {
                    return Ok(Transformed::no(operand));
                }
                let call = ScalarFunction::new_udf(self.complete.clone(), vec![operand]);
                Ok(Transformed::yes(Expr::ScalarFunction(call)))
            }
        }
    }
}

fn is_timestamp(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Timestamp(..))
}

/// Text with seconds where it names a time to the minute.
fn complete_timestamp_texts(values: &ArrayRef) -> Result<ArrayRef> {
    let text = cast(values, &DataType::Utf8)?;
    let text = text
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| DataFusionError::Internal("text cast to Utf8".to_string()))?;
    let completed: StringArray = (0..text.len())
        .map(|row| {
            text.is_valid(row).then(|| {
                let value = text.value(row);
                with_seconds(value).unwrap_or_else(|| value.to_string())
            })
        })
        .collect();
    Ok(Arc::new(completed))
}
