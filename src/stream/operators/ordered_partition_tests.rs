use super::*;
use std::collections::BTreeMap;

fn entry(order: &[u8], row: &[u8]) -> Entry {
    (order.into(), row.into())
}

#[test]
fn apply_adds_and_removes_copies() {
    let mut partition = Partition::new();
    apply(&mut partition, entry(b"a", b"1"), 2);
    apply(&mut partition, entry(b"a", b"1"), -1);
    assert_eq!(partition[&entry(b"a", b"1")], 1);
    apply(&mut partition, entry(b"a", b"1"), -1);
    apply(&mut partition, entry(b"b", b"2"), 0);
    assert!(partition.is_empty());
}

/// Adds `diff` copies of `entry` to partition `key`, noted.
fn change(partitions: &mut Partitions, key: &[u8], entry: Entry, diff: i64) {
    let mut partition = partitions.checkout(key);
    partitions.note(key, &entry, diff);
    apply(&mut partition, entry, diff);
    partitions.checkin(key, partition);
}

/// Each partition's entries, owned.
type Contents = BTreeMap<Vec<u8>, Vec<(Vec<u8>, Vec<u8>, i64)>>;

fn contents(partitions: &Partitions) -> Contents {
    let keys: Vec<&Box<[u8]>> = partitions.by_key.keys().collect();
    keys.into_iter()
        .map(|key| {
            let entries = partitions.entries(key);
            let entries = entries.map(|(o, r, c)| (o.to_vec(), r.to_vec(), c));
            (key.to_vec(), entries.collect())
        })
        .collect()
}

#[test]
fn a_rolled_back_group_leaves_the_partitions_as_they_were() {
    let mut partitions = Partitions::default();
    change(&mut partitions, b"p", entry(b"a", b"1"), 2);
    change(&mut partitions, b"q", entry(b"b", b"2"), 1);
    // A partition past the packed size, kept as a tree.
    for i in 0..(PACKED_ENTRIES as u32 + 3) {
        change(&mut partitions, b"t", entry(&i.to_be_bytes(), b"r"), 1);
    }
    partitions.commit();
    let before = contents(&partitions);
    let bytes = partitions.bytes;
    change(&mut partitions, b"p", entry(b"a", b"1"), -2);
    change(&mut partitions, b"r", entry(b"c", b"3"), 1);
    partitions.take(b"q");
    change(&mut partitions, b"q", entry(b"d", b"4"), 3);
    for i in 0..(PACKED_ENTRIES as u32) {
        change(&mut partitions, b"t", entry(&i.to_be_bytes(), b"r"), -1);
    }
    assert!(matches!(
        partitions.by_key[b"t".as_slice()],
        Stored::Packed(_)
    ));
    assert!(partitions.rollback());
    assert_eq!(contents(&partitions), before);
    assert!(matches!(
        partitions.by_key[b"t".as_slice()],
        Stored::Tree(_)
    ));
    assert_eq!(partitions.bytes, bytes, "the gauge follows");
}

#[test]
fn a_group_past_the_undo_bound_is_refused_and_the_next_is_undone() {
    let mut partitions = Partitions::default();
    let wide = vec![7u8; 4096];
    for key in 0..(UNDO_BYTES / 4096 + 10) as u32 {
        change(&mut partitions, &key.to_be_bytes(), entry(b"o", &wide), 1);
    }
    assert!(partitions.undo.given_up && partitions.undo.bytes.is_empty());
    assert!(!partitions.rollback(), "too much to undo");
    partitions.commit();
    let before = partitions.len();
    change(&mut partitions, b"new", entry(b"a", b"1"), 1);
    assert!(partitions.rollback());
    assert_eq!(partitions.len(), before);
}

#[test]
fn packed_and_tree_partitions_checkpoint_and_restore_alike() {
    use crate::state::{SledStore, StateStore};
    use crate::stream::checkpoint::testing::{commit_state, stored_state};
    let mut partitions = Partitions::default();
    change(&mut partitions, b"small", entry(b"k", b"row"), 2);
    for i in 0..40u32 {
        change(&mut partitions, b"big", entry(&i.to_be_bytes(), b"r"), 1);
    }
    change(&mut partitions, b"gone", entry(b"k", b"row"), 1);
    change(&mut partitions, b"gone", entry(b"k", b"row"), -1);
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    commit_state(&store as &dyn StateStore, |state| {
        partitions.checkpoint(state)
    });
    let mut restored = Partitions::default();
    restored.restore(&stored_state(&store), "test").unwrap();
    assert_eq!(contents(&restored), contents(&partitions));
    assert_eq!(restored.len(), 2);
    assert_eq!(restored.bytes, partitions.bytes);
}

#[test]
fn a_partition_round_trips_and_a_damaged_one_is_refused() {
    let mut partition = Partition::new();
    apply(&mut partition, entry(b"k", b"row"), 3);
    apply(&mut partition, entry(b"", b"other"), -1);
    let bytes = encode(&partition);
    assert_eq!(decode(&bytes, "test").unwrap(), partition);
    let error = decode(&bytes[..bytes.len() - 1], "OverWindow").unwrap_err();
    assert!(error.to_string().contains("OverWindow"), "{error}");
    assert!(decode(&[1, 0, 0], "test").is_err());
}
