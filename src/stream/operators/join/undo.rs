//! What a join side changed in the write group running now, kept so a
//! failed group is undone in proportion to what it changed: each change
//! (key, row, diff) in one byte buffer (no allocation per row), and the
//! deadline entries that expiring rows took out, to put back.

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

#[derive(Default)]
pub struct SideUndo {
    /// Each change's key bytes then row bytes, one change after another.
    bytes: Vec<u8>,
    /// Each change: key length, row length, diff.
    changes: Vec<(u32, u32, i64)>,
    pub taken_out: Vec<(DeadlineList, DueRows)>,
}

impl SideUndo {
    pub fn note(&mut self, key: &[u8], row: &[u8], diff: i64) {
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(row);
        self.changes
            .push((key.len() as u32, row.len() as u32, diff));
    }

    pub fn note_taken_out(&mut self, list: DeadlineList, rows: &DueRows) {
        if !rows.is_empty() {
            self.taken_out.push((list, rows.clone()));
        }
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
            *self = SideUndo::default();
            return;
        }
        self.bytes.clear();
        self.changes.clear();
        self.taken_out.clear();
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes.len() + self.changes.len() * 16
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
}
