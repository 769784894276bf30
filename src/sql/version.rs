//! The Postgres version weir reports and `version()`. Clients parse
//! `version()` to learn what they talk to (SQLAlchemy's Postgres dialects
//! match `PostgreSQL <major>.<minor>` at its start and refuse to connect
//! otherwise), so it reads like Postgres's own, with weir named after the
//! version; DataFusion's says `Apache DataFusion …`.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

/// The Postgres version weir reports (its protocol and catalog level).
pub const SERVER_VERSION: &str = "16.6";
/// The same as `server_version_num` gives it (major × 10000 + minor).
pub const SERVER_VERSION_NUMBER: &str = "160006";

/// What `version()` returns, e.g. `PostgreSQL 16.6 (weir 0.1.0) on
/// x86_64-pc-linux-gnu, compiled by rustc, 64-bit`.
pub fn version_text() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (weir {}) on {}-pc-{}-gnu, compiled by rustc, {}-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        usize::BITS,
    )
}

/// `version()`, replacing DataFusion's.
pub fn version_function() -> ScalarUDF {
    let text = version_text();
    create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLAlchemy's check (`_get_server_version_info`), as a plain parse:
    /// the text starts with `PostgreSQL <major>.<minor>`.
    #[test]
    fn version_reads_like_postgres() {
        let text = version_text();
        let rest = text.strip_prefix("PostgreSQL ").unwrap();
        let number: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
        assert_eq!(number, SERVER_VERSION);
        let (major, minor) = number.split_once('.').unwrap();
        assert!(major.parse::<u32>().unwrap() >= 10 && minor.parse::<u32>().is_ok());
        let expected = major.parse::<u32>().unwrap() * 10000 + minor.parse::<u32>().unwrap();
        assert_eq!(SERVER_VERSION_NUMBER, expected.to_string());
        assert!(text.contains("weir"), "{text}");
    }
}
