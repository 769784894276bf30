//! DataFusion's and Arrow's messages for common mistakes, said as Postgres
//! says them: its SQLSTATE, its wording (which drivers, ORMs and people
//! search for) and Postgres type names instead of Arrow's. Each rule
//! recognises one message by its fixed words; an error no rule knows keeps
//! its own message.

use super::{sqlstate, WeirError};

type Rule = fn(&str) -> Option<WeirError>;

const RULES: &[Rule] = &[
    unsupported_cast,
    missing_column,
    invalid_input,
    integer_out_of_range,
    numeric_overflow,
    values_length,
    subquery_rows,
    grouping,
    negative_limit,
    order_by_position,
    set_operation_columns,
    date_trunc_unit,
    zero_step,
    invalid_power_argument,
    like_escape,
    invalid_date,
    timestamp_input,
    missing_function,
    function_mismatch,
    operator_mismatch,
];

/// `error` in Postgres's words when a rule knows its message; a hint of
/// its own is kept when the rule has none.
pub fn reword(error: WeirError) -> WeirError {
    let Some(mut reworded) = RULES.iter().find_map(|rule| rule(&error.message)) else {
        return error;
    };
    if reworded.hint.is_none() {
        reworded.hint = error.hint;
    }
    reworded
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let after = &text[text.find(start)? + start.len()..];
    Some(&after[..after.find(end)?])
}

/// Postgres's name for an Arrow type as DataFusion prints it.
pub fn type_name(arrow: &str) -> String {
    let name = match arrow.trim() {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        "Float16" | "Float32" => "real",
        "Float64" => "double precision",
        "Utf8" | "LargeUtf8" | "Utf8View" => "text",
        "Boolean" => "boolean",
        "Date32" | "Date64" => "date",
        "Binary" | "LargeBinary" | "BinaryView" => "bytea",
        other if other.starts_with("Decimal") => "numeric",
        other if other.starts_with("Timestamp") && other.contains("Some") => {
            "timestamp with time zone"
        }
        other if other.starts_with("Timestamp") => "timestamp",
        other if other.starts_with("Time") => "time",
        other if other.starts_with("Interval") => "interval",
        other => other,
    };
    name.to_string()
}

