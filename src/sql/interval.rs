//! Constant interval literals as nanoseconds, for checks the parser makes
//! on window sizes. Only fixed-length units are accepted (no months/years).

use datafusion::sql::sqlparser::ast::{Expr, Interval, Value};

const NANOS_PER_MICROSECOND: i128 = 1_000;
const NANOS_PER_MILLISECOND: i128 = 1_000_000;
const NANOS_PER_SECOND: i128 = 1_000_000_000;

fn unit_nanoseconds(unit: &str) -> Option<i128> {
    let unit = unit.to_ascii_lowercase();
    let unit = unit.trim_end_matches('s');
    Some(match unit {
        "microsecond" | "u" => NANOS_PER_MICROSECOND,
        "millisecond" | "m" => NANOS_PER_MILLISECOND,
        "second" | "sec" | "" => NANOS_PER_SECOND,
        "minute" | "min" => 60 * NANOS_PER_SECOND,
        "hour" | "h" | "hr" => 3_600 * NANOS_PER_SECOND,
        "day" | "d" => 86_400 * NANOS_PER_SECOND,
        "week" | "w" => 7 * 86_400 * NANOS_PER_SECOND,
        _ => return None,
    })
}

/// The length of `expr` if it is an INTERVAL literal of fixed length:
/// `INTERVAL '5' MINUTE`, `INTERVAL '5 minutes'`, `INTERVAL '1 hour 30 minutes'`.
pub fn interval_nanoseconds(expr: &Expr) -> Option<i128> {
    let Expr::Interval(Interval {
        value,
        leading_field,
        last_field: None,
        ..
    }) = expr
    else {
        return None;
    };
    let Expr::Value(value) = value.as_ref() else {
        return None;
    };
    let Value::SingleQuotedString(text) = &value.value else {
        return None;
    };
    match leading_field {
        Some(field) => {
            let amount: f64 = text.trim().parse().ok()?;
            let unit = unit_nanoseconds(&field.to_string())?;
            Some((amount * unit as f64) as i128)
        }
        None => parse_parts(text),
    }
}

/// The length of an interval written as text: '10 minutes', '1 hour 30 minutes'.
pub fn text_nanoseconds(text: &str) -> Option<i128> {
    parse_parts(text)
}

/// "1 hour 30 minutes", "90 seconds", "1.5 hours", and the compact
/// "10s", "500ms", "5m", "2h".
fn parse_parts(text: &str) -> Option<i128> {
    if let Some(compact) = compact(text.trim()) {
        return Some(compact);
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() || words.len() % 2 != 0 {
        return None;
    }
    words.chunks(2).try_fold(0i128, |total, pair| {
        let amount: f64 = pair[0].parse().ok()?;
        let unit = unit_nanoseconds(pair[1])?;
        Some(total + (amount * unit as f64) as i128)
    })
}

/// "10s", "500ms", "5m", "2h", "1d": a number glued to a short unit.
fn compact(text: &str) -> Option<i128> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (amount, unit) = text.split_at(split);
    let amount: f64 = amount.parse().ok()?;
    let unit = match unit {
        "us" => NANOS_PER_MICROSECOND,
        "ms" => NANOS_PER_MILLISECOND,
        "s" => NANOS_PER_SECOND,
        "m" | "min" => 60 * NANOS_PER_SECOND,
        "h" => 3_600 * NANOS_PER_SECOND,
        "d" => 86_400 * NANOS_PER_SECOND,
        _ => return None,
    };
    Some((amount * unit as f64) as i128)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn nanos(sql: &str) -> Option<i128> {
        let expr = Parser::new(&WeirDialect::new())
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
        interval_nanoseconds(&expr)
    }

    #[test]
    fn both_spellings() {
        assert_eq!(nanos("INTERVAL '5' MINUTE"), Some(300 * NANOS_PER_SECOND));
        assert_eq!(nanos("INTERVAL '5 minutes'"), Some(300 * NANOS_PER_SECOND));
        assert_eq!(
            nanos("INTERVAL '1 hour 30 minutes'"),
            Some(5_400 * NANOS_PER_SECOND)
        );
        assert_eq!(
            nanos("INTERVAL '500 milliseconds'"),
            Some(500 * NANOS_PER_MILLISECOND)
        );
        assert_eq!(nanos("INTERVAL '2' DAY"), Some(172_800 * NANOS_PER_SECOND));
        assert_eq!(text_nanoseconds("10s"), Some(10 * NANOS_PER_SECOND));
        assert_eq!(text_nanoseconds("500ms"), Some(500 * NANOS_PER_MILLISECOND));
        assert_eq!(text_nanoseconds("5m"), Some(300 * NANOS_PER_SECOND));
    }

    #[test]
    fn variable_or_unknown_lengths_are_none() {
        assert_eq!(nanos("INTERVAL '1' MONTH"), None);
        assert_eq!(nanos("INTERVAL '1 year'"), None);
        assert_eq!(nanos("size_column"), None);
    }
}
