//! GROUP BY over SESSION windows. Each row arrives as its own session
//! `[ts, ts + gap)` (from the window operator); sessions of one key that
//! overlap or touch merge, their accumulators combined with DataFusion's
//! `state()` / `merge_batch`. A session is complete when the watermark
//! reaches its end (emitted then under EMIT ON WINDOW CLOSE), takes
//! corrections until end + allowed lateness, and is then final: its state
//! goes, leaving a marker for one more gap so that a row which would merge
//! into it is late rather than the start of a session overlapping it.
//! Keys are split into partitions (`parallelism`), each placing its share
//! of a batch on its own worker thread (`session_partition`) while the
//! operator goes on to the next batch; their answers go out in the order
//! the batches and watermarks came in (`session_steps`). The operator
//! waits for its partitions only at checkpoints and when the runtime
//! flushes it at the end of a write group.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{evaluate_arguments, push_changes, value_columns, AggregateCall, Arguments};
use super::late::LateRow;
use super::session_partition::{SessionBatch, SessionPartition, SessionRules};
use super::session_state::decode_sessions;
use super::session_steps::PendingSteps;
use super::LateHandling;
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::parallelism::{partition_of_key, ROWS_FOR_THREADS};
use crate::stream::partition_workers::Partitioned;
use crate::stream::time_columns::{nanoseconds, timestamps};
use crate::stream::EmitMode;

/// Where the session's bounds are among the GROUP BY columns.
#[derive(Debug, Clone, Copy)]
pub struct SessionColumns {
    pub start: Option<usize>,
    pub end: Option<usize>,
    pub gap_ns: i64,
}

pub struct Session {
    pub end: i64,
    /// The end this open session is filed under in `open_ends`: at most
    /// `end`, since a row extending the session only moves `end`; the
    /// entry is moved when the watermark reaches it (`refile`).
    pub filed_end: i64,
    /// None once the session is final (a marker).
    pub accumulators: Option<Vec<Box<dyn Accumulator>>>,
    /// Whether the output holds this session's row.
    pub emitted: bool,
    /// Rows of the current chunk not yet in the accumulators.
    pub pending: Vec<u32>,
}

/// Two touching sessions as one: accumulators merged through DataFusion's
/// `state()` / `merge_batch`, rows still pending kept. `state()` may take
/// what it reports, which is fine here: `other` is gone afterwards.
pub fn merge_sessions(mut survivor: Session, mut other: Session) -> Result<Session> {
    let (Some(target), Some(source)) = (&mut survivor.accumulators, other.accumulators.take())
    else {
        return Err(WeirError::internal("merging a final session"));
    };
    for (target, mut source) in target.iter_mut().zip(source) {
        let state: Vec<ArrayRef> = source
            .state()?
            .into_iter()
            .map(|value| value.to_array())
            .collect::<datafusion::error::Result<_>>()?;
        target.merge_batch(&state)?;
    }
    survivor.end = survivor.end.max(other.end);
    survivor.pending.append(&mut other.pending);
    Ok(survivor)
}

/// One key's sessions by start; they never overlap or touch.
pub type Sessions = BTreeMap<i64, Session>;

/// Rows to emit: key, start, end, aggregate values, diff.
pub type Emitted = Vec<(Vec<u8>, i64, i64, Vec<ScalarValue>, i64)>;

pub struct SessionAggregateOperator {
    /// Every GROUP BY expression; those at `shape.columns` are the bounds.
    groups: Vec<Arc<dyn PhysicalExpr>>,
    shape: Arc<SessionShape>,
    /// The keys' sessions, split by a hash of the key, each worked on by
    /// its own worker thread.
    partitions: Partitioned<SessionPartition, StepOutcome>,
    /// Batches and watermarks handed to the partitions, in order.
    steps: PendingSteps,
    /// Messages made ready while waiting for a checkpoint; they go out
    /// before the barrier.
    ready_output: Output,
    late: LateHandling,
    /// Set once the running write group changed the operator: how much of
    /// `ready_output` was there before (the partitions keep the rest of
    /// the undo, `session_undo`).
    ready_before: Option<usize>,
}

/// What every partition's jobs read alike.
struct SessionShape {
    columns: SessionColumns,
    calls: Vec<AggregateCall>,
    rules: SessionRules,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    group_count: usize,
    /// Row format of the key: the GROUP BY columns other than the bounds.
    converter: Option<RowConverter>,
}

/// A batch's columns, shared by the jobs of the partitions it was split
/// across.
struct SharedBatch {
    chunk: Chunk,
    times: Int64Array,
    keys: Option<Rows>,
    arguments: Vec<Arguments>,
    watermark: Option<i64>,
}

/// A partition's answer to a step: late rows (for a batch) and the rows it
/// emits.
struct StepOutcome {
    step: u64,
    partition: usize,
    late: Vec<LateRow>,
    output: Output,
}

