//! One partition's windows, kept so that a failed write group can be
//! undone at the cost of what it changed. The rows a group adds go into
//! bins of their own (`staged`), moved or merged into the committed bins
//! when the group commits and dropped when it fails; a committed window
//! the group closes leaves its state (`BinState`) behind until then, to
//! be put back if the group fails. A `GroupsAccumulator` cannot take rows
//! back out, and copying a window's state before every write would cost
//! the window's size per write; staging costs nothing for a window that
//! only the group filled (the common bulk load) and a merge of the
//! group's groups otherwise.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::window_bin::{BinShape, BinState, WindowBin};
use super::window_partitions::ClosedWindow;
use crate::error::Result;

/// One partition's windows by end.
pub type Bins = BTreeMap<i64, WindowBin>;

#[derive(Default)]
pub struct StagedBins {
    /// What committed write groups added.
    committed: Bins,
    /// What the running write group added.
    staged: Bins,
    /// Committed windows the running group closed, as they were.
    closed: Vec<(i64, BinState)>,
}

impl StagedBins {
    /// The running group's bin of the window ending at `end`.
    pub fn staged_bin(&mut self, end: i64, shape: &BinShape) -> Result<&mut WindowBin> {
        bin_at(&mut self.staged, end, shape)
    }

    /// The committed bins: what a checkpoint writes and a restore loads
    /// (both come between write groups).
    pub fn committed(&mut self) -> &mut Bins {
        &mut self.committed
    }

    /// Closes the windows ending at or before `watermark_ns`: their rows,
    /// and the earliest end still held. A committed window's rows come
    /// before the group's, as they were added.
    pub fn close(
        &mut self,
        shape: &BinShape,
        watermark_ns: i64,
    ) -> Result<(Vec<ClosedWindow>, Option<i64>)> {
        let committed = take_through(&mut self.committed, watermark_ns);
        let mut closing = take_through(&mut self.staged, watermark_ns);
        for (end, bin) in committed {
            self.closed.push((end, bin.into_state()?));
            let mut merged = WindowBin::new(shape)?;
            if let Some((_, before)) = self.closed.last() {
                merged.merge_state(before, shape)?;
            }
            if let Some(added) = closing.remove(&end) {
                merged.merge_state(&added.into_state()?, shape)?;
            }
            closing.insert(end, merged);
        }
        let windows = closing
            .into_iter()
            .map(|(end, bin)| {
                let (keys, values) = bin.finish(shape)?;
                Ok((end, keys, values))
            })
            .collect::<Result<_>>()?;
        let remaining = [self.committed.keys().next(), self.staged.keys().next()];
        Ok((windows, remaining.into_iter().flatten().min().copied()))
    }

    /// The running group committed: its bins join the committed ones.
    pub fn commit(&mut self, shape: &BinShape) -> Result<()> {
        self.closed.clear();
        for (end, bin) in std::mem::take(&mut self.staged) {
            match self.committed.entry(end) {
                Entry::Vacant(entry) => {
                    entry.insert(bin);
                }
                Entry::Occupied(entry) => {
                    entry.into_mut().merge_state(&bin.into_state()?, shape)?;
                }
            }
        }
        Ok(())
    }

    /// The running group failed: its rows go and the committed windows it
    /// closed come back; returns their ends.
    pub fn roll_back(&mut self, shape: &BinShape) -> Result<Vec<i64>> {
        self.staged.clear();
        let mut restored = Vec::new();
        for (end, state) in std::mem::take(&mut self.closed) {
            let mut bin = WindowBin::new(shape)?;
            bin.merge_state(&state, shape)?;
            self.committed.insert(end, bin);
            restored.push(end);
        }
        Ok(restored)
    }

    pub fn memory_bytes(&self) -> usize {
        let bins = self.committed.values().chain(self.staged.values());
        let closed = self.closed.iter().map(|(_, state)| state.memory_bytes());
        bins.map(WindowBin::memory_bytes).sum::<usize>() + closed.sum::<usize>()
    }
}

/// Takes the bins ending at or before `end` out of `bins`.
fn take_through(bins: &mut Bins, end: i64) -> Bins {
    let later = bins.split_off(&end.saturating_add(1));
    std::mem::replace(bins, later)
}

pub fn bin_at<'a>(bins: &'a mut Bins, end: i64, shape: &BinShape) -> Result<&'a mut WindowBin> {
    Ok(match bins.entry(end) {
        Entry::Occupied(entry) => entry.into_mut(),
        Entry::Vacant(entry) => entry.insert(WindowBin::new(shape)?),
    })
}
