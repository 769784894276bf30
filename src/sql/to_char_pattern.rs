//! `to_char(timestamp, 'YYYY-MM-DD HH24:MI:SS')` with Postgres' template
//! patterns: DataFusion's `to_char` takes chrono's `%Y-%m-%d` formats, so
//! a literal Postgres template is translated into one before planning (a
//! format with `%` in it is taken to be chrono's already and left alone).
//! A template that is not a literal (a column, a parameter) is translated
//! row by row by `postgres_template(format)`, from SQL edition 5 on; it
//! was used as a chrono format, so `to_char(ts, fmt)` printed the template
//! back. Patterns weir cannot print
//! exactly (blank-padded month and day names, upper-case names, ordinal
//! suffixes, ...) are refused with 0A000 rather than printed wrong.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::DataFusionError;
use datafusion::logical_expr::ScalarUDF;
use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, VisitMut, VisitorMut,
};

use crate::error::{sqlstate, Result, WeirError};

/// The function that translates a template that is not a literal.
const TEMPLATE_FUNCTION: &str = "postgres_template";

/// Postgres patterns and their chrono equivalents, longest first where
/// one is a prefix of another.
const PATTERNS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("YYYY", "%Y"),
    ("YY", "%y"),
    ("MM", "%m"),
    ("DDD", "%j"),
    ("DD", "%d"),
    ("Mon", "%b"),
    ("Dy", "%a"),
    ("AM", "%p"),
    ("PM", "%p"),
    // Postgres reads the numeric patterns in lower case too.
    ("hh24", "%H"),
    ("hh12", "%I"),
    ("hh", "%I"),
    ("mi", "%M"),
    ("ss", "%S"),
    ("ms", "%3f"),
    ("us", "%6f"),
    ("yyyy", "%Y"),
    ("yy", "%y"),
    ("mm", "%m"),
    ("ddd", "%j"),
    ("dd", "%d"),
];

/// Postgres patterns weir does not translate: refused, not copied as text.
const UNSUPPORTED: &[&str] = &[
    "MONTH", "Month", "month", "MON", "mon", "DAY", "Day", "day", "DY", "dy", "FM", "TH", "th",
    "TZ", "tz", "OF", "SSSS", "IYYY", "IW", "ID", "WW", "CC", "RM", "rm", "am", "pm", "A.M.",
    "P.M.", "a.m.", "p.m.", "Y,YYY", "YYY", "Q", "J", "W", "D", "Y", "I", "ssss", "iyyy", "iw",
    "id", "ww", "cc", "y,yyy", "yyy", "q", "j", "w", "d", "y", "i",
];

pub fn rewrite(statement: &mut ast::Statement, edition: u32) -> Result<()> {
    let mut rewriter = PatternRewriter {
        error: None,
        per_row: edition >= 5,
    };
    let _ = statement.visit(&mut rewriter);
    rewriter.error.map_or(Ok(()), Err)
}

struct PatternRewriter {
    error: Option<WeirError>,
    /// Whether a template that is not a literal is translated per row.
    per_row: bool,
}

impl VisitorMut for PatternRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Some(template) = template_of(expr) else {
            return ControlFlow::Continue(());
        };
        if let Expr::Value(value) = template {
            if let Value::SingleQuotedString(text) = &mut value.value {
                if !text.contains('%') {
                    match translate(text) {
                        Ok(format) => *text = format,
                        Err(error) => {
                            self.error = Some(error);
                            return ControlFlow::Break(());
                        }
                    }
                }
                return ControlFlow::Continue(());
            }
        }
        // A column, an expression or a parameter (`$1`).
        if self.per_row && !is_translated(template) {
            let expression = std::mem::replace(template, Expr::value(Value::Null));
            *template = super::ast_build::call(TEMPLATE_FUNCTION, vec![expression], vec![]);
        }
        ControlFlow::Continue(())
    }
}

/// Whether the template is a `postgres_template(…)` call already (a
/// statement rewritten twice, as a view's is).
fn is_translated(template: &Expr) -> bool {
    matches!(template, Expr::Function(function)
        if function.name.to_string().eq_ignore_ascii_case(TEMPLATE_FUNCTION))
}

