//! The stream operators, one per file. Each is planned from the node of the
//! same stem in `sql::streaming` (`AggregateNode` plans an
//! `AggregateOperator`).

pub mod aggregate;
pub mod aggregate_calls;
pub mod aggregate_late;
mod aggregate_state;
pub mod emit_on_close;
pub mod filter;
pub mod materialize;
pub mod project;
pub mod session_aggregate;
mod session_state;
pub mod union;
pub mod window;
pub mod window_aggregate;
mod window_bin;
mod window_partitions;
pub mod window_spec;

pub use aggregate::AggregateOperator;
pub use emit_on_close::EmitOnCloseOperator;
pub use filter::FilterOperator;
pub use materialize::MaterializeOperator;
pub use project::ProjectOperator;
pub use session_aggregate::SessionAggregateOperator;
pub use union::UnionOperator;
pub use window::WindowOperator;
pub use window_aggregate::WindowAggregateOperator;
