//! A view row's stored value: its count at each commit epoch a reader may
//! still read at. Readers see the newest version at or before their epoch,
//! so a query reads one commit's rows while later commits land; versions no
//! reader can see any more are dropped when the row is next written.

use crate::error::{sqlstate, Result, WeirError};

/// Marks the versioned layout (a pre-versions value is a bare 8-byte count).
const TAG: u8 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions(Vec<(u64, i64)>);

impl Versions {
    pub fn decode(value: &[u8]) -> Result<Self> {
        if value.len() == 8 {
            let mut count = [0u8; 8];
            count.copy_from_slice(value);
            return Ok(Versions(vec![(0, i64::from_be_bytes(count))]));
        }
        if value.first() != Some(&TAG) || (value.len() - 1) % 16 != 0 {
            return Err(WeirError::new(
                sqlstate::DATA_CORRUPTED,
                "a stored materialized view row count is malformed",
            ));
        }
        let versions = value[1..]
            .chunks_exact(16)
            .map(|pair| {
                let mut epoch = [0u8; 8];
                let mut count = [0u8; 8];
                epoch.copy_from_slice(&pair[..8]);
                count.copy_from_slice(&pair[8..]);
                (u64::from_be_bytes(epoch), i64::from_be_bytes(count))
            })
            .collect();
        Ok(Versions(versions))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(1 + 16 * self.0.len());
        value.push(TAG);
        for (epoch, count) in &self.0 {
            value.extend_from_slice(&epoch.to_be_bytes());
            value.extend_from_slice(&count.to_be_bytes());
        }
        value
    }

    /// The count a reader at `epoch` sees; versions of `aborted` epochs
    /// (written by statements that never committed) do not count.
    pub fn count_at(&self, epoch: u64, aborted: &[u64]) -> i64 {
        self.0
            .iter()
            .rev()
            .find(|(at, _)| *at <= epoch && !aborted.contains(at))
            .map_or(0, |(_, count)| *count)
    }

    /// The count written at exactly `epoch`, if any.
    pub fn exactly_at(&self, epoch: u64) -> Option<i64> {
        self.0
            .iter()
            .find(|(at, _)| *at == epoch)
            .map(|(_, count)| *count)
    }

    /// Adds `count` as of `epoch`, keeping only what readers at `oldest`
    /// or later can see; None when no reader could see the row at all.
    pub fn with(mut self, epoch: u64, count: i64, oldest: u64, aborted: &[u64]) -> Option<Self> {
        self.0.retain(|(at, _)| !aborted.contains(at));
        let visible_from = self
            .0
            .iter()
            .rposition(|(at, _)| *at <= oldest)
            .unwrap_or(0);
        self.0.drain(..visible_from);
        self.0.retain(|(at, _)| *at < epoch);
        self.0.push((epoch, count));
        // A zero count at or before `oldest` reads like no version at all.
        if self
            .0
            .first()
            .is_some_and(|(at, c)| *at <= oldest && *c == 0)
        {
            self.0.remove(0);
        }
        self.0.iter().any(|(_, count)| *count != 0).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_the_version_of_their_epoch_until_none_is_left() {
        let row = Versions::default().with(1, 2, 0, &[]).unwrap();
        // A reader at epoch 1 is still running when epoch 2 changes the row.
        let row = row.with(2, 5, 1, &[]).unwrap();
        assert_eq!((row.count_at(1, &[]), row.count_at(2, &[])), (2, 5));
        // Once every reader is at 2 or later, epoch 1's count goes.
        let row = row.with(3, 0, 2, &[]).unwrap();
        assert_eq!(row, Versions(vec![(2, 5), (3, 0)]));
        assert_eq!(row.clone().with(4, 0, 3, &[]), None, "deleted for everyone");
        let decoded = Versions::decode(&row.encode()).unwrap();
        assert_eq!(decoded, row);
    }

    #[test]
    fn versions_of_aborted_epochs_are_never_read_and_go_when_rewritten() {
        let row = Versions::default().with(1, 2, 0, &[]).unwrap();
        // Epoch 2 was staged by a statement that failed.
        let row = row.with(2, 9, 1, &[]).unwrap();
        assert_eq!(row.count_at(5, &[2]), 2);
        let row = row.with(3, 4, 1, &[2]).unwrap();
        assert_eq!(row, Versions(vec![(1, 2), (3, 4)]));
    }

    #[test]
    fn a_bare_count_is_the_old_layout_and_garbage_is_corruption() {
        let old = Versions::decode(&7i64.to_be_bytes()).unwrap();
        assert_eq!(old.count_at(0, &[]), 7);
        assert_eq!(Versions::decode(b"xyz").unwrap_err().code, "XX001");
    }
}
