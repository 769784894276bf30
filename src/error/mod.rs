//! Errors a client can see: every failure carries a Postgres SQLSTATE, a
//! message and, where we can say what to do, a hint.

use std::fmt;

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;

mod postgres_messages;

pub use postgres_messages::type_name as postgres_type_name;

/// SQLSTATE codes weir reports (see the Postgres errcodes appendix).
pub mod sqlstate {
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const INVALID_SCHEMA_NAME: &str = "3F000";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const DUPLICATE_SCHEMA: &str = "42P06";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const CANNOT_COERCE: &str = "42846";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
    pub const SYNTAX_OR_ACCESS_RULE: &str = "42000";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const STRING_DATA_RIGHT_TRUNCATION: &str = "22001";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const DATA_EXCEPTION: &str = "22000";
    pub const INVALID_REGULAR_EXPRESSION: &str = "2201B";
    pub const CARDINALITY_VIOLATION: &str = "21000";
    pub const INVALID_COLUMN_REFERENCE: &str = "42P10";
    pub const DUPLICATE_COLUMN: &str = "42701";
    pub const INVALID_CURSOR_NAME: &str = "34000";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const DUPLICATE_CURSOR: &str = "42P03";
    /// Postgres reports an unknown setting name as 42704 (undefined_object).
    pub const UNDEFINED_PARAMETER: &str = "42704";
    /// A `$n` the statement has no value for (Postgres's undefined_parameter).
    pub const UNDEFINED_STATEMENT_PARAMETER: &str = "42P02";
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    /// An outside system a connector needs (a Kafka broker) does not answer
    /// (as postgres_fdw reports a remote server it cannot reach).
    pub const CANNOT_CONNECT: &str = "08001";
    pub const INVALID_STATEMENT_NAME: &str = "26000";
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    pub const QUERY_CANCELED: &str = "57014";
    pub const SERIALIZATION_FAILURE: &str = "40001";
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
    pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
    pub const INVALID_SAVEPOINT_SPECIFICATION: &str = "3B001";
    pub const IO_ERROR: &str = "58030";
    pub const DATA_CORRUPTED: &str = "XX001";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const RESOURCES_EXHAUSTED: &str = "53000";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const RESERVED_NAME: &str = "42939";
    pub const OBJECT_IN_USE: &str = "55006";
    pub const OUT_OF_MEMORY: &str = "53200";
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    pub const GROUPING_ERROR: &str = "42803";
    pub const INVALID_ROW_COUNT_IN_LIMIT: &str = "2201W";
    pub const INVALID_ROW_COUNT_IN_OFFSET: &str = "2201X";
    pub const INVALID_ARGUMENT_FOR_POWER: &str = "2201F";
    pub const INVALID_ESCAPE_SEQUENCE: &str = "22025";
    pub const INVALID_DATETIME_FORMAT: &str = "22007";
}

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// An error as a Postgres client will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeirError {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl WeirError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        WeirError {
            code,
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(sqlstate::SYNTAX_ERROR, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }

    pub fn undefined_table(name: &str) -> Self {
        Self::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )
        .with_hint("SHOW TABLES (or \\dt in psql) lists the tables that exist.")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(sqlstate::INTERNAL_ERROR, message)
    }

    pub fn io(message: impl Into<String>) -> Self {
        Self::new(sqlstate::IO_ERROR, message)
            .with_hint("Check that the data directory is writable and the disk is not full.")
    }
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for WeirError {}

impl From<ParserError> for WeirError {
    fn from(error: ParserError) -> Self {
        let text = match error {
            ParserError::ParserError(text) | ParserError::TokenizerError(text) => text,
            ParserError::RecursionLimitExceeded => {
                return WeirError::new(
                    sqlstate::RESOURCES_EXHAUSTED,
                    "statement is nested too deeply",
                )
                .with_hint("Simplify the statement or split it into views.");
            }
        };
        WeirError::syntax(format!("syntax error: {text}"))
            .with_hint("Check the statement near the line and column shown.")
    }
}