/// The template (second argument) of a `to_char(…, …)` call.
fn template_of(expr: &mut Expr) -> Option<&mut Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let [name] = function.name.0.as_slice() else {
        return None;
    };
    let is_to_char = name.as_ident().is_some_and(|ident| {
        ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("to_char")
    });
    let FunctionArguments::List(list) = &mut function.args else {
        return None;
    };
    match (is_to_char, list.args.as_mut_slice()) {
        (true, [_, FunctionArg::Unnamed(FunctionArgExpr::Expr(template))]) => Some(template),
        _ => None,
    }
}

/// `postgres_template(format)`: each row's Postgres template as a chrono
/// format (one with `%` kept as it is), 0A000 for a pattern weir cannot
/// print.
pub fn template_function() -> ScalarUDF {
    super::text_function::array_function(TEMPLATE_FUNCTION, DataType::Utf8, translate_templates)
}

fn translate_templates(templates: &ArrayRef) -> datafusion::common::Result<ArrayRef> {
    let templates = cast(templates, &DataType::Utf8)?;
    let templates = templates.as_string::<i32>();
    let mut formats =
        StringBuilder::with_capacity(templates.len(), templates.value_data().len() * 2);
    for row in 0..templates.len() {
        if templates.is_null(row) {
            formats.append_null();
            continue;
        }
        let template = templates.value(row);
        match template.contains('%') {
            true => formats.append_value(template),
            false => formats.append_value(
                translate(template).map_err(|error| DataFusionError::External(Box::new(error)))?,
            ),
        }
    }
    Ok(Arc::new(formats.finish()))
}

/// A Postgres template as a chrono format.
pub fn translate(template: &str) -> Result<String> {
    let mut format = String::with_capacity(template.len() + 8);
    let mut rest = template;
    while let Some(next) = rest.chars().next() {
        if next == '"' {
            // Quoted text is copied as it is.
            let quoted = &rest[1..];
            let end = quoted.find('"').unwrap_or(quoted.len());
            push_literal(&mut format, &quoted[..end]);
            rest = quoted.get(end + 1..).unwrap_or("");
            continue;
        }
        if let Some((pattern, chrono)) = PATTERNS.iter().find(|(p, _)| rest.starts_with(p)) {
            if UNSUPPORTED
                .iter()
                .any(|u| u.len() > pattern.len() && rest.starts_with(u))
            {
                return Err(unsupported(rest));
            }
            format.push_str(chrono);
            rest = &rest[pattern.len()..];
            continue;
        }
        if UNSUPPORTED.iter().any(|u| rest.starts_with(u)) {
            return Err(unsupported(rest));
        }
        push_literal(&mut format, &rest[..next.len_utf8()]);
        rest = &rest[next.len_utf8()..];
    }
    Ok(format)
}

fn push_literal(format: &mut String, text: &str) {
    format.push_str(&text.replace('%', "%%"));
}

fn unsupported(at: &str) -> WeirError {
    let pattern: String = at.chars().take(6).collect();
    WeirError::new(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!("to_char pattern at \"{pattern}\" is not supported"),
    )
    .with_hint(
        "Supported: YYYY YY MM DD DDD HH24 HH12 HH MI SS MS US Mon Dy AM PM and quoted text; \
         or give a chrono format such as '%Y-%m-%d'.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_templates_become_chrono_formats() {
        assert_eq!(
            translate("YYYY-MM-DD HH24:MI:SS").unwrap(),
            "%Y-%m-%d %H:%M:%S"
        );
        assert_eq!(
            translate("DD Mon YY, HH12:MI AM").unwrap(),
            "%d %b %y, %I:%M %p"
        );
        assert_eq!(
            translate("HH24:MI:SS.MS \"at\" 100%").unwrap(),
            "%H:%M:%S.%3f at 100%%"
        );
        assert_eq!(translate("YYYY-MM-DDT00").unwrap(), "%Y-%m-%dT00");
        assert_eq!(
            translate("yyyy-mm-dd hh24:mi:ss.ms").unwrap(),
            "%Y-%m-%d %H:%M:%S.%3f"
        );
    }

    #[test]
    fn patterns_it_cannot_print_exactly_are_refused() {
        for template in [
            "Month DD", "FMDD", "DDTH", "Day", "MON", "YYYY Q", "HH:MI am", "yyyy q", "dd mon",
        ] {
            let error = translate(template).unwrap_err();
            assert_eq!(error.code, sqlstate::FEATURE_NOT_SUPPORTED, "{template}");
        }
    }
}
