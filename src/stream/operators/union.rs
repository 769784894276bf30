//! Where a view's branches meet (UNION ALL). Rows pass under the union's
//! column names; the watermark is the minimum over the branches (none until
//! every branch has one), and a row that carries the watermark it arrived
//! under gets the minimum of that and the other branches' watermarks, so
//! lateness downstream is judged against the merged stream. A barrier
//! passes once it has come from every branch. The branches' watermarks are
//! checkpointed: a restarted union judges rows as the one before the crash.

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::stream::alignment::{BarrierAlign, WatermarkMerge};
use crate::stream::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::Output;

pub struct UnionOperator {
    schema: SchemaRef,
    /// False when the branches' watermarks are on different columns: the
    /// union then has none.
    forwards_watermarks: bool,
    names: Vec<String>,
    /// Each branch's watermark so far.
    watermarks: Vec<Option<i64>>,
    merge: WatermarkMerge,
    barriers: BarrierAlign,
    /// `watermarks` and `merge` at the last commit, once the write group
    /// running now moved them.
    before: Option<(Vec<Option<i64>>, WatermarkMerge)>,
}

impl UnionOperator {
    pub fn new(schema: SchemaRef, inputs: usize, forwards_watermarks: bool) -> Self {
        let names: Vec<String> = (0..inputs).map(|branch| branch.to_string()).collect();
        UnionOperator {
            schema,
            forwards_watermarks,
            watermarks: vec![None; inputs],
            merge: WatermarkMerge::new(&names),
            barriers: BarrierAlign::new(&names),
            names,
            before: None,
        }
    }

    /// A message from `branch`; what passes the union goes to `output`.
    /// Returns the epoch of a barrier that has now come from every branch
    /// (the caller checkpoints the union then).
    pub fn on_message(
        &mut self,
        branch: usize,
        message: Message,
        output: &mut Output,
    ) -> Result<Option<u64>> {
        match message {
            Message::Batch(chunk) => {
                let chunk = self.relabel(branch, *chunk)?;
                output.push(Message::batch(chunk));
            }
            Message::Watermark(watermark) if self.forwards_watermarks => {
                if self.before.is_none() {
                    self.before = Some((self.watermarks.clone(), self.merge.clone()));
                }
                let slot = &mut self.watermarks[branch];
                *slot = Some(slot.map_or(watermark, |current| current.max(watermark)));
                if let Some(merged) = self.merge.advance(&self.names[branch], watermark) {
                    output.push(Message::Watermark(merged));
                }
            }
            Message::Watermark(_) => {}
            Message::Barrier(epoch) => {
                if self.barriers.arrive(&self.names[branch], epoch) {
                    output.push(Message::Barrier(epoch));
                    return Ok(Some(epoch));
                }
            }
            // Views with EMIT EVERY read one table (the planner sees to
            // it), so a firing comes down one branch only.
            Message::Fire(view) => output.push(Message::Fire(view)),
        }
        Ok(None)
    }

    /// The chunk under the union's names, each row's watermark merged.
    fn relabel(&self, branch: usize, chunk: Chunk) -> Result<Chunk> {
        let rows = RecordBatch::try_new(self.schema.clone(), chunk.rows.columns().to_vec())?;
        let watermarks = match (&chunk.watermarks, self.forwards_watermarks) {
            (Some(own), true) => Some(self.merged_per_row(branch, own)),
            _ => None,
        };
        Ok(Chunk {
            rows,
            diffs: chunk.diffs,
            watermarks,
        })
    }

    fn merged_per_row(&self, branch: usize, own: &Int64Array) -> Int64Array {
        let others = self
            .watermarks
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != branch)
            .map(|(_, watermark)| *watermark)
            .collect::<Option<Vec<i64>>>()
            .map(|watermarks| watermarks.into_iter().min().unwrap_or(i64::MAX));
        own.iter()
            .map(|watermark| Some(watermark?.min(others?)))
            .collect()
    }

    pub fn commit(&mut self) {
        self.before = None;
    }

    /// Puts the branches' watermarks back as they were at the last commit;
    /// its only state, so it always can.
    pub fn rollback(&mut self) -> bool {
        if let Some((watermarks, merge)) = self.before.take() {
            self.watermarks = watermarks;
            self.merge = merge;
        }
        true
    }

    pub fn checkpoint(&self, state: &mut StateWriter) {
        for (branch, watermark) in self.watermarks.iter().enumerate() {
            if let Some(watermark) = watermark {
                state.put(&branch_key(branch), encode_i64(*watermark));
            }
        }
    }

    pub fn restore(&mut self, state: &StateReader) {
        for branch in 0..self.watermarks.len() {
            if let Some(watermark) = state.get(&branch_key(branch)).and_then(decode_i64) {
                self.watermarks[branch] = Some(watermark);
                self.merge.advance(&self.names[branch], watermark);
            }
        }
    }
}

