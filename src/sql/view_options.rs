//! `CREATE MATERIALIZED VIEW v WITH (late_data = '...', allowed_lateness =
//! '...', state_ttl = '...')`: the view's late data policy and join state
//! TTL, checked when the view is parsed.

use datafusion::sql::sqlparser::ast::{CreateTableOptions, Expr, SqlOption, Value};

use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use super::dialect::WeirDialect;
use super::interval::interval_nanoseconds;
use crate::error::{sqlstate, Result, WeirError};
use crate::stream::{LatePolicy, UNBOUNDED_LATENESS_NS};

const POLICIES: &str = "'drop', 'side_output' or 'update'";

/// What a view's WITH (...) asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ViewOptions {
    pub late: LatePolicy,
    /// `state_ttl`: a join forgets an input row this long after it came.
    pub state_ttl_ns: Option<i64>,
    /// Tables the query joins `FOR SYSTEM_TIME AS OF` the processing time
    /// (lookup joins; not a WITH option, the query's own clause).
    pub lookup_tables: Vec<String>,
    /// `EMIT EVERY interval` (not a WITH option, the EMIT clause's): the
    /// view's changes are published at most this often.
    pub firing_interval_ns: Option<i64>,
}

/// The options a view's WITH (...) lists (late data `drop`, no TTL
/// without options).
pub fn view_options(options: &CreateTableOptions) -> Result<ViewOptions> {
    let listed: &[SqlOption] = match options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(options) => options,
        _ => {
            return Err(
                WeirError::syntax("materialized view options go in WITH (...)").with_hint(
                    "Write WITH (late_data = 'update', allowed_lateness = '10 minutes').",
                ),
            )
        }
    };
    let mut policy = None;
    let mut lateness_ns = None;
    let mut state_ttl_ns = None;
    for option in listed {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(WeirError::syntax(format!("unexpected option {option}"))
                .with_hint("Options are written name = 'value'."));
        };
        match key.value.to_ascii_lowercase().as_str() {
            "late_data" => policy = Some(policy_name(value)?),
            "allowed_lateness" => lateness_ns = Some(lateness(value)?),
            "state_ttl" => state_ttl_ns = Some(duration("state_ttl", value)?),
            other => {
                return Err(
                    invalid(format!("unknown materialized view option \"{other}\""))
                        .with_hint("The options are late_data, allowed_lateness and state_ttl."),
                )
            }
        }
    }
    Ok(ViewOptions {
        late: late_policy(policy, lateness_ns)?,
        state_ttl_ns,
        lookup_tables: Vec::new(),
        firing_interval_ns: None,
    })
}

/// The interval of `EMIT EVERY interval`: `INTERVAL '1' MINUTE` or
/// `'30 seconds'`, as nanoseconds.
pub fn firing_interval(tokens: Vec<TokenWithSpan>) -> Result<i64> {
    let dialect = WeirDialect::for_tokens(tokens.len());
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let expression = parser
        .parse_expr()
        .ok()
        .filter(|_| parser.peek_token().token == Token::EOF);
    let Some(expression) = expression else {
        return Err(WeirError::syntax("EMIT EVERY takes an interval")
            .with_hint("Write EMIT EVERY INTERVAL '1' MINUTE or EMIT EVERY '30 seconds'."));
    };
    positive_nanoseconds(&expression).ok_or_else(|| {
        invalid(format!(
            "EMIT EVERY {expression} is not a positive, fixed-length interval"
        ))
        .with_hint("Write it like EMIT EVERY INTERVAL '1' MINUTE or EMIT EVERY '30 seconds'.")
    })
}

fn late_policy(policy: Option<&str>, lateness_ns: Option<i64>) -> Result<LatePolicy> {
    match (policy.unwrap_or("drop"), lateness_ns) {
        ("update", Some(allowed_lateness_ns)) => Ok(LatePolicy::Update {
            allowed_lateness_ns,
        }),
        ("update", None) => Err(invalid(
            "late_data = 'update' needs allowed_lateness: how long a window stays open past its end",
        )
        .with_hint("Add allowed_lateness = '10 minutes' (or however late rows may be) to WITH (...).")),
        (other, Some(_)) => Err(invalid(format!(
            "allowed_lateness only applies to late_data = 'update', not '{other}'"
        ))
        .with_hint("Add late_data = 'update', or leave out allowed_lateness.")),
        ("side_output", None) => Ok(LatePolicy::SideOutput),
        _ => Ok(LatePolicy::Drop),
    }
}

fn invalid(message: impl Into<String>) -> WeirError {
    WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

fn text(value: &Expr) -> Option<String> {
    match value {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => Some(text.clone()),
            _ => None,
        },
        Expr::Identifier(ident) => Some(ident.value.clone()),
        _ => None,
    }
}

fn policy_name(value: &Expr) -> Result<&'static str> {
    let name = text(value).unwrap_or_else(|| value.to_string());
    match name.to_ascii_lowercase().as_str() {
        "drop" => Ok("drop"),
        "side_output" => Ok("side_output"),
        "update" => Ok("update"),
        _ => Err(invalid(format!("late_data = '{name}' is not a policy"))
            .with_hint(format!("Use one of {POLICIES}."))),
    }
}

