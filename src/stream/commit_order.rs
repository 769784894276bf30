//! The order in which write groups reached the views, across tables. Each
//! table's log keeps its own rows in order, but a view reading several
//! tables (a lookup join, a union, a join feeding an aggregate) saw their
//! rows interleaved, group by group; replaying the tables one after the
//! other would give a lookup join's stream rows a newer table than they
//! met, and the state downstream of it would no longer match the view's
//! rows. So every group that reaches a view logs, in its own commit, the
//! rows it added to each table (`commits/<sequence>`), and recovery replays
//! the tables' rows after the checkpoint in that order. The checkpoint
//! record holds the last sequence it covers; entries at or before it are
//! trimmed.

use crate::error::{sqlstate, Result, WeirError};
use crate::state::{StateStore, WriteBatch};

const PREFIX: &[u8] = b"commits/";

/// One group's writes that views read: (table, rows), in push order.
pub type GroupOrder = Vec<(String, u64)>;

fn key(sequence: u64) -> Vec<u8> {
    [PREFIX, &sequence.to_be_bytes()].concat()
}

/// Puts group `sequence`'s order into `batch`.
pub fn put(batch: &mut WriteBatch, sequence: u64, order: &GroupOrder) {
    let mut value = Vec::new();
    for (table, rows) in order {
        value.extend_from_slice(&(table.len() as u32).to_be_bytes());
        value.extend_from_slice(table.as_bytes());
        value.extend_from_slice(&rows.to_be_bytes());
    }
    batch.put(key(sequence), value);
}

fn decode(value: &[u8]) -> Result<GroupOrder> {
    let corrupt = || {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            "an entry of the write groups' order is malformed",
        )
    };
    let mut order = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let (length, tail) = rest.split_at_checked(4).ok_or_else(corrupt)?;
        let length = u32::from_be_bytes(length.try_into().map_err(|_| corrupt())?) as usize;
        let (name, tail) = tail.split_at_checked(length).ok_or_else(corrupt)?;
        let (rows, tail) = tail.split_at_checked(8).ok_or_else(corrupt)?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt())?;
        order.push((
            name,
            u64::from_be_bytes(rows.try_into().map_err(|_| corrupt())?),
        ));
        rest = tail;
    }
    Ok(order)
}

/// The groups logged after `sequence`, in order: (sequence, order).
pub fn after(store: &dyn StateStore, sequence: u64) -> Result<Vec<(u64, GroupOrder)>> {
    let start = key(sequence.saturating_add(1));
    let end = [PREFIX, &[0xff; 9][..]].concat();
    store
        .scan_range(&start, &end)
        .map(|entry| {
            let (key, value) = entry?;
            let sequence = key
                .get(PREFIX.len()..)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| WeirError::internal("malformed write group order key"))?;
            Ok((sequence, decode(&value)?))
        })
        .collect()
}

/// Deletes the groups logged at or before `sequence` (a checkpoint covers
/// them).
pub fn trim(store: &dyn StateStore, sequence: u64) -> Result<()> {
    let mut batch = WriteBatch::new();
    let end = key(sequence.saturating_add(1));
    for entry in store.scan_range(PREFIX, &end) {
        batch.delete(entry?.0);
    }
    if !batch.is_empty() {
        store.commit(batch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;

    #[test]
    fn groups_come_back_in_order_after_a_sequence_and_are_trimmed() {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let mut batch = WriteBatch::new();
        for sequence in [1, 2, 300] {
            let order = vec![("orders".to_string(), sequence), ("rates".to_string(), 0)];
            put(&mut batch, sequence, &order);
        }
        store.commit(batch).unwrap();
        let groups = after(&store, 1).unwrap();
        let sequences: Vec<u64> = groups.iter().map(|(sequence, _)| *sequence).collect();
        assert_eq!(sequences, [2, 300]);
        assert_eq!(groups[1].1[0], ("orders".to_string(), 300));
        trim(&store, 2).unwrap();
        assert_eq!(after(&store, 0).unwrap().len(), 1);
        assert!(decode(&[0, 0, 0, 9, b'x']).is_err());
    }
}
