//! One key partition of a session aggregate: the sessions of the keys that
//! hash to it, and their ends indexed for closing. The operator splits a
//! batch's rows by key and each partition places its share on a thread of
//! its own (`session_aggregate`); partitions share nothing, so the rows a
//! key's sessions see, and their order, do not depend on the count.

use std::collections::BTreeSet;

use datafusion::arrow::array::{Array, Int64Array, UInt32Array};
use datafusion::arrow::row::Rows;

use super::calls::{evaluate, new_accumulators, AggregateCall, Arguments, GroupedArguments};
use super::late::LateRow;
use super::session_aggregate::{merge_sessions, Emitted, Session, Sessions};
use super::session_keys::{KeyId, SessionKeys};
use super::session_undo::{Index, SessionUndo};
use crate::error::{Result, WeirError};
use crate::stream::message::Chunk;
use crate::stream::operators::window_spec::session_end;
use crate::stream::EmitMode;

/// What every partition of one operator applies alike.
#[derive(Debug, Clone, Copy)]
pub struct SessionRules {
    pub gap_ns: i64,
    pub lateness_ns: i64,
    pub emit: EmitMode,
}

/// A batch's columns as every partition reads them.
pub struct SessionBatch<'a> {
    pub calls: &'a [AggregateCall],
    pub chunk: &'a Chunk,
    /// Each row's event time (its own session's start).
    pub times: &'a Int64Array,
    /// Each row's key in the row format (None: every key is empty).
    pub keys: &'a Option<Rows>,
    pub arguments: &'a [Arguments],
    /// The operator's watermark before the batch.
    pub watermark: Option<i64>,
}

/// A session's place in an end-ordered index: (end, key id, start).
pub type SessionAt = (i64, KeyId, i64);

#[derive(Default)]
pub struct SessionPartition {
    /// Every key's sessions, by key id.
    pub keys: SessionKeys,
    /// (end, key, start) of the sessions still taking rows, and of the
    /// final ones (markers), so closing visits each session once.
    pub open_ends: BTreeSet<SessionAt>,
    pub marker_ends: BTreeSet<SessionAt>,
    /// How to undo what the running write group changed.
    undo: SessionUndo,
}

