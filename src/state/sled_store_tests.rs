//! SledStore's own tests: batches, ranges, reopen, damage.

use super::*;

#[test]
fn a_store_another_holder_has_open_is_refused_with_a_hint() {
    let directory = tempfile::tempdir().unwrap();
    let _first = SledStore::open(directory.path()).unwrap();
    let Err(error) = SledStore::open(directory.path()) else {
        panic!("a second open of a locked store succeeded");
    };
    assert!(
        error.message.contains("in use by another process"),
        "{error}"
    );
    assert!(error
        .hint
        .unwrap_or_default()
        .contains("another --data-dir"));
}

#[test]
fn commit_get_scan_and_delete_prefix() {
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(b"a/1".to_vec(), b"one".to_vec());
    batch.put(b"a/2".to_vec(), b"two".to_vec());
    batch.put(b"b/1".to_vec(), b"other".to_vec());
    store.commit(batch).unwrap();
    assert_eq!(store.get(b"a/1").unwrap().unwrap(), b"one");
    assert_eq!(store.scan_prefix(b"a/").unwrap().len(), 2);

    let mut batch = WriteBatch::new();
    batch.delete_prefix(b"a/".to_vec());
    store.commit(batch).unwrap();
    assert!(store.scan_prefix(b"a/").unwrap().is_empty());
    assert_eq!(store.get(b"b/1").unwrap().unwrap(), b"other");
}

#[test]
fn ranges_and_the_last_entry_before_a_key() {
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut batch = WriteBatch::new();
    for key in [b"r/1", b"r/3", b"r/5", b"s/0"] {
        batch.put(key.to_vec(), key.to_vec());
    }
    store.stage(batch).unwrap();
    let keys = |start: &[u8], end: &[u8]| -> Vec<Vec<u8>> {
        store
            .scan_range(start, end)
            .map(|entry| entry.unwrap().0)
            .collect()
    };
    assert_eq!(keys(b"r/1", b"r/5"), vec![b"r/1".to_vec(), b"r/3".to_vec()]);
    assert!(keys(b"r/5", b"r/1").is_empty());
    let last = |at: &[u8]| store.last_at_or_before(b"r/", at).unwrap().map(|e| e.0);
    assert_eq!(last(b"r/4"), Some(b"r/3".to_vec()));
    assert_eq!(last(b"r/5"), Some(b"r/5".to_vec()));
    assert_eq!(last(b"r/0"), None);
}

/// `SledStore::open`, retried while a handle just dropped holds the lock.
fn retry_while_locked(directory: &std::path::Path) -> crate::error::Result<SledStore> {
    SledStore::open_when_released(directory)
}

/// Opens the store in `directory`, waiting while a handle just dropped
/// still holds sled's lock (its flusher thread lets go a moment later).
fn reopen(directory: &std::path::Path) -> SledStore {
    retry_while_locked(directory).unwrap()
}

#[test]
fn values_survive_reopen() {
    let directory = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"k".to_vec(), b"v".to_vec());
        store.commit(batch).unwrap();
    }
    let store = reopen(directory.path());
    assert_eq!(store.get(b"k").unwrap().unwrap(), b"v");
}

#[test]
fn every_kind_of_write_keeps_the_tally_true_across_reopen() {
    let directory = tempfile::tempdir().unwrap();
    for round in 0..3u8 {
        let store = reopen(directory.path());
        let mut batch = WriteBatch::new();
        batch.put(vec![b'a', round], vec![round; 10]);
        batch.put(b"a/same".to_vec(), vec![round; 3]);
        batch.put_log(vec![b'l', round], vec![round; OUT_OF_LINE_BYTES + 1]);
        batch.delete(vec![b'a', round.wrapping_sub(1)]);
        store.commit(batch).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"p/1".to_vec(), b"x".to_vec());
        batch.delete_prefix(b"p/".to_vec());
        batch.put(b"p/2".to_vec(), b"y".to_vec());
        batch.delete_prefix(vec![b'l', round.wrapping_sub(1)]);
        store.stage(batch).unwrap();
    }
    let store = reopen(directory.path());
    assert_eq!(store.get(b"a/same").unwrap().unwrap(), vec![2; 3]);
}

#[test]
fn a_store_missing_what_its_tally_counts_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"k".to_vec(), b"v".to_vec());
        store.commit(batch).unwrap();
        // A node rolled back by damage: an entry gone behind the tally.
        store.database.remove(b"k").unwrap();
        store.database.flush().unwrap();
    }
    let Err(error) = retry_while_locked(directory.path()) else {
        panic!("a store that lost an entry opened");
    };
    assert_eq!(error.code, crate::error::sqlstate::DATA_CORRUPTED);
    assert!(error.message.contains("does not match"), "{error}");
    // An operator who empties the record accepts the store as it is.
    std::fs::write(
        directory.path().join(super::super::acknowledged::FILE_NAME),
        b"",
    )
    .unwrap();
    let store = reopen(directory.path());
    assert!(store.get(b"k").unwrap().is_none());
    drop(store);
    reopen(directory.path());
}

#[test]
fn corrupted_value_is_a_clear_error() {
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    // Write a damaged envelope underneath the trait, as disk damage would.
    let mut sealed = envelope::seal(b"payload");
    let last = sealed.len() - 1;
    sealed[last] ^= 0xff;
    store.database.insert(b"k", sealed).unwrap();
    let error = store.get(b"k").unwrap_err();
    assert_eq!(error.code, crate::error::sqlstate::DATA_CORRUPTED);
    assert!(store.scan_prefix(b"k").is_err());
}