fn missing_column(text: &str) -> Option<WeirError> {
    let rest = &text[text.find("No field named ")? + "No field named ".len()..];
    // The name ends at a full stop followed by a space, a line or nothing.
    let end = rest
        .char_indices()
        .find(|&(index, c)| {
            c == '.'
                && rest[index + 1..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map_or(rest.len(), |(index, _)| index);
    let name = rest[..end].replace('"', "");
    let error = WeirError::new(
        sqlstate::UNDEFINED_COLUMN,
        format!("column \"{name}\" does not exist"),
    );
    let valid = text.split("Valid fields are ").nth(1);
    Some(match (between(text, "Did you mean '", "'"), valid) {
        (Some(near), _) => error.with_hint(format!(
            "Perhaps you meant to reference the column \"{near}\"."
        )),
        (None, Some(valid)) => error.with_hint(format!(
            "The columns there are: {}.",
            valid.trim().trim_end_matches('.')
        )),
        (None, None) => {
            error.with_hint("Check the column name; \\d <table> in psql lists the columns.")
        }
    })
}

/// "Unsupported CAST from Time64(ns) to Date32": a cast Postgres has no
/// path for either (42846), said with its type names.
fn unsupported_cast(text: &str) -> Option<WeirError> {
    let rest = text.split("Unsupported CAST from ").nth(1)?;
    let (from, to) = rest.split_once(" to ")?;
    Some(
        WeirError::new(
            sqlstate::CANNOT_COERCE,
            format!(
                "cannot cast type {} to {}",
                type_name(from),
                type_name(to.trim())
            ),
        )
        .with_hint("Cast through text, or to a type this one converts to."),
    )
}

/// "Cannot cast string 'abc' to value of Int32 type" (and "value" for
/// booleans): the value is text that does not read as the type.
fn invalid_input(text: &str) -> Option<WeirError> {
    let start = ["Cannot cast string '", "Cannot cast value '"]
        .iter()
        .find_map(|start| Some(text.find(start)? + start.len()))?;
    let rest = &text[start..];
    let value_end = rest.rfind("' to value of ")?;
    let arrow = rest[value_end..].strip_prefix("' to value of ")?;
    let arrow = arrow.strip_suffix(" type").unwrap_or(arrow);
    Some(WeirError::new(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        format!(
            "invalid input syntax for type {}: \"{}\"",
            type_name(arrow),
            &rest[..value_end]
        ),
    ))
}

/// "Can't cast value 70000 to type Int16".
fn integer_out_of_range(text: &str) -> Option<WeirError> {
    let arrow = text
        .split("Can't cast value ")
        .nth(1)?
        .split(" to type ")
        .nth(1)?;
    Some(WeirError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{} out of range", type_name(arrow)),
    ))
}

/// "123.00 is too large to store in a Decimal128 of precision 10. Max is 99999999.99".
fn numeric_overflow(text: &str) -> Option<WeirError> {
    let precision = between(
        text,
        "too large to store in a Decimal128 of precision ",
        ".",
    )?;
    let largest = text.split("Max is ").nth(1).unwrap_or("?").trim();
    Some(
        WeirError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "numeric field overflow",
        )
        .with_hint(format!(
            "A field with precision {precision} holds values up to {largest} in magnitude."
        )),
    )
}

/// "Inconsistent data length across values list: got 8 values in row 0 but
/// expected 7": the first row is measured against the INSERT's columns.
fn values_length(text: &str) -> Option<WeirError> {
    let got: usize = between(text, "values list: got ", " values")?
        .parse()
        .ok()?;
    let row = between(text, " in row ", " but")?;
    let expected: usize = text.split("but expected ").nth(1)?.trim().parse().ok()?;
    let message = match (row, got > expected) {
        ("0", true) => "INSERT has more expressions than target columns",
        ("0", false) => "INSERT has more target columns than expressions",
        _ => "VALUES lists must all be the same length",
    };
    Some(WeirError::new(sqlstate::SYNTAX_ERROR, message))
}

fn subquery_rows(text: &str) -> Option<WeirError> {
    text.contains("Scalar subquery returned more than one row")
        .then(|| {
            WeirError::new(
                sqlstate::CARDINALITY_VIOLATION,
                "more than one row returned by a subquery used as an expression",
            )
            .with_hint("Make the subquery return one row: add a WHERE, an aggregate, or LIMIT 1.")
        })
}

fn grouping(text: &str) -> Option<WeirError> {
    let column = between(text, "column \"", "\" must appear in the GROUP BY clause")?;
    Some(WeirError::new(
        sqlstate::GROUPING_ERROR,
        format!("column \"{column}\" must appear in the GROUP BY clause or be used in an aggregate function"),
    ))
}

fn negative_limit(text: &str) -> Option<WeirError> {
    if text.contains("LIMIT must be >= 0") {
        return Some(WeirError::new(
            sqlstate::INVALID_ROW_COUNT_IN_LIMIT,
            "LIMIT must not be negative",
        ));
    }
    text.contains("OFFSET must be >=0").then(|| {
        WeirError::new(
            sqlstate::INVALID_ROW_COUNT_IN_OFFSET,
            "OFFSET must not be negative",
        )
    })
}

fn order_by_position(text: &str) -> Option<WeirError> {
    let position = between(text, "Order by column out of bounds, specified: ", ",")?;
    Some(WeirError::new(
        sqlstate::INVALID_COLUMN_REFERENCE,
        format!("ORDER BY position {position} is not in select list"),
    ))
}

fn set_operation_columns(text: &str) -> Option<WeirError> {
    text.contains("queries have different number of columns")
        .then(|| {
            WeirError::new(
                sqlstate::SYNTAX_ERROR,
                "each UNION query must have the same number of columns",
            )
        })
}

fn date_trunc_unit(text: &str) -> Option<WeirError> {
    let unit = between(text, "Unsupported date_trunc granularity: '", "'")?;
    let supported = text.split("Supported values are: ").nth(1).unwrap_or("");
    Some(
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("unit \"{unit}\" not recognized for date_trunc"),
        )
        .with_hint(format!("The units are: {supported}.")),
    )
}

