//! The stream operators, one per file. Each is planned from the node of the
//! same stem in `sql::streaming` (`AggregateNode` plans an
//! `AggregateOperator`).

pub mod aggregate;
pub mod emit_on_close;
pub mod filter;
pub mod join;
pub mod materialize;
pub mod ordered_partition;
pub mod over_window;
pub mod project;
pub mod temporal_filter;
pub mod top_n;
pub mod top_n_windows;
pub mod union;
pub mod window;
pub mod window_spec;

pub use aggregate::{AggregateOperator, SessionAggregateOperator, WindowAggregateOperator};
pub use emit_on_close::EmitOnCloseOperator;
pub use filter::FilterOperator;
pub use join::JoinOperator;
pub use materialize::MaterializeOperator;
pub use over_window::OverWindowOperator;
pub use project::ProjectOperator;
pub use temporal_filter::TemporalFilterOperator;
pub use top_n::TopNOperator;
pub use union::UnionOperator;
pub use window::WindowOperator;
