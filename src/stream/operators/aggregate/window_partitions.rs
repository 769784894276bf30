//! A window aggregate's bins split by key into partitions (`parallelism`):
//! a group lives in the partition its key hashes to, each partition has
//! its own bins by window end, and a batch's rows are added to every
//! partition at once, one thread per partition. A checkpoint entry holds a
//! window's groups from all partitions together, so a restore may use any
//! number of partitions.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, UInt32Array};
use datafusion::arrow::compute::{concat, take};

use super::late::LateRow;
use super::state::{decode_state, encode_state};
use super::window_bin::{checkpointed_keys, BinRows, BinShape, WindowBin};
use crate::error::{Result, WeirError};
use crate::stream::parallelism::{for_each_partition, partition_of_rows, ROWS_FOR_THREADS};

/// A batch's argument columns and FILTER mask for one call.
pub type Arguments = (
    Vec<ArrayRef>,
    Option<datafusion::arrow::array::BooleanArray>,
);

pub struct WindowPartitions {
    partitions: Vec<BTreeMap<i64, WindowBin>>,
}

impl WindowPartitions {
    pub fn new(partitions: usize) -> Self {
        WindowPartitions {
            partitions: (0..partitions.max(1)).map(|_| BTreeMap::new()).collect(),
        }
    }

    /// Adds a batch's rows: `assign` sorts a partition's rows into on-time
    /// rows by window end and late rows. Returns the late rows of all
    /// partitions, in row order, and the ends of the windows that changed.
    pub fn update(
        &mut self,
        shape: &BinShape,
        keys: &[ArrayRef],
        arguments: &[Arguments],
        assign: &Assign<'_>,
    ) -> Result<(Vec<LateRow>, Vec<i64>)> {
        let rows = keys.first().map_or(0, |k| k.len());
        let members = self.split(keys, rows)?;
        let batch = BatchColumns {
            keys,
            arguments,
            rows,
        };
        let threaded = rows >= ROWS_FOR_THREADS && self.partitions.len() > 1;
        let pairs = self.partitions.iter_mut().zip(members);
        let outcomes = for_each_partition(pairs, threaded, |(bins, rows)| {
            add(bins, &rows, assign, shape, &batch)
        });
        let (mut late, mut changed) = (Vec::new(), Vec::new());
        for outcome in outcomes {
            let (partition_late, partition_changed) = outcome?;
            late.extend(partition_late);
            changed.extend(partition_changed);
        }
        late.sort_by_key(|row| row.row);
        Ok((late, changed))
    }

    /// Each partition's rows of the batch, in order.
    fn split(&self, keys: &[ArrayRef], rows: usize) -> Result<Vec<Vec<u32>>> {
        let count = self.partitions.len();
        if count == 1 {
            return Ok(vec![(0..rows as u32).collect()]);
        }
        let partition_of = partition_of_rows(keys, rows, count)?;
        let mut members: Vec<Vec<u32>> = (0..count)
            .map(|_| Vec::with_capacity(rows / count))
            .collect();
        for (row, partition) in partition_of.into_iter().enumerate() {
            members[partition].push(row as u32);
        }
        Ok(members)
    }

    /// Takes the bins of windows ending at or before `watermark_ns`, by
    /// end, each window's partitions in order.
    pub fn close(&mut self, watermark_ns: i64) -> BTreeMap<i64, Vec<WindowBin>> {
        let mut closed: BTreeMap<i64, Vec<WindowBin>> = BTreeMap::new();
        for bins in &mut self.partitions {
            let open = bins.split_off(&watermark_ns.saturating_add(1));
            for (end, bin) in std::mem::replace(bins, open) {
                closed.entry(end).or_default().push(bin);
            }
        }
        closed
    }

    /// The checkpoint entry of the window ending at `end` (None if no
    /// partition has it): its groups from every partition.
    pub fn checkpoint(&mut self, shape: &BinShape, end: i64) -> Result<Option<Vec<u8>>> {
        let mut keys: Vec<BinaryArray> = Vec::new();
        let mut states: Vec<Vec<ArrayRef>> = Vec::new();
        for bins in &mut self.partitions {
            if let Some(bin) = bins.get_mut(&end) {
                let (bin_keys, bin_states) = bin.checkpoint_columns(shape)?;
                keys.push(bin_keys);
                states.push(bin_states);
            }
        }
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
        for batch in decode_state(&shape.calls, value)? {
            let keys = checkpointed_keys(&batch, shape)?;
            let states = &batch.columns()[1..];
            let partition_of = partition_of_rows(&keys, batch.num_rows(), count)?;
            for (partition, bins) in self.partitions.iter_mut().enumerate() {
                let rows: Vec<u32> = (0..batch.num_rows() as u32)
                    .filter(|&row| partition_of[row as usize] == partition)
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let indices = UInt32Array::from(rows);
                let bin = bin_at(bins, end, shape)?;
                bin.merge(
                    &take_all(&keys, &indices)?,
                    &take_all(states, &indices)?,
                    shape,
                )?;
            }
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
        let bins = self.partitions.iter().flat_map(BTreeMap::values);
        bins.map(WindowBin::memory_bytes).sum()
    }
}

/// A batch's group keys and aggregate arguments, shared by the partitions.
struct BatchColumns<'a> {
    keys: &'a [ArrayRef],
    arguments: &'a [Arguments],
    rows: usize,
}

/// Sorts rows (indices into the batch) into on-time rows by window end, and
/// late rows.
pub type Assign<'a> = dyn Fn(&[u32]) -> Result<Assigned> + Sync + 'a;

/// On-time rows by window end, and late rows.
pub type Assigned = (BTreeMap<i64, Vec<u32>>, Vec<LateRow>);

/// A partition's late rows and the ends of the windows it changed.
type Added = (Vec<LateRow>, Vec<i64>);

/// Adds one partition's share of a batch to its bins.
fn add(
    bins: &mut BTreeMap<i64, WindowBin>,
    rows: &[u32],
    assign: &Assign<'_>,
    shape: &BinShape,
    batch: &BatchColumns,
) -> Result<Added> {
    if rows.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let (by_end, late) = assign(rows)?;
    let changed = by_end.keys().copied().collect();
    for (end, members) in by_end {
        let taken;
        let (keys, arguments) = if members.len() == batch.rows {
            // Every row, in order: no copy.
            (batch.keys, batch.arguments)
        } else {
            let indices = UInt32Array::from(members);
            taken = (
                take_all(batch.keys, &indices)?,
                arguments_at(batch.arguments, &indices)?,
            );
            (taken.0.as_slice(), taken.1.as_slice())
        };
        bin_at(bins, end, shape)?.update(BinRows { keys, arguments })?;
    }
    Ok((late, changed))
}

fn bin_at<'a>(
    bins: &'a mut BTreeMap<i64, WindowBin>,
    end: i64,
    shape: &BinShape,
) -> Result<&'a mut WindowBin> {
    Ok(match bins.entry(end) {
        std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
        std::collections::btree_map::Entry::Vacant(entry) => entry.insert(WindowBin::new(shape)?),
    })
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
