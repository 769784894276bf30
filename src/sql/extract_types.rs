//! `EXTRACT` and `date_part` typed and valued as Postgres has them:
//! `EXTRACT(field FROM x)` is a numeric — whole for most fields, with six
//! places for `second` and `epoch` (`56.789000`), three for `milliseconds`
//! — and `date_part('field', x)` a double precision; the seconds carry
//! their fraction (DataFusion's `second` was the whole seconds, an Int32).
//! Both are planned over DataFusion's `date_part`: the seconds from its
//! `microsecond` (seconds and fraction, in microseconds). From SQL edition
//! 4 (a view's values and types change). Fields DataFusion lacks are left
//! for its error.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, CastKind, DataType, ExactNumberInfo, Expr, SetExpr, Value, VisitMut, VisitorMut,
};

use super::ast_build::{call, name_items, plain_call_arguments};

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut ExtractRewriter);
}

struct ExtractRewriter;

impl VisitorMut for ExtractRewriter {
    type Break = ();

    /// Postgres names the columns `extract` and `date_part`.
    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            name_items(&mut select.projection, |expr| match expr {
                Expr::Extract { field, .. } if planned(&field_name(field)).is_some() => {
                    Some("extract")
                }
                _ => date_part_call(expr).map(|_| "date_part"),
            });
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let rewritten = match &*expr {
            Expr::Extract {
                field, expr: input, ..
            } => extract(&field_name(field), input.as_ref().clone()),
            other => date_part_call(other).and_then(|(field, input)| date_part(&field, input)),
        };
        if let Some(rewritten) = rewritten {
            *expr = rewritten;
        }
        ControlFlow::Continue(())
    }
}

fn field_name(field: &ast::DateTimeField) -> String {
    field.to_string().to_lowercase()
}

/// DataFusion's field for `field`, and the scale of Postgres's numeric
/// (None: a field this rewrite leaves alone).
fn planned(field: &str) -> Option<(&'static str, u64)> {
    Some(match field {
        "second" | "seconds" => ("microsecond", 6),
        "millisecond" | "milliseconds" => ("microsecond", 3),
        "microsecond" | "microseconds" => ("microsecond", 0),
        "epoch" => ("epoch", 6),
        "year" | "years" => ("year", 0),
        "month" | "months" => ("month", 0),
        "day" | "days" => ("day", 0),
        "hour" | "hours" => ("hour", 0),
        "minute" | "minutes" => ("minute", 0),
        "quarter" => ("quarter", 0),
        "week" => ("week", 0),
        "dow" => ("dow", 0),
        "doy" => ("doy", 0),
        "isodow" => ("isodow", 0),
        "isoyear" => ("isoyear", 0),
        "century" => ("century", 0),
        "decade" => ("decade", 0),
        "millennium" => ("millennium", 0),
        _ => return None,
    })
}

/// `EXTRACT(field FROM input)` as a numeric of the field's scale.
fn extract(field: &str, input: Expr) -> Option<Expr> {
    let (part, scale) = planned(field)?;
    let value = value(field, part, input);
    Some(cast(value, numeric(scale)))
}

/// `date_part('field', input)` as a double.
fn date_part(field: &str, input: Expr) -> Option<Expr> {
    let (part, _) = planned(field)?;
    Some(value(field, part, input))
}

/// The field's value as a double: the seconds and milliseconds from the
/// microseconds, the rest as DataFusion computes them.
fn value(field: &str, part: &str, input: Expr) -> Expr {
    let raw = call("date_part", vec![text(part), input], vec![]);
    let double = cast(raw, DataType::DoublePrecision);
    let divisor = match field {
        "second" | "seconds" => 1_000_000,
        "millisecond" | "milliseconds" => 1_000,
        _ => return double,
    };
    Expr::Nested(Box::new(Expr::BinaryOp {
        left: Box::new(double),
        op: ast::BinaryOperator::Divide,
        right: Box::new(cast(
            Expr::value(Value::Number(divisor.to_string(), false)),
            DataType::DoublePrecision,
        )),
    }))
}

/// The field and input of a plain `date_part('field', input)` call.
fn date_part_call(expr: &Expr) -> Option<(String, Expr)> {
    let [Expr::Value(field), input] = plain_call_arguments(expr, "date_part", 2)?[..] else {
        return None;
    };
    let Value::SingleQuotedString(field) = &field.value else {
        return None;
    };
    let field = field.to_lowercase();
    planned(&field).map(|_| (field, input.clone()))
}

fn text(value: &str) -> Expr {
    Expr::value(Value::SingleQuotedString(value.to_string()))
}

fn numeric(scale: u64) -> DataType {
    DataType::Numeric(ExactNumberInfo::PrecisionAndScale(38, scale as i64))
}

fn cast(expr: Expr, data_type: DataType) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr),
        data_type,
        array: false,
        format: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::ast_build::rewritten;

    #[test]
    fn extract_is_numeric_and_date_part_double() {
        assert_eq!(
            rewritten("SELECT EXTRACT(SECOND FROM t) FROM x", rewrite),
            "SELECT CAST((CAST(date_part('microsecond', t) AS DOUBLE PRECISION) / \
             CAST(1000000 AS DOUBLE PRECISION)) AS NUMERIC(38,6)) AS extract FROM x"
        );
        assert_eq!(
            rewritten("SELECT date_part('year', t) + 1 FROM x", rewrite),
            "SELECT CAST(date_part('year', t) AS DOUBLE PRECISION) + 1 FROM x"
        );
        assert_eq!(
            rewritten("SELECT date_part('julian', t) FROM x", rewrite),
            "SELECT date_part('julian', t) FROM x"
        );
    }
}
