//! The one trait every stream operator implements, and the `Stage` the
//! runtime wraps each operator in. Only the batch hook is required; by
//! default watermarks and barriers pass through unchanged. The runtime, not
//! the operator, owns watermark bookkeeping: a `Stage` keeps its operator's
//! input watermark, drops watermarks that do not advance it, hands the
//! current one to every hook in a `Context`, and checkpoints and restores
//! it. Several inputs meet in `UnionOperator`, which forwards the minimum.

use super::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use super::message::{Chunk, Message};
use super::spill::SpillSpace;
use crate::error::Result;

/// Where an operator puts the messages it produces, in order.
pub type Output = Vec<Message>;

/// What the runtime knows when it hands an operator a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    /// The input's watermark before this message (None until the first);
    /// a row of a chunk may carry the older one it arrived under.
    pub watermark: Option<i64>,
}

pub trait Operator: Send {
    /// A short name for EXPLAIN and errors, e.g. `WindowAggregate`.
    fn name(&self) -> &'static str;

    /// Processes one chunk of rows; work must be proportional to the chunk.
    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()>;

    /// The input watermark advanced from `context.watermark` to
    /// `watermark_ns` (the runtime calls this only when it advances).
    fn on_watermark(
        &mut self,
        watermark_ns: i64,
        _context: Context,
        output: &mut Output,
    ) -> Result<()> {
        output.push(Message::Watermark(watermark_ns));
        Ok(())
    }

    /// A checkpoint barrier: the runtime has already called `checkpoint`;
    /// forward it.
    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        output.push(Message::Barrier(epoch));
        Ok(())
    }

    /// An `EMIT EVERY` firing of view `view`: publish what was held for
    /// it (an aggregate does), and forward it.
    fn on_fire(&mut self, view: u64, output: &mut Output) -> Result<()> {
        output.push(Message::Fire(view));
        Ok(())
    }

    /// Whether its output changes with the clock alone (a temporal
    /// filter): the runtime then checkpoints, and so calls it, even when
    /// no row came.
    fn clocked(&self) -> bool {
        false
    }

    /// Finishes work the operator handed to other threads, putting out
    /// what it held back for it and reporting its errors; the runtime
    /// calls it before a write group commits.
    fn flush(&mut self, _output: &mut Output) -> Result<()> {
        Ok(())
    }

    /// Writes what changed in the operator's state since the last
    /// checkpoint (stateless operators write nothing; the watermark is the
    /// runtime's).
    fn checkpoint(&mut self, _state: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    /// Gives the operator a key space to spill state that outgrows memory
    /// to (`spill`), before `restore` and any message; one without it
    /// keeps all its state in memory.
    fn attach(&mut self, _space: SpillSpace) {}

    /// Loads the state the last checkpoint holds, before any message.
    fn restore(&mut self, _state: &StateReader) -> Result<()> {
        Ok(())
    }

    /// Roughly the bytes of memory its state holds (accumulators, keys,
    /// rows it waits on); computed at checkpoints, so it may walk the state.
    fn memory_bytes(&self) -> usize {
        0
    }

    /// The write group whose changes it took has committed: what it kept
    /// to undo them goes.
    fn commit(&mut self) {}

    /// The write group failed: puts its state back as it was at the last
    /// `commit` (or its creation or restore), at a cost in proportion to
    /// what the group changed. Returns false when it cannot (its view is
    /// then rebuilt from its checkpoint); an operator without state
    /// returns true.
    fn rollback(&mut self) -> Result<bool> {
        Ok(false)
    }
}

/// The checkpoint entry holding a stage's input watermark (the name every
/// operator used for its own before the runtime kept it, so older
/// checkpoints restore unchanged).
const WATERMARK: &[u8] = b"watermark";

/// An operator and its input watermark, kept by the runtime.
pub struct Stage<O: Operator + ?Sized = dyn Operator> {
    operator: Box<O>,
    watermark: Option<i64>,
    /// Whether `watermark` moved since the last checkpoint.
    watermark_changed: bool,
    /// `watermark` and `watermark_changed` at the last commit, once the
    /// group running now moved it.
    watermark_before: Option<(Option<i64>, bool)>,
}

impl<O: Operator + ?Sized> Stage<O> {
    pub fn new(operator: Box<O>) -> Self {
        Stage {
            operator,
            watermark: None,
            watermark_changed: false,
            watermark_before: None,
        }
    }

    pub fn operator(&self) -> &O {
        &self.operator
    }

    /// Its input watermark (None until the first).
    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    pub fn operator_mut(&mut self) -> &mut O {
        &mut self.operator
    }

