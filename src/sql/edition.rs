//! Which edition of weir's SQL a plan is made by, carried in DataFusion's
//! config so the plan-time rewrites (sql::literal_types) can ask it. A
//! materialized view is re-planned on start by the edition that created
//! it (catalog::SQL_EDITION says what each edition changed): its stored
//! rows and operator states have that plan's shape.

use datafusion::common::config::{ConfigExtension, ConfigOptions};
use datafusion::common::extensions_options;

extensions_options! {
    /// weir's own planning options.
    pub struct Edition {
        /// The edition of weir's SQL a statement is planned by.
        pub sql_edition: u32, default = 0
    }
}

impl ConfigExtension for Edition {
    const PREFIX: &'static str = "weir_planning";
}

impl Edition {
    pub fn new(sql_edition: u32) -> Self {
        Edition { sql_edition }
    }
}

/// The edition `config` plans by (0 where none is set: the oldest).
pub fn of(config: &ConfigOptions) -> u32 {
    config
        .extensions
        .get::<Edition>()
        .map_or(0, |edition| edition.sql_edition)
}
