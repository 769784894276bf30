//! Where a view's two branches meet in a join (inner, left, right or full
//! outer) on equal keys, with an optional further condition on the joined
//! row for inner joins. Each side keeps its rows so far as a multiset per
//! key (`side.rs`); a change on one side is joined with the other side's
//! rows of its key and then applied to its own, so the output is exactly
//! the change of the joined multiset (for a self-join too: the left
//! branch's change meets the right side before it has that change, the
//! right branch's meets the left after). Outer joins also emit and retract
//! the NULL-padded row of a preserved row as its key gains its first match
//! or loses its last. The state grows with the inputs, except in an inner
//! join bounded by time (an interval or window join): a row leaves once
//! the other side's watermark passes the last time it could match.
//! A barrier passes, and the state is checkpointed, once both branches
//! sent it. Watermarks stop here, except in a lookup join (the left's go
//! through) and a join whose time bound keeps one input's time column
//! above a shifted watermark of the other (`output_watermark`).

mod existence;
mod rows;
mod side;
#[cfg(test)]
mod tests;
mod undo;

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, Int64Array, UInt32Builder,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::SortField;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::stream::alignment::BarrierAlign;
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::Output;
use crate::stream::spill::SpillSpace;
use crate::stream::time_columns::wall_clock_ns;
pub use side::Expiry;
use side::JoinSide;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Left rows with a match (`IN` / `EXISTS` subqueries), left columns.
    Semi,
    /// Left rows without a match (`NOT EXISTS`), left columns.
    Anti,
}

impl JoinKind {
    /// Whether rows of `side` (0 left, 1 right) appear without a match.
    pub fn preserves(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinKind::Left | JoinKind::Anti, 0) | (JoinKind::Right, 1) | (JoinKind::Full, _)
        )
    }

    /// Semi and anti joins show left rows only, each as often as it is
    /// there, depending on whether its key has a match.
    pub fn tests_existence(self) -> bool {
        matches!(self, JoinKind::Semi | JoinKind::Anti)
    }

    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Inner => "Inner",
            JoinKind::Left => "Left",
            JoinKind::Right => "Right",
            JoinKind::Full => "Full",
            JoinKind::Semi => "Semi",
            JoinKind::Anti => "Anti",
        }
    }
}

/// One input of a join: its columns and its key expressions over them.
pub struct JoinInput {
    pub schema: SchemaRef,
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
}

pub struct JoinSpec {
    pub kind: JoinKind,
    pub left: JoinInput,
    pub right: JoinInput,
    /// The key types (both sides' keys evaluate to these).
    pub key_types: Vec<datafusion::arrow::datatypes::DataType>,
    /// `IS NOT DISTINCT FROM` keys: NULL matches NULL.
    pub nulls_match: bool,
    /// A further condition on the joined row (inner joins only).
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns, then right.
    pub schema: SchemaRef,
    /// Per side, when its rows stop matching (inner joins only).
    pub expiry: [Option<Expiry>; 2],
    /// Per side, `state_ttl`: how long after it came a row is forgotten
    /// (inner joins of append-only inputs only).
    pub ttl_ns: [Option<i64>; 2],
    /// A lookup join (`FOR SYSTEM_TIME AS OF PROCTIME()`): a left row meets
    /// the right rows there are when it comes and is not kept; right
    /// changes change no joined row. Inner and left joins only.
    pub lookup: bool,
    /// Per side, how far below its watermark a joined row's time column
    /// can still be: the output watermark is the least of the sides'
    /// watermarks minus these (an interval join on the left's time column:
    /// `[0, X]` when left rows match right rows up to X later).
    pub output_watermark: Option<[i64; 2]>,
}

pub struct JoinOperator {
    kind: JoinKind,
    sides: [JoinSide; 2],
    filter: Option<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    barriers: BarrierAlign,
    names: [String; 2],
    /// Each branch's watermark so far.
    watermarks: [Option<i64>; 2],
    /// The processing-time clock TTLs count by (nanoseconds since 1970).
    clock: fn() -> i64,
    lookup: bool,
    output_watermark: Option<[i64; 2]>,
    /// The last watermark it put out.
    emitted_watermark: Option<i64>,
    /// `watermarks` and `emitted_watermark` at the last commit, once the
    /// write group running now moved them.
    watermarks_before: Option<([Option<i64>; 2], Option<i64>)>,
}

