//! The streaming runtime's time semantics. Today: the event-time watermark
//! every watermarked table maintains. The operators, messages
//! (`Batch` / `Watermark` / `Barrier`) and runtime of materialized views are
//! built on it next (see docs/architecture.md).

pub mod watermark;

pub use watermark::WatermarkTracker;