impl SessionPartition {
    /// Places this partition's rows of a batch (in batch order); returns
    /// the late ones and the rows to emit.
    pub fn add_rows(
        &mut self,
        rules: &SessionRules,
        batch: &SessionBatch,
        rows: &[u32],
    ) -> Result<(Vec<LateRow>, Emitted)> {
        let (mut late, mut emitted) = (Vec::new(), Vec::new());
        // Keys changed by this batch, in the order first seen.
        let mut changed_ids = Vec::new();
        let mut touching = Vec::new();
        for &row in rows {
            let index = row as usize;
            if batch.times.is_null(index) {
                continue;
            }
            if batch.chunk.diff(index) != 1 {
                return Err(WeirError::internal("an aggregate received a retraction"));
            }
            let ts = batch.times.value(index);
            let end = session_end(ts, rules.gap_ns)?;
            let watermark = batch.chunk.watermark_before(index, batch.watermark);
            let key = batch.keys.as_ref().map_or(&[][..], |k| k.row(index).data());
            let id = self.keys.find(key);
            touching.clear();
            if let Some(id) = id {
                self.touching(id, (ts, end), &mut touching);
            }
            if self.is_late(rules, id, (ts, end), &touching, watermark) {
                let watermark = watermark.unwrap_or(i64::MIN);
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
            if self.keys.join_batch(id) {
                changed_ids.push(id);
                self.undo.note(id, &mut self.keys, batch.calls)?;
            }
            self.place_row(batch.calls, id, (ts, end), &touching, row, &mut emitted)?;
        }
        self.keys.leave_batch(&changed_ids);
        self.apply_pending(rules, batch, &changed_ids, &mut emitted)?;
        Ok((late, emitted))
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

    /// A row joins the open sessions it touches even when its own
    /// `[ts, ts + gap)` is complete; it is late only when it would reopen a
    /// final session or, touching none, is complete itself (the SESSION
    /// rule in the design).
    fn is_late(
        &self,
        rules: &SessionRules,
        id: Option<KeyId>,
        (_, end): (i64, i64),
        touching: &[i64],
        watermark: Option<i64>,
    ) -> bool {
        let is_final = |session: &Session| {
            session.accumulators.is_none()
                || watermark.is_some_and(|w| w >= session.end.saturating_add(rules.lateness_ns))
        };
        let touches_final = id.is_some_and(|id| {
            let sessions = self.keys.sessions(id);
            let mut touched = touching.iter().filter_map(|start| sessions.get(start));
            touched.any(is_final)
        });
        let own_complete = watermark.is_some_and(|w| w >= end.saturating_add(rules.lateness_ns));
        touches_final || (touching.is_empty() && own_complete)
    }

    /// Places the row in the sessions it touches, merged into one (or a new
    /// session). Its accumulators are updated when the batch is done
    /// (`apply_pending`); a shown session it changes is retracted now.
    fn place_row(
        &mut self,
        calls: &[AggregateCall],
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
            let at = (session.filed_end, id, old_start);
            self.undo.unfile(Index::Open, &mut self.open_ends, &at);
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
                accumulators: Some(new_accumulators(calls)?),
                emitted: false,
                pending: Vec::new(),
            },
        };
        session.end = last;
        session.filed_end = last;
        session.pending.push(row);
        sessions.insert(start, session);
        (self.undo).file(Index::Open, &mut self.open_ends, (last, id, start));
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

    /// Adds each changed session's rows of this batch to its accumulators
    /// and shows it if the emit mode says so.
    fn apply_pending(
        &mut self,
        rules: &SessionRules,
        batch: &SessionBatch,
        ids: &[KeyId],
        emitted: &mut Emitted,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let shows_all = rules.emit == EmitMode::OnUpdate;
        // Every changed session's rows in one permutation, walked below in
        // the same order.
        let order = ids
            .iter()
            .flat_map(|id| self.keys.sessions(*id).values())
            .flat_map(|session| session.pending.iter().copied());
        let order = UInt32Array::from_iter_values(order);
        let grouped = GroupedArguments::new(batch.arguments, &order)?;
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
                if shows_all || batch.watermark.is_some_and(|w| w >= session.end) {
                    let values = evaluate(accumulators)?;
                    emitted.push((key.to_vec(), *start, session.end, values, 1));
                    session.emitted = true;
                }
            }
        }
        Ok(())
    }

    /// The watermark reached `watermark_ns`: under EMIT ON WINDOW CLOSE the
    /// sessions complete now and not shown yet are shown; sessions past
    /// allowed lateness become final.
    pub fn close(
        &mut self,
        (rules, calls): (&SessionRules, &[AggregateCall]),
        watermark_ns: i64,
        horizon: i64,
    ) -> Result<Emitted> {
        let mut emitted = Vec::new();
        if rules.emit == EmitMode::OnWindowClose {
            self.emit_complete(calls, watermark_ns, &mut emitted)?;
        }
        self.finalize(calls, horizon, rules.gap_ns)?;
        Ok(emitted)
    }

    fn emit_complete(
        &mut self,
        calls: &[AggregateCall],
        watermark_ns: i64,
        emitted: &mut Emitted,
    ) -> Result<()> {
        let bound = (watermark_ns.saturating_add(1), 0, i64::MIN);
        let mut extended = Vec::new();
        let complete: Vec<SessionAt> = self.open_ends.range(..bound).copied().collect();
        for (filed, id, start) in complete {
            let Some(session) = self.keys.sessions(id).get(&start) else {
                continue;
            };
            if session.end > watermark_ns {
                extended.push((filed, id, start));
                continue;
            }
            if session.accumulators.is_none() || session.emitted {
                continue;
            }
            self.undo.note(id, &mut self.keys, calls)?;
            let (key, sessions) = self.keys.entry_mut(id);
            let Some(session) = sessions.get_mut(&start) else {
                continue;
            };
            if let Some(accumulators) = session.accumulators.as_mut() {
                emitted.push((key.to_vec(), start, session.end, evaluate(accumulators)?, 1));
                session.emitted = true;
            }
            self.keys.mark_changed(id);
        }
        for at in extended {
            self.undo.unfile(Index::Open, &mut self.open_ends, &at);
            self.refile(at.1, at.2);
        }
        Ok(())
    }

    /// Files an open session in `open_ends` under its current end (its
    /// old entry already gone).
    fn refile(&mut self, id: KeyId, start: i64) {
        if let Some(session) = self.keys.entry_mut(id).1.get_mut(&start) {
            session.filed_end = session.end;
            let at = (session.end, id, start);
            self.undo.file(Index::Open, &mut self.open_ends, at);
        }
    }

    /// Sessions ending at or before `horizon` become final markers; markers
    /// go once no row can touch them and an open session too (see
    /// `outlives`).
    fn finalize(&mut self, calls: &[AggregateCall], horizon: i64, gap: i64) -> Result<()> {
        let ending = take_before(&mut self.open_ends, horizon);
        self.undo.unfiled(Index::Open, &ending);
        for (_, id, start) in ending {
            let Some(session) = self.keys.sessions(id).get(&start) else {
                continue;
            };
            if session.end > horizon {
                self.refile(id, start);
                continue;
            }
            self.undo.note(id, &mut self.keys, calls)?;
            if let Some(session) = self.keys.entry_mut(id).1.get_mut(&start) {
                session.accumulators = None;
                let at = (session.end, id, start);
                self.undo.file(Index::Marker, &mut self.marker_ends, at);
            }
            self.keys.mark_changed(id);
        }
        let forgotten = horizon.saturating_sub(gap.saturating_mul(2));
        let gone = take_before(&mut self.marker_ends, forgotten);
        self.undo.unfiled(Index::Marker, &gone);
        for (end, id, start) in gone {
            if let Some(later_end) = outlives(self.keys.sessions(id), start, end, gap) {
                let at = (later_end, id, start);
                self.undo.file(Index::Marker, &mut self.marker_ends, at);
                continue;
            }
            self.undo.note(id, &mut self.keys, calls)?;
            let sessions = self.keys.entry_mut(id).1;
            sessions.remove(&start);
            if sessions.is_empty() {
                // An emptied map keeps its node (~1 kB): let it go now. Its
                // id goes when the write group commits (a COPY of millions
                // of rows is one, and would hold every key's node).
                *sessions = Sessions::new();
                self.undo.emptied(id);
            }
            self.keys.mark_changed(id);
        }
        Ok(())
    }

    /// The running write group committed.
    pub fn commit(&mut self) {
        self.undo.commit(&mut self.keys);
    }

    /// The running write group failed: puts back what it changed (false:
    /// it kept too much to undo; the view is to be rebuilt).
    pub fn roll_back(&mut self, calls: &[AggregateCall]) -> Result<bool> {
        let indexes = (&mut self.open_ends, &mut self.marker_ends);
        self.undo.roll_back(&mut self.keys, indexes, calls)
    }

    /// A key's sessions from a checkpoint.
    pub fn restore(&mut self, key: Vec<u8>, sessions: Sessions) -> Result<()> {
        let id = self.keys.restore(key, sessions)?;
        for (start, session) in self.keys.sessions(id) {
            let at = (session.end, id, *start);
            match session.accumulators {
                Some(_) => self.open_ends.insert(at),
                None => self.marker_ends.insert(at),
            };
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
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

/// Takes the entries ending at or before `end` out of `index`.
fn take_before(index: &mut BTreeSet<SessionAt>, end: i64) -> BTreeSet<SessionAt> {
    let later = index.split_off(&(end.saturating_add(1), 0, i64::MIN));
    std::mem::replace(index, later)
}