impl JoinOperator {
    pub fn new(spec: JoinSpec) -> Result<Self> {
        let expires =
            spec.expiry.iter().any(Option::is_some) || spec.ttl_ns.iter().any(Option::is_some);
        if (spec.filter.is_some() || expires) && spec.kind != JoinKind::Inner {
            return Err(WeirError::internal(
                "a join other than inner with a residual filter or expiring rows",
            ));
        }
        if spec.lookup && !matches!(spec.kind, JoinKind::Inner | JoinKind::Left) {
            return Err(WeirError::internal(
                "a lookup join other than inner or left",
            ));
        }
        // A cross join's rows all share one key (see `batch_keys`).
        let key_types = match spec.key_types.is_empty() {
            true => vec![datafusion::arrow::datatypes::DataType::Boolean],
            false => spec.key_types.clone(),
        };
        let key_fields = || {
            key_types
                .iter()
                .map(|data_type| SortField::new(data_type.clone()))
                .collect::<Vec<_>>()
        };
        let side = |index: usize, input: JoinInput| {
            JoinSide::new(
                index,
                input.schema,
                input.keys,
                key_fields(),
                spec.nulls_match,
            )
            .map(|side| {
                side.with_expiry(spec.expiry[index])
                    .with_ttl(spec.ttl_ns[index])
            })
        };
        let names = ["left".to_string(), "right".to_string()];
        Ok(JoinOperator {
            kind: spec.kind,
            sides: [side(0, spec.left)?, side(1, spec.right)?],
            filter: spec.filter,
            schema: spec.schema,
            barriers: BarrierAlign::new(&names),
            names,
            watermarks: [None; 2],
            clock: wall_clock_ns,
            lookup: spec.lookup,
            output_watermark: spec.output_watermark,
            emitted_watermark: None,
            watermarks_before: None,
        })
    }

    /// Puts out the output watermark if both sides' watermarks raise it:
    /// a row joined later has its time column above it (a new row of the
    /// column's side is above that side's watermark; one met by a new row
    /// of the other side is at most its lag below that side's).
    fn emit_watermark(&mut self, output: &mut Output) {
        let (Some(lags), [Some(left), Some(right)]) = (self.output_watermark, self.watermarks)
        else {
            return;
        };
        let watermark = left
            .saturating_sub(lags[0])
            .min(right.saturating_sub(lags[1]));
        if self
            .emitted_watermark
            .is_none_or(|emitted| watermark > emitted)
        {
            self.emitted_watermark = Some(watermark);
            output.push(Message::Watermark(watermark));
        }
    }

    /// TTLs count by `clock` instead of the wall clock (tests).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    /// Forgets the rows whose TTL has run out; the time now.
    fn expire_ttl(&mut self) -> Result<i64> {
        let now_ns = (self.clock)();
        for side in &mut self.sides {
            side.expire_ttl(now_ns)?;
        }
        Ok(now_ns)
    }

    /// A message from branch `side` (0 left, 1 right); the join's changes
    /// go to `output`. Returns the epoch of a barrier that has now come
    /// from both branches (the caller checkpoints the join then).
    pub fn on_message(
        &mut self,
        side: usize,
        message: Message,
        output: &mut Output,
    ) -> Result<Option<u64>> {
        match message {
            Message::Batch(chunk) => {
                self.on_batch(side, &chunk, output)?;
                for side in &mut self.sides {
                    side.settle()?;
                }
            }
            Message::Watermark(watermark) => {
                if self.watermarks_before.is_none() {
                    self.watermarks_before = Some((self.watermarks, self.emitted_watermark));
                }
                let known = &mut self.watermarks[side];
                if known.is_none_or(|known| watermark > known) {
                    *known = Some(watermark);
                    self.sides[1 - side].expire(watermark)?;
                    self.sides[1 - side].settle()?;
                    // A lookup join's rows are the left's rows, in its time.
                    if self.lookup && side == 0 {
                        output.push(Message::Watermark(watermark));
                    }
                    self.emit_watermark(output);
                }
            }
            Message::Barrier(epoch) => {
                self.expire_ttl()?;
                // Barriers come between write groups and are not undone.
                self.commit();
                if self.barriers.arrive(&self.names[side], epoch) {
                    output.push(Message::Barrier(epoch));
                    return Ok(Some(epoch));
                }
            }
            // As in a union: one branch of a view with EMIT EVERY fires.
            Message::Fire(view) => output.push(Message::Fire(view)),
        }
        Ok(None)
    }

