//! How many partitions a keyed operator splits its groups into, each
//! updated on its own thread for every batch (`--parallelism`, default 1:
//! measured on 2 cores, splitting the window aggregate alone costs more
//! than its threads save, docs/benchmarks.md). Set once at start, before
//! any view is planned; results do not depend on it (a group lives in
//! exactly one partition, and checkpoints hold groups, not partitions, so a
//! restart may change it).

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::ArrayRef;
use datafusion::common::hash_utils::{create_hashes, RandomState};

use crate::error::Result;

/// The most partitions a setting may ask for.
pub const MAX_PARALLELISM: usize = 64;

static PARALLELISM: AtomicUsize = AtomicUsize::new(0);

/// One partition until partitioning pays (see the module comment).
pub const DEFAULT_PARALLELISM: usize = 1;

pub fn set_parallelism(partitions: usize) {
    PARALLELISM.store(partitions.clamp(1, MAX_PARALLELISM), Ordering::Relaxed);
}

pub fn parallelism() -> usize {
    match PARALLELISM.load(Ordering::Relaxed) {
        0 => DEFAULT_PARALLELISM,
        partitions => partitions,
    }
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
