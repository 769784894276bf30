//! The streaming runtime: messages (`Batch` / `Watermark` / `Barrier`), the
//! `Operator` trait, the operators, and the `Dataflow` that pushes every
//! write to a table through the views that depend on it before the write
//! is acknowledged (read-your-writes).

pub mod alignment;
pub mod append_observer;
pub mod branch;
pub mod checkpoint;
pub mod checkpoint_store;
pub mod commit_order;
pub mod dataflow;
pub mod junction;
pub mod late;
pub mod message;
pub mod operator;
pub mod operators;
pub mod parallelism;
pub mod partition_workers;
pub mod pipeline;
pub mod spill;
pub mod time_columns;
pub mod view_sink;
pub mod watermark;

pub use dataflow::Dataflow;
pub use late::{LatePolicy, LateRows, UNBOUNDED_LATENESS_NS};
pub use message::{Chunk, Message};
pub use operator::Operator;
pub use view_sink::ViewSink;
pub use watermark::WatermarkTracker;

use serde::{Deserialize, Serialize};

/// When a view's rows appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum EmitMode {
    /// Partial results are visible and corrected as rows arrive.
    #[default]
    OnUpdate,
    /// A window's row appears once, final, when the watermark passes its end.
    OnWindowClose,
}

impl EmitMode {
    pub fn describe(self) -> &'static str {
        match self {
            EmitMode::OnUpdate => "on update",
            EmitMode::OnWindowClose => "on window close",
        }
    }
}