    fn on_batch(&mut self, side: usize, chunk: &Chunk, output: &mut Output) -> Result<()> {
        if self.kind.tests_existence() {
            return self.on_existence_batch(side, chunk, output);
        }
        let now_ns = self.expire_ttl()?;
        if self.lookup && side == 1 {
            return self.sides[1].apply_batch(chunk);
        }
        let stores = !self.lookup;
        let [left, right] = &mut self.sides;
        let (this, other) = if side == 0 {
            (left, right)
        } else {
            (right, left)
        };
        let keys = this.batch_keys(&chunk.rows)?;
        let rows = this.batch_rows(&chunk.rows)?;
        let (this_preserved, other_preserved) =
            (self.kind.preserves(side), self.kind.preserves(1 - side));
        other.prefetch(&keys)?;
        if other_preserved {
            this.prefetch(&keys)?;
        }
        let other = &*other;
        // Rows the other side's watermark has passed match what is stored
        // now but nothing later: they are not kept.
        let ends = this.match_ends(&chunk.rows)?;
        let other_watermark = self.watermarks[1 - side];
        let mut matches = Matches::default();
        for index in 0..chunk.num_rows() {
            let diff = chunk.diff(index);
            let probe = Some(index as u32);
            if !keys.matchable[index] {
                if this_preserved {
                    matches.push(probe, None, diff);
                }
                continue;
            }
            let key = keys.keys.row(index);
            let key = key.as_ref();
            match other.group(key) {
                Some(group) => {
                    for (row, count) in &group.rows {
                        matches.push(probe, Some(&**row), diff * count);
                    }
                }
                None if this_preserved => matches.push(probe, None, diff),
                None => {}
            }
            if other_preserved {
                let before = this.total(key);
                let gained_first = before <= 0 && before + diff > 0;
                let lost_last = before > 0 && before + diff <= 0;
                if let (true, Some(group)) = (gained_first || lost_last, other.group(key)) {
                    let sign = if gained_first { -1 } else { 1 };
                    for (row, count) in &group.rows {
                        matches.push(None, Some(&**row), sign * count);
                    }
                }
            }
            let row = rows.row(index);
            let stored = stores
                && match &ends {
                    None => true,
                    Some(ends) if ends.is_valid(index) => {
                        let end = ends.value(index);
                        let matchable = other_watermark.is_none_or(|watermark| end >= watermark);
                        // A retraction's row has its entry from when it came
                        // (an entry outliving its row forgets nothing).
                        if matchable && diff > 0 {
                            this.remember_end(end, row.as_ref());
                        }
                        matchable
                    }
                    Some(_) => false,
                };
            if stored {
                this.apply(key, row.as_ref(), diff);
                this.remember_arrival(now_ns, row.as_ref());
            }
        }
        let joined = joined(
            &self.schema,
            self.filter.as_ref(),
            (side, other),
            chunk,
            matches,
        )?;
        if let Some(joined) = joined.filter(|joined| joined.num_rows() > 0) {
            output.push(Message::batch(joined));
        }
        Ok(())
    }

    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        for side in &mut self.sides {
            side.checkpoint(state)?;
        }
        Ok(())
    }

    /// Each side spills to its own part of `space` past the memory budget.
    pub fn attach(&mut self, space: SpillSpace) {
        for (index, side) in self.sides.iter_mut().enumerate() {
            let mut side_space = space.clone();
            side_space.space.extend_from_slice(&[index as u8, b'/']);
            side.attach(side_space, format!("spilled/{index}").into_bytes());
        }
    }

    pub fn restore(&mut self, state: &StateReader) -> Result<()> {
        let now_ns = (self.clock)();
        for side in &mut self.sides {
            side.restore(state, now_ns)?;
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
        self.sides.iter().map(JoinSide::memory_bytes).sum()
    }

    pub fn commit(&mut self) {
        self.sides.iter_mut().for_each(JoinSide::commit);
        self.watermarks_before = None;
    }

    /// Undoes the failed write group: both sides' rows and deadlines, and
    /// the watermarks. False when a side's undo was given up (the group
    /// changed too much): the view is rebuilt from its checkpoint.
    pub fn rollback(&mut self) -> Result<bool> {
        // Both sides, whatever the first says.
        let [left, right] = &mut self.sides;
        let undone = left.rollback() & right.rollback();
        if let Some((watermarks, emitted)) = self.watermarks_before.take() {
            self.watermarks = watermarks;
            self.emitted_watermark = emitted;
        }
        Ok(undone)
    }
}