    pub fn name(&self) -> &'static str {
        self.operator.name()
    }

    pub fn clocked(&self) -> bool {
        self.operator.clocked()
    }

    pub fn memory_bytes(&self) -> usize {
        self.operator.memory_bytes()
    }

    fn context(&self) -> Context {
        Context {
            watermark: self.watermark,
        }
    }

    pub fn on_batch(&mut self, chunk: Chunk, output: &mut Output) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        let context = self.context();
        self.operator.on_batch(chunk, context, output)
    }

    /// Passes `watermark_ns` on to the operator only if it advances.
    pub fn on_watermark(&mut self, watermark_ns: i64, output: &mut Output) -> Result<()> {
        let context = self.context();
        if context
            .watermark
            .is_some_and(|current| current >= watermark_ns)
        {
            return Ok(());
        }
        self.watermark_before
            .get_or_insert((self.watermark, self.watermark_changed));
        self.watermark = Some(watermark_ns);
        self.watermark_changed = true;
        self.operator.on_watermark(watermark_ns, context, output)
    }

    /// The write group committed (see `Operator::commit`).
    pub fn commit(&mut self) {
        self.watermark_before = None;
        self.operator.commit();
    }

    /// The write group failed (see `Operator::rollback`).
    pub fn rollback(&mut self) -> Result<bool> {
        if let Some((watermark, changed)) = self.watermark_before.take() {
            self.watermark = watermark;
            self.watermark_changed = changed;
        }
        self.operator.rollback()
    }

    pub fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        self.operator.on_barrier(epoch, output)
    }

    pub fn on_fire(&mut self, view: u64, output: &mut Output) -> Result<()> {
        self.operator.on_fire(view, output)
    }

    /// Feeds `messages` through the operator, returning what it produced.
    pub fn run(&mut self, messages: Vec<Message>) -> Result<Output> {
        let mut output = Vec::new();
        for message in messages {
            match message {
                Message::Batch(chunk) => self.on_batch(*chunk, &mut output)?,
                Message::Watermark(watermark) => self.on_watermark(watermark, &mut output)?,
                Message::Barrier(epoch) => self.on_barrier(epoch, &mut output)?,
                Message::Fire(view) => self.on_fire(view, &mut output)?,
            }
        }
        Ok(output)
    }

    pub fn flush(&mut self) -> Result<Output> {
        let mut output = Vec::new();
        self.operator.flush(&mut output)?;
        Ok(output)
    }

    /// The operator's changed state and, if it moved, the watermark.
    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        self.operator.checkpoint(state)?;
        if let (true, Some(watermark)) = (self.watermark_changed, self.watermark) {
            state.put(WATERMARK, encode_i64(watermark));
            self.watermark_changed = false;
        }
        Ok(())
    }

    pub fn attach(&mut self, space: SpillSpace) {
        self.operator.attach(space);
    }

    pub fn restore(&mut self, state: &StateReader) -> Result<()> {
        self.watermark = state.get(WATERMARK).and_then(decode_i64);
        self.watermark_changed = false;
        self.watermark_before = None;
        self.operator.restore(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};

    /// Records the watermarks and contexts it is given.
    #[derive(Default)]
    struct Recorder {
        seen: Vec<(i64, Option<i64>)>,
    }

    impl Operator for Recorder {
        fn name(&self) -> &'static str {
            "Recorder"
        }

        fn on_batch(&mut self, _: Chunk, _: Context, _: &mut Output) -> Result<()> {
            Ok(())
        }

        fn on_watermark(&mut self, watermark: i64, context: Context, _: &mut Output) -> Result<()> {
            self.seen.push((watermark, context.watermark));
            Ok(())
        }
    }

    #[test]
    fn only_advancing_watermarks_reach_the_operator_with_the_previous_one() {
        let mut stage = Stage::new(Box::new(Recorder::default()));
        let messages = [10, 5, 10, 20].map(Message::Watermark).to_vec();
        stage.run(messages).unwrap();
        assert_eq!(stage.operator().seen, vec![(10, None), (20, Some(10))]);
    }

    #[test]
    fn the_watermark_is_checkpointed_when_it_moved_and_restored() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut stage = Stage::new(Box::new(Recorder::default()));
        stage.on_watermark(7, &mut Vec::new()).unwrap();
        assert_eq!(commit_checkpoint(&mut stage, &store), 1);
        assert_eq!(
            commit_checkpoint(&mut stage, &store),
            0,
            "an unmoved watermark is not rewritten"
        );
        let mut restored = Stage::new(Box::new(Recorder::default()));
        restored.restore(&stored_state(&store)).unwrap();
        let messages = vec![Message::Watermark(7), Message::Watermark(8)];
        restored.run(messages).unwrap();
        assert_eq!(restored.operator().seen, vec![(8, Some(7))]);
    }
}
