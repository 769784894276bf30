//! How the row-level aggregate undoes a failed write group: before the
//! group first changes a group's accumulators, their state is kept (the
//! same `snapshot` a checkpoint takes, so the live accumulators go on
//! exactly as a restored one would); bins the group closed are kept
//! instead of dropped. Undoing rebuilds the touched groups from what was
//! kept and puts the closed bins back: work in proportion to what the
//! group touched.

use std::collections::BTreeMap;

use datafusion::common::hash_map::EntryRef;
use datafusion::common::HashMap;

use datafusion::arrow::array::ArrayRef;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use super::calls::{new_accumulators, AggregateCall};
use super::state::snapshot_all;
use super::Bin;
use crate::error::Result;

/// Each call's accumulator state (None: the group did not exist yet).
type GroupStates = Option<Vec<Vec<ScalarValue>>>;

/// What a write group changed in an aggregate's bins.
#[derive(Default)]
pub struct AggregateUndo {
    /// Per group touched (its window end, big-endian, then its key): each
    /// call's state before the write group (None: the group did not
    /// exist). Looked up through `scratch`, so finding a group already
    /// kept allocates nothing, and cleared in place at commit, so the
    /// table is not built again for every write group.
    groups: HashMap<Vec<u8>, GroupStates>,
    scratch: Vec<u8>,
    /// Bins the group dropped (closed past their lateness).
    dropped: BTreeMap<i64, Bin>,
    /// Whether the global group's row was still owed.
    pub owed_empty_row: Option<bool>,
}

impl AggregateUndo {
    /// Keeps the state of group `key` of the bin ending at `end` before
    /// the group running now first changes it.
    pub fn before_change(
        &mut self,
        (end, key): (i64, &[u8]),
        accumulators: Option<&mut Vec<Box<dyn Accumulator>>>,
        calls: &[AggregateCall],
    ) -> Result<()> {
        self.scratch.clear();
        self.scratch.extend_from_slice(&end.to_be_bytes());
        self.scratch.extend_from_slice(key);
        let EntryRef::Vacant(entry) = self.groups.entry_ref(self.scratch.as_slice()) else {
            return Ok(());
        };
        let states = accumulators
            .map(|accumulators| snapshot_all(calls, accumulators))
            .transpose()?;
        entry.insert(states);
        Ok(())
    }

    /// The write group committed: nothing to undo (the table's room kept).
    pub fn clear(&mut self) {
        self.groups.clear();
        self.dropped.clear();
        self.owed_empty_row = None;
    }

    pub fn dropped(&mut self, end: i64, bin: Bin) {
        self.dropped.insert(end, bin);
    }

    /// Puts `bins` back as they were before the group; returns the ends
    /// of the bins it touched (to be checkpointed again).
    pub fn undo(self, bins: &mut BTreeMap<i64, Bin>, calls: &[AggregateCall]) -> Result<Vec<i64>> {
        let mut touched: Vec<i64> = self.dropped.keys().copied().collect();
        bins.extend(self.dropped);
        for (mut group, states) in self.groups {
            let key = group.split_off(size_of::<i64>());
            let end = i64::from_be_bytes(group.try_into().unwrap_or_default());
            touched.push(end);
            let bin = bins.entry(end).or_default();
            match states {
                None => {
                    bin.remove(&key);
                }
                Some(states) => {
                    bin.insert(key, restored(calls, states)?);
                }
            }
        }
        Ok(touched)
    }
}

/// Fresh accumulators merged from each call's kept state.
pub(super) fn restored(
    calls: &[AggregateCall],
    states: Vec<Vec<ScalarValue>>,
) -> Result<Vec<Box<dyn Accumulator>>> {
    let mut accumulators = new_accumulators(calls)?;
    for (accumulator, state) in accumulators.iter_mut().zip(states) {
        let arrays = state
            .iter()
            .map(ScalarValue::to_array)
            .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
        accumulator.merge_batch(&arrays)?;
    }
    Ok(accumulators)
}
