//! One window's groups (or the one bin of an aggregate without a window)
//! for a view that emits on update: DataFusion's `GroupValues` interns the
//! group keys; each call's typed `GroupStates` and a row count per group
//! hold the rest. A batch's changes are worked out for the groups it
//! touched only: their values before and after it, vectorised, and a
//! retraction and a new row for each group whose value changed.
//!
//! A group whose rows are all gone stays interned, empty (`GroupValues`
//! cannot remove a key), and leaves the view; a checkpoint writes only the
//! groups with rows, and rebuilds the bin from them when the empty ones
//! outnumber them.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, BooleanArray, UInt32Array};
use datafusion::arrow::compute::kernels::cmp::distinct;
use datafusion::arrow::compute::{interleave, or, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::RowConverter;
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use super::calls::{AggregateCall, Arguments};
use super::group_states::{group_states, GroupStates};
use super::state::{decode_state, encode_rows, state_widths};
use super::updating_spill::BinSpill;
use crate::error::{Result, WeirError};

/// What every bin of one operator shares.
pub struct UpdatingShape {
    /// The group columns.
    pub key_schema: SchemaRef,
    /// Group columns to the checkpoint's row format.
    pub converter: RowConverter,
    pub calls: Vec<AggregateCall>,
    /// Its input takes rows back: the last call (hidden) counts a group's
    /// rows, and restores the row counts.
    pub retracting: bool,
}

/// A batch's rows of one bin.
pub struct BinBatch<'a> {
    pub keys: &'a [ArrayRef],
    pub arguments: &'a [Arguments],
    pub diffs: Option<&'a [i64]>,
}

/// What a batch changed in the view: rows (each taken from the batch row
/// `key_rows[i]` for its group columns, `values` for the rest) and diffs.
pub struct BinChanges {
    pub key_rows: UInt32Array,
    pub values: Vec<ArrayRef>,
    pub diffs: Vec<i64>,
}

pub struct UpdatingBin {
    keys: Box<dyn GroupValues>,
    /// Each group's key in row format, in group order (`key_ends[g]` is
    /// where group g's ends): what a checkpoint writes.
    key_rows: Vec<u8>,
    key_ends: Vec<usize>,
    states: Vec<Box<dyn GroupStates>>,
    /// Per group: its rows (0: not in the view).
    rows: Vec<i64>,
    /// Per group: whether the batch being applied touched it.
    touched: Vec<bool>,
    /// Per group: whether the write group running now saved it.
    saved: Vec<bool>,
    /// The groups the write group saved, with their rows before it.
    saved_rows: Vec<(usize, i64)>,
    /// Scratch: each batch row's group.
    group_indices: Vec<usize>,
    /// Per group: whether it changed since it was last written out
    /// (`take_dirty`, for a bin that spills).
    dirty: Vec<bool>,
    dirty_groups: Vec<u32>,
}

impl UpdatingBin {
    pub fn new(shape: &UpdatingShape) -> Result<Self> {
        let states = shape
            .calls
            .iter()
            .map(|call| {
                group_states(call)?
                    .ok_or_else(|| WeirError::internal("an aggregate call has no typed state"))
            })
            .collect::<Result<_>>()?;
        Ok(UpdatingBin {
            keys: new_group_values(Arc::clone(&shape.key_schema), &GroupOrdering::None)?,
            key_rows: Vec::new(),
            key_ends: Vec::new(),
            states,
            rows: Vec::new(),
            touched: Vec::new(),
            saved: Vec::new(),
            saved_rows: Vec::new(),
            group_indices: Vec::new(),
            dirty: Vec::new(),
            dirty_groups: Vec::new(),
        })
    }