impl From<datafusion::arrow::error::ArrowError> for WeirError {
    fn from(error: datafusion::arrow::error::ArrowError) -> Self {
        postgres_messages::reword(arrow_error_to_weir(error))
    }
}

impl From<DataFusionError> for WeirError {
    fn from(error: DataFusionError) -> Self {
        postgres_messages::reword(from_datafusion(error))
    }
}

fn from_datafusion(error: DataFusionError) -> WeirError {
    match error {
        DataFusionError::Context(_, inner) => from_datafusion(*inner),
        DataFusionError::Diagnostic(_, inner) => from_datafusion(*inner),
        DataFusionError::Shared(inner) => from_datafusion(clone_shared(&inner)),
        DataFusionError::Collection(mut errors) if !errors.is_empty() => {
            from_datafusion(errors.remove(0))
        }
        DataFusionError::External(inner) => from_external(inner),
        DataFusionError::SQL(parser_error, _) => WeirError::from(*parser_error),
        DataFusionError::NotImplemented(text) if numeric_too_wide(&text) => WeirError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("numeric value out of range: {text}"),
        )
        .with_hint("weir's numeric holds up to 76 digits; use double precision for wider values."),
        DataFusionError::NotImplemented(text) => {
            WeirError::unsupported(format!("not supported: {text}"))
        }
        DataFusionError::SchemaError(schema_error, _) => {
            schema_error_to_weir(schema_error.to_string())
        }
        DataFusionError::Plan(text) => plan_error_to_weir(text),
        DataFusionError::ArrowError(arrow_error, _) => arrow_error_to_weir(*arrow_error),
        DataFusionError::ResourcesExhausted(text) => out_of_memory(text),
        DataFusionError::IoError(io_error) => WeirError::io(io_error.to_string()),
        DataFusionError::Execution(text) => execution_error_to_weir(text),
        other => WeirError::internal(other.to_string()),
    }
}

/// An error DataFusion or Arrow carried from elsewhere (a weir function,
/// a stream of batches).
fn from_external(inner: Box<dyn std::error::Error + Send + Sync>) -> WeirError {
    match inner.downcast::<WeirError>() {
        Ok(weir) => *weir,
        Err(other) => match other.downcast::<DataFusionError>() {
            Ok(datafusion) => from_datafusion(*datafusion),
            Err(other) => match other.downcast::<datafusion::arrow::error::ArrowError>() {
                Ok(arrow) => arrow_error_to_weir(*arrow),
                Err(other) => {
                    let text = other.to_string();
                    invalid_regex(&text).unwrap_or_else(|| WeirError::internal(text))
                }
            },
        },
    }
}

/// A query past its session's memory pool (`query_memory_limit`).
fn out_of_memory(text: String) -> WeirError {
    let Some(consumer) = text
        .split("Failed to allocate additional ")
        .nth(1)
        .and_then(|rest| rest.split(" for ").nth(1))
        .and_then(|rest| rest.split(" with ").next())
    else {
        return WeirError::new(sqlstate::RESOURCES_EXHAUSTED, text);
    };
    WeirError::new(
        sqlstate::OUT_OF_MEMORY,
        format!(
            "out of memory: the query needs more than query_memory_limit allows (in {consumer})"
        ),
    )
    .with_hint(
        "SET query_memory_limit = '8GB' (or 0 for no limit) to allow more, or make the query \
         hold less: filter or aggregate before joining, join the smaller input first.",
    )
}

fn clone_shared(inner: &DataFusionError) -> DataFusionError {
    match inner {
        DataFusionError::Plan(text) => DataFusionError::Plan(text.clone()),
        DataFusionError::Execution(text) => DataFusionError::Execution(text.clone()),
        DataFusionError::NotImplemented(text) => DataFusionError::NotImplemented(text.clone()),
        // A hash join's build side is shared by its partitions, memory
        // errors included.
        DataFusionError::ResourcesExhausted(text) => {
            DataFusionError::ResourcesExhausted(text.clone())
        }
        DataFusionError::Context(_, inner) => clone_shared(inner),
        other => DataFusionError::Execution(other.to_string()),
    }
}

