//! A filter relative to the current time (`WHERE ts > now() - INTERVAL '1'
//! HOUR`): each row is shown from the time its lower bounds allow
//! (`ts <= now()`: once the clock reaches it) until the time its upper
//! bounds end it (`ts > now() - 1 hour`: an hour after `ts`), and is
//! retracted then. The operator holds every row it still has to show or
//! take back, keyed by row (Arrow's row format) with the next time it
//! changes in a `BTreeMap`, so each clock step costs what it changes. The
//! clock is read on every batch and at every checkpoint, where the
//! changes due are worked out before the state is written and put out
//! ahead of the barrier, so a restart neither repeats nor loses them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::time_columns::{nanoseconds, wall_clock_ns};

/// One condition `time OP now() + offset_ns` on a row.
#[derive(Debug, Clone)]
pub struct TimeBound {
    /// The row's side (a timestamp).
    pub time: Arc<dyn PhysicalExpr>,
    pub offset_ns: i64,
    /// `time > now() + offset` (or `>=`): the row ends as now passes it;
    /// otherwise (`<`, `<=`) it starts then.
    pub ends: bool,
    /// `>=` / `<=`: the bound itself is inside.
    pub inclusive: bool,
}

/// A held row: how many copies, when it shows and ends, and whether it is
/// shown now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    count: i64,
    shows_at: i64,
    ends_at: i64,
    shown: bool,
}

