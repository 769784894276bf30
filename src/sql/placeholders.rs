//! The numbers of `$n` parameters. A Bind message carries at most 65535
//! values (its count is 16 bits), so a larger `$n` could never be bound; and
//! code that sizes a vector by the largest `$n` (DataFusion's INSERT planner,
//! the parameter type list) would allocate gigabytes for `$2000000000`. The
//! tokens are checked before anything is planned.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{sqlstate, Result, WeirError};

/// The most parameters a statement can have: a Bind message's count is an
/// unsigned 16-bit number.
pub const MAX_PARAMETERS: usize = 65_535;

/// Fails with 42P02, as Postgres does for a parameter it does not have, when
/// a `$n` is outside `$1..$65535`. Named placeholders (`$name`) are left to
/// planning.
pub fn check_numbers(tokens: &[TokenWithSpan]) -> Result<()> {
    for token in tokens {
        let Token::Placeholder(text) = &token.token else {
            continue;
        };
        let Some(digits) = text.strip_prefix('$') else {
            continue;
        };
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            continue;
        }
        let in_range = digits
            .parse::<usize>()
            .is_ok_and(|number| (1..=MAX_PARAMETERS).contains(&number));
        if !in_range {
            return Err(no_such_parameter(text));
        }
    }
    Ok(())
}

/// Postgres's error for a `$n` that has no value.
pub fn no_such_parameter(placeholder: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_STATEMENT_PARAMETER,
        format!("there is no parameter {placeholder}"),
    )
    .with_hint(format!(
        "Parameters are numbered $1 to ${MAX_PARAMETERS} and take their values from the \
         extended query protocol (your driver's parameters)."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn check(sql: &str) -> Result<()> {
        let tokens = Tokenizer::new(&WeirDialect::new(), sql)
            .tokenize_with_location()
            .unwrap();
        check_numbers(&tokens)
    }

    #[test]
    fn parameters_up_to_65535_are_accepted() {
        assert!(check("SELECT $1, $65535, '$99999999', $$ $0 $$").is_ok());
    }

    #[test]
    fn larger_or_zero_numbers_are_undefined_parameters() {
        for sql in [
            "SELECT $2000000000",
            "SELECT $65536",
            "SELECT $0",
            "INSERT INTO t VALUES ($99999999999999999999999)",
        ] {
            let error = check(sql).unwrap_err();
            assert_eq!(error.code, "42P02", "{sql}");
            assert!(
                error.message.starts_with("there is no parameter $"),
                "{sql}"
            );
        }
    }
}