fn branch_key(branch: usize) -> Vec<u8> {
    format!("watermark/{branch}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn two_branches() -> UnionOperator {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        UnionOperator::new(schema, 2, true)
    }

    fn chunk(name: &str, watermarks: Vec<Option<i64>>) -> Message {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, true)]));
        let values: Vec<i64> = (0..watermarks.len() as i64).collect();
        let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).unwrap();
        Message::batch(Chunk {
            rows,
            diffs: None,
            watermarks: Some(Int64Array::from(watermarks)),
        })
    }

    fn row_watermarks(output: &Output) -> Vec<Option<i64>> {
        match output.last() {
            Some(Message::Batch(chunk)) => chunk.watermarks.as_ref().unwrap().iter().collect(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn the_watermark_is_the_minimum_once_every_branch_has_one() {
        let mut union = two_branches();
        let mut output = Vec::new();
        union
            .on_message(0, Message::Watermark(20), &mut output)
            .unwrap();
        assert!(output.is_empty(), "branch 1 has no watermark yet");
        union
            .on_message(1, Message::Watermark(5), &mut output)
            .unwrap();
        union
            .on_message(1, Message::Watermark(30), &mut output)
            .unwrap();
        let merged: Vec<_> = output
            .iter()
            .filter_map(|m| match m {
                Message::Watermark(w) => Some(*w),
                _ => None,
            })
            .collect();
        assert_eq!(merged, vec![5, 20]);
    }

    #[test]
    fn rows_are_renamed_and_judged_by_the_merged_watermark() {
        let mut union = two_branches();
        let mut output = Vec::new();
        union
            .on_message(0, chunk("m", vec![Some(50)]), &mut output)
            .unwrap();
        assert_eq!(row_watermarks(&output), vec![None], "branch 1 has none");
        if let Some(Message::Batch(chunk)) = output.last() {
            assert_eq!(chunk.rows.schema().field(0).name(), "n");
        }
        union
            .on_message(1, Message::Watermark(10), &mut output)
            .unwrap();
        union
            .on_message(0, chunk("m", vec![Some(50), Some(7), None]), &mut output)
            .unwrap();
        assert_eq!(row_watermarks(&output), vec![Some(10), Some(7), None]);
    }

    #[test]
    fn a_barrier_passes_once_and_the_watermarks_survive_a_restart() {
        let mut union = two_branches();
        let mut output = Vec::new();
        union
            .on_message(0, Message::Watermark(20), &mut output)
            .unwrap();
        assert_eq!(
            union
                .on_message(0, Message::Barrier(1), &mut output)
                .unwrap(),
            None
        );
        assert_eq!(
            union
                .on_message(1, Message::Barrier(1), &mut output)
                .unwrap(),
            Some(1)
        );
        let directory = tempfile::tempdir().unwrap();
        let store = crate::state::SledStore::open(directory.path()).unwrap();
        let mut batch = crate::state::WriteBatch::new();
        union.checkpoint(&mut StateWriter::new(b"u/".to_vec(), &mut batch));
        crate::state::StateStore::commit(&store, batch).unwrap();
        let entries = crate::state::StateStore::scan_prefix(&store, b"u/")
            .unwrap()
            .into_iter()
            .map(|(key, value)| (key[2..].to_vec(), value))
            .collect();
        let mut restored = two_branches();
        restored.restore(&StateReader { entries });
        let mut output = Vec::new();
        restored
            .on_message(1, Message::Watermark(40), &mut output)
            .unwrap();
        assert!(matches!(output.as_slice(), [Message::Watermark(20)]));
    }
}