impl SessionAggregateOperator {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        columns: SessionColumns,
        calls: Vec<AggregateCall>,
        emit: EmitMode,
        schema: SchemaRef,
        late: LateHandling,
        partitions: usize,
    ) -> Result<Self> {
        let key_fields: Vec<SortField> = (0..groups.len())
            .filter(|index| !is_bound(&columns, *index))
            .map(|index| SortField::new(schema.field(index).data_type().clone()))
            .collect();
        let converter = if key_fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(key_fields)?)
        };
        let rules = SessionRules {
            gap_ns: columns.gap_ns,
            lateness_ns: late.policy.allowed_lateness_ns(),
            emit,
        };
        let shape = SessionShape {
            columns,
            calls,
            rules,
            schema,
            group_count: groups.len(),
            converter,
        };
        let states = (0..partitions.max(1))
            .map(|_| SessionPartition::default())
            .collect();
        Ok(SessionAggregateOperator {
            groups,
            shape: Arc::new(shape),
            partitions: Partitioned::new(states),
            steps: PendingSteps::default(),
            ready_output: Vec::new(),
            late,
            ready_before: None,
        })
    }

    /// Each row's event time (its own session's start).
    fn row_times(&self, chunk: &Chunk) -> Result<Int64Array> {
        let rows = chunk.num_rows();
        let columns = &self.shape.columns;
        let (index, shift) = match (columns.start, columns.end) {
            (Some(start), _) => (start, 0),
            (None, Some(end)) => (end, columns.gap_ns),
            (None, None) => return Err(WeirError::internal("a session without bounds")),
        };
        let column = self.groups[index].evaluate(&chunk.rows)?.into_array(rows)?;
        let times = nanoseconds(&column)?;
        // An end came from `ts + gap`, so `end - gap` fits.
        Ok(times
            .iter()
            .map(|time| time.map(|t| t.saturating_sub(shift)))
            .collect())
    }

    /// Each row's key in the row format; None when the only GROUP BY
    /// columns are the bounds (every row's key is empty). Borrowed per row
    /// so no row allocates its key.
    fn key_rows(&self, chunk: &Chunk) -> Result<Option<Rows>> {
        let rows = chunk.num_rows();
        let Some(converter) = &self.shape.converter else {
            return Ok(None);
        };
        let columns = self
            .groups
            .iter()
            .enumerate()
            .filter(|(index, _)| !is_bound(&self.shape.columns, *index))
            .map(|(_, expression)| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        Ok(Some(converter.convert_columns(&columns)?))
    }

    /// Each partition's rows of a batch, in order.
    fn split(&self, keys: &Option<Rows>, rows: usize) -> Vec<Vec<u32>> {
        let count = self.partitions.len();
        let Some(keys) = keys.as_ref().filter(|_| count > 1) else {
            let mut members = vec![Vec::new(); count];
            members[0] = (0..rows as u32).collect();
            return members;
        };
        let mut members: Vec<Vec<u32>> = (0..count)
            .map(|_| Vec::with_capacity(rows / count + rows / 8))
            .collect();
        for row in 0..rows {
            members[partition_of_key(keys.row(row).data(), count)].push(row as u32);
        }
        members
    }

    /// The first change of a write group: what earlier groups left in
    /// flight (nothing after a flush) is finished first, so that an undo
    /// drops only the group's own work.
    fn note_change(&mut self) -> Result<()> {
        if self.ready_before.is_none() {
            self.wait_for_partitions()?;
            self.ready_before = Some(self.ready_output.len());
        }
        Ok(())
    }

    /// Everything handed over finished, what it made ready held back.
    fn wait_for_partitions(&mut self) -> Result<()> {
        let mut ready = std::mem::take(&mut self.ready_output);
        self.take_finished(true, &mut ready)?;
        self.ready_output = ready;
        Ok(())
    }

    fn commit_partitions(&mut self) -> Result<()> {
        self.wait_for_partitions()?;
        if self.ready_before.take().is_some() {
            for mut partition in self.partitions.states()? {
                partition.commit();
            }
        }
        Ok(())
    }

    /// Takes what the partitions finished (when `block`, everything handed
    /// over) and puts out the steps that are complete, in order.
    fn take_finished(&mut self, block: bool, output: &mut Output) -> Result<()> {
        output.append(&mut self.ready_output);
        for outcome in self.partitions.finished(block)? {
            let outcome = outcome?;
            let (step, partition) = (outcome.step, outcome.partition);
            self.steps
                .record(step, partition, outcome.late, outcome.output)?;
        }
        for ready in self.steps.ready() {
            if let Some(chunk) = &ready.chunk {
                self.late.report(chunk, &ready.late)?;
            }
            output.extend(ready.output);
        }
        Ok(())
    }
}

