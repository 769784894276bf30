//! GROUP BY over SESSION windows. Each row arrives as its own session
//! `[ts, ts + gap)` (from the window operator); sessions of one key that
//! overlap or touch merge, their accumulators combined with DataFusion's
//! `state()` / `merge_batch`. A session is complete when the watermark
//! reaches its end (emitted then under EMIT ON WINDOW CLOSE), takes
//! corrections until end + allowed lateness, and is then final: its state
//! goes, leaving a marker for one more gap so that a row which would merge
//! into it is late rather than the start of a session overlapping it.
//! Keys are split into partitions (`parallelism`), each placing its share
//! of a batch on its own thread (`session_partition`).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{evaluate_arguments, push_changes, value_columns, AggregateCall};
use super::session_partition::{SessionBatch, SessionPartition, SessionRules};
use super::session_state::decode_sessions;
use super::LateHandling;
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::parallelism::{for_each_partition, partition_of_key, ROWS_FOR_THREADS};
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
    /// Every GROUP BY expression; those at `columns` are the session bounds.
    groups: Vec<Arc<dyn PhysicalExpr>>,
    columns: SessionColumns,
    calls: Vec<AggregateCall>,
    emit: EmitMode,
    schema: SchemaRef,
    /// Row format of the key: the GROUP BY columns other than the bounds.
    converter: Option<RowConverter>,
    /// The keys' sessions, split by a hash of the key.
    partitions: Vec<SessionPartition>,
    late: LateHandling,
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
        Ok(SessionAggregateOperator {
            groups,
            columns,
            calls,
            emit,
            schema,
            converter,
            partitions: (0..partitions.max(1))
                .map(|_| SessionPartition::default())
                .collect(),
            late,
        })
    }

    /// Each row's event time (its own session's start).
    fn row_times(&self, chunk: &Chunk) -> Result<Int64Array> {
        let rows = chunk.num_rows();
        let (index, shift) = match (self.columns.start, self.columns.end) {
            (Some(start), _) => (start, 0),
            (None, Some(end)) => (end, self.columns.gap_ns),
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
        let Some(converter) = &self.converter else {
            return Ok(None);
        };
        let columns = self
            .groups
            .iter()
            .enumerate()
            .filter(|(index, _)| !is_bound(&self.columns, *index))
            .map(|(_, expression)| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        Ok(Some(converter.convert_columns(&columns)?))
    }

    fn emit_rows(&self, emitted: Emitted, output: &mut Output) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
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
        for index in 0..self.groups.len() {
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
        let values: Vec<&[ScalarValue]> = emitted.iter().map(|e| e.3.as_slice()).collect();
        columns.extend(value_columns(&self.schema, self.groups.len(), &values)?);
        push_changes(&self.schema, columns, emitted.iter().map(|e| e.4), output)
    }
}

fn is_bound(columns: &SessionColumns, index: usize) -> bool {
    Some(index) == columns.start || Some(index) == columns.end
}

fn session_name(key: &[u8]) -> Vec<u8> {
    [b"session/".as_slice(), key].concat()
}

impl SessionAggregateOperator {
    fn rules(&self) -> SessionRules {
        SessionRules {
            gap_ns: self.columns.gap_ns,
            lateness_ns: self.late.policy.allowed_lateness_ns(),
            emit: self.emit,
        }
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
}

impl Operator for SessionAggregateOperator {
    fn memory_bytes(&self) -> usize {
        self.partitions
            .iter()
            .map(SessionPartition::memory_bytes)
            .sum()
    }

    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        let times = self.row_times(&chunk)?;
        let keys = self.key_rows(&chunk)?;
        let batch = SessionBatch {
            calls: &self.calls,
            chunk: &chunk,
            times: &times,
            keys: &keys,
            arguments: &evaluate_arguments(&self.calls, &chunk)?,
            watermark: context.watermark,
        };
        let members = self.split(&keys, chunk.num_rows());
        let threaded = chunk.num_rows() >= ROWS_FOR_THREADS && self.partitions.len() > 1;
        let rules = self.rules();
        let pairs = self.partitions.iter_mut().zip(members);
        let outcomes = for_each_partition(pairs, threaded, |(partition, rows)| {
            partition.add_rows(&rules, &batch, &rows)
        });
        let (mut late, mut emitted) = (Vec::new(), Vec::new());
        for outcome in outcomes {
            let (partition_late, partition_emitted) = outcome?;
            late.extend(partition_late);
            emitted.extend(partition_emitted);
        }
        late.sort_by_key(|row| row.row);
        self.late.report(&chunk, &late)?;
        self.emit_rows(emitted, output)
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        let horizon = watermark_ns.saturating_sub(self.late.policy.allowed_lateness_ns());
        let open: usize = self.partitions.iter().map(|p| p.open_ends.len()).sum();
        let threaded = open >= ROWS_FOR_THREADS && self.partitions.len() > 1;
        let rules = self.rules();
        let outcomes = for_each_partition(self.partitions.iter_mut(), threaded, |partition| {
            partition.close(&rules, watermark_ns, horizon)
        });
        let mut emitted = Vec::new();
        for outcome in outcomes {
            emitted.extend(outcome?);
        }
        self.emit_rows(emitted, output)?;
        if self.emit == EmitMode::OnWindowClose && self.columns.end.is_some() {
            // Every session shown from now on ends after the horizon.
            output.push(Message::Watermark(horizon));
        }
        Ok(())
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        for partition in &mut self.partitions {
            partition
                .keys
                .checkpoint(&self.calls, session_name, state)?;
        }
        Ok(())
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        let count = self.partitions.len();
        for (name, value) in state.with_prefix(b"session/") {
            let key = name[b"session/".len()..].to_vec();
            let sessions = decode_sessions(&self.calls, value)?;
            self.partitions[partition_of_key(&key, count)].restore(key, sessions)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "session_aggregate_tests.rs"]
mod tests;
