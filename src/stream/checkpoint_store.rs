//! Committing a checkpoint's operator state. A checkpoint that changes few
//! entries updates the current generation (`checkpoint::generation_prefix`)
//! in the same atomic batch as its epoch record. One that changes many — the
//! first after a long COPY, which holds checkpoints off while it runs —
//! would make that batch huge, and sled keeps a copy of every tree node an
//! atomic batch touches until the batch ends (some 20× its size in memory).
//! So it is written as a new generation instead: the current generation's
//! entries and the checkpoint's changes are staged in small pieces under a
//! new prefix, the epoch record naming it is committed on its own, and the
//! old generation is deleted in pieces. A crash in between leaves a
//! generation no record names; the next start deletes it.

use super::checkpoint::{
    generation_prefix, in_generation, operator_state_prefix, prefix_end, stale_generation_prefixes,
    EpochRecord,
};
use crate::error::Result;
use crate::state::{StateStore, WriteBatch};

/// Changes from which a checkpoint may go to a new generation: below this,
/// one atomic batch costs little.
const NEW_GENERATION_MIN_CHANGES: usize = 16 * 1024;

/// Keys per staged piece when a generation is copied or deleted.
const PIECE_KEYS: usize = 1024;

/// Where the operator state is stored and how many entries it holds: known
/// exactly after a count, bounded below by the count less deletes since.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StoredState {
    pub generation: u64,
    counted_entries: u64,
    deleted_since_count: u64,
}

impl StoredState {
    pub fn counted(generation: u64, entries: u64) -> Self {
        StoredState {
            generation,
            counted_entries: entries,
            deleted_since_count: 0,
        }
    }

    fn fewest_entries(&self) -> u64 {
        self.counted_entries
            .saturating_sub(self.deleted_since_count)
    }
}

/// A checkpoint ready to commit: where its state goes is decided (and
/// `StoredState` updated as if it commits; a failed commit breaks the
/// dataflow, and recovery reads the truth back from the record).
pub struct PreparedCheckpoint {
    record: EpochRecord,
    /// What is not operator state (view changes a barrier made).
    rest: WriteBatch,
    /// Operator state, keys in generation 0.
    state: WriteBatch,
    /// Some(old generation) when `record.generation` is a new one.
    replaces: Option<u64>,
}

impl PreparedCheckpoint {
    /// Bytes of state and view changes it writes.
    pub fn size_bytes(&self) -> usize {
        self.state.size_bytes() + self.rest.size_bytes()
    }

    /// Whether it carries view changes, which become visible only after
    /// its commit (so it must commit before the next write).
    pub fn changes_views(&self) -> bool {
        !self.rest.is_empty()
    }

    pub fn generation(&self) -> u64 {
        self.record.generation
    }

    /// Writes it; the checkpoint counts once this returns.
    pub fn commit(self, store: &dyn StateStore) -> Result<()> {
        let PreparedCheckpoint {
            record,
            mut rest,
            mut state,
            replaces,
        } = self;
        let canonical = operator_state_prefix();
        let Some(old) = replaces else {
            state.rename_prefix(&canonical, &generation_prefix(record.generation));
            rest.extend(state);
            record.put_into(&mut rest)?;
            return store.commit(rest);
        };
        copy_generation(store, old, record.generation, &state.deleted_prefixes())?;
        state.rename_prefix(&canonical, &generation_prefix(record.generation));
        store.stage(state)?;
        record.put_into(&mut rest)?;
        store.commit(rest)?;
        // Nothing refers to the old generation now; if a crash interrupts
        // the delete, the next start finishes it.
        delete_in_pieces(store, &generation_prefix(old))
    }
}

/// Decides where `batch` (a checkpoint's writes, keys in generation 0)
/// goes; `stored` then describes the state as it will be once committed.
pub fn prepare_checkpoint(
    store: &dyn StateStore,
    stored: &mut StoredState,
    mut record: EpochRecord,
    mut batch: WriteBatch,
) -> Result<PreparedCheckpoint> {
    let state = batch.split_off_everything_under(&operator_state_prefix());
    let changes = state.len();
    let replaces = match worth_a_new_generation(store, stored, changes)? {
        None => {
            count_changes(stored, &state);
            None
        }
        Some(entries) => {
            let (puts, deletes) = state.put_and_delete_counts();
            let everything = operator_state_prefix();
            // A full checkpoint copies nothing of the old generation.
            let full = state.deleted_prefixes().contains(&everything.as_slice());
            let entries = if full { 0 } else { entries };
            let old = stored.generation;
            *stored = StoredState {
                generation: old + 1,
                counted_entries: entries + puts as u64,
                deleted_since_count: deletes as u64,
            };
            Some(old)
        }
    };
    record.generation = stored.generation;
    Ok(PreparedCheckpoint {
        record,
        rest: batch,
        state,
        replaces,
    })
}