fn zero_step(text: &str) -> Option<WeirError> {
    text.contains("step can't be 0").then(|| {
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "step size cannot equal zero",
        )
    })
}

fn invalid_power_argument(text: &str) -> Option<WeirError> {
    [
        "cannot take square root of a negative number",
        "zero raised to a negative power is undefined",
    ]
    .into_iter()
    .find(|message| text.contains(message))
    .map(|message| WeirError::new(sqlstate::INVALID_ARGUMENT_FOR_POWER, message))
}

fn like_escape(text: &str) -> Option<WeirError> {
    text.contains("Invalid escape character in LIKE expression")
        .then(|| {
            WeirError::new(sqlstate::INVALID_ESCAPE_SEQUENCE, "invalid escape string")
                .with_hint("Escape string must be empty or one character.")
        })
}

/// make_date's "Unable to parse date from 2026, 2, 30".
fn invalid_date(text: &str) -> Option<WeirError> {
    let parts = text.split("Unable to parse date from ").nth(1)?;
    let fields: Vec<&str> = parts.split(", ").map(str::trim).collect();
    let [year, month, day] = fields.as_slice() else {
        return None;
    };
    Some(WeirError::new(
        sqlstate::DATETIME_FIELD_OVERFLOW,
        format!("date field value out of range: {year}-{month:0>2}-{day:0>2}"),
    ))
}

fn timestamp_input(text: &str) -> Option<WeirError> {
    let value = between(text, "Error parsing timestamp from '", "'")?;
    Some(
        WeirError::new(
            sqlstate::INVALID_DATETIME_FORMAT,
            format!("invalid input syntax for type timestamp: \"{value}\""),
        )
        .with_hint("Write timestamps as 'YYYY-MM-DD HH:MM:SS[.ffffff]'."),
    )
}

fn missing_function(text: &str) -> Option<WeirError> {
    let name = between(text, "Invalid function '", "'")?;
    let error = WeirError::new(
        sqlstate::UNDEFINED_FUNCTION,
        format!("function {name} does not exist"),
    );
    Some(match between(text, "Did you mean '", "'") {
        Some(near) => error.with_hint(format!("Perhaps you meant {near}.")),
        None => error.with_hint("Check the function name and argument types."),
    })
}

/// "No function matches the given name and argument types 'f(Int64,
/// Utf8)'" (with DataFusion's list of every signature it tried).
fn function_mismatch(text: &str) -> Option<WeirError> {
    let call = between(
        text,
        "No function matches the given name and argument types '",
        "'",
    )?;
    let (name, arguments) = call.strip_suffix(')')?.split_once('(')?;
    let mut types = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (index, character) in arguments.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                types.push(type_name(&arguments[start..index]));
                start = index + 1;
            }
            _ => {}
        }
    }
    if !arguments.trim().is_empty() {
        types.push(type_name(&arguments[start..]));
    }
    Some(
        WeirError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function {name}({}) does not exist", types.join(", ")),
        )
        .with_hint(
            "No function matches the given name and argument types. You might need to add explicit type casts.",
        ),
    )
}

