//! The runtime: every materialized view is a chain of operators ending in a
//! `MaterializeOperator`. A write to a table (or a change to a view) is pushed
//! through every view that reads it, then through their readers, inside the
//! writer's critical section, so the write is acknowledged only once all
//! dependent views reflect it (read-your-writes). The runtime merges input
//! watermarks (minimum over inputs, never going back) so operators only see
//! a single, monotone watermark.
//!
//! Execution is synchronous in the writer's (blocking) task: deterministic,
//! no channels to size, and nothing to wait for on FLUSH. Partition-parallel
//! execution behind an exchange is the direction in docs/architecture.md.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::record_batch::RecordBatch;

use super::message::{Chunk, Message};
use super::operator::{run, Operator};
use super::operators::MaterializeOperator;
use super::WatermarkTracker;
use crate::catalog::view_result::ViewResult;
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;

/// One materialized view's running operators.
pub struct ViewPipeline {
    pub name: String,
    /// The relations it reads (one today).
    pub inputs: Vec<String>,
    operators: Vec<Box<dyn Operator>>,
    sink: MaterializeOperator,
    watermarks: WatermarkMerge,
}

impl ViewPipeline {
    pub fn new(
        name: &str,
        inputs: Vec<String>,
        operators: Vec<Box<dyn Operator>>,
        result: Arc<ViewResult>,
    ) -> Self {
        ViewPipeline {
            name: name.to_string(),
            watermarks: WatermarkMerge::new(&inputs),
            inputs,
            operators,
            sink: MaterializeOperator::new(result),
        }
    }

    /// Runs `messages` from `input` through the chain; returns the view's changes.
    fn process(&mut self, input: &str, messages: Vec<Message>) -> Result<Vec<Message>> {
        let mut current = Vec::with_capacity(messages.len());
        for message in messages {
            match message {
                Message::Watermark(watermark) => {
                    if let Some(merged) = self.watermarks.advance(input, watermark) {
                        current.push(Message::Watermark(merged));
                    }
                }
                other => current.push(other),
            }
        }
        for operator in &mut self.operators {
            current = run(operator.as_mut(), current)?;
        }
        run(&mut self.sink, current)
    }
}

/// The minimum watermark over a view's inputs; None until every input has one.
#[derive(Debug, Clone)]
pub struct WatermarkMerge {
    inputs: HashMap<String, Option<i64>>,
    merged: Option<i64>,
}

impl WatermarkMerge {
    pub fn new(inputs: &[String]) -> Self {
        WatermarkMerge {
            inputs: inputs.iter().map(|input| (input.clone(), None)).collect(),
            merged: None,
        }
    }

    /// Records `input`'s watermark; returns the merged one if it advanced.
    pub fn advance(&mut self, input: &str, watermark: i64) -> Option<i64> {
        let slot = self.inputs.get_mut(input)?;
        *slot = Some(slot.map_or(watermark, |current| current.max(watermark)));
        let minimum = self
            .inputs
            .values()
            .copied()
            .collect::<Option<Vec<i64>>>()?
            .into_iter()
            .min()?;
        if self.merged.is_some_and(|merged| merged >= minimum) {
            return None;
        }
        self.merged = Some(minimum);
        self.merged
    }
}

#[derive(Default)]
pub struct Dataflow {
    /// By view id: creation order, so a view's inputs come before it.
    views: BTreeMap<u64, ViewPipeline>,
    /// Set when a push failed part-way: operator state may be ahead of what
    /// was committed, so views must be rebuilt before the next write.
    broken: bool,
}

impl Dataflow {
    pub fn add_view(&mut self, id: u64, pipeline: ViewPipeline) {
        self.views.insert(id, pipeline);
    }

    pub fn remove_view(&mut self, name: &str) {
        self.views.retain(|_, view| view.name != name);
    }

    /// Drops every pipeline (to rebuild them); writes stay refused until
    /// `set_repaired`.
    pub fn clear_views(&mut self) {
        self.views.clear();
        self.broken = true;
    }

    pub fn set_repaired(&mut self) {
        self.broken = false;
    }