    /// Interns `keys`, making room for new groups; their row-format keys
    /// are kept. Returns the new groups.
    fn intern(&mut self, keys: &[ArrayRef], shape: &UpdatingShape) -> Result<Range<usize>> {
        let before = self.keys.len();
        self.keys.intern(keys, &mut self.group_indices)?;
        let total = self.keys.len();
        if total == before {
            return Ok(before..total);
        }
        // The first row of each new group (groups are numbered in order
        // of first appearance).
        let mut firsts = Vec::with_capacity(total - before);
        for (row, &group) in self.group_indices.iter().enumerate() {
            if group == before + firsts.len() {
                firsts.push(row as u32);
            }
        }
        let firsts = UInt32Array::from(firsts);
        let columns = keys
            .iter()
            .map(|column| Ok(take(column.as_ref(), &firsts, None)?))
            .collect::<Result<Vec<_>>>()?;
        for row in shape.converter.convert_columns(&columns)?.iter() {
            self.key_rows.extend_from_slice(row.data());
            self.key_ends.push(self.key_rows.len());
        }
        for states in &mut self.states {
            states.resize(total);
        }
        self.rows.resize(total, 0);
        self.touched.resize(total, false);
        self.saved.resize(total, false);
        self.dirty.resize(total, false);
        Ok(before..total)
    }

    /// Applies a batch's rows (keeping what the write group changed, to
    /// undo it, when `keeps_undo`); returns the view's changes. Groups new
    /// to memory are first read back from `spill`, if it has let any go.
    pub fn apply(
        &mut self,
        batch: BinBatch<'_>,
        shape: &UpdatingShape,
        keeps_undo: bool,
        spill: Option<&BinSpill>,
    ) -> Result<BinChanges> {
        let new_groups = self.intern(batch.keys, shape)?;
        let indices = std::mem::take(&mut self.group_indices);
        if let Some(spill) = spill {
            spill.read_back(self, new_groups, shape)?;
        }
        // The groups touched, in order of first row, and that row.
        let (mut groups, mut firsts) = (Vec::new(), Vec::new());
        for (row, &group) in indices.iter().enumerate() {
            if !std::mem::replace(&mut self.touched[group], true) {
                groups.push(group as u32);
                firsts.push(row as u32);
                if !std::mem::replace(&mut self.dirty[group], true) {
                    self.dirty_groups.push(group as u32);
                }
            }
        }
        if keeps_undo {
            for &group in &groups {
                self.save(group as usize);
            }
        }
        let shown_before: Vec<bool> = groups.iter().map(|&g| self.rows[g as usize] > 0).collect();
        let before = self.evaluate(&groups)?;
        for (row, &group) in indices.iter().enumerate() {
            self.rows[group] += batch.diffs.map_or(1, |diffs| diffs[row]);
        }
        let updated = self.states.iter_mut().zip(batch.arguments).try_for_each(
            |(states, (columns, mask))| {
                states.update(columns, &indices, batch.diffs, mask.as_ref())
            },
        );
        self.group_indices = indices;
        for &group in &groups {
            self.touched[group as usize] = false;
        }
        if !keeps_undo {
            self.forget();
        }
        updated?;
        self.empty_groups(&groups)?;
        let after = self.evaluate(&groups)?;
        changes(
            &groups,
            &firsts,
            shown_before,
            |g| self.rows[g] > 0,
            (before, after),
        )
    }

