//! A view row's stored value: its state at each commit epoch a reader may
//! still read at — a count for a multiset row, the row itself (or none)
//! for a key of a keyed view. Readers see the newest version at or before
//! their epoch, so a query reads one commit's rows while later commits
//! land; versions no reader can see any more are dropped when the row is
//! next written.

use crate::error::{sqlstate, Result, WeirError};

/// Marks the versioned multiset layout (a pre-versions value is a bare
/// 8-byte count).
const COUNT_TAG: u8 = 1;
/// Marks a keyed view's row versions.
const ROW_TAG: u8 = 2;
/// A row version's length that says "no row".
const NO_ROW: u32 = u32::MAX;

/// What a version holds; `default()` is the empty state (no row).
pub trait Version: Clone + Default + PartialEq {
    fn is_empty(&self) -> bool;
}

impl Version for i64 {
    fn is_empty(&self) -> bool {
        *self == 0
    }
}

impl Version for Option<Vec<u8>> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions<V = i64>(Vec<(u64, V)>);

/// A multiset row's count per epoch.
pub type CountVersions = Versions<i64>;

/// A keyed view's row per epoch (Arrow's row format).
pub type RowVersions = Versions<Option<Vec<u8>>>;

fn malformed() -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        "a stored materialized view row is malformed",
    )
}

fn take_array<const N: usize>(bytes: &mut &[u8]) -> Result<[u8; N]> {
    let (head, rest) = bytes.split_at_checked(N).ok_or_else(malformed)?;
    *bytes = rest;
    head.try_into().map_err(|_| malformed())
}

impl CountVersions {
    pub fn decode(value: &[u8]) -> Result<Self> {
        if value.len() == 8 {
            let mut count = [0u8; 8];
            count.copy_from_slice(value);
            return Ok(Versions(vec![(0, i64::from_be_bytes(count))]));
        }
        if value.first() != Some(&COUNT_TAG) || (value.len() - 1) % 16 != 0 {
            return Err(malformed());
        }
        let mut rest = &value[1..];
        let mut versions = Vec::with_capacity(rest.len() / 16);
        while !rest.is_empty() {
            let epoch = u64::from_be_bytes(take_array(&mut rest)?);
            versions.push((epoch, i64::from_be_bytes(take_array(&mut rest)?)));
        }
        Ok(Versions(versions))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(1 + 16 * self.0.len());
        value.push(COUNT_TAG);
        for (epoch, count) in &self.0 {
            value.extend_from_slice(&epoch.to_be_bytes());
            value.extend_from_slice(&count.to_be_bytes());
        }
        value
    }

    /// The count a reader at `epoch` sees.
    pub fn count_at(&self, epoch: u64, aborted: &[u64]) -> i64 {
        self.at(epoch, aborted).copied().unwrap_or(0)
    }
}

impl RowVersions {
    pub fn decode(value: &[u8]) -> Result<Self> {
        if value.first() != Some(&ROW_TAG) {
            return Err(malformed());
        }
        let mut rest = &value[1..];
        let mut versions = Vec::new();
        while !rest.is_empty() {
            let epoch = u64::from_be_bytes(take_array(&mut rest)?);
            let length = u32::from_be_bytes(take_array(&mut rest)?);
            let row = if length == NO_ROW {
                None
            } else {
                let (row, after) = rest
                    .split_at_checked(length as usize)
                    .ok_or_else(malformed)?;
                rest = after;
                Some(row.to_vec())
            };
            versions.push((epoch, row));
        }
        Ok(Versions(versions))
    }

    pub fn encode(&self) -> Vec<u8> {
        let rows: usize = self.0.iter().flat_map(|(_, row)| row).map(Vec::len).sum();
        let mut value = Vec::with_capacity(1 + 12 * self.0.len() + rows);
        value.push(ROW_TAG);
        for (epoch, row) in &self.0 {
            value.extend_from_slice(&epoch.to_be_bytes());
            match row {
                // Rows are far below 4 GiB: a view's rows come from batches.
                Some(row) => {
                    value.extend_from_slice(&(row.len() as u32).to_be_bytes());
                    value.extend_from_slice(row);
                }
                None => value.extend_from_slice(&NO_ROW.to_be_bytes()),
            }
        }
        value
    }

    /// The row a reader at `epoch` sees, if any.
    pub fn row_at(&self, epoch: u64, aborted: &[u64]) -> Option<&[u8]> {
        self.at(epoch, aborted).and_then(|row| row.as_deref())
    }
}

impl<V: Version> Versions<V> {
    /// The state a reader at `epoch` sees; versions of `aborted` epochs
    /// (written by statements that never committed) do not count.
    pub fn at(&self, epoch: u64, aborted: &[u64]) -> Option<&V> {
        self.0
            .iter()
            .rev()
            .find(|(at, _)| *at <= epoch && !aborted.contains(at))
            .map(|(_, state)| state)
    }

    /// The state written at exactly `epoch`, if any.
    pub fn exactly_at(&self, epoch: u64) -> Option<&V> {
        self.0
            .iter()
            .find(|(at, _)| *at == epoch)
            .map(|(_, state)| state)
    }

    /// Adds `state` as of `epoch`, keeping only what readers at `oldest`
    /// or later can see; None when no reader could see anything at all.
    pub fn with(mut self, epoch: u64, state: V, oldest: u64, aborted: &[u64]) -> Option<Self> {
        self.0.retain(|(at, _)| !aborted.contains(at));
        let visible_from = self
            .0
            .iter()
            .rposition(|(at, _)| *at <= oldest)
            .unwrap_or(0);
        self.0.drain(..visible_from);
        self.0.retain(|(at, _)| *at < epoch);
        self.0.push((epoch, state));
        // An empty state at or before `oldest` reads like no version at all.
        if self
            .0
            .first()
            .is_some_and(|(at, state)| *at <= oldest && state.is_empty())
        {
            self.0.remove(0);
        }
        self.0
            .iter()
            .any(|(_, state)| !state.is_empty())
            .then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_the_version_of_their_epoch_until_none_is_left() {
        let row = CountVersions::default().with(1, 2, 0, &[]).unwrap();
        // A reader at epoch 1 is still running when epoch 2 changes the row.
        let row = row.with(2, 5, 1, &[]).unwrap();
        assert_eq!((row.count_at(1, &[]), row.count_at(2, &[])), (2, 5));
        // Once every reader is at 2 or later, epoch 1's count goes.
        let row = row.with(3, 0, 2, &[]).unwrap();
        assert_eq!(row, Versions(vec![(2, 5), (3, 0)]));
        assert_eq!(row.clone().with(4, 0, 3, &[]), None, "deleted for everyone");
        let decoded = CountVersions::decode(&row.encode()).unwrap();
        assert_eq!(decoded, row);
    }

    #[test]
    fn versions_of_aborted_epochs_are_never_read_and_go_when_rewritten() {
        let row = CountVersions::default().with(1, 2, 0, &[]).unwrap();
        // Epoch 2 was staged by a statement that failed.
        let row = row.with(2, 9, 1, &[]).unwrap();
        assert_eq!(row.count_at(5, &[2]), 2);
        let row = row.with(3, 4, 1, &[2]).unwrap();
        assert_eq!(row, Versions(vec![(1, 2), (3, 4)]));
    }

    #[test]
    fn a_bare_count_is_the_old_layout_and_garbage_is_corruption() {
        let old = CountVersions::decode(&7i64.to_be_bytes()).unwrap();
        assert_eq!(old.count_at(0, &[]), 7);
        assert_eq!(CountVersions::decode(b"xyz").unwrap_err().code, "XX001");
    }
}
