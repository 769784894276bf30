//! GROUP BY over SESSION windows. Each row arrives as its own session
//! `[ts, ts + gap)` (from the window operator); sessions of one key that
//! overlap or touch merge, their accumulators combined with DataFusion's
//! `state()` / `merge_batch`. A session is complete when the watermark
//! reaches its end (emitted then under EMIT ON WINDOW CLOSE), takes
//! corrections until end + allowed lateness, and is then final: its state
//! goes, leaving a marker for one more gap so that a row which would merge
//! into it is late rather than the start of a session overlapping it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{HashSet, ScalarValue};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::calls::{
    evaluate, evaluate_arguments, new_accumulators, push_changes, value_columns, AggregateCall,
    Arguments, GroupedArguments,
};
use super::late::LateRow;
use super::session_keys::{KeyId, SessionKeys};
use super::session_state::decode_sessions;
use super::LateHandling;
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{advance_watermark, Operator, Output};
use crate::stream::operators::window_spec::session_end;
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
fn merge_sessions(mut survivor: Session, mut other: Session) -> Result<Session> {
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
type Emitted = Vec<(Vec<u8>, i64, i64, Vec<ScalarValue>, i64)>;

pub struct SessionAggregateOperator {
    /// Every GROUP BY expression; those at `columns` are the session bounds.
    groups: Vec<Arc<dyn PhysicalExpr>>,
    columns: SessionColumns,
    calls: Vec<AggregateCall>,
    emit: EmitMode,
    schema: SchemaRef,
    /// Row format of the key: the GROUP BY columns other than the bounds.
    converter: Option<RowConverter>,
    /// Every key's sessions, by key id.
    keys: SessionKeys,
    /// (end, key, start) of the sessions still taking rows, and of the
    /// final ones (markers), so closing visits each session once.
    open_ends: BTreeSet<SessionAt>,
    marker_ends: BTreeSet<SessionAt>,
    watermark: Option<i64>,
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
            keys: SessionKeys::default(),
            open_ends: BTreeSet::new(),
            marker_ends: BTreeSet::new(),
            watermark: None,
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
    /// (`key_at`) so no row allocates its key.
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

    /// Starts of the key's sessions that `[ts, end]` overlaps or touches,
    /// into `touching` (reused across rows).
    fn touching(&self, id: KeyId, (ts, end): (i64, i64), touching: &mut Vec<i64>) {
        let sessions = self.keys.sessions(id).range(..=end).rev();
        let starts = sessions
            .take_while(|(_, session)| session.end >= ts)
            .map(|(start, _)| *start);
        touching.extend(starts);
    }

    /// Whether a session is final for a row arriving under `watermark`.
    fn is_final(&self, session: &Session, watermark: Option<i64>) -> bool {
        let lateness = self.late.policy.allowed_lateness_ns();
        session.accumulators.is_none()
            || watermark.is_some_and(|w| w >= session.end.saturating_add(lateness))
    }

    /// Places the row in the sessions it touches, merged into one (or a new
    /// session). Its accumulators are updated when the chunk is done
    /// (`apply_pending`); a shown session it changes is retracted now.
    fn place_row(
        &mut self,
        id: KeyId,
        (ts, end): (i64, i64),
        touching: &[i64],
        row: u32,
        emitted: &mut Emitted,
    ) -> Result<()> {
        if let [only] = touching[..] {
            if only <= ts {
                return self.extend_session(id, only, end, row, emitted);
            }
        }
        let (key, sessions) = self.keys.entry_mut(id);
        let mut merged: Option<Session> = None;
        let (mut start, mut last) = (ts, end);
        for &old_start in touching {
            let Some(mut session) = sessions.remove(&old_start) else {
                continue;
            };
            self.open_ends.remove(&(session.filed_end, id, old_start));
            retract_shown(key, old_start, &mut session, emitted)?;
            start = start.min(old_start);
            last = last.max(session.end);
            merged = Some(match merged {
                None => session,
                Some(survivor) => merge_sessions(survivor, session)?,
            });
        }
        let mut session = match merged {
            Some(session) => session,
            None => Session {
                end,
                filed_end: end,
                accumulators: Some(new_accumulators(&self.calls)?),
                emitted: false,
                pending: Vec::new(),
            },
        };
        session.end = last;
        session.filed_end = last;
        session.pending.push(row);
        sessions.insert(start, session);
        self.open_ends.insert((last, id, start));
        Ok(())
    }

    /// The common case of `place_row`: the row falls in or just after one
    /// session and does not move its start, so the session stays in place
    /// and keeps its entry in `open_ends` (moved later, see `filed_end`).
    fn extend_session(
        &mut self,
        id: KeyId,
        start: i64,
        end: i64,
        row: u32,
        emitted: &mut Emitted,
    ) -> Result<()> {
        let (key, sessions) = self.keys.entry_mut(id);
        let session = sessions
            .get_mut(&start)
            .ok_or_else(|| WeirError::internal("a touching session vanished"))?;
        retract_shown(key, start, session, emitted)?;
        session.end = session.end.max(end);
        session.pending.push(row);
        Ok(())
    }

    /// Adds each changed session's rows of this chunk to its accumulators
    /// and shows it if the emit mode says so.
    fn apply_pending(
        &mut self,
        ids: &[KeyId],
        arguments: &[Arguments],
        emitted: &mut Emitted,
    ) -> Result<()> {
        let shows_all = self.emit == EmitMode::OnUpdate;
        // Every changed session's rows in one permutation, walked below in
        // the same order.
        let order = ids
            .iter()
            .flat_map(|id| self.keys.sessions(*id).values())
            .flat_map(|session| session.pending.iter().copied());
        let grouped = GroupedArguments::new(arguments, &UInt32Array::from_iter_values(order))?;
        let mut next = 0;
        for &id in ids {
            let (key, sessions) = self.keys.entry_mut(id);
            for (start, session) in sessions.iter_mut() {
                if session.pending.is_empty() {
                    continue;
                }
                let rows = next..next + session.pending.len();
                next = rows.end;
                session.pending.clear();
                let accumulators = session
                    .accumulators
                    .as_mut()
                    .ok_or_else(|| WeirError::internal("rows for a final session"))?;
                for (call, accumulator) in accumulators.iter_mut().enumerate() {
                    accumulator.update_batch(&grouped.group(call, &rows)?)?;
                }
                if shows_all || self.watermark.is_some_and(|w| w >= session.end) {
                    let values = evaluate(accumulators)?;
                    emitted.push((key.to_vec(), *start, session.end, values, 1));
                    session.emitted = true;
                }
            }
            self.keys.mark_changed(id);
        }
        Ok(())
    }

    /// Under EMIT ON WINDOW CLOSE: the sessions complete at `watermark_ns`
    /// not shown yet.
    fn emit_complete(&mut self, watermark_ns: i64, emitted: &mut Emitted) -> Result<()> {
        let bound = (watermark_ns.saturating_add(1), 0, i64::MIN);
        let mut extended = Vec::new();
        for &(filed, id, start) in self.open_ends.range(..bound) {
            let (key, sessions) = self.keys.entry_mut(id);
            let Some(session) = sessions.get_mut(&start) else {
                continue;
            };
            if session.end > watermark_ns {
                extended.push((filed, id, start));
                continue;
            }
            if let (Some(accumulators), false) = (&mut session.accumulators, session.emitted) {
                let values = evaluate(accumulators)?;
                emitted.push((key.to_vec(), start, session.end, values, 1));
                session.emitted = true;
                self.keys.mark_changed(id);
            }
        }
        for at in extended {
            self.open_ends.remove(&at);
            self.refile(at.1, at.2);
        }
        Ok(())
    }

    /// Files an open session in `open_ends` under its current end (its
    /// old entry already gone).
    fn refile(&mut self, id: KeyId, start: i64) {
        if let Some(session) = self.keys.entry_mut(id).1.get_mut(&start) {
            session.filed_end = session.end;
            self.open_ends.insert((session.end, id, start));
        }
    }

    /// Sessions ending at or before `horizon` become final markers; markers
    /// go once no row can touch them and an open session too (see
    /// `outlives`).
    fn finalize(&mut self, horizon: i64) {
        for (_, id, start) in take_before(&mut self.open_ends, horizon) {
            let Some(session) = self.keys.entry_mut(id).1.get_mut(&start) else {
                continue;
            };
            if session.end > horizon {
                self.refile(id, start);
                continue;
            }
            session.accumulators = None;
            self.marker_ends.insert((session.end, id, start));
            self.keys.mark_changed(id);
        }
        let gap = self.columns.gap_ns;
        let forgotten = horizon.saturating_sub(gap.saturating_mul(2));
        for (end, id, start) in take_before(&mut self.marker_ends, forgotten) {
            let sessions = self.keys.entry_mut(id).1;
            if let Some(later_end) = outlives(sessions, start, end, gap) {
                self.marker_ends.insert((later_end, id, start));
                continue;
            }
            sessions.remove(&start);
            if sessions.is_empty() {
                self.keys.release(id);
            } else {
                self.keys.mark_changed(id);
            }
        }
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

/// A shown session about to change: its row is retracted from the output.
fn retract_shown(
    key: &[u8],
    start: i64,
    session: &mut Session,
    emitted: &mut Emitted,
) -> Result<()> {
    if !session.emitted {
        return Ok(());
    }
    let accumulators = session
        .accumulators
        .as_mut()
        .ok_or_else(|| WeirError::internal("changing a final session"))?;
    let values = evaluate(accumulators)?;
    emitted.push((key.to_vec(), start, session.end, values, -1));
    session.emitted = false;
    Ok(())
}

/// A final session (a marker) ending at `end` must stay while a row could
/// touch it and an open session: such a row is late, not part of the open
/// one. New sessions start after horizon - gap, so two gaps past `end` only
/// an open session already starting within a gap of `end` can be touched
/// together with it; the marker then waits for that session's end, which
/// this returns.
fn outlives(sessions: &Sessions, start: i64, end: i64, gap: i64) -> Option<i64> {
    let (next_start, next) = sessions.range(start.saturating_add(1)..).next()?;
    let close = *next_start <= end.saturating_add(gap);
    (close && next.accumulators.is_some()).then_some(next.end.max(end.saturating_add(1)))
}

/// A session's place in an end-ordered index: (end, key id, start).
type SessionAt = (i64, KeyId, i64);

/// Takes the entries ending at or before `end` out of `index`.
fn take_before(index: &mut BTreeSet<SessionAt>, end: i64) -> BTreeSet<SessionAt> {
    let later = index.split_off(&(end.saturating_add(1), 0, i64::MIN));
    std::mem::replace(index, later)
}

fn key_at(keys: &Option<Rows>, row: usize) -> &[u8] {
    keys.as_ref().map_or(&[], |rows| rows.row(row).data())
}

fn is_bound(columns: &SessionColumns, index: usize) -> bool {
    Some(index) == columns.start || Some(index) == columns.end
}

fn session_name(key: &[u8]) -> Vec<u8> {
    [b"session/".as_slice(), key].concat()
}

impl Operator for SessionAggregateOperator {
    fn memory_bytes(&self) -> usize {
        let per_key = self.keys.iter().map(|(key, sessions)| {
            let accumulators: usize = sessions
                .values()
                .flat_map(|session| session.accumulators.iter().flatten())
                .map(|accumulator| accumulator.size())
                .sum();
            key.len() * 2 + accumulators + sessions.len() * super::GROUP_OVERHEAD_BYTES
        });
        let index = (self.open_ends.len() + self.marker_ends.len()) * 32;
        per_key.sum::<usize>() + index
    }

    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn on_batch(&mut self, chunk: Chunk, output: &mut Output) -> Result<()> {
        let times = self.row_times(&chunk)?;
        let keys = self.key_rows(&chunk)?;
        let arguments: Vec<Arguments> = evaluate_arguments(&self.calls, &chunk)?;
        let gap = self.columns.gap_ns;
        let lateness = self.late.policy.allowed_lateness_ns();
        let mut late = Vec::new();
        let mut emitted = Vec::new();
        // Keys changed by this chunk, in the order first seen.
        let (mut changed_ids, mut seen) = (Vec::new(), HashSet::new());
        let mut touching = Vec::new();
        for row in 0..chunk.num_rows() {
            if times.is_null(row) {
                continue;
            }
            if chunk.diff(row) != 1 {
                return Err(WeirError::internal("an aggregate received a retraction"));
            }
            let ts = times.value(row);
            let end = session_end(ts, gap)?;
            let watermark = chunk.watermark_before(row, self.watermark);
            let key = key_at(&keys, row);
            let id = self.keys.find(key);
            touching.clear();
            if let Some(id) = id {
                self.touching(id, (ts, end), &mut touching);
            }
            let touches_final = id.is_some_and(|id| {
                let sessions = self.keys.sessions(id);
                touching.iter().any(|start| {
                    sessions
                        .get(start)
                        .is_some_and(|session| self.is_final(session, watermark))
                })
            });
            // A row joins the open sessions it touches even when its own
            // `[ts, ts + gap)` is complete; it is late only when it would
            // reopen a final session or, touching none, is complete itself
            // (the SESSION rule in the design).
            let own_complete = watermark.is_some_and(|w| w >= end.saturating_add(lateness));
            if touches_final || (touching.is_empty() && own_complete) {
                let (row, watermark) = (row as u32, watermark.unwrap_or(i64::MIN));
                late.push(LateRow {
                    row,
                    start: ts,
                    end,
                    watermark,
                });
                continue;
            }
            let id = match id {
                Some(id) => id,
                None => self.keys.intern(key)?,
            };
            if seen.insert(id) {
                changed_ids.push(id);
            }
            self.place_row(id, (ts, end), &touching, row as u32, &mut emitted)?;
        }
        self.apply_pending(&changed_ids, &arguments, &mut emitted)?;
        self.late.report(&chunk, &late)?;
        self.emit_rows(emitted, output)
    }

    fn on_watermark(&mut self, watermark_ns: i64, output: &mut Output) -> Result<()> {
        if !advance_watermark(&mut self.watermark, watermark_ns) {
            return Ok(());
        }
        let horizon = watermark_ns.saturating_sub(self.late.policy.allowed_lateness_ns());
        let mut emitted = Vec::new();
        if self.emit == EmitMode::OnWindowClose {
            self.emit_complete(watermark_ns, &mut emitted)?;
        }
        self.finalize(horizon);
        self.emit_rows(emitted, output)?;
        if self.emit == EmitMode::OnWindowClose && self.columns.end.is_some() {
            // Every session shown from now on ends after the horizon.
            output.push(Message::Watermark(horizon));
        }
        Ok(())
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        self.keys.checkpoint(&self.calls, session_name, state)?;
        if let Some(watermark) = self.watermark {
            state.put(b"watermark", encode_i64(watermark));
        }
        Ok(())
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        self.watermark = state.get(b"watermark").and_then(decode_i64);
        for (name, value) in state.with_prefix(b"session/") {
            let key = name[b"session/".len()..].to_vec();
            let sessions = decode_sessions(&self.calls, value)?;
            let id = self.keys.restore(key, sessions)?;
            for (start, session) in self.keys.sessions(id) {
                let at = (session.end, id, *start);
                match session.accumulators {
                    Some(_) => self.open_ends.insert(at),
                    None => self.marker_ends.insert(at),
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "session_aggregate_tests.rs"]
mod tests;