/// Prepares and commits at once (DDL-free callers and tests).
pub fn commit_checkpoint(
    store: &dyn StateStore,
    stored: &mut StoredState,
    record: EpochRecord,
    batch: WriteBatch,
) -> Result<usize> {
    let prepared = prepare_checkpoint(store, stored, record, batch)?;
    let bytes = prepared.size_bytes();
    prepared.commit(store)?;
    Ok(bytes)
}

/// Moves `writes` (a DDL's batch, with its checkpoint) into the current
/// generation, committed with it.
pub fn into_current_generation(stored: &mut StoredState, writes: &mut WriteBatch) {
    let canonical = operator_state_prefix();
    let mut state = writes.split_off_everything_under(&canonical);
    add_to_current(stored, &mut state);
    writes.extend(state);
}

fn add_to_current(stored: &mut StoredState, state: &mut WriteBatch) {
    count_changes(stored, state);
    state.rename_prefix(
        &operator_state_prefix(),
        &generation_prefix(stored.generation),
    );
}

fn count_changes(stored: &mut StoredState, state: &WriteBatch) {
    let (puts, deletes) = state.put_and_delete_counts();
    if !state.deleted_prefixes().is_empty() {
        // A full checkpoint replaces what was there: count afresh.
        *stored = StoredState::counted(stored.generation, 0);
    }
    stored.counted_entries += puts as u64;
    stored.deleted_since_count += deletes as u64;
}

/// Whether `changes` are many, and at least half as many as the entries
/// stored (so copying the rest costs no more than writing them): then
/// how many entries are stored.
fn worth_a_new_generation(
    store: &dyn StateStore,
    stored: &mut StoredState,
    changes: usize,
) -> Result<Option<u64>> {
    if changes < NEW_GENERATION_MIN_CHANGES {
        return Ok(None);
    }
    let changes = changes as u64;
    if stored.fewest_entries() > changes * 2 {
        return Ok(None);
    }
    let prefix = generation_prefix(stored.generation);
    let entries = store.stored_size(&prefix, &prefix_end(&prefix))?.entries;
    *stored = StoredState::counted(stored.generation, entries);
    Ok((entries <= changes * 2).then_some(entries))
}

/// Stages every entry of generation `from` into `to`, except those under
/// `skipped` (prefixes the checkpoint deletes).
fn copy_generation(store: &dyn StateStore, from: u64, to: u64, skipped: &[&[u8]]) -> Result<()> {
    let source = generation_prefix(from);
    let target = generation_prefix(to);
    let skipped: Vec<Vec<u8>> = skipped
        .iter()
        .map(|prefix| in_generation(prefix, from))
        .collect();
    let mut piece = WriteBatch::new();
    for entry in store.scan_range(&source, &prefix_end(&source)) {
        let (key, value) = entry?;
        if skipped.iter().any(|prefix| key.starts_with(prefix)) {
            continue;
        }
        piece.put([target.as_slice(), &key[source.len()..]].concat(), value);
        if piece.len() >= PIECE_KEYS {
            store.stage(std::mem::take(&mut piece))?;
        }
    }
    store.stage(piece)
}

/// Deletes every key under `prefix`, a piece at a time (not atomically).
pub fn delete_in_pieces(store: &dyn StateStore, prefix: &[u8]) -> Result<()> {
    let end = prefix_end(prefix);
    loop {
        let mut piece = WriteBatch::new();
        for entry in store.scan_range(prefix, &end).take(PIECE_KEYS) {
            piece.delete(entry?.0);
        }
        if piece.is_empty() {
            return Ok(());
        }
        store.stage(piece)?;
    }
}