fn schema_error_to_weir(text: String) -> WeirError {
    if text.contains("No field named") {
        WeirError::new(sqlstate::UNDEFINED_COLUMN, strip_prefix(&text))
            .with_hint("Check the column name; \\d <table> in psql lists the columns.")
    } else if text.contains("Ambiguous reference") {
        WeirError::new("42702", strip_prefix(&text))
            .with_hint("Qualify the column with its table name.")
    } else if text.contains("already exists") {
        WeirError::new(sqlstate::DUPLICATE_TABLE, strip_prefix(&text))
    } else {
        WeirError::new(sqlstate::SYNTAX_OR_ACCESS_RULE, strip_prefix(&text))
    }
}

/// A number too wide for a 256-bit decimal (`1e400`, `1e-300`): Postgres's
/// numeric holds it and its casts fail with 22003 (`CAST(1e400 AS double
/// precision)`), so the value is out of range here too, not unsupported.
fn numeric_too_wide(text: &str) -> bool {
    text.contains("Decimal")
        && (text.contains("exceeds the minimum supported scale")
            || text.contains("exceeds the maximum supported precision"))
}

fn plan_error_to_weir(text: String) -> WeirError {
    // Only CREATE TABLE AS and CREATE VIEW reach this: a query's repeated
    // names are aliased apart (`sql::repeated_columns`).
    if text.contains("Projections require unique expression names") {
        return WeirError::new(sqlstate::DUPLICATE_COLUMN, text)
            .with_hint("Give each column its own name (AS in a SELECT list).");
    }
    if text.contains("not found") && text.starts_with("table ") {
        // DataFusion names it in full; Postgres as written (`t`, `s.t`).
        let name = text.split('\'').nth(1).unwrap_or("?");
        let name = name.strip_prefix("weir.").unwrap_or(name);
        let name = name.strip_prefix("public.").unwrap_or(name);
        return WeirError::undefined_table(name);
    }
    if text.contains("Invalid function") || text.contains("There is no function") {
        return WeirError::new(sqlstate::UNDEFINED_FUNCTION, text)
            .with_hint("Check the function name and argument types.");
    }
    if text.contains("No function matches") || text.contains("Failed to coerce") {
        return WeirError::new(sqlstate::UNDEFINED_FUNCTION, text)
            .with_hint("Add explicit casts so the argument types match a signature.");
    }
    if text.contains("coerce") || text.contains("Cannot infer common") || text.contains("type") {
        return WeirError::new(sqlstate::DATATYPE_MISMATCH, text)
            .with_hint("Add an explicit CAST so both sides have the same type.");
    }
    if text.contains("Unsupported") || text.contains("not supported") {
        return WeirError::unsupported(text);
    }
    WeirError::new(sqlstate::SYNTAX_OR_ACCESS_RULE, text)
}

fn execution_error_to_weir(text: String) -> WeirError {
    if let Some(error) = timestamp_overflow(&text) {
        return error;
    }
    if text.contains("Invalid batch column at") && text.contains("null values") {
        return WeirError::new(sqlstate::NOT_NULL_VIOLATION, text)
            .with_hint("The column is NOT NULL: give it a value.");
    }
    if text.contains("non-nullable") || text.contains("NOT NULL") {
        return WeirError::new(sqlstate::NOT_NULL_VIOLATION, text)
            .with_hint("The column is NOT NULL: give it a value.");
    }
    if text.contains("Divide by zero") || text.contains("division by zero") {
        return WeirError::new(sqlstate::DIVISION_BY_ZERO, "division by zero");
    }
    if text.contains("Cannot cast") || text.contains("Cast error") {
        return WeirError::new(sqlstate::INVALID_TEXT_REPRESENTATION, text);
    }
    if let Some(error) = function_argument_error(&text) {
        return error;
    }
    invalid_regex(&text).unwrap_or_else(|| WeirError::new(sqlstate::DATA_EXCEPTION, text))
}

