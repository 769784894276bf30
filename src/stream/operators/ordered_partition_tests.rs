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
    let mut partition = partitions.checkout(key).unwrap();
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
    partitions.take(b"q").unwrap();
    change(&mut partitions, b"q", entry(b"d", b"4"), 3);
    for i in 0..(PACKED_ENTRIES as u32) {
        change(&mut partitions, b"t", entry(&i.to_be_bytes(), b"r"), -1);
    }
    assert!(matches!(
        partitions.by_key[b"t".as_slice()],
        Stored::Packed(_)
    ));
    assert!(partitions.rollback().unwrap());
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
    assert!(!partitions.rollback().unwrap(), "too much to undo");
    partitions.commit();
    let before = partitions.len();
    change(&mut partitions, b"new", entry(b"a", b"1"), 1);
    assert!(partitions.rollback().unwrap());
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
        partitions.checkpoint(state).unwrap()
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

/// Partition `key` as it is, in memory or spilled, without changing it.
fn read(partitions: &Partitions, key: &[u8]) -> Partition {
    match partitions.by_key.get(key) {
        Some(stored) => stored.clone().into_partition(),
        None => partitions
            .read_spilled(key)
            .unwrap()
            .map(Stored::into_partition)
            .unwrap_or_default(),
    }
}

fn spilling(
    store: &std::sync::Arc<dyn crate::state::StateStore>,
    budget_bytes: usize,
) -> Partitions {
    let mut partitions = Partitions::default();
    partitions.attach(SpillSpace::for_test(
        store.clone(),
        b"opstate/test/",
        budget_bytes,
    ));
    partitions
}

/// Spilling partitions against a model through changes, emptied and
/// refilled partitions, commits, rollbacks, checkpoints and crashes: each
/// partition reads as the model says, runs stay few, and the store keeps
/// only the runs the last checkpoint lists.
#[test]
fn spilled_partitions_follow_a_model_through_rollbacks_checkpoints_and_crashes() {
    use crate::state::{runs, SledStore, StateStore};
    use crate::stream::checkpoint::testing::{commit_state, stored_state};
    use std::sync::Arc;
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut partitions = spilling(&store, 2048);
    let mut model: BTreeMap<u32, Partition> = BTreeMap::new();
    let (mut committed, mut checkpointed) = (model.clone(), model.clone());
    let mut random = 0x2545_f491_4f6c_dd1du64;
    let mut next = |bound: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % bound
    };
    let (mut spills, mut crashes) = (0, 0);
    for step in 0..3000 {
        match next(100) {
            0..=69 => {
                let key = next(300) as u32;
                let order = (next(20) as u32).to_be_bytes();
                let entry = entry(&order, b"row-bytes-long-enough-to-spill");
                let present = model.get(&key).and_then(|p| p.get(&entry)).is_some();
                let diff = if present && next(2) == 0 { -1 } else { 1 };
                change(&mut partitions, &key.to_be_bytes(), entry.clone(), diff);
                apply(model.entry(key).or_default(), entry, diff);
                model.retain(|_, partition| !partition.is_empty());
            }
            70..=74 => {
                let key = next(300) as u32;
                let taken = partitions.take(&key.to_be_bytes()).unwrap();
                partitions.touch(&key.to_be_bytes());
                assert_eq!(taken, model.remove(&key), "step {step}");
            }
            75..=84 => {
                let before = partitions.bytes > 2048;
                partitions.settle().unwrap();
                spills += before as usize;
            }
            85..=91 => {
                partitions.commit();
                committed = model.clone();
            }
            92..=95 => {
                assert!(partitions.rollback().unwrap());
                model = committed.clone();
            }
            96..=98 => {
                partitions.commit();
                commit_state(&*store, |state| partitions.checkpoint(state).unwrap());
                committed = model.clone();
                checkpointed = model.clone();
            }
            _ => {
                crashes += 1;
                partitions = spilling(&store, 2048);
                partitions.restore(&stored_state(&*store), "test").unwrap();
                model = checkpointed.clone();
                committed = model.clone();
            }
        }
        if step % 5 != 0 {
            continue;
        }
        for key in 0..300u32 {
            let expected = model.get(&key).cloned().unwrap_or_default();
            assert_eq!(
                read(&partitions, &key.to_be_bytes()),
                expected,
                "step {step} key {key}"
            );
        }
    }
    assert!(
        spills > 50 && crashes > 10,
        "{spills} spills, {crashes} crashes"
    );
    let spilled = partitions.spilled.as_ref().unwrap();
    assert!(spilled.run_count() <= 12, "{} runs", spilled.run_count());
    partitions.commit();
    commit_state(&*store, |state| partitions.checkpoint(state).unwrap());
    let listed = partitions.spilled.as_ref().unwrap().run_ids();
    let stored = runs::stored_run_ids(&*store, b"opstate/test/").unwrap();
    assert_eq!(stored, listed, "only the listed runs stay stored");
}
