//! The one trait every stream operator implements. Only the batch hook is
//! required; by default watermarks and barriers pass through unchanged. The
//! runtime (`dataflow`), not the operator, merges watermarks from inputs and
//! will align barriers when operators get several inputs.

use super::checkpoint::{StateReader, StateWriter};
use super::message::{Chunk, Message};
use crate::error::Result;

/// Where an operator puts the messages it produces, in order.
pub type Output = Vec<Message>;

pub trait Operator: Send {
    /// A short name for EXPLAIN and errors, e.g. `WindowAggregate`.
    fn name(&self) -> &'static str;

    /// Processes one chunk of rows; work must be proportional to the chunk.
    fn on_batch(&mut self, chunk: Chunk, output: &mut Output) -> Result<()>;

    /// The input watermark advanced to `watermark_ns` (never goes back).
    fn on_watermark(&mut self, watermark_ns: i64, output: &mut Output) -> Result<()> {
        output.push(Message::Watermark(watermark_ns));
        Ok(())
    }

    /// A checkpoint barrier: the runtime has already called `checkpoint`;
    /// forward it.
    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        output.push(Message::Barrier(epoch));
        Ok(())
    }

    /// Writes what changed in the operator's state since the last
    /// checkpoint (stateless operators write nothing).
    fn checkpoint(&mut self, _state: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    /// Loads the state the last checkpoint holds, before any message.
    fn restore(&mut self, _state: &StateReader) -> Result<()> {
        Ok(())
    }

    /// Roughly the bytes of memory its state holds (accumulators, keys,
    /// rows it waits on); computed at checkpoints, so it may walk the state.
    fn memory_bytes(&self) -> usize {
        0
    }
}

/// Feeds `messages` through `operator`, returning what it produced.
pub fn run(operator: &mut dyn Operator, messages: Vec<Message>) -> Result<Output> {
    let mut output = Vec::new();
    for message in messages {
        match message {
            Message::Batch(chunk) if chunk.num_rows() == 0 => {}
            Message::Batch(chunk) => operator.on_batch(*chunk, &mut output)?,
            Message::Watermark(watermark) => operator.on_watermark(watermark, &mut output)?,
            Message::Barrier(epoch) => operator.on_barrier(epoch, &mut output)?,
        }
    }
    Ok(output)
}

/// Moves an operator's watermark to `watermark_ns`; false (and no change)
/// when it is not ahead of the current one, so the caller can ignore it.
pub fn advance_watermark(current: &mut Option<i64>, watermark_ns: i64) -> bool {
    if current.is_some_and(|current| current >= watermark_ns) {
        return false;
    }
    *current = Some(watermark_ns);
    true
}
