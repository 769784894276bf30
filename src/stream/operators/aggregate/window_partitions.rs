//! A window aggregate's bins split by key into partitions (`parallelism`):
//! a group lives in the partition its key hashes to, each partition has
//! its own bins by window end, and each works on its share of a batch on
//! its own worker thread while the operator goes on with the next batch
//! (`partition_workers`). A checkpoint entry holds a window's groups from
//! all partitions together, so a restore may use any number of partitions.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, UInt32Array};
use datafusion::arrow::compute::{concat, take};
use datafusion::common::HashMap;

use super::state::{decode_state, encode_state};
use super::window_bin::{checkpointed_keys, first_bounds, BinRows, BinShape};
use super::window_staging::{bin_at, StagedBins};
use crate::error::{Result, WeirError};
use crate::stream::parallelism::{partition_of_rows, ROWS_FOR_THREADS};
use crate::stream::partition_workers::Partitioned;

/// A batch's argument columns and FILTER mask for one call.
pub type Arguments = (
    Vec<ArrayRef>,
    Option<datafusion::arrow::array::BooleanArray>,
);

pub struct WindowPartitions {
    partitions: Partitioned<StagedBins, Outcome>,
}

/// What a partition reports when a job is done.
pub enum Outcome {
    /// A batch was added: the ends of the windows it changed.
    Added(Vec<i64>),
    /// Windows closed: the close's number, the partition, each window
    /// that partition had (its end, key columns, value columns), and the
    /// earliest end it still holds.
    Closed {
        close: u64,
        partition: usize,
        windows: Vec<ClosedWindow>,
        remaining: Option<i64>,
    },
    /// The write group's bins joined the committed ones.
    Committed,
}

/// A closed window's rows from one partition: end, key columns, values.
pub type ClosedWindow = (i64, Vec<ArrayRef>, Vec<ArrayRef>);

/// The on-time rows of a batch: the keys bins intern, the window bounds'
/// columns, aggregate arguments, and each row's window end (None: late,
/// or in no window).
#[derive(Clone)]
pub struct BatchColumns {
    pub keys: Vec<ArrayRef>,
    pub bounds: Vec<ArrayRef>,
    pub arguments: Vec<Arguments>,
    pub ends: Arc<Vec<Option<i64>>>,
}

impl WindowPartitions {
    pub fn new(partitions: usize) -> Self {
        let bins = (0..partitions.max(1))
            .map(|_| StagedBins::default())
            .collect();
        WindowPartitions {
            partitions: Partitioned::new(bins),
        }
    }

    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Hands each partition its share of `batch`; they add it while the
    /// caller goes on, and report `Outcome::Added`.
    pub fn update(&mut self, shape: &Arc<BinShape>, batch: BatchColumns) -> Result<()> {
        let rows = batch.ends.len();
        let small = rows < ROWS_FOR_THREADS;
        for (index, members) in self.split(&batch.keys, rows)?.into_iter().enumerate() {
            if members.as_ref().is_some_and(Vec::is_empty) {
                continue;
            }
            let (shape, batch) = (shape.clone(), batch.clone());
            self.partitions.send(index, small, move |bins| {
                add(bins, members.as_deref(), &shape, &batch).map(Outcome::Added)
            })?;
        }
        Ok(())
    }

    /// Each partition's rows of the batch, in order (None: all of them).
    fn split(&self, keys: &[ArrayRef], rows: usize) -> Result<Vec<Option<Vec<u32>>>> {
        let count = self.partitions.len();
        if count == 1 {
            return Ok(vec![None]);
        }
        let partition_of = partition_of_rows(keys, rows, count)?;
        let mut members: Vec<Vec<u32>> = (0..count)
            .map(|_| Vec::with_capacity(rows / count + 1))
            .collect();
        for (row, partition) in partition_of.into_iter().enumerate() {
            members[partition].push(row as u32);
        }
        Ok(members.into_iter().map(Some).collect())
    }