/// DataFusion's errors for function arguments Postgres also refuses, with
/// Postgres's SQLSTATE and message (found by tests/postgres_differential.rs).
fn function_argument_error(text: &str) -> Option<WeirError> {
    let (code, message) = if text.contains("negative count not allowed")
        || text.contains("negative substring length")
    {
        ("22011", "negative substring length not allowed")
    } else if text.contains("interval out of range") {
        ("22008", "interval out of range")
    } else if text.contains("field position must not be zero") {
        ("22023", "field position must not be zero")
    } else if text.contains("chr: null character not permitted") {
        ("54000", "null character not permitted")
    } else if text.contains("chr: character number must be positive") {
        ("22023", "character number must be positive")
    } else if text.contains("chr: requested character too large") {
        ("54000", "requested character too large for encoding")
    } else if text.contains("Signed integer overflow") || text.contains("overflow on abs(") {
        // gcd, lcm, abs past their type's range.
        (sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "integer out of range")
    } else {
        return None;
    };
    Some(WeirError::new(code, message))
}

/// A pattern the regex crate cannot compile (its message, or Arrow's
/// around it), as Postgres reports one: 2201B with the reason on one line.
fn invalid_regex(text: &str) -> Option<WeirError> {
    if !text.contains("regex parse error") && !text.contains("Regular expression did not compile") {
        return None;
    }
    let reason = text
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or("the pattern does not compile");
    Some(
        WeirError::new(
            sqlstate::INVALID_REGULAR_EXPRESSION,
            format!("invalid regular expression: {reason}"),
        )
        .with_hint("Check the pattern: weir uses Rust's regex syntax, close to Postgres's."),
    )
}

/// Timestamp arithmetic past 1677 or 2262 (Arrow's and date_bin's
/// messages) as Postgres reports it: 22008 "timestamp out of range".
fn timestamp_overflow(text: &str) -> Option<WeirError> {
    let lower = text.to_ascii_lowercase();
    let overflowed = lower.contains("timestamp out of range")
        || (lower.contains("date_bin")
            && (lower.contains("overflow") || lower.contains("out of range")));
    overflowed.then(|| {
        WeirError::new(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range").with_hint(
            "Timestamps run from 1677-09-21 00:12:43.145224192 to 2262-04-11 23:47:16.854775807; check the times and intervals involved.",
        )
    })
}

/// A cast of 'NaN' or '[-]Infinity' text to a decimal: Postgres' NUMERIC
/// has these values, a Decimal128 does not.
fn special_numeric(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("to value of decimal")
        && ["'nan'", "'infinity'", "'-infinity'", "'inf'", "'-inf'"]
            .iter()
            .any(|value| lower.contains(value))
}

fn arrow_error_to_weir(error: datafusion::arrow::error::ArrowError) -> WeirError {
    use datafusion::arrow::error::ArrowError;
    match error {
        ArrowError::DivideByZero => WeirError::new(sqlstate::DIVISION_BY_ZERO, "division by zero"),
        ArrowError::ExternalError(inner) => from_external(inner),
        ArrowError::CastError(text) | ArrowError::ParseError(text) => {
            let hint = match special_numeric(&text) {
                true => "weir's NUMERIC holds no NaN or infinity; use DOUBLE PRECISION for them.",
                false => "Check the value against the column's type.",
            };
            WeirError::new(sqlstate::INVALID_TEXT_REPRESENTATION, text).with_hint(hint)
        }
        ArrowError::ArithmeticOverflow(text) => {
            WeirError::new(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, text)
        }
        ArrowError::InvalidArgumentError(text) if text.contains("null") => {
            WeirError::new(sqlstate::NOT_NULL_VIOLATION, text)
                .with_hint("The column is NOT NULL: give it a value.")
        }
        other => {
            let text = other.to_string();
            timestamp_overflow(&text)
                .or_else(|| function_argument_error(&text))
                .or_else(|| invalid_regex(&text))
                .unwrap_or_else(|| WeirError::new(sqlstate::DATA_EXCEPTION, text))
        }
    }
}

