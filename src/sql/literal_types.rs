//! Number literals typed as Postgres types them: an integer that fits in
//! 32 bits is an `integer` (DataFusion makes every integer a `bigint`, so
//! `2147483647 + 1` never overflowed and `SELECT 1` described an int8
//! column), and one past `bigint` is a `numeric` (DataFusion made it an
//! unsigned 64-bit integer). Literals with a fraction or exponent are
//! `numeric` through DataFusion's `parse_float_as_decimal`. The literals
//! are retyped once, where SQL becomes a plan (`postgres_types`, before
//! any type coercion), so coercion then widens them as Postgres would
//! (`bigint_column + 1` is a bigint) and Describe tells clients the types
//! the rows come in. Not an analyzer rule: the analyzer also runs on
//! plans whose bigint literals are a bound parameter's value.
//! LIMIT / OFFSET and VALUES lists keep DataFusion's types: the first are
//! read as bigint, and a VALUES list's rows must agree on one type. An
//! INSERT's or UPDATE's values were cast to the table's column types
//! while they were bigint literals; where a retyped literal changed a
//! value's type, the projection feeding the table casts it back.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Result, ScalarValue};
use std::sync::Arc;

use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection};
use datafusion::optimizer::AnalyzerRule;

use super::expression_walk::rewrite_expressions_except;

/// A plan fresh from SQL with its literals typed as Postgres types them,
/// doubles unified with numerics as doubles (sql::float_numeric),
/// numeric quotients with 16 places (sql::numeric_division) and intervals
/// compared on one line of time (sql::interval_order); from edition 3,
/// EXCEPT ALL / INTERSECT ALL counting copies (sql::counted_set_operations).
/// Only in planning states that read `0.1` as a numeric: a materialized
/// view created by an earlier edition of weir's SQL (catalog::SQL_EDITION)
/// is planned as it was, since its stored rows have that plan's types.
pub fn postgres_types(plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
    if !config.sql_parser.parse_float_as_decimal {
        return Ok(plan);
    }
    let plan = match super::edition::of(config) >= 3 {
        true => super::counted_set_operations::rewrite(plan)?,
        false => plan,
    };
    let skip = |plan: &LogicalPlan| matches!(plan, LogicalPlan::Limit(_) | LogicalPlan::Values(_));
    let plan = rewrite_expressions_except(plan, skip, |expr, _| Ok(retyped(expr)))?;
    let plan = conform_dml(plan)?;
    // One walk for the rewrites, in this order: a numeric beside a double
    // becomes a double before division picks a numeric scale; NULLIF of
    // intervals (edition 4) becomes a comparison interval_order then makes.
    let edition = super::edition::of(config);
    rewrite_expressions_except(
        plan,
        |_| false,
        |expr, schema| {
            super::float_numeric::rewrite(expr, schema)?
                .transform_data(|expr| super::numeric_division::rewrite(expr, schema))?
                .transform_data(|expr| match edition >= 4 {
                    true => super::interval_order::nullif(expr, schema),
                    false => Ok(Transformed::no(expr)),
                })?
                .transform_data(|expr| super::interval_order::rewrite(expr, schema))
        },
    )
}

/// A DML node's input projection with each value cast to its column's
/// type where the two differ.
fn conform_dml(plan: LogicalPlan) -> Result<LogicalPlan> {
    let LogicalPlan::Dml(mut dml) = plan else {
        return Ok(plan);
    };
    let target = dml.target.schema();
    let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
        return Ok(LogicalPlan::Dml(dml));
    };
    if projection.expr.len() != target.fields().len() {
        return Ok(LogicalPlan::Dml(dml));
    }
    let input_schema = projection.input.schema();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(projection.expr.len());
    for (expr, field) in projection.expr.iter().zip(target.fields()) {
        let (name_qualifier, name) = expr.qualified_name();
        if expr.get_type(input_schema)? == *field.data_type() {
            exprs.push(expr.clone());
            continue;
        }
        changed = true;
        let cast = expr
            .clone()
            .unalias()
            .cast_to(field.data_type(), input_schema)?;
        exprs.push(cast.alias_qualified(name_qualifier, name));
    }
    if changed {
        let input = Projection::try_new(exprs, projection.input.clone())?;
        dml.input = Arc::new(LogicalPlan::Projection(input));
        return Ok(LogicalPlan::Dml(dml));
    }
    Ok(LogicalPlan::Dml(dml))
}

fn retyped(expr: Expr) -> Transformed<Expr> {
    match expr {
        Expr::Literal(ScalarValue::Int64(Some(value)), metadata) => match i32::try_from(value) {
            Ok(value) => Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(value)), metadata)),
            Err(_) => Transformed::no(Expr::Literal(ScalarValue::Int64(Some(value)), metadata)),
        },
        // `1e3` is read with a negative scale, which Postgres's numeric
        // (and weir's output of it) does not have: 1000 at scale 0.
        Expr::Literal(ScalarValue::Decimal128(Some(value), precision, scale), metadata)
            if scale < 0 =>
        {
            let shift = u32::from(scale.unsigned_abs());
            let widened = 10i128
                .checked_pow(shift)
                .and_then(|factor| value.checked_mul(factor))
                .filter(|_| u32::from(precision) + shift <= 38);
            match widened {
                Some(widened) => Transformed::yes(Expr::Literal(
                    ScalarValue::Decimal128(Some(widened), precision + shift as u8, 0),
                    metadata,
                )),
                None => Transformed::no(Expr::Literal(
                    ScalarValue::Decimal128(Some(value), precision, scale),
                    metadata,
                )),
            }
        }
        Expr::Literal(ScalarValue::UInt64(Some(value)), metadata) => Transformed::yes(
            Expr::Literal(ScalarValue::Decimal128(Some(value.into()), 20, 0), metadata),
        ),
        // `count(*)` is planned as `count(Int64(1))`, a name EXPLAIN and
        // views show: its argument is put back (its type cannot matter).
        Expr::AggregateFunction(mut call) if call.func.name() == "count" => {
            for argument in call.params.args.iter_mut() {
                if let Expr::Literal(ScalarValue::Int32(Some(value)), _) = argument {
                    *argument = Expr::Literal(ScalarValue::Int64(Some(i64::from(*value))), None);
                }
            }
            Transformed::yes(Expr::AggregateFunction(call))
        }
        other => Transformed::no(other),
    }
}

/// After type coercion: a cast coercion placed on an integer literal
/// (`bigint_column * 10` became `* CAST(10 AS BIGINT)`) folded into the
/// literal, so plans and EXPLAIN read as the query was written.
#[derive(Debug, Default)]
pub struct LiteralCastRule;

impl AnalyzerRule for LiteralCastRule {
    fn name(&self) -> &str {
        "weir_literal_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions_except(plan, |_| false, |expr, _| Ok(folded(expr)))
    }
}

fn folded(expr: Expr) -> Transformed<Expr> {
    let Expr::Cast(cast) = expr else {
        return Transformed::no(expr);
    };
    let target = cast.field.data_type();
    let widening = target.is_integer() || matches!(target, DataType::Decimal128(..));
    match cast.expr.as_ref() {
        Expr::Literal(value, metadata) if value.data_type().is_integer() && widening => {
            match value.cast_to(target) {
                Ok(folded) => Transformed::yes(Expr::Literal(folded, metadata.clone())),
                Err(_) => Transformed::no(Expr::Cast(cast)),
            }
        }
        _ => Transformed::no(Expr::Cast(cast)),
    }
}
