//! What a join side changed in the write group running now, kept so a
//! failed group is undone in proportion to what it changed: each change
//! (key, row, diff) in one byte buffer (no allocation per row), and the
//! deadline entries that expiring rows took out, to put back. What is kept
//! is bounded (`UNDO_BYTES`, as the aggregates' undo): a write group past
//! it (a COPY of millions of rows) keeps nothing more, and if it fails the
//! view is rebuilt from its checkpoint — memory follows the state, not the
//! statement.

use std::collections::BTreeMap;

/// Deadline entries taken out as due: the rows by their deadline.
pub type DueRows = BTreeMap<i64, Vec<Box<[u8]>>>;

/// Which of a side's deadline lists entries came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineList {
    /// The other side's watermark (an interval or window join).
    Expiry,
    /// `state_ttl`, by the clock.
    Ttl,
}

/// Buffers past this are given back when a group ends.
const KEPT_CAPACITY_BYTES: usize = 64 * 1024;

/// The most one side's undo may hold before the write group gives it up.
const UNDO_BYTES: usize = 64 << 20;

/// Per row taken out, beyond its bytes.
const TAKEN_OUT_ROW_BYTES: usize = 24;

pub struct SideUndo {
    /// Each change's key bytes then row bytes, one change after another.
    bytes: Vec<u8>,
    /// Each change: key length, row length, diff.
    changes: Vec<(u32, u32, i64)>,
    pub taken_out: Vec<(DeadlineList, DueRows)>,
    taken_out_bytes: usize,
    limit_bytes: usize,
    /// The group outgrew the limit: nothing is kept, and undoing it is
    /// refused.
    given_up: bool,
}

impl Default for SideUndo {
    fn default() -> Self {
        SideUndo::with_limit(UNDO_BYTES)
    }
}

impl SideUndo {
    pub fn with_limit(limit_bytes: usize) -> Self {
        SideUndo {
            bytes: Vec::new(),
            changes: Vec::new(),
            taken_out: Vec::new(),
            taken_out_bytes: 0,
            limit_bytes,
            given_up: false,
        }
    }

    pub fn note(&mut self, key: &[u8], row: &[u8], diff: i64) {
        if self.given_up {
            return;
        }
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(row);
        self.changes
            .push((key.len() as u32, row.len() as u32, diff));
        self.bound();
    }

    pub fn note_taken_out(&mut self, list: DeadlineList, rows: &DueRows) {
        if rows.is_empty() || self.given_up {
            return;
        }
        let rows_bytes: usize = (rows.values().flatten())
            .map(|row| row.len() + TAKEN_OUT_ROW_BYTES)
            .sum();
        self.taken_out_bytes += rows_bytes;
        self.taken_out.push((list, rows.clone()));
        self.bound();
    }

    /// Whether the group outgrew the limit (its undo is refused).
    pub fn given_up(&self) -> bool {
        self.given_up
    }

    /// Past the limit, keeps nothing more.
    fn bound(&mut self) {
        if self.memory_bytes() <= self.limit_bytes {
            return;
        }
        *self = SideUndo {
            given_up: true,
            ..SideUndo::with_limit(self.limit_bytes)
        };
    }

    /// The changes, last first: (key, row, diff).
    pub fn changes_last_first(&self) -> impl Iterator<Item = (&[u8], &[u8], i64)> {
        let mut end = self.bytes.len();
        self.changes.iter().rev().map(move |&(key, row, diff)| {
            let (key, row) = (key as usize, row as usize);
            let start = end - key - row;
            let change = (
                &self.bytes[start..start + key],
                &self.bytes[start + key..end],
                diff,
            );
            end = start;
            change
        })
    }

    /// Forgets the changes; the buffers are kept for the next group
    /// unless a big one grew them.
    pub fn clear(&mut self) {
        if self.bytes.capacity() > KEPT_CAPACITY_BYTES {
            *self = SideUndo::with_limit(self.limit_bytes);
            return;
        }
        self.bytes.clear();
        self.changes.clear();
        self.taken_out.clear();
        self.taken_out_bytes = 0;
        self.given_up = false;
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes.len() + self.changes.len() * 16 + self.taken_out_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_back_last_first_with_their_bytes() {
        let mut undo = SideUndo::default();
        undo.note(b"k1", b"row one", 1);
        undo.note(b"", b"r", -2);
        undo.note(b"key3", b"", 3);
        let changes: Vec<_> = undo.changes_last_first().collect();
        assert_eq!(
            changes,
            vec![
                (&b"key3"[..], &b""[..], 3),
                (&b""[..], &b"r"[..], -2),
                (&b"k1"[..], &b"row one"[..], 1)
            ]
        );
        undo.clear();
        assert_eq!(undo.changes_last_first().count(), 0);
    }

    #[test]
    fn a_group_past_the_limit_keeps_nothing_until_it_ends() {
        let mut undo = SideUndo::with_limit(100);
        undo.note(b"k", &[7; 60], 1);
        assert!(!undo.given_up());
        undo.note(b"k", &[8; 60], 1);
        assert!(undo.given_up());
        assert_eq!(undo.changes_last_first().count(), 0);
        let mut due = DueRows::new();
        due.insert(5, vec![vec![1u8; 10].into_boxed_slice()]);
        undo.note_taken_out(DeadlineList::Expiry, &due);
        assert!(undo.taken_out.is_empty() && undo.memory_bytes() == 0);
        undo.clear();
        assert!(!undo.given_up());
        undo.note(b"k", b"row", 1);
        assert_eq!(undo.changes_last_first().count(), 1);
    }
}