    /// A new view's backfill failed: only that view was touched.
    pub fn remove_failed_view(&mut self, name: &str) {
        self.remove_view(name);
        self.broken = false;
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    pub fn has_readers(&self, relation: &str) -> bool {
        self.views
            .values()
            .any(|view| view.inputs.iter().any(|input| input == relation))
    }

    pub fn set_replaying(&mut self, replaying: bool) {
        for view in self.views.values_mut() {
            view.sink.set_replaying(replaying);
        }
    }

    /// Pushes `messages` from `source` through every view reading it, and
    /// on through views reading those; returns the writes to commit.
    pub fn push(&mut self, source: &str, messages: Vec<Message>) -> Result<WriteBatch> {
        self.push_to(None, source, messages)
    }

    /// Like `push`, but the first hop only reaches view `only` (backfill).
    pub fn push_to(
        &mut self,
        only: Option<&str>,
        source: &str,
        messages: Vec<Message>,
    ) -> Result<WriteBatch> {
        if self.broken {
            return Err(views_rebuilding());
        }
        let outcome = self.propagate(only, source, messages);
        if outcome.is_err() {
            self.broken = true;
        }
        outcome
    }

    fn propagate(
        &mut self,
        only: Option<&str>,
        source: &str,
        messages: Vec<Message>,
    ) -> Result<WriteBatch> {
        let mut writes = WriteBatch::new();
        let mut queue = VecDeque::from([(source.to_string(), messages, only)]);
        while let Some((input, messages, only)) = queue.pop_front() {
            for view in self.views.values_mut() {
                let reads = view.inputs.contains(&input);
                if !reads || only.is_some_and(|only| only != view.name) {
                    continue;
                }
                let changes = view.process(&input, messages.clone())?;
                writes.extend(view.sink.take_writes());
                if !changes.is_empty() {
                    queue.push_back((view.name.clone(), changes, None));
                }
            }
        }
        Ok(writes)
    }
}

fn views_rebuilding() -> WeirError {
    WeirError::new(
        "40001",
        "materialized views are being rebuilt after a failed write",
    )
    .with_hint("Retry the statement.")
}

/// The messages a table emits for rows appended to it: the rows with the
/// watermark each arrived under, then the new watermark.
pub fn source_messages(
    rows: RecordBatch,
    tracker: Option<&mut WatermarkTracker>,
) -> Result<Vec<Message>> {
    let Some(tracker) = tracker else {
        return Ok(vec![Message::batch(Chunk::inserts(rows))]);
    };
    let watermarks = tracker.watermarks_before(&rows)?;
    let mut messages = vec![Message::batch(Chunk {
        rows,
        diffs: None,
        watermarks: Some(watermarks),
    })];
    if let Some(watermark) = tracker.current_ns() {
        messages.push(Message::Watermark(watermark));
    }
    Ok(messages)
}

/// The dataflow shared by the engine and every table's writer.
#[derive(Clone, Default)]
pub struct SharedDataflow(Arc<Mutex<Dataflow>>);

impl SharedDataflow {
    pub fn lock(&self) -> MutexGuard<'_, Dataflow> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl crate::catalog::table::AppendObserver for SharedDataflow {
    fn on_append(&self, table: &str, messages: Vec<Message>) -> Result<WriteBatch> {
        let mut flow = self.lock();
        if !flow.has_readers(table) {
            return Ok(WriteBatch::new());
        }
        flow.push(table, messages)
    }

    fn on_commit_failed(&self) {
        self.lock().mark_broken();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_watermark_is_the_minimum_and_never_goes_back() {
        let mut merge = WatermarkMerge::new(&["a".to_string(), "b".to_string()]);
        assert_eq!(merge.advance("a", 10), None);
        assert_eq!(merge.advance("b", 5), Some(5));
        assert_eq!(merge.advance("b", 20), Some(10));
        assert_eq!(merge.advance("a", 8), None);
        assert_eq!(merge.advance("a", 15), Some(15));
        assert_eq!(merge.advance("unknown", 100), None);
    }
}