    /// Has every partition close its windows ending at or before
    /// `watermark_ns`, after the batches handed over before; each reports
    /// `Outcome::Closed` with number `close`.
    pub fn close(&mut self, shape: &Arc<BinShape>, close: u64, watermark_ns: i64) -> Result<()> {
        for partition in 0..self.partitions.len() {
            let shape = shape.clone();
            self.partitions.send(partition, true, move |bins| {
                let (windows, remaining) = bins.close(&shape, watermark_ns)?;
                Ok(Outcome::Closed {
                    close,
                    partition,
                    windows,
                    remaining,
                })
            })?;
        }
        Ok(())
    }

    /// The write group committed: each partition's staged bins join its
    /// committed ones (reported as `Outcome::Committed`).
    pub fn commit(&mut self, shape: &Arc<BinShape>) -> Result<()> {
        for partition in 0..self.partitions.len() {
            let shape = shape.clone();
            self.partitions.send(partition, true, move |bins| {
                bins.commit(&shape).map(|()| Outcome::Committed)
            })?;
        }
        Ok(())
    }

    /// The write group failed: waits for the partitions (what they
    /// report, errors included, belongs to the failed group), then drops
    /// its rows and puts back the committed windows it closed; their ends.
    pub fn roll_back(&mut self, shape: &BinShape) -> Result<Vec<i64>> {
        let _ = self.partitions.finished(true)?;
        let mut restored = Vec::new();
        for mut bins in self.partitions.states()? {
            restored.extend(bins.roll_back(shape)?);
        }
        Ok(restored)
    }

    /// What the partitions finished since the last call; when `block`,
    /// after they finished everything handed over.
    pub fn finished(&mut self, block: bool) -> Result<Vec<Outcome>> {
        self.partitions.finished(block)?.into_iter().collect()
    }

    /// The checkpoint entry of the window ending at `end` (None if no
    /// partition has it): its groups from every partition. Take every
    /// outcome first (`finished(true)`).
    pub fn checkpoint(&mut self, shape: &BinShape, end: i64) -> Result<Option<Vec<u8>>> {
        let mut keys: Vec<BinaryArray> = Vec::new();
        let mut states: Vec<Vec<ArrayRef>> = Vec::new();
        let mut partitions = self.partitions.states()?;
        for bins in partitions.iter_mut() {
            if let Some(bin) = bins.committed().get_mut(&end) {
                let (bin_keys, bin_states) = bin.checkpoint_columns(shape)?;
                keys.push(bin_keys);
                states.push(bin_states);
            }
        }
        drop(partitions);
        if keys.len() <= 1 {
            return keys
                .pop()
                .zip(states.pop())
                .map(|(keys, states)| encode_state(keys, states))
                .transpose();
        }
        let key_arrays: Vec<&dyn Array> = keys.iter().map(|k| k as &dyn Array).collect();
        let keys = concat(&key_arrays)?;
        let keys = keys
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| WeirError::internal("checkpoint keys are not binary"))?
            .clone();
        let columns = (0..states[0].len())
            .map(|column| {
                let parts: Vec<&dyn Array> = states.iter().map(|s| s[column].as_ref()).collect();
                Ok(concat(&parts)?)
            })
            .collect::<Result<Vec<_>>>()?;
        encode_state(keys, columns).map(Some)
    }

    /// Loads a checkpointed window, each group into its partition.
    pub fn restore(&mut self, shape: &BinShape, end: i64, value: &[u8]) -> Result<()> {
        let count = self.partitions.len();
        let mut partitions = self.partitions.states()?;
        for batch in decode_state(&shape.calls, value)? {
            let (keys, bounds) = shape.split_keys(checkpointed_keys(&batch, shape)?);
            let bounds = first_bounds(&bounds);
            let states = &batch.columns()[1..];
            let partition_of = partition_of_rows(&keys, batch.num_rows(), count)?;
            for (partition, bins) in partitions.iter_mut().enumerate() {
                let rows: Vec<u32> = (0..batch.num_rows() as u32)
                    .filter(|&row| partition_of[row as usize] == partition)
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let indices = UInt32Array::from(rows);
                let bin = bin_at(bins.committed(), end, shape)?;
                bin.merge(
                    &take_all(&keys, &indices)?,
                    bounds.clone(),
                    &take_all(states, &indices)?,
                    shape,
                )?;
            }
        }
        Ok(())
    }

    /// As measured now; batches still being added may not count yet.
    pub fn memory_bytes(&self) -> usize {
        let partitions = self.partitions.peek();
        partitions.map(|bins| bins.memory_bytes()).sum()
    }
}

