//! Interval literals in Postgres's own output form, which Arrow's parser
//! refuses: a time part (`'1 day 03:04:05.5'`, `'-00:30'`), a leading `@`
//! and a trailing `ago` (`'@ 2 hours ago'`). Each literal —
//! `INTERVAL '…'`, `'…'::interval`, `CAST('…' AS interval)` — is rewritten
//! before planning into amounts and units Arrow reads
//! (`1 day 3 hours 4 minutes 5.5 seconds`); anything else is left for
//! Arrow's parser and its error.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, DataType, Expr, Value, VisitMut, VisitorMut};

/// From SQL edition 4, also `('…')::interval` (the literal in
/// parentheses) and `- INTERVAL '…'`: DataFusion negated the literal's
/// text, so `- INTERVAL '1 mon 2 days'` was `-1 mons +2 days`; it becomes
/// `(INTERVAL '0 seconds' - INTERVAL '…')`, every part negated.
pub fn rewrite(statement: &mut ast::Statement, edition: u32) {
    let _ = statement.visit(&mut IntervalTexts { edition });
}

struct IntervalTexts {
    edition: u32,
}

impl VisitorMut for IntervalTexts {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.edition >= 4 {
            negate_by_subtraction(expr);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let literal = match expr {
            Expr::Interval(interval) if interval.leading_field.is_none() => interval.value.as_mut(),
            Expr::Cast {
                data_type: DataType::Interval { .. },
                expr,
                ..
            } => expr.as_mut(),
            _ => return ControlFlow::Continue(()),
        };
        let literal = match literal {
            Expr::Nested(inner) if self.edition >= 4 => inner.as_mut(),
            other => other,
        };
        if let Expr::Value(value) = literal {
            if let Value::SingleQuotedString(text) = &mut value.value {
                if let Some(normalised) = normalise(text) {
                    *text = normalised;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// `- INTERVAL '…'` as `(INTERVAL '0 seconds' - INTERVAL '…')`.
fn negate_by_subtraction(expr: &mut Expr) {
    let Expr::UnaryOp {
        op: ast::UnaryOperator::Minus,
        expr: operand,
    } = expr
    else {
        return;
    };
    let interval = match operand.as_ref() {
        Expr::Interval(_) => operand.as_ref().clone(),
        Expr::Nested(inner) if matches!(inner.as_ref(), Expr::Interval(_)) => {
            inner.as_ref().clone()
        }
        _ => return,
    };
    let zero = Expr::Interval(ast::Interval {
        value: Box::new(Expr::value(Value::SingleQuotedString(
            "0 seconds".to_string(),
        ))),
        leading_field: None,
        leading_precision: None,
        last_field: None,
        fractional_seconds_precision: None,
    });
    *expr = Expr::Nested(Box::new(Expr::BinaryOp {
        left: Box::new(zero),
        op: ast::BinaryOperator::Minus,
        right: Box::new(interval),
    }));
}

/// `text` with Postgres's time part, `@` and `ago` spelled as units; None
/// when it has none of them (Arrow reads it as it is).
pub fn normalise(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let ago = words
        .last()
        .is_some_and(|word| word.eq_ignore_ascii_case("ago"));
    let has_time = words.iter().any(|word| time_part(word).is_some());
    // A number without a unit is seconds (`'123'` is 00:02:03); Arrow
    // read it as months.
    let amount = |word: &&str| {
        word.chars()
            .all(|c| c.is_ascii_digit() || "+-.".contains(c))
    };
    let bare_amount = words
        .iter()
        .enumerate()
        .any(|(index, word)| amount(word) && words.get(index + 1).is_none_or(&amount));
    if !ago && !has_time && !bare_amount && words.first() != Some(&"@") {
        return None;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut words = words.iter().filter(|word| **word != "@").peekable();
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case("ago") {
            continue;
        }
        if let Some(time) = time_part(word) {
            parts.extend(time);
            continue;
        }
        // An amount and its unit, together (`2days`) or apart.
        match word.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+')) {
            Some(_) => parts.push(word.to_string()),
            None => {
                let unit = words.next_if(|unit| !unit.eq_ignore_ascii_case("ago"));
                let unit = unit.map_or("seconds", |unit| unit);
                parts.push(format!("{word} {unit}"));
            }
        }
    }
    if ago {
        parts = parts.iter().map(|part| negated(part)).collect();
    }
    Some(parts.join(" "))
}

/// `[-]h:m[:s[.f]]` as hours, minutes and seconds, each with the sign.
fn time_part(word: &str) -> Option<Vec<String>> {
    let (sign, rest) = match word.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", word.strip_prefix('+').unwrap_or(word)),
    };
    let fields: Vec<&str> = rest.split(':').collect();
    if !(2..=3).contains(&fields.len()) {
        return None;
    }
    let numeric = |field: &str, fraction: bool| {
        !field.is_empty()
            && field
                .chars()
                .all(|c| c.is_ascii_digit() || (fraction && c == '.'))
            && field.matches('.').count() <= 1
    };
    if !numeric(fields[0], false) || !numeric(fields[1], false) {
        return None;
    }
    let mut parts = vec![
        format!("{sign}{} hours", fields[0]),
        format!("{sign}{} minutes", fields[1]),
    ];
    if let Some(seconds) = fields.get(2) {
        if !numeric(seconds, true) {
            return None;
        }
        parts.push(format!("{sign}{seconds} seconds"));
    }
    Some(parts)
}

/// An `amount unit` part with its amount's sign flipped.
fn negated(part: &str) -> String {
    match part.strip_prefix('-') {
        Some(positive) => positive.to_string(),
        None => format!("-{}", part.strip_prefix('+').unwrap_or(part)),
    }
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn time_parts_at_and_ago() {
        assert_eq!(
            normalise("1 mon 2 days 03:04:05.5").as_deref(),
            Some("1 mon 2 days 03 hours 04 minutes 05.5 seconds")
        );
        assert_eq!(
            normalise("-00:30").as_deref(),
            Some("-00 hours -30 minutes")
        );
        assert_eq!(normalise("@ 2 hours ago").as_deref(), Some("-2 hours"));
        assert_eq!(normalise("1 day ago").as_deref(), Some("-1 day"));
        assert_eq!(normalise("1 day"), None);
        assert_eq!(normalise("5 minutes"), None);
        assert_eq!(normalise("123").as_deref(), Some("123 seconds"));
        assert_eq!(normalise("-1.5").as_deref(), Some("-1.5 seconds"));
        assert_eq!(normalise("1 day 30").as_deref(), Some("1 day 30 seconds"));
    }
}