fn strip_prefix(text: &str) -> String {
    text.trim_start_matches("Schema error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_errors_are_syntax_errors() {
        let error = WeirError::from(ParserError::ParserError("Expected: x".into()));
        assert_eq!(error.code, sqlstate::SYNTAX_ERROR);
        assert!(error.hint.is_some());
    }

    #[test]
    fn numbers_too_wide_are_out_of_range() {
        let error = WeirError::from(DataFusionError::NotImplemented(
            "Decimal scale -400 exceeds the minimum supported scale: -128".into(),
        ));
        assert_eq!(error.code, "22003");
    }

    #[test]
    fn function_argument_errors_have_postgres_codes() {
        let overflow = datafusion::arrow::error::ArrowError::ComputeError(
            "Signed integer overflow in GCD(-9223372036854775808, 0)".to_string(),
        );
        assert_eq!(WeirError::from(overflow).code, "22003");
        let substring = DataFusionError::Execution("negative count not allowed: -1".into());
        assert_eq!(WeirError::from(substring).code, "22011");
    }

    #[test]
    fn missing_table_is_undefined_table() {
        let error = WeirError::from(DataFusionError::Plan(
            "table 'weir.public.nope' not found".into(),
        ));
        assert_eq!(error.code, sqlstate::UNDEFINED_TABLE);
        assert_eq!(error.message, "relation \"nope\" does not exist");
        let error = WeirError::from(DataFusionError::Plan(
            "table 'weir.sales.nope' not found".into(),
        ));
        assert_eq!(error.message, "relation \"sales.nope\" does not exist");
    }

    #[test]
    fn invalid_patterns_are_2201b() {
        let message = "regex parse error:\n    (\n    ^\nerror: unclosed group";
        let external: Box<dyn std::error::Error + Send + Sync> = message.into();
        let error = WeirError::from(DataFusionError::External(external));
        assert_eq!(error.code, sqlstate::INVALID_REGULAR_EXPRESSION);
        assert_eq!(error.message, "invalid regular expression: unclosed group");
        let arrow = datafusion::arrow::error::ArrowError::ComputeError(format!(
            "Regular expression did not compile: {message}"
        ));
        let error = WeirError::from(DataFusionError::ArrowError(Box::new(arrow), None));
        assert_eq!(error.code, sqlstate::INVALID_REGULAR_EXPRESSION);
    }

    #[test]
    fn context_is_unwrapped() {
        let inner = DataFusionError::NotImplemented("LATERAL".into());
        let error = WeirError::from(DataFusionError::Context("planning".into(), Box::new(inner)));
        assert_eq!(error.code, sqlstate::FEATURE_NOT_SUPPORTED);
    }

    #[test]
    fn numeric_nan_says_to_use_double_precision() {
        let error = WeirError::from(datafusion::arrow::error::ArrowError::CastError(
            "Cannot cast string 'NaN' to value of Decimal128(38, 10) type".into(),
        ));
        assert_eq!(error.code, sqlstate::INVALID_TEXT_REPRESENTATION);
        assert!(error.hint.unwrap_or_default().contains("DOUBLE PRECISION"));
    }

    #[test]
    fn timestamp_overflow_is_22008() {
        let arrow =
            datafusion::arrow::error::ArrowError::ComputeError("Timestamp out of range".into());
        let error = WeirError::from(DataFusionError::ArrowError(Box::new(arrow), None));
        assert_eq!(error.code, sqlstate::DATETIME_FIELD_OVERFLOW);
        let text = "date_bin origin 0 + delta 1 overflows i64".to_string();
        assert_eq!(
            WeirError::from(DataFusionError::Execution(text)).code,
            sqlstate::DATETIME_FIELD_OVERFLOW
        );
    }

    #[test]
    fn weir_errors_survive_arrow_wrapping() {
        let original = WeirError::new(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range");
        let inner = DataFusionError::External(Box::new(original.clone()));
        let arrow = datafusion::arrow::error::ArrowError::ExternalError(Box::new(inner));
        assert_eq!(WeirError::from(arrow), original);
    }

    #[test]
    fn weir_errors_survive_external_wrapping() {
        let original = WeirError::unsupported("UPDATE");
        let wrapped = DataFusionError::External(Box::new(original.clone()));
        assert_eq!(WeirError::from(wrapped), original);
    }
}
