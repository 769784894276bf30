//! `current_user()` and `session_user()`: the name the client logged in
//! with (weir has no roles yet, so the two are the same). Registered in the
//! session's own planning state; `sql::special_registers` turns `user`,
//! `current_user`, `current_role` and `session_user` into these calls.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use crate::sql::special_registers::{CURRENT_USER_FUNCTION, SESSION_USER_FUNCTION};

/// The user a session without a startup message (in-process tests) has.
pub const DEFAULT_USER: &str = "weir";

pub fn functions(user: &str) -> [ScalarUDF; 2] {
    [CURRENT_USER_FUNCTION, SESSION_USER_FUNCTION].map(|name| {
        let user = ScalarValue::Utf8(Some(user.to_string()));
        create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_| Ok(ColumnarValue::Scalar(user.clone()))),
        )
    })
}
