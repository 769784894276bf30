//! Where a view's changes end up: its stored rows. The runtime's last
//! operator (`MaterializeOperator`) and the dataflow's commit protocol talk
//! to this trait; the stored view result (connectors) implements it.

use std::sync::atomic::AtomicU64;

use datafusion::arrow::datatypes::SchemaRef;

use crate::error::Result;
use crate::state::WriteBatch;
use crate::stream::message::Chunk;

pub trait ViewSink: Send + Sync {
    /// The view's own columns.
    fn schema(&self) -> SchemaRef;
    /// Applies a chunk of changes to the staged rows; returns the writes
    /// that make them durable.
    fn apply(&self, chunk: &Chunk) -> Result<WriteBatch>;
    /// The view's watermark, for readers.
    fn set_watermark(&self, watermark_ns: i64);
    fn watermark_ns(&self) -> Option<i64>;
    /// Puts the watermark back (a failed write group had raised it).
    fn reset_watermark(&self, watermark_ns: Option<i64>);
    /// How many rows the view's operators dropped as late.
    fn late_rows(&self) -> &AtomicU64;
    /// Its operators' state in memory when last measured.
    fn record_state_memory(&self, bytes: u64);
    /// Before staged writes are spilled to the store ahead of their commit:
    /// what must be reserved durably first (None: nothing).
    fn reserve(&self) -> Result<Option<WriteBatch>>;
    /// The statement's changes are all applied: the writes that end them
    /// (a keyed view writes its changes here, once per statement).
    fn seal(&self) -> Result<WriteBatch> {
        Ok(WriteBatch::new())
    }
    /// The staged writes were spilled.
    fn spilled(&self);
    /// The staged changes were committed: readers see them.
    fn publish(&self);
    /// The staged changes were not committed.
    fn discard(&self);
}