/// The output rows of `matches`: probe rows from `chunk` (of `side`),
/// stored rows from `other`, left columns first.
fn joined(
    schema: &SchemaRef,
    filter: Option<&Arc<dyn PhysicalExpr>>,
    (side, other): (usize, &JoinSide),
    chunk: &Chunk,
    matches: Matches,
) -> Result<Option<Chunk>> {
    let Matches {
        mut probe,
        mut stored,
        stored_rows,
        diffs,
    } = matches;
    if diffs.is_empty() {
        return Ok(None);
    }
    let (probe, stored) = (probe.finish(), stored.finish());
    let taken = |columns: &[ArrayRef], indices| {
        columns
            .iter()
            .map(|column| take(column, indices, None))
            .collect::<std::result::Result<Vec<_>, _>>()
    };
    let probe_columns = taken(chunk.rows.columns(), &probe)?;
    let stored_columns = if stored_rows.is_empty() {
        let fields = other.schema().fields();
        fields
            .iter()
            .map(|field| new_null_array(field.data_type(), diffs.len()))
            .collect()
    } else {
        taken(&other.columns(stored_rows)?, &stored)?
    };
    let columns = match side {
        0 => [probe_columns, stored_columns].concat(),
        _ => [stored_columns, probe_columns].concat(),
    };
    let options = RecordBatchOptions::new().with_row_count(Some(diffs.len()));
    let rows = RecordBatch::try_new_with_options(schema.clone(), columns, &options)?;
    let joined = Chunk {
        rows,
        diffs: Some(Int64Array::from(diffs)),
        watermarks: None,
    };
    let Some(filter) = filter else {
        return Ok(Some(joined));
    };
    let mask = filter
        .evaluate(&joined.rows)?
        .into_array(joined.num_rows())?;
    let mask = mask
        .as_boolean_opt()
        .ok_or_else(|| WeirError::internal("a join condition is not boolean"))?;
    Ok(Some(joined.filter(mask)?))
}

/// The output rows of one batch, in order: a probe row (or NULLs), a
/// stored row of the other side (or NULLs), and +1 or -1.
#[derive(Default)]
struct Matches<'a> {
    probe: UInt32Builder,
    stored: UInt32Builder,
    stored_rows: Vec<&'a [u8]>,
    diffs: Vec<i64>,
}

impl<'a> Matches<'a> {
    /// A change of `diff` copies of the joined row, put out as that many
    /// rows of diff ±1: operators downstream (aggregates) count rows.
    fn push(&mut self, probe: Option<u32>, stored: Option<&'a [u8]>, diff: i64) {
        let stored = stored.map(|row| {
            self.stored_rows.push(row);
            (self.stored_rows.len() - 1) as u32
        });
        for _ in 0..diff.unsigned_abs() {
            self.probe.append_option(probe);
            self.stored.append_option(stored);
            self.diffs.push(diff.signum());
        }
    }
}
