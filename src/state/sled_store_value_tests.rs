//! Values kept out of line: against a plain map as the model, through every
//! kind of write, within-batch repeats, staging, segment rotation and
//! reopening; no segment is deleted while a key points into it, and none is
//! kept once nothing does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::*;
use crate::testing::Random;

fn value(random: &mut Random, large: bool) -> Vec<u8> {
    let length = if large {
        OUT_OF_LINE_BYTES + random.below(6000) as usize
    } else {
        1 + random.below(40) as usize
    };
    let byte = random.below(256) as u8;
    vec![byte; length]
}

fn open(directory: &Path) -> SledStore {
    // sled's background threads may hold the directory lock a moment after
    // the previous store is dropped.
    for _ in 0..50 {
        match SledStore::open_with_segments(directory, 8 * 1024 * 1024, 16 * 1024) {
            Ok(store) => return store,
            // sled's lock error is reported as LOCKED_MESSAGE (the data
            // directory "is in use by another process").
            Err(error) if error.message.contains(LOCKED_MESSAGE) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(error) => panic!("{error:?}"),
        }
    }
    panic!("the store stayed locked");
}

fn segment_files(directory: &Path) -> BTreeSet<u64> {
    std::fs::read_dir(directory.join("values"))
        .unwrap()
        .map(|file| {
            let name = file.unwrap().file_name().to_string_lossy().to_string();
            u64::from_str_radix(name.strip_suffix(".values").unwrap(), 16).unwrap()
        })
        .collect()
}

/// Live bytes per segment as the pointers in sled say.
fn referenced(store: &SledStore) -> BTreeMap<u64, i64> {
    let mut live = BTreeMap::new();
    for entry in store.database.iter() {
        let (key, stored) = entry.unwrap();
        if key.starts_with(LIVE_BYTES_PREFIX) {
            continue;
        }
        if let Some(location) = Location::decode(&key, &stored).unwrap() {
            *live.entry(location.segment).or_default() += i64::from(location.length);
        }
    }
    live
}

fn check(store: &SledStore, directory: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let stored: BTreeMap<Vec<u8>, Vec<u8>> = store
        .scan_range(b"a", b"c")
        .map(|entry| entry.unwrap())
        .collect();
    assert_eq!(&stored, model);
    for (key, expected) in model {
        assert_eq!(store.get(key).unwrap().as_ref(), Some(expected));
    }
    let live = referenced(store);
    let counted: BTreeMap<u64, i64> = store
        .database
        .scan_prefix(LIVE_BYTES_PREFIX)
        .map(|entry| {
            let (key, stored) = entry.unwrap();
            let count = decode_count(&key, &stored).unwrap();
            (segment_of_live_key(&key).unwrap(), count)
        })
        .collect();
    assert_eq!(counted, live, "segment counts agree with the pointers");
    let mut expected_files: BTreeSet<u64> = live.keys().copied().collect();
    expected_files.insert(store.values.active_segment());
    assert_eq!(segment_files(directory), expected_files);
}

fn random_batch(random: &mut Random, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) -> WriteBatch {
    let before: Vec<Vec<u8>> = model.keys().cloned().collect();
    let mut batch = WriteBatch::new();
    for _ in 0..1 + random.below(8) {
        let key = format!(
            "{}/{}",
            ["a", "b"][random.below(2) as usize],
            random.below(12)
        );
        let key = key.into_bytes();
        match random.below(10) {
            0..=2 => {
                let value = value(random, true);
                model.insert(key.clone(), value.clone());
                batch.put_log(key, value);
            }
            3 => {
                // Large, but not a log record: stays in sled.
                let value = value(random, true);
                model.insert(key.clone(), value.clone());
                batch.put(key, value);
            }
            4..=6 => {
                let value = value(random, false);
                model.insert(key.clone(), value.clone());
                batch.put(key, value);
            }
            7 | 8 => {
                model.remove(&key);
                batch.delete(key);
            }
            _ => {
                // Resolved against the keys stored before the batch.
                for old in before.iter().filter(|old| old.starts_with(b"a/")) {
                    model.remove(old);
                }
                batch.delete_prefix(b"a/".to_vec());
            }
        }
    }
    batch
}

#[test]
fn out_of_line_values_follow_a_model_through_every_write() {
    for seed in [7u64, 1_234_567, 987_654_321] {
        let directory = tempfile::tempdir().unwrap();
        let mut random = Random(seed);
        let mut model = BTreeMap::new();
        let mut store = open(directory.path());
        for step in 0..300 {
            let batch = random_batch(&mut random, &mut model);
            if random.below(4) == 0 {
                store.stage(batch).unwrap();
                continue;
            }
            store.commit(batch).unwrap();
            check(&store, directory.path(), &model);
            if step % 50 == 49 {
                drop(store);
                store = open(directory.path());
                check(&store, directory.path(), &model);
            }
        }
        assert!(segment_files(directory.path()).len() > 1);
    }
}

#[test]
fn large_log_records_are_pointers_in_sled() {
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    let mut batch = WriteBatch::new();
    batch.put_log(b"a/big".to_vec(), vec![9u8; 100_000]);
    batch.put_log(b"a/small".to_vec(), b"s".to_vec());
    batch.put(b"a/state".to_vec(), vec![8u8; 100_000]);
    store.commit(batch).unwrap();
    let raw = store.database.get(b"a/big").unwrap().unwrap();
    assert!(raw.len() < 64);
    assert!(store.database.get(b"a/state").unwrap().unwrap().len() > 100_000);
    assert_eq!(store.get(b"a/state").unwrap().unwrap(), vec![8u8; 100_000]);
    assert_eq!(store.get(b"a/big").unwrap().unwrap(), vec![9u8; 100_000]);
    let last = store.last_at_or_before(b"a/", b"a/c").unwrap().unwrap();
    assert_eq!(last.0, b"a/big");
}

/// Why `directory` does not open, once sled's threads have let go of the
/// lock the previous store held.
fn open_failure(directory: &Path) -> crate::error::WeirError {
    for _ in 0..50 {
        match SledStore::open(directory) {
            Ok(_) => panic!("the store opened"),
            Err(error) if error.message.contains(LOCKED_MESSAGE) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(error) => return error,
        }
    }
    panic!("the store stayed locked")
}

#[test]
fn a_missing_segment_is_reported_at_open() {
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    let mut batch = WriteBatch::new();
    batch.put_log(b"a/big".to_vec(), vec![1u8; 10_000]);
    store.commit(batch).unwrap();
    let segment = store.values.active_segment();
    drop(store);
    let path = directory
        .path()
        .join(format!("values/{segment:016x}.values"));
    std::fs::remove_file(path).unwrap();
    let error = open_failure(directory.path());
    assert_eq!(error.code, sqlstate::DATA_CORRUPTED, "{}", error.message);
    assert!(error.message.contains("missing"), "{}", error.message);
}

#[test]
fn a_damaged_segment_is_a_clear_error() {
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    let mut batch = WriteBatch::new();
    batch.put_log(b"a/big".to_vec(), vec![1u8; 10_000]);
    store.commit(batch).unwrap();
    let path = directory.path().join(format!(
        "values/{:016x}.values",
        store.values.active_segment()
    ));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[5_000] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let error = store.get(b"a/big").unwrap_err();
    assert_eq!(error.code, sqlstate::DATA_CORRUPTED);
}