/// Deletes the generations no record names (left by a crash).
pub fn delete_stale_generations(store: &dyn StateStore, current: u64) -> Result<()> {
    for prefix in stale_generation_prefixes(store, current)? {
        delete_in_pieces(store, &prefix)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::state::SledStore;
    use crate::stream::checkpoint::{epoch_key, generation_prefix, operator_prefix};

    fn stored_state(store: &dyn StateStore) -> (u64, BTreeMap<Vec<u8>, Vec<u8>>) {
        let record = EpochRecord::read(store).unwrap().unwrap();
        let prefix = generation_prefix(record.generation);
        let entries = store
            .scan_prefix(&prefix)
            .unwrap()
            .into_iter()
            .map(|(key, value)| (key[prefix.len()..].to_vec(), value))
            .collect();
        (record.generation, entries)
    }

    fn name(operator: usize, entry: u64) -> Vec<u8> {
        [operator_prefix(7, operator), entry.to_be_bytes().to_vec()].concat()
    }

    fn relative(key: &[u8]) -> Vec<u8> {
        key[operator_state_prefix().len()..].to_vec()
    }

    /// Commits puts of `entries` (value = `round`) and deletes of `deleted`
    /// for operator 0, mirroring them in `model`.
    fn checkpoint(
        store: &dyn StateStore,
        stored: &mut StoredState,
        model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
        round: u8,
        entries: std::ops::Range<u64>,
        deleted: std::ops::Range<u64>,
    ) {
        let mut batch = WriteBatch::new();
        for entry in entries {
            batch.put(name(0, entry), vec![round]);
            model.insert(relative(&name(0, entry)), vec![round]);
        }
        for entry in deleted {
            batch.delete(name(0, entry));
            model.remove(&relative(&name(0, entry)));
        }
        let record = EpochRecord {
            epoch: u64::from(round),
            ..EpochRecord::default()
        };
        commit_checkpoint(store, stored, record, batch).unwrap();
    }

    #[test]
    fn small_checkpoints_update_the_current_generation_and_big_ones_start_a_new_one() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut stored = StoredState::default();
        let mut model = BTreeMap::new();
        checkpoint(&store, &mut stored, &mut model, 1, 0..100, 0..0);
        assert_eq!(stored_state(&store), (0, model.clone()));

        // Changes past the threshold and past half of what is stored.
        let many = NEW_GENERATION_MIN_CHANGES as u64;
        checkpoint(&store, &mut stored, &mut model, 2, 50..50 + many, 0..10);
        assert_eq!(stored_state(&store), (1, model.clone()));
        assert!(store.scan_prefix(&generation_prefix(0)).unwrap().is_empty());
        assert_eq!(stored.generation, 1);

        checkpoint(&store, &mut stored, &mut model, 3, 0..10, 20..30);
        assert_eq!(stored_state(&store), (1, model.clone()));
        checkpoint(&store, &mut stored, &mut model, 4, 0..3 * many, 0..0);
        assert_eq!(stored_state(&store), (2, model.clone()));
        // Many changes, but few next to what is stored: stays in place.
        checkpoint(&store, &mut stored, &mut model, 5, many..2 * many, 0..5);
        assert_eq!(stored_state(&store), (2, model.clone()));
    }

    #[test]
    fn a_full_checkpoint_in_a_new_generation_copies_nothing_it_deletes() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut stored = StoredState::default();
        let mut model = BTreeMap::new();
        checkpoint(&store, &mut stored, &mut model, 1, 0..100, 0..0);
        let mut batch = WriteBatch::new();
        batch.delete_prefix(operator_state_prefix());
        model.clear();
        for entry in 1000..1000 + NEW_GENERATION_MIN_CHANGES as u64 {
            batch.put(name(1, entry), vec![9]);
            model.insert(relative(&name(1, entry)), vec![9]);
        }
        commit_checkpoint(&store, &mut stored, EpochRecord::default(), batch).unwrap();
        assert_eq!(stored_state(&store), (1, model.clone()));
        assert_eq!(stored.fewest_entries(), model.len() as u64);
    }

    #[test]
    fn generations_no_record_names_are_deleted_at_start() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        for generation in [0, 2, 3, u64::MAX] {
            let key = in_generation(&name(0, 1), generation);
            batch.put(key, vec![generation as u8]);
        }
        batch.put(epoch_key(), b"{}".to_vec());
        store.commit(batch).unwrap();
        let stale = stale_generation_prefixes(&store, 2).unwrap();
        assert_eq!(
            stale,
            vec![
                generation_prefix(0),
                generation_prefix(3),
                generation_prefix(u64::MAX)
            ]
        );
        delete_stale_generations(&store, 2).unwrap();
        assert!(stale_generation_prefixes(&store, 2).unwrap().is_empty());
        let kept = store.scan_prefix(b"checkpoint/").unwrap();
        let keys: Vec<Vec<u8>> = kept.into_iter().map(|(key, _)| key).collect();
        assert_eq!(keys, vec![epoch_key(), in_generation(&name(0, 1), 2)]);
    }

    #[test]
    fn a_ddl_batch_names_the_current_generation() {
        let mut stored = StoredState::counted(4, 10);
        let mut writes = WriteBatch::new();
        writes.delete_prefix(crate::stream::checkpoint::view_prefix(7));
        writes.put(b"catalog/x".to_vec(), vec![1]);
        into_current_generation(&mut stored, &mut writes);
        let mut expected = WriteBatch::new();
        expected.put(b"catalog/x".to_vec(), vec![1]);
        expected.delete_prefix(in_generation(&crate::stream::checkpoint::view_prefix(7), 4));
        assert_eq!(format!("{writes:?}"), format!("{expected:?}"));
    }
}
