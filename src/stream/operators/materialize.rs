//! The last operator of every view: applies its changes to the view's rows
//! and passes them on to the views that read this one.

use std::sync::Arc;

use crate::error::Result;
use crate::state::WriteBatch;
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::ViewSink;

pub struct MaterializeOperator {
    result: Arc<dyn ViewSink>,
    writes: WriteBatch,
    /// While rebuilding operator state on start the stored rows are already
    /// current: changes are passed on but not applied again.
    replaying: bool,
    /// The view's watermark at the last commit, once the group running
    /// now raised it.
    watermark_before: Option<Option<i64>>,
}

impl MaterializeOperator {
    pub fn new(result: Arc<dyn ViewSink>) -> Self {
        MaterializeOperator {
            result,
            writes: WriteBatch::new(),
            replaying: false,
            watermark_before: None,
        }
    }

    pub fn set_replaying(&mut self, replaying: bool) {
        self.replaying = replaying;
    }

    /// The writes that make the changes applied so far durable.
    pub fn take_writes(&mut self) -> WriteBatch {
        std::mem::take(&mut self.writes)
    }

    pub fn result(&self) -> &Arc<dyn ViewSink> {
        &self.result
    }
}

impl Operator for MaterializeOperator {
    fn name(&self) -> &'static str {
        "Materialize"
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        if !self.replaying {
            self.writes.extend(self.result.apply(&chunk)?);
        }
        // Readers see the view's own column names, and its rows under the
        // view's own watermark.
        let rows = datafusion::arrow::record_batch::RecordBatch::try_new(
            self.result.schema(),
            chunk.rows.columns().to_vec(),
        )?;
        output.push(Message::batch(Chunk {
            rows,
            diffs: chunk.diffs,
            watermarks: None,
        }));
        Ok(())
    }

    /// The view's staged rows are the view result's, discarded with the
    /// group; the watermark readers see goes back.
    fn rollback(&mut self) -> Result<bool> {
        self.writes = WriteBatch::new();
        if let Some(watermark) = self.watermark_before.take() {
            self.result.reset_watermark(watermark);
        }
        Ok(true)
    }

    fn commit(&mut self) {
        self.watermark_before = None;
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        if self.watermark_before.is_none() {
            self.watermark_before = Some(self.result.watermark_ns());
        }
        self.result.set_watermark(watermark_ns);
        output.push(Message::Watermark(watermark_ns));
        Ok(())
    }
}