/// "Cannot coerce arithmetic expression Utf8 + Int64 to valid types".
fn operator_mismatch(text: &str) -> Option<WeirError> {
    let expression = between(
        text,
        "Cannot coerce arithmetic expression ",
        " to valid types",
    )?;
    let (left, operator, right) =
        [" + ", " - ", " * ", " / ", " % "]
            .iter()
            .find_map(|operator| {
                let (left, right) = expression.split_once(operator)?;
                Some((left, operator.trim(), right))
            })?;
    Some(
        WeirError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!(
                "operator does not exist: {} {operator} {}",
                type_name(left),
                type_name(right)
            ),
        )
        .with_hint("No operator matches the argument types; add explicit casts."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(code: &'static str, text: &str) -> (String, String) {
        let error = reword(WeirError::new(code, text));
        (error.code.to_string(), error.message)
    }

    #[test]
    fn datafusion_messages_become_postgres_messages() {
        let cases = [
            ("No field named nope. Did you mean 'name'?", "42703", "column \"nope\" does not exist"),
            ("No field named b_t.x.", "42703", "column \"b_t.x\" does not exist"),
            ("No field named m.\nValid fields are t.a, t.b.", "42703", "column \"m\" does not exist"),
            ("Cannot cast string 'abc' to value of Int32 type", "22P02", "invalid input syntax for type integer: \"abc\""),
            ("This feature is not implemented: Unsupported CAST from Time64(ns) to Date32", "42846", "cannot cast type time to date"),
            ("Cannot cast value 'maybe' to value of Boolean type", "22P02", "invalid input syntax for type boolean: \"maybe\""),
            ("Cannot cast string 'it's' to value of Decimal128(10, 2) type", "22P02", "invalid input syntax for type numeric: \"it's\""),
            ("Can't cast value 70000 to type Int16", "22003", "smallint out of range"),
            ("Invalid argument error: 10.0 is too large to store in a Decimal128 of precision 2. Max is 9.9", "22003", "numeric field overflow"),
            ("Inconsistent data length across values list: got 8 values in row 0 but expected 7", "42601", "INSERT has more expressions than target columns"),
            ("Inconsistent data length across values list: got 1 values in row 0 but expected 7", "42601", "INSERT has more target columns than expressions"),
            ("Inconsistent data length across values list: got 1 values in row 2 but expected 2", "42601", "VALUES lists must all be the same length"),
            ("Scalar subquery returned more than one row", "21000", "more than one row returned by a subquery used as an expression"),
            ("While expanding wildcard, column \"b_t.id\" must appear in the GROUP BY clause or must be part of an aggregate function", "42803", "column \"b_t.id\" must appear in the GROUP BY clause or be used in an aggregate function"),
            ("LIMIT must be >= 0, '-1' was provided", "2201W", "LIMIT must not be negative"),
            ("OFFSET must be >=0, '-1' was provided", "2201X", "OFFSET must not be negative"),
            ("Order by column out of bounds, specified: 5, max: 1", "42P10", "ORDER BY position 5 is not in select list"),
            ("UNION queries have different number of columns", "42601", "each UNION query must have the same number of columns"),
            ("Unsupported date_trunc granularity: 'fortnight'. Supported values are: day, week", "22023", "unit \"fortnight\" not recognized for date_trunc"),
            ("step can't be 0 for function generate_series(start [, stop, step])", "22023", "step size cannot equal zero"),
            ("Compute error: zero raised to a negative power is undefined", "2201F", "zero raised to a negative power is undefined"),
            ("Invalid escape character in LIKE expression. Expected a single character", "22025", "invalid escape string"),
            ("Unable to parse date from 2026, 2, 30", "22008", "date field value out of range: 2026-02-30"),
            ("Error parsing timestamp from 'not a time': error parsing date", "22007", "invalid input syntax for type timestamp: \"not a time\""),
            ("Invalid function 'nope'. Did you mean 'now'?", "42883", "function nope does not exist"),
            ("Cannot coerce arithmetic expression Utf8 + Int64 to valid types", "42883", "operator does not exist: text + bigint"),
            ("Internal error: Function 'reverse' failed. No function matches the given name and argument types 'reverse(Int64)'. You might", "42883", "function reverse(bigint) does not exist"),
            ("No function matches the given name and argument types 'lpad(Decimal128(10, 2), Utf8)'.", "42883", "function lpad(numeric, text) does not exist"),
        ];
        for (text, code, message) in cases {
            assert_eq!(
                said("22000", text),
                (code.to_string(), message.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn unknown_messages_and_their_hints_are_kept() {
        let error = WeirError::new("22000", "something else").with_hint("keep me");
        assert_eq!(reword(error.clone()), error);
        let cast = WeirError::new(
            "22P02",
            "Cannot cast string 'NaN' to value of Decimal128(38, 10) type",
        )
        .with_hint("use DOUBLE PRECISION");
        assert_eq!(reword(cast).hint.as_deref(), Some("use DOUBLE PRECISION"));
    }
}
