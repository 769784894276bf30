//! The output order of a session aggregate whose partitions work on their
//! own threads. Every batch and every watermark becomes a numbered step
//! that the partitions it was sent to answer; a step's output goes out
//! once every step before it has gone out, its partitions' rows in
//! partition order, then its output watermark, so the output is what
//! running the partitions in place would give.

use std::collections::VecDeque;

use super::late::LateRow;
use crate::error::{Result, WeirError};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::Output;

#[derive(Default)]
pub struct PendingSteps {
    next_step: u64,
    queue: VecDeque<Pending>,
}

struct Pending {
    step: u64,
    /// Partitions that have not answered yet.
    waiting: usize,
    /// The batch whose late rows the step reports (None for a watermark).
    chunk: Option<Chunk>,
    late: Vec<LateRow>,
    /// (partition, its output) as answered.
    outputs: Vec<(usize, Output)>,
    watermark_out: Option<i64>,
}

/// A step every partition answered: its batch and late rows (in batch
/// order), and its output in order.
pub struct ReadyStep {
    pub chunk: Option<Chunk>,
    pub late: Vec<LateRow>,
    pub output: Output,
}

impl PendingSteps {
    /// Forgets the steps not gone out (a failed write group's); numbering
    /// goes on.
    pub fn discard(&mut self) {
        self.queue.clear();
    }

    /// A step sent to `partitions` partitions; its number.
    pub fn open(
        &mut self,
        partitions: usize,
        chunk: Option<Chunk>,
        watermark_out: Option<i64>,
    ) -> u64 {
        let step = self.next_step;
        self.next_step += 1;
        self.queue.push_back(Pending {
            step,
            waiting: partitions,
            chunk,
            late: Vec::new(),
            outputs: Vec::new(),
            watermark_out,
        });
        step
    }

    /// Partition `partition`'s answer to step `step`.
    pub fn record(
        &mut self,
        step: u64,
        partition: usize,
        late: Vec<LateRow>,
        output: Output,
    ) -> Result<()> {
        let pending = self
            .queue
            .iter_mut()
            .find(|pending| pending.step == step && pending.waiting > 0)
            .ok_or_else(|| WeirError::internal("a partition answered an unknown step"))?;
        pending.waiting -= 1;
        pending.late.extend(late);
        pending.outputs.push((partition, output));
        Ok(())
    }

    /// The leading steps that may go out, in order.
    pub fn ready(&mut self) -> Vec<ReadyStep> {
        let mut ready = Vec::new();
        while self.queue.front().is_some_and(|front| front.waiting == 0) {
            let Some(mut pending) = self.queue.pop_front() else {
                break;
            };
            pending.late.sort_by_key(|row| row.row);
            pending.outputs.sort_by_key(|(partition, _)| *partition);
            let mut output: Output = pending.outputs.into_iter().flat_map(|(_, o)| o).collect();
            output.extend(pending.watermark_out.map(Message::Watermark));
            ready.push(ReadyStep {
                chunk: pending.chunk,
                late: pending.late,
                output,
            });
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn late(row: u32) -> LateRow {
        LateRow {
            row,
            start: 0,
            end: 0,
            watermark: 0,
        }
    }

    fn watermarks(output: &Output) -> Vec<i64> {
        let watermark = |message: &Message| match message {
            Message::Watermark(watermark) => Some(*watermark),
            _ => None,
        };
        output.iter().filter_map(watermark).collect()
    }

    #[test]
    fn steps_go_out_in_order_once_every_partition_answered() {
        let mut steps = PendingSteps::default();
        let batch = steps.open(2, None, None);
        let close = steps.open(2, None, Some(100));
        let empty = steps.open(0, None, Some(150));
        steps
            .record(close, 1, Vec::new(), vec![Message::Watermark(7)])
            .unwrap();
        steps
            .record(close, 0, Vec::new(), vec![Message::Watermark(6)])
            .unwrap();
        steps
            .record(batch, 1, vec![late(9), late(2)], Vec::new())
            .unwrap();
        assert!(steps.ready().is_empty(), "the batch is not answered");
        steps.record(batch, 0, vec![late(5)], Vec::new()).unwrap();
        let ready = steps.ready();
        assert_eq!(ready.len(), 3);
        let rows: Vec<u32> = ready[0].late.iter().map(|row| row.row).collect();
        assert_eq!(rows, vec![2, 5, 9]);
        assert_eq!(watermarks(&ready[1].output), vec![6, 7, 100]);
        assert_eq!(watermarks(&ready[2].output), vec![150]);
        assert!(steps.record(empty, 0, Vec::new(), Vec::new()).is_err());
    }
}
