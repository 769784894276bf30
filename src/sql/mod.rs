//! The SQL front end: weir's statement parser. It wraps sqlparser's public
//! `Parser` (PostgreSQL dialect) so weir-only syntax (WATERMARK, CREATE SOURCE,
//! EMIT, SUBSCRIBE, ...) can be added here without touching the rest; every
//! standard statement is handed on as sqlparser's AST for DataFusion to plan.

mod alter_system;
pub mod alter_table;
mod array_subquery;
mod ast_build;
pub mod boolean_text;
pub mod bytea_input;
mod catalog_compatibility;
mod catalog_lookups;
pub mod character_lengths;
pub mod checked_arithmetic;
mod client_idioms;
pub mod date_function;
pub mod dialect;
mod exists_value;
pub mod expression_walk;
mod field_access;
mod first_row_subquery;
pub mod format_function;
pub mod generate_subscripts;
mod in_list_conditions;
mod interval;
pub mod interval_arithmetic;
pub mod interval_style;
pub mod interval_text;
pub mod json_build_object;
pub mod like_escape;
mod limits;
mod lookup_join;
pub mod materialized;
pub mod numeric_sum;
mod output_names;
mod parser;
pub mod placeholders;
pub mod postgres_text;
pub mod privilege_ddl;
mod regclass_cast;
mod repeated_columns;
pub mod role_ddl;
pub mod sink_ddl;
mod source_ddl;
pub mod special_registers;
mod stream_ddl;
pub mod streaming;
pub mod subscribe;
mod table_time;
pub mod text_casts;
mod text_function;
pub mod timestamp_text;
pub mod to_char_pattern;
mod tokens;
pub mod units;
pub mod version;
mod view_options;
pub mod windows;

pub use materialized::MaterializedView;
pub use output_names::output_names;
pub use parser::{parse, Statement};
pub use source_ddl::SourceClause;
pub use stream_ddl::{StreamOptions, WatermarkClause};
pub use view_options::ViewOptions;