    /// Empties the groups whose rows are all gone, so a group that comes
    /// back starts afresh.
    fn empty_groups(&mut self, groups: &[u32]) -> Result<()> {
        for &group in groups {
            let group = group as usize;
            match self.rows[group] {
                0 => self
                    .states
                    .iter_mut()
                    .for_each(|states| states.reset(group)),
                rows if rows < 0 => {
                    return Err(WeirError::internal(
                        "an aggregate took back a row its group does not hold",
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        self.states
            .iter()
            .map(|states| states.evaluate(groups))
            .collect()
    }

    /// Keeps a group as it was before the write group first changes it.
    fn save(&mut self, group: usize) {
        if std::mem::replace(&mut self.saved[group], true) {
            return;
        }
        self.saved_rows.push((group, self.rows[group]));
        for states in &mut self.states {
            states.save(group);
        }
    }

    /// Bytes of what the write group running now would undo.
    pub fn undo_bytes(&self) -> usize {
        let states: usize = self.states.iter().map(|states| states.undo_bytes()).sum();
        states + self.saved_rows.len() * size_of::<(usize, i64)>()
    }

    /// Whether the write group running now changed the bin.
    pub fn changed_in_write_group(&self) -> bool {
        !self.saved_rows.is_empty()
    }

    /// Puts back every group the write group changed.
    pub fn undo(&mut self) {
        for (group, rows) in self.saved_rows.drain(..).rev() {
            self.rows[group] = rows;
            self.saved[group] = false;
        }
        for states in &mut self.states {
            states.undo();
        }
    }

    /// The write group committed.
    pub fn forget(&mut self) {
        for (group, _) in self.saved_rows.drain(..) {
            self.saved[group] = false;
        }
        for states in &mut self.states {
            states.forget();
        }
    }

    /// The bin's checkpoint entry: its groups with rows, keys in row
    /// format, then each call's state columns (the row-level aggregate's
    /// format). A bin mostly of emptied groups is rebuilt from it.
    pub fn checkpoint(&mut self, shape: &UpdatingShape) -> Result<Vec<u8>> {
        let live: Vec<u32> = (0..self.rows.len() as u32)
            .filter(|&group| self.rows[group as usize] > 0)
            .collect();
        let keys = BinaryArray::from_iter_values(live.iter().map(|&group| self.key_row(group)));
        let mut states = Vec::new();
        for group_states in &self.states {
            states.extend(group_states.state(&live)?);
        }
        let value = encode_rows(keys.clone(), states.clone(), &shape.calls)?;
        let emptied = self.rows.len() - live.len();
        if emptied > live.len() + 1024 && !self.changed_in_write_group() {
            let rows: Vec<i64> = live
                .iter()
                .map(|&group| self.rows[group as usize])
                .collect();
            *self = UpdatingBin::new(shape)?;
            self.merge(&keys, &states, Some(&rows), shape)?;
            self.forget();
        }
        Ok(value)
    }

    pub fn key_row(&self, group: u32) -> &[u8] {
        let group = group as usize;
        let start = if group == 0 {
            0
        } else {
            self.key_ends[group - 1]
        };
        &self.key_rows[start..self.key_ends[group]]
    }

    /// The bin a checkpoint entry (`checkpoint`, or the row-level
    /// aggregate's) holds.
    pub fn restore(value: &[u8], shape: &UpdatingShape) -> Result<Self> {
        let mut bin = UpdatingBin::new(shape)?;
        for batch in decode_state(&shape.calls, value)? {
            let keys = batch.column(0).as_any().downcast_ref::<BinaryArray>();
            let keys = keys.ok_or_else(|| WeirError::internal("a bin's keys are not binary"))?;
            bin.merge(keys, &batch.columns()[1..], None, shape)?;
        }
        bin.forget();
        Ok(bin)
    }

    /// Merges groups in: keys in row format, each call's state columns
    /// and each group's rows (None: from the hidden row count when the
    /// input retracts, else one). Not logged for `undo`.
    pub fn merge(
        &mut self,
        keys: &BinaryArray,
        states: &[ArrayRef],
        rows: Option<&[i64]>,
        shape: &UpdatingShape,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let parser = shape.converter.parser();
        let columns = shape
            .converter
            .convert_rows(keys.iter().flatten().map(|key| parser.parse(key)))?;
        self.intern(&columns, shape)?;
        let indices = std::mem::take(&mut self.group_indices);
        let mut column = 0;
        for (group_states, width) in self.states.iter_mut().zip(state_widths(&shape.calls)?) {
            group_states.merge(&states[column..column + width], &indices)?;
            column += width;
        }
        let counts = match (rows, shape.retracting) {
            (Some(rows), _) => Some(rows.to_vec()),
            (None, true) => Some(self.hidden_row_counts(&indices)?),
            (None, false) => None,
        };
        for (row, &group) in indices.iter().enumerate() {
            self.rows[group] = counts.as_ref().map_or(1, |counts| counts[row]);
        }
        self.group_indices = indices;
        Ok(())
    }

    /// The hidden last call's count of each of `groups`.
    fn hidden_row_counts(&self, groups: &[usize]) -> Result<Vec<i64>> {
        let groups: Vec<u32> = groups.iter().map(|&group| group as u32).collect();
        let last = self
            .states
            .last()
            .ok_or_else(|| WeirError::internal("a retracting aggregate lacks its row count"))?;
        let counts = last.evaluate(&groups)?;
        let counts = datafusion::arrow::array::AsArray::as_primitive_opt::<
            datafusion::arrow::datatypes::Int64Type,
        >(counts.as_ref())
        .ok_or_else(|| WeirError::internal("a retracting aggregate's row count is not a count"))?;
        Ok(counts.values().to_vec())
    }

    /// The groups changed since the last call (or `mark_all_dirty`).
    pub fn take_dirty(&mut self) -> Vec<u32> {
        for &group in &self.dirty_groups {
            self.dirty[group as usize] = false;
        }
        std::mem::take(&mut self.dirty_groups)
    }

    /// Every group counts as changed (restored from a whole-bin entry).
    pub fn mark_all_dirty(&mut self) {
        self.dirty.iter_mut().for_each(|dirty| *dirty = true);
        self.dirty_groups = (0..self.dirty.len() as u32).collect();
    }

    /// The groups the write group running now saved (to undo).
    pub fn saved_groups(&self) -> Vec<u32> {
        self.saved_rows
            .iter()
            .map(|&(group, _)| group as u32)
            .collect()
    }

    /// Each of `groups`' rows, and every call's state columns for them.
    pub fn group_states(&self, groups: &[u32]) -> Result<(Vec<i64>, Vec<ArrayRef>)> {
        let rows = groups
            .iter()
            .map(|&group| self.rows[group as usize])
            .collect();
        let mut states = Vec::new();
        for group_states in &self.states {
            states.extend(group_states.state(groups)?);
        }
        Ok((rows, states))
    }

    pub fn memory_bytes(&self) -> usize {
        let states: usize = self.states.iter().map(|states| states.size()).sum();
        self.keys.size()
            + states
            + self.key_rows.capacity()
            + self.key_ends.capacity() * size_of::<usize>()
            + self.rows.capacity() * size_of::<i64>()
            + self.touched.capacity()
            + self.saved.capacity()
            + self.saved_rows.capacity() * size_of::<(usize, i64)>()
            + self.group_indices.capacity() * size_of::<usize>()
            + self.dirty.capacity()
            + self.dirty_groups.capacity() * size_of::<u32>()
    }
}

/// The view's changes for the touched `groups` (first seen at batch rows
/// `firsts`): per group whose row changed, its old row retracted (if it
/// was shown) and its new row (if still shown), side by side.
fn changes(
    groups: &[u32],
    firsts: &[u32],
    shown_before: Vec<bool>,
    shown_after: impl Fn(usize) -> bool,
    (before, after): (Vec<ArrayRef>, Vec<ArrayRef>),
) -> Result<BinChanges> {
    let count = groups.len();
    let mut differs = BooleanArray::from(vec![false; count]);
    for (old, new) in before.iter().zip(&after) {
        differs = or(&differs, &distinct(old, new)?)?;
    }
    let (mut key_rows, mut picks, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    for (index, &group) in groups.iter().enumerate() {
        let (was, is) = (shown_before[index], shown_after(group as usize));
        if was == is && (!was || !differs.value(index)) {
            continue;
        }
        if was {
            key_rows.push(firsts[index]);
            picks.push((0, index));
            diffs.push(-1);
        }
        if is {
            key_rows.push(firsts[index]);
            picks.push((1, index));
            diffs.push(1);
        }
    }
    let values = before
        .iter()
        .zip(&after)
        .map(|(old, new)| Ok(interleave(&[old.as_ref(), new.as_ref()], &picks)?))
        .collect::<Result<_>>()?;
    Ok(BinChanges {
        key_rows: UInt32Array::from(key_rows),
        values,
        diffs,
    })
}
