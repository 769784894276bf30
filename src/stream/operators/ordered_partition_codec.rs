//! How a partition is encoded: packed in memory (`Stored::Packed`), in
//! checkpoints and in spilled runs alike.

use super::{in_place, EntryRef, Partition};
use crate::error::{sqlstate, Result, WeirError};

/// A partition as stored: per entry, the key's and row's lengths (u32) and
/// bytes, then the multiplicity (i64), all little-endian.
pub fn encode(partition: &Partition) -> Vec<u8> {
    encode_entries(in_place(partition))
}

/// Entries (in order) encoded as `encode` does.
pub(super) fn encode_entries<'a>(entries: impl Iterator<Item = EntryRef<'a>> + Clone) -> Vec<u8> {
    let length: usize = entries
        .clone()
        .map(|(o, r, _)| 16 + o.len() + r.len())
        .sum();
    let mut bytes = Vec::with_capacity(length);
    for (order, row, count) in entries {
        for part in [order, row] {
            bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
            bytes.extend_from_slice(part);
        }
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    bytes
}

/// Reads a stored partition of `operator`, refusing one that ends early.
pub fn decode(bytes: &[u8], operator: &str) -> Result<Partition> {
    let mut reader = Reader {
        bytes,
        at: 0,
        operator,
    };
    let mut partition = Partition::new();
    while reader.at < bytes.len() {
        let order = reader.part()?.into();
        let row = reader.part()?.into();
        let count = i64::from_le_bytes(reader.take(8)?.try_into().expect("8 bytes"));
        partition.insert((order, row), count);
    }
    Ok(partition)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    operator: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(length)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!(
                    "a {} operator's checkpointed partition is damaged",
                    self.operator
                ),
            )
        })?;
        let part = &self.bytes[self.at..end];
        self.at = end;
        Ok(part)
    }

    /// A length (u32) and that many bytes.
    fn part(&mut self) -> Result<&'a [u8]> {
        let length = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
        self.take(length as usize)
    }
}

/// The entries of a packed partition (`encode`), in order.
#[cfg(test)]
pub(super) fn packed_entries(mut bytes: &[u8]) -> impl Iterator<Item = EntryRef<'_>> {
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let mut part = || {
            let length = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
            let (part, rest) = bytes[4..].split_at(length);
            bytes = rest;
            part
        };
        let (order, row) = (part(), part());
        let count = i64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        bytes = &bytes[8..];
        Some((order, row, count))
    })
}