/// `allowed_lateness`: a duration, or `'unbounded'` (windows never close).
fn lateness(value: &Expr) -> Result<i64> {
    if text(value).is_some_and(|text| text.trim().eq_ignore_ascii_case("unbounded")) {
        return Ok(UNBOUNDED_LATENESS_NS);
    }
    duration("allowed_lateness", value).map_err(|error| {
        error.with_hint(
            "Write it like '10 minutes' or INTERVAL '2' HOUR, or 'unbounded' to keep every window correctable.",
        )
    })
}

/// `'10 minutes'` or `INTERVAL '10' MINUTE`, as nanoseconds.
fn duration(option: &str, value: &Expr) -> Result<i64> {
    positive_nanoseconds(value).ok_or_else(|| {
        invalid(format!(
            "{option} = {value} is not a positive, fixed-length interval"
        ))
        .with_hint("Write it like '10 minutes', '2 hours' or INTERVAL '30' SECOND.")
    })
}

fn positive_nanoseconds(value: &Expr) -> Option<i64> {
    let nanoseconds = match value {
        Expr::Interval(_) => interval_nanoseconds(value),
        _ => text(value).and_then(|text| super::interval::text_nanoseconds(&text)),
    };
    nanoseconds
        .filter(|&nanoseconds| nanoseconds > 0 && nanoseconds <= i64::MAX as i128 / 4)
        .map(|nanoseconds| nanoseconds as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn every(interval: &str) -> Result<i64> {
        let tokens = Tokenizer::new(&WeirDialect::new(), interval)
            .tokenize_with_location()
            .unwrap();
        firing_interval(tokens)
    }

    #[test]
    fn emit_every_takes_a_positive_interval() {
        assert_eq!(every("INTERVAL '1' MINUTE").unwrap(), 60_000_000_000);
        assert_eq!(every("'30 seconds'").unwrap(), 30_000_000_000);
        for bad in ["'0 seconds'", "INTERVAL '1' MONTH", "'-1 minute'", "'soon'"] {
            assert_eq!(every(bad).unwrap_err().code, "22023", "{bad}");
        }
        assert_eq!(every("1 +").unwrap_err().code, "42601");
    }

    /// The options of a view created `WITH` them.
    fn options(with: &str) -> Result<ViewOptions> {
        let sql = format!("CREATE MATERIALIZED VIEW v {with} AS SELECT 1");
        let statement = Parser::parse_sql(&WeirDialect::new(), &sql)
            .unwrap()
            .remove(0);
        let Statement::CreateView(create) = statement else {
            panic!("not a view")
        };
        view_options(&create.options)
    }

    fn policy(with: &str) -> Result<LatePolicy> {
        options(with).map(|options| options.late)
    }

    #[test]
    fn state_ttl_is_a_positive_interval() {
        assert_eq!(
            options("WITH (state_ttl = '1 hour')").unwrap().state_ttl_ns,
            Some(3_600_000_000_000)
        );
        assert_eq!(options("").unwrap().state_ttl_ns, None);
        let bad = options("WITH (state_ttl = '-1 hour')").unwrap_err();
        assert_eq!(bad.code, "22023");
        assert!(bad.message.contains("state_ttl"), "{}", bad.message);
    }

    #[test]
    fn unbounded_lateness_keeps_windows_open_for_good() {
        let unbounded =
            policy("WITH (late_data = 'update', allowed_lateness = 'Unbounded')").unwrap();
        assert!(unbounded.is_unbounded());
        assert_eq!(unbounded.describe(), "update(allowed_lateness=unbounded)");
        let refused = policy("WITH (late_data = 'drop', allowed_lateness = 'unbounded')");
        assert_eq!(refused.unwrap_err().code, "22023");
        let misspelt = policy("WITH (late_data = 'update', allowed_lateness = 'forever')");
        assert!(misspelt.unwrap_err().hint.unwrap().contains("'unbounded'"));
    }

    #[test]
    fn policies_and_lateness() {
        assert_eq!(policy("").unwrap(), LatePolicy::Drop);
        assert_eq!(
            policy("WITH (late_data = 'drop')").unwrap(),
            LatePolicy::Drop
        );
        assert_eq!(
            policy("WITH (late_data = 'side_output')").unwrap(),
            LatePolicy::SideOutput
        );
        assert_eq!(
            policy("WITH (late_data = 'update', allowed_lateness = '10 minutes')").unwrap(),
            LatePolicy::Update {
                allowed_lateness_ns: 600_000_000_000
            }
        );
        assert_eq!(
            policy("WITH (LATE_DATA = update, allowed_lateness = INTERVAL '2' HOUR)").unwrap(),
            LatePolicy::Update {
                allowed_lateness_ns: 7_200_000_000_000
            }
        );
    }

    #[test]
    fn mistakes_say_what_to_write() {
        let missing = policy("WITH (late_data = 'update')").unwrap_err();
        assert_eq!(missing.code, "22023");
        assert!(missing.message.contains("allowed_lateness"));
        assert_eq!(
            policy("WITH (late_data = 'keep')").unwrap_err().code,
            "22023"
        );
        assert_eq!(
            policy("WITH (allowed_lateness = '1 minute')")
                .unwrap_err()
                .code,
            "22023"
        );
        assert_eq!(
            policy("WITH (late_data = 'update', allowed_lateness = '1 month')")
                .unwrap_err()
                .code,
            "22023"
        );
        assert_eq!(policy("WITH (color = 'red')").unwrap_err().code, "22023");
    }
}