/// Adds a partition's rows of a batch (all when `members` is None) to its
/// bins; returns the ends of the windows it changed.
fn add(
    bins: &mut StagedBins,
    members: Option<&[u32]>,
    shape: &BinShape,
    batch: &BatchColumns,
) -> Result<Vec<i64>> {
    let rows = batch.ends.len();
    let by_end = match members {
        Some(members) => rows_by_end(members.iter().copied(), &batch.ends),
        None => rows_by_end(0..rows as u32, &batch.ends),
    };
    let changed = by_end.iter().map(|(end, _)| *end).collect();
    for (end, members) in by_end {
        // Every row of a window has its bounds: the first row's will do.
        let first = members[0] as usize;
        let bounds = batch.bounds.iter().map(|c| c.slice(first, 1)).collect();
        let taken;
        let (keys, arguments) = if members.len() == rows {
            // Every row, in order: no copy.
            (batch.keys.as_slice(), batch.arguments.as_slice())
        } else {
            let indices = UInt32Array::from(members);
            taken = (
                take_all(&batch.keys, &indices)?,
                arguments_at(&batch.arguments, &indices)?,
            );
            (taken.0.as_slice(), taken.1.as_slice())
        };
        bins.staged_bin(end, shape)?.update(BinRows {
            keys,
            arguments,
            bounds,
        })?;
    }
    Ok(changed)
}

/// Rows grouped by window end, in row order within each end. A batch
/// touches few windows (one or two for TUMBLE, five or six for a 2 s / 10
/// s HOP, whose rows take turns), so a short list is searched first and
/// a hash map only once there are many.
fn rows_by_end(rows: impl Iterator<Item = u32>, ends: &[Option<i64>]) -> Vec<(i64, Vec<u32>)> {
    const LISTED: usize = 16;
    let mut groups: Vec<(i64, Vec<u32>)> = Vec::new();
    let mut positions: HashMap<i64, usize> = HashMap::new();
    for row in rows {
        let Some(end) = ends[row as usize] else {
            continue;
        };
        let listed = groups[..groups.len().min(LISTED)]
            .iter()
            .position(|(listed, _)| *listed == end);
        let position = match listed {
            Some(position) => position,
            None if groups.len() < LISTED => {
                groups.push((end, Vec::new()));
                groups.len() - 1
            }
            None => *positions.entry(end).or_insert_with(|| {
                groups.push((end, Vec::new()));
                groups.len() - 1
            }),
        };
        groups[position].1.push(row);
    }
    groups
}

/// Argument columns and FILTER masks of the rows at `indices`.
fn arguments_at(arguments: &[Arguments], indices: &UInt32Array) -> Result<Vec<Arguments>> {
    arguments
        .iter()
        .map(|(columns, mask)| {
            let columns = take_all(columns, indices)?;
            let mask = match mask {
                Some(mask) => Some(
                    datafusion::arrow::array::AsArray::as_boolean(&take(mask, indices, None)?)
                        .clone(),
                ),
                None => None,
            };
            Ok((columns, mask))
        })
        .collect()
}

fn take_all(columns: &[ArrayRef], indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    columns
        .iter()
        .map(|column| Ok(take(column.as_ref(), indices, None)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_grouped_by_end_in_order_with_few_or_many_ends() {
        let ends = vec![Some(20), Some(10), None, Some(20), Some(10)];
        let groups = rows_by_end(0..5, &ends);
        assert_eq!(groups, vec![(20, vec![0, 3]), (10, vec![1, 4])]);
        // Past the listed ends, a map finds the rest.
        let ends: Vec<Option<i64>> = (0..100).map(|row| Some(row % 40)).collect();
        let groups = rows_by_end(0..100, &ends);
        assert_eq!(groups.len(), 40);
        for (end, rows) in groups {
            let expected: Vec<u32> = (0..100).filter(|row| row % 40 == end as u32).collect();
            assert_eq!(rows, expected, "end {end}");
        }
    }
}