impl Held {
    /// The next time it changes (None when never again).
    fn next_change(&self) -> Option<i64> {
        match self.shown {
            false => Some(self.shows_at),
            true => (self.ends_at != i64::MAX).then_some(self.ends_at),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(25);
        for value in [self.count, self.shows_at, self.ends_at] {
            bytes.extend_from_slice(&value.to_be_bytes());
        }
        bytes.push(u8::from(self.shown));
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Held> {
        let number = |at: usize| Some(i64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        Some(Held {
            count: number(0)?,
            shows_at: number(8)?,
            ends_at: number(16)?,
            shown: *bytes.get(24)? == 1,
        })
    }
}

pub struct TemporalFilterOperator {
    bounds: Vec<TimeBound>,
    schema: SchemaRef,
    converter: RowConverter,
    rows: HashMap<Box<[u8]>, Held>,
    /// Rows by the next time they change; entries may be stale (checked
    /// against `rows` when due).
    changes: BTreeMap<i64, Vec<Box<[u8]>>>,
    /// Rows changed since the last checkpoint.
    changed: HashSet<Box<[u8]>>,
    /// Changes worked out at a checkpoint, put out before its barrier.
    held_back: Vec<Message>,
    bytes: usize,
    clock: fn() -> i64,
    /// What the write group running now changed.
    undo: Undo,
}

/// Each row the write group touched as it was before (None: not held),
/// and the due entries it took out of `changes`.
#[derive(Default)]
struct Undo {
    rows: HashMap<Box<[u8]>, Option<Held>>,
    due: Vec<(i64, Vec<Box<[u8]>>)>,
}

const ROW_OVERHEAD_BYTES: usize = 80;

/// The checkpoint entries of held rows start with it.
const ROW_PREFIX: &[u8] = b"row/";

impl TemporalFilterOperator {
    pub fn new(schema: SchemaRef, bounds: Vec<TimeBound>) -> Result<Self> {
        let fields = schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(TemporalFilterOperator {
            bounds,
            converter: RowConverter::new(fields)?,
            schema,
            rows: HashMap::new(),
            changes: BTreeMap::new(),
            changed: HashSet::new(),
            held_back: Vec::new(),
            bytes: 0,
            clock: wall_clock_ns,
            undo: Undo::default(),
        })
    }

    /// Reads time from `clock` instead of the wall clock (tests).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    /// Per row of `batch`, when it shows and when it ends (None: never
    /// shown, a NULL time).
    fn spans(&self, batch: &RecordBatch) -> Result<Vec<Option<(i64, i64)>>> {
        let rows = batch.num_rows();
        let mut spans = vec![Some((i64::MIN, i64::MAX)); rows];
        for bound in &self.bounds {
            let times = nanoseconds(&bound.time.evaluate(batch)?.into_array(rows)?)?;
            for (span, time) in spans.iter_mut().zip(times.iter()) {
                let (Some((shows, ends)), Some(time)) = (span.as_mut(), time) else {
                    *span = None;
                    continue;
                };
                // time > now + offset  <=>  now < time - offset.
                let edge = time.saturating_sub(bound.offset_ns);
                match (bound.ends, bound.inclusive) {
                    (true, false) => *ends = (*ends).min(edge),
                    (true, true) => *ends = (*ends).min(edge.saturating_add(1)),
                    (false, false) => *shows = (*shows).max(edge.saturating_add(1)),
                    (false, true) => *shows = (*shows).max(edge),
                }
            }
        }
        Ok(spans)
    }

    /// Adds `diff` copies of `row` (shown or not as of `now`); returns
    /// whether it is shown.
    fn hold(&mut self, row: &[u8], (shows_at, ends_at): (i64, i64), diff: i64, now: i64) -> bool {
        self.before_change(row);
        let held = match self.rows.get_mut(row) {
            Some(held) => held,
            None => {
                let held = Held {
                    count: 0,
                    shows_at,
                    ends_at,
                    shown: shows_at <= now,
                };
                if let Some(next) = held.next_change() {
                    self.changes.entry(next).or_default().push(row.into());
                }
                self.bytes += row.len() + ROW_OVERHEAD_BYTES;
                self.rows.entry(row.into()).or_insert(held)
            }
        };
        held.count += diff;
        let shown = held.shown;
        if held.count == 0 {
            self.rows.remove(row);
            self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
        }
        self.changed.insert(row.into());
        shown
    }

    /// Shows and ends the rows whose time has come by `now`.
    fn advance(&mut self, now: i64, output: &mut Output) -> Result<()> {
        if self
            .changes
            .first_key_value()
            .is_none_or(|(first, _)| *first > now)
        {
            return Ok(());
        }
        let later = self.changes.split_off(&now.saturating_add(1));
        let due = std::mem::replace(&mut self.changes, later);
        self.undo
            .due
            .extend(due.iter().map(|(at, rows)| (*at, rows.clone())));
        let mut emitted: Vec<(Box<[u8]>, i64)> = Vec::new();
        for row in due.into_values().flatten() {
            if self
                .rows
                .get(&row)
                .is_none_or(|held| held.next_change().is_none_or(|next| next > now))
            {
                continue;
            }
            self.before_change(&row);
            let held = self.rows.get_mut(&row).expect("looked up above");
            self.changed.insert(row.clone());
            if !held.shown && held.ends_at > now {
                held.shown = true;
                emitted.push((row.clone(), held.count));
                if let Some(next) = held.next_change() {
                    self.changes.entry(next).or_default().push(row);
                }
                continue;
            }
            if held.shown {
                emitted.push((row.clone(), -held.count));
            }
            self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
            self.rows.remove(&row);
        }
        self.put_out(&emitted, output)
    }

    /// Keeps `row` as it is before the write group first changes it.
    fn before_change(&mut self, row: &[u8]) {
        if !self.undo.rows.contains_key(row) {
            let before = self.rows.get(row).copied();
            self.undo.rows.insert(row.into(), before);
        }
    }

    /// Puts every row the failed group touched back, and the due entries
    /// it took out (their changes come again at the next batch).
    fn roll_back(&mut self) {
        let undo = std::mem::take(&mut self.undo);
        for (row, before) in undo.rows {
            let size = row.len() + ROW_OVERHEAD_BYTES;
            match (self.rows.contains_key(&row), before) {
                (true, None) => self.bytes -= size,
                (false, Some(_)) => self.bytes += size,
                _ => {}
            }
            match before {
                Some(held) => self.rows.insert(row.clone(), held),
                None => self.rows.remove(&row),
            };
            self.changed.insert(row);
        }
        for (at, rows) in undo.due {
            self.changes.entry(at).or_default().extend(rows);
        }
    }

    fn put_out(&self, emitted: &[(Box<[u8]>, i64)], output: &mut Output) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let parser = self.converter.parser();
        let columns = self
            .converter
            .convert_rows(emitted.iter().map(|(row, _)| parser.parse(row)))?;
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        let diffs = Int64Array::from_iter_values(emitted.iter().map(|(_, diff)| *diff));
        output.push(Message::batch(Chunk {
            rows,
            diffs: Some(diffs),
            watermarks: None,
        }));
        Ok(())
    }
}

impl Operator for TemporalFilterOperator {
    fn name(&self) -> &'static str {
        "TemporalFilter"
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        let now = (self.clock)();
        self.advance(now, output)?;
        let spans = self.spans(&chunk.rows)?;
        let rows = self.converter.convert_columns(chunk.rows.columns())?;
        let mut shown = Vec::with_capacity(chunk.num_rows());
        for (index, span) in spans.into_iter().enumerate() {
            let visible = match span {
                Some(span) if span.1 > now => {
                    self.hold(rows.row(index).as_ref(), span, chunk.diff(index), now)
                }
                _ => false,
            };
            shown.push(visible);
        }
        let kept = chunk.filter(&shown.into())?;
        if kept.num_rows() > 0 {
            output.push(Message::batch(kept));
        }
        Ok(())
    }

    fn on_barrier(&mut self, epoch: u64, output: &mut Output) -> Result<()> {
        output.append(&mut self.held_back);
        output.push(Message::Barrier(epoch));
        Ok(())
    }

    fn clocked(&self) -> bool {
        true
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        let mut due = Vec::new();
        self.advance((self.clock)(), &mut due)?;
        self.held_back.extend(due);
        for row in self.changed.drain() {
            let name = [ROW_PREFIX, &row].concat();
            match self.rows.get(&row) {
                Some(held) => state.put(&name, held.encode()),
                None => state.delete(&name),
            }
        }
        Ok(())
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        for (name, value) in state.with_prefix(ROW_PREFIX) {
            let row = &name[ROW_PREFIX.len()..];
            let held = Held::decode(value)
                .ok_or_else(|| WeirError::internal("a temporal filter's state is damaged"))?;
            if let Some(next) = held.next_change() {
                self.changes.entry(next).or_default().push(row.into());
            }
            self.bytes += row.len() + ROW_OVERHEAD_BYTES;
            self.rows.insert(row.into(), held);
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.bytes
    }

    fn commit(&mut self) {
        self.undo = Undo::default();
    }

    fn rollback(&mut self) -> Result<bool> {
        self.roll_back();
        Ok(true)
    }
}

#[cfg(test)]
#[path = "temporal_filter_tests.rs"]
mod tests;
