//! How many partitions a keyed operator splits its groups into, each
//! worked on by its own worker thread (`partition_workers`; `--parallelism`;
//! by default one per core for session aggregates and one for window
//! aggregates, as measured on 2 cores, docs/benchmarks.md). Set once at
//! start, before any view is planned; results do not depend on it (a group
//! lives in exactly one partition, and checkpoints hold groups, not
//! partitions, so a restart may change it).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::ArrayRef;
use datafusion::common::hash_utils::{create_hashes, RandomState};

use crate::error::Result;

/// The most partitions a setting may ask for.
pub const MAX_PARALLELISM: usize = 64;

/// Below this many rows a batch is split on the calling thread alone:
/// waking the partition threads would cost more than it saves.
pub const ROWS_FOR_THREADS: usize = 2048;

/// The explicit setting; 0 when not set (each operator kind's default).
static PARALLELISM: AtomicUsize = AtomicUsize::new(0);

pub fn set_parallelism(partitions: usize) {
    PARALLELISM.store(partitions.clamp(1, MAX_PARALLELISM), Ordering::Relaxed);
}

fn setting() -> Option<usize> {
    match PARALLELISM.load(Ordering::Relaxed) {
        0 => None,
        partitions => Some(partitions),
    }
}

/// A window aggregate's partitions: the setting, else one. Measured on 2
/// cores, its per-row work is too small for the split to pay (keyed
/// TUMBLE 22 % slower at 2, HOP even; docs/benchmarks.md).
pub fn window_partitions() -> usize {
    setting().unwrap_or(1)
}

/// A session aggregate's partitions: the setting, else one per core (its
/// per-row work pays for the split: keyed SESSION +24 % at 2 on 2 cores).
pub fn session_partitions() -> usize {
    setting().unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(1, |cores| cores.get())
            .min(MAX_PARALLELISM)
    })
}

/// The most partitions any operator uses.
pub fn most_partitions() -> usize {
    window_partitions().max(session_partitions())
}

/// The partition of each row's key: a fixed hash of the key columns, so a
/// key always lands in the same partition.
pub fn partition_of_rows(keys: &[ArrayRef], rows: usize, partitions: usize) -> Result<Vec<usize>> {
    if partitions == 1 || keys.is_empty() {
        return Ok(vec![0; rows]);
    }
    let mut hashes = vec![0u64; rows];
    create_hashes(keys, &RandomState::with_seed(0x7765_6972), &mut hashes)?;
    Ok(hashes
        .into_iter()
        .map(|hash| (hash % partitions as u64) as usize)
        .collect())
}

/// The partition of a key given as bytes (a row-format key): a fixed hash,
/// so a key always lands in the same partition within a process, which
/// is all a restore needs (checkpoints hold keys, not partitions).
pub fn partition_of_key(key: &[u8], partitions: usize) -> usize {
    if partitions == 1 {
        return 0;
    }
    (RandomState::with_seed(0x7765_6972).hash_one(key) % partitions as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use std::sync::Arc;

    #[test]
    fn a_key_always_lands_in_the_same_partition() {
        let keys: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![7, 8, 7, 9, 8, 7]))];
        let partitions = partition_of_rows(&keys, 6, 4).unwrap();
        assert_eq!(partitions[0], partitions[2]);
        assert_eq!(partitions[0], partitions[5]);
        assert_eq!(partitions[1], partitions[4]);
        assert!(partitions.iter().all(|&p| p < 4));
        assert_eq!(partition_of_rows(&keys, 6, 1).unwrap(), vec![0; 6]);
        let many: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(0..1000))];
        let spread = partition_of_rows(&many, 1000, 2).unwrap();
        let in_first = spread.iter().filter(|&&p| p == 0).count();
        assert!((350..650).contains(&in_first), "{in_first} of 1000");
    }
}
