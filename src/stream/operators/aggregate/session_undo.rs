//! How a session partition undoes a failed write group. Before the group
//! first changes a key's sessions they are kept (each session's bounds,
//! flags and accumulator state, as a checkpoint takes it), and every
//! change to the end indexes is logged. Undoing replays the index log
//! backwards and puts the kept sessions back. A key whose sessions all go
//! keeps its id until the group commits, so the ids in the log name the
//! same keys when it is undone. Work in proportion to what the group
//! changed. What is kept is bounded (`UNDO_BYTES`): past it, the group
//! keeps nothing more, and if it fails the view is rebuilt from its
//! checkpoint (a COPY of millions of rows is one write group).

use std::collections::BTreeSet;

use datafusion::common::{HashSet, ScalarValue};

use super::calls::AggregateCall;
use super::session_aggregate::{Session, Sessions};
use super::session_keys::{KeyId, SessionKeys};
use super::session_partition::SessionAt;
use super::state::snapshot_all;
use super::undo::restored;
use crate::error::Result;

/// Which end index an entry is in.
#[derive(Clone, Copy)]
pub enum Index {
    /// Sessions still taking rows.
    Open,
    /// Final sessions (markers).
    Marker,
}

/// A session as it was: start, end, the end it was filed under, whether
/// it was shown, and each call's state (None: a marker).
type SessionImage = (i64, i64, i64, bool, Option<Vec<Vec<ScalarValue>>>);

/// The most one partition's undo may hold (a few kB in unit tests, so
/// that they reach it).
const UNDO_BYTES: usize = if cfg!(test) { 16 << 10 } else { 64 << 20 };

/// Per index entry, and per kept session beyond its states.
const INDEX_ENTRY_BYTES: usize = 40;
const SESSION_IMAGE_BYTES: usize = 64;

#[derive(Default)]
pub struct SessionUndo {
    /// Roughly the bytes kept.
    bytes: usize,
    /// The group outgrew `UNDO_BYTES`: nothing more is kept, and undoing
    /// it is refused.
    given_up: bool,
    /// By key id: whether the group already kept the key's sessions.
    noted: Vec<bool>,
    /// The keys the group changed and their sessions before it.
    keys: Vec<(KeyId, Vec<SessionImage>)>,
    /// Index entries the group added (true) or removed (false), in order.
    index: Vec<(Index, SessionAt, bool)>,
    /// Keys whose sessions all went: their ids are given up at commit.
    emptied: HashSet<KeyId>,
}

impl SessionUndo {
    /// Keeps key `id`'s sessions unless the group already did.
    pub fn note(
        &mut self,
        id: KeyId,
        keys: &mut SessionKeys,
        calls: &[AggregateCall],
    ) -> Result<()> {
        if self.given_up {
            return Ok(());
        }
        let index = id as usize;
        if self.noted.len() <= index {
            self.noted.resize(index + 1, false);
        }
        if std::mem::replace(&mut self.noted[index], true) {
            return Ok(());
        }
        let mut images = Vec::new();
        for (start, session) in keys.entry_mut(id).1.iter_mut() {
            let states = (session.accumulators.as_mut())
                .map(|accumulators| snapshot_all(calls, accumulators))
                .transpose()?;
            images.push((
                *start,
                session.end,
                session.filed_end,
                session.emitted,
                states,
            ));
        }
        self.bytes += images
            .iter()
            .map(|image| {
                let states = image.4.iter().flatten().flatten();
                SESSION_IMAGE_BYTES + states.map(ScalarValue::size).sum::<usize>()
            })
            .sum::<usize>();
        self.keys.push((id, images));
        self.bound();
        Ok(())
    }

    /// Past `UNDO_BYTES`, gives the group's undo up.
    fn bound(&mut self) {
        if self.bytes > UNDO_BYTES {
            self.forget();
            self.given_up = true;
        }
    }

    fn log(&mut self, entry: (Index, SessionAt, bool)) {
        if !self.given_up {
            self.index.push(entry);
            self.bytes += INDEX_ENTRY_BYTES;
            self.bound();
        }
    }

    /// Adds `at` to `index` (logged).
    pub fn file(&mut self, index: Index, set: &mut BTreeSet<SessionAt>, at: SessionAt) {
        if set.insert(at) {
            self.log((index, at, true));
        }
    }

    /// Takes `at` out of `index` (logged).
    pub fn unfile(&mut self, index: Index, set: &mut BTreeSet<SessionAt>, at: &SessionAt) {
        if set.remove(at) {
            self.log((index, *at, false));
        }
    }

    /// Entries taken out of `index` together.
    pub fn unfiled(&mut self, index: Index, taken: &BTreeSet<SessionAt>) {
        for at in taken {
            self.log((index, *at, false));
        }
    }

    /// Key `id`'s sessions all went; its id goes at commit.
    pub fn emptied(&mut self, id: KeyId) {
        self.emptied.insert(id);
    }

    /// The group committed: keys left without sessions give up their ids.
    pub fn commit(&mut self, keys: &mut SessionKeys) {
        for id in self.emptied.drain() {
            if keys.sessions(id).is_empty() {
                keys.release(id);
            }
        }
        self.forget();
        self.given_up = false;
    }

    /// The group failed: the indexes and the keys it changed as they were
    /// (false: the group gave its undo up; the view is to be rebuilt).
    pub fn roll_back(
        &mut self,
        keys: &mut SessionKeys,
        (open, markers): (&mut BTreeSet<SessionAt>, &mut BTreeSet<SessionAt>),
        calls: &[AggregateCall],
    ) -> Result<bool> {
        if std::mem::take(&mut self.given_up) {
            self.emptied.clear();
            self.forget();
            return Ok(false);
        }
        for (index, at, added) in self.index.drain(..).rev() {
            let set = match index {
                Index::Open => &mut *open,
                Index::Marker => &mut *markers,
            };
            if added {
                set.remove(&at);
            } else {
                set.insert(at);
            }
        }
        self.emptied.clear();
        for (id, images) in std::mem::take(&mut self.keys) {
            self.noted[id as usize] = false;
            keys.leave_batch(&[id]);
            if images.is_empty() {
                keys.entry_mut(id).1.clear();
                keys.release(id);
                continue;
            }
            let mut sessions = Sessions::new();
            for (start, end, filed_end, emitted, states) in images {
                let accumulators = states.map(|states| restored(calls, states)).transpose()?;
                let session = Session {
                    end,
                    filed_end,
                    accumulators,
                    emitted,
                    pending: Vec::new(),
                };
                sessions.insert(start, session);
            }
            *keys.entry_mut(id).1 = sessions;
            keys.mark_changed(id);
        }
        self.forget();
        Ok(true)
    }

    fn forget(&mut self) {
        for (id, _) in std::mem::take(&mut self.keys) {
            self.noted[id as usize] = false;
        }
        // Not cleared: a group that gave its undo up grew these to the
        // bound, and a cleared Vec would keep that capacity.
        self.index = Vec::new();
        self.bytes = 0;
    }
}