impl SessionShape {
    fn emit_rows(&self, emitted: Emitted) -> Result<Output> {
        let mut output = Vec::new();
        if emitted.is_empty() {
            return Ok(output);
        }
        let mut keys = match &self.converter {
            Some(converter) => {
                let parser = converter.parser();
                let rows = emitted.iter().map(|(key, ..)| parser.parse(key));
                converter.convert_rows(rows)?.into_iter()
            }
            None => Vec::new().into_iter(),
        };
        let fields = self.schema.fields();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(fields.len());
        for index in 0..self.group_count {
            let data_type = fields[index].data_type();
            let column = if Some(index) == self.columns.start {
                timestamps(emitted.iter().map(|e| e.1).collect(), data_type)?
            } else if Some(index) == self.columns.end {
                timestamps(emitted.iter().map(|e| e.2).collect(), data_type)?
            } else {
                keys.next()
                    .ok_or_else(|| WeirError::internal("a session key column is missing"))?
            };
            columns.push(column);
        }
        let diffs: Vec<i64> = emitted.iter().map(|e| e.4).collect();
        let values = emitted.into_iter().map(|e| e.3);
        columns.extend(value_columns(&self.schema, self.group_count, values)?);
        push_changes(&self.schema, columns, diffs.into_iter(), &mut output)?;
        Ok(output)
    }
}

fn is_bound(columns: &SessionColumns, index: usize) -> bool {
    Some(index) == columns.start || Some(index) == columns.end
}

fn session_name(key: &[u8]) -> Vec<u8> {
    [b"session/".as_slice(), key].concat()
}

impl Operator for SessionAggregateOperator {
    fn memory_bytes(&self) -> usize {
        let partitions = self.partitions.peek();
        partitions.map(|partition| partition.memory_bytes()).sum()
    }

    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        self.note_change()?;
        let batch = Arc::new(SharedBatch {
            times: self.row_times(&chunk)?,
            keys: self.key_rows(&chunk)?,
            arguments: evaluate_arguments(&self.shape.calls, &chunk)?,
            watermark: context.watermark,
            chunk,
        });
        let members = self.split(&batch.keys, batch.chunk.num_rows());
        let sent = members.iter().filter(|rows| !rows.is_empty()).count();
        let step = self.steps.open(sent, Some(batch.chunk.clone()), None);
        for (partition, rows) in members.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let small = rows.len() < ROWS_FOR_THREADS;
            let (shape, batch) = (self.shape.clone(), batch.clone());
            self.partitions.send(partition, small, move |state| {
                let columns = SessionBatch {
                    calls: &shape.calls,
                    chunk: &batch.chunk,
                    times: &batch.times,
                    keys: &batch.keys,
                    arguments: &batch.arguments,
                    watermark: batch.watermark,
                };
                let (late, emitted) = state.add_rows(&shape.rules, &columns, &rows)?;
                let output = shape.emit_rows(emitted)?;
                Ok(StepOutcome {
                    step,
                    partition,
                    late,
                    output,
                })
            })?;
        }
        self.take_finished(false, output)
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        self.note_change()?;
        let horizon = watermark_ns.saturating_sub(self.shape.rules.lateness_ns);
        // Under EMIT ON WINDOW CLOSE every session shown after this step
        // ends after the horizon.
        let closes = self.shape.rules.emit == EmitMode::OnWindowClose;
        let watermark_out = (closes && self.shape.columns.end.is_some()).then_some(horizon);
        let count = self.partitions.len();
        let step = self.steps.open(count, None, watermark_out);
        for partition in 0..count {
            let shape = self.shape.clone();
            self.partitions.send(partition, true, move |state| {
                let rules = (&shape.rules, shape.calls.as_slice());
                let emitted = state.close(rules, watermark_ns, horizon)?;
                Ok(StepOutcome {
                    step,
                    partition,
                    late: Vec::new(),
                    output: shape.emit_rows(emitted)?,
                })
            })?;
        }
        self.take_finished(false, output)
    }

    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        output.append(&mut self.ready_output);
        output.push(Message::Barrier(epoch));
        Ok(())
    }

    fn flush(&mut self, output: &mut Output) -> Result<()> {
        self.take_finished(true, output)
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        // A barrier comes between write groups, and is not undone; what
        // the wait makes ready goes out with it.
        self.commit_partitions()?;
        for mut partition in self.partitions.states()? {
            partition
                .keys
                .checkpoint(&self.shape.calls, session_name, state)?;
        }
        Ok(())
    }

    fn commit(&mut self) {
        if let Err(error) = self.commit_partitions() {
            // The partitions report it again at the next wait.
            tracing::error!(%error.message, "a session aggregate could not commit a write group");
        }
    }

    fn rollback(&mut self) -> Result<bool> {
        let Some(ready_before) = self.ready_before.take() else {
            return Ok(true);
        };
        // What the partitions still report belongs to the failed group.
        let _ = self.partitions.finished(true)?;
        self.steps.discard();
        self.ready_output.truncate(ready_before);
        let mut undone = true;
        for mut partition in self.partitions.states()? {
            undone &= partition.roll_back(&self.shape.calls)?;
        }
        Ok(undone)
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        let mut partitions = self.partitions.states()?;
        let count = partitions.len();
        for (name, value) in state.with_prefix(b"session/") {
            let key = name[b"session/".len()..].to_vec();
            let sessions = decode_sessions(&self.shape.calls, value)?;
            partitions[partition_of_key(&key, count)].restore(key, sessions)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "session_aggregate_tests.rs"]
mod tests;
