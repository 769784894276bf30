//! weir's SQL statement parser (`weir::sql::parse`, src/sql/parser.rs):
//! tokenizing, splitting at semicolons, weir's extensions (WATERMARK,
//! APPEND ONLY, CREATE SOURCE/SINK, SUBSCRIBE, roles, GRANT, windows, ...),
//! sqlparser's PostgreSQL grammar and the catalog-compatibility rewrites.
//! Any input may be refused with an error; none may panic or overflow the
//! stack. Non-UTF-8 input is skipped: the server only parses text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sql) = std::str::from_utf8(data) {
        let _ = weir::sql::parse(sql);
    }
});
