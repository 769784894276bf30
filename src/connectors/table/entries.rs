//! How a table's rows lie in the store. Entries are keyed by the offset of
//! their first row, so any row offset is one ordered seek away; each entry
//! carries the largest event time before it, so reading from the middle of
//! the log needs no pass over what came before. The head record holds the
//! committed row count: entries at or past it are rows a statement spilled
//! and has not committed (yet, or ever), invisible to every reader.

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use serde::{Deserialize, Serialize};

use super::changes::TableChanges;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::batch_codec::{
    decode_batches_projected, encode_batch_compressed, stored_columns,
};
use crate::state::{key, Entries, StateStore, StoredSize, WriteBatch};

/// The committed state of a table's log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    /// Rows committed; entries from this offset on are not part of the table.
    pub rows: u64,
    /// The largest event time of the committed rows, for the watermark.
    pub max_event_ns: Option<i64>,
    /// A source's connector position after the committed rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<String>,
}

/// One stored entry: consecutive rows from `first_row`.
pub struct Entry {
    pub first_row: u64,
    /// The largest event time of the rows before this entry.
    pub max_event_before: Option<i64>,
    pub rows: RecordBatch,
    /// Per row, the offset of the row it retracts (see `TableChanges`).
    pub retracts: Option<UInt64Array>,
}

/// Header flags of an entry.
const HAS_EVENT_TIME: u8 = 1;
const HAS_RETRACTIONS: u8 = 2;

pub fn entries_prefix(table_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"tablerows", &table_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

pub fn entry_key(table_id: u64, first_row: u64) -> Vec<u8> {
    let mut entry = entries_prefix(table_id);
    entry.extend_from_slice(&first_row.to_be_bytes());
    entry
}

/// Past every entry key of the table.
fn entries_end(table_id: u64) -> Vec<u8> {
    entry_key(table_id, u64::MAX)
}

pub fn head_key(table_id: u64) -> Vec<u8> {
    key(&[b"tablehead", &table_id.to_be_bytes()])
}

/// The log layout before entries were keyed by row (one key per write).
pub fn legacy_rows_prefix(table_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"rows", &table_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

pub fn encode_head(head: &LogHead) -> Result<Vec<u8>> {
    serde_json::to_vec(head)
        .map_err(|error| WeirError::internal(format!("cannot encode a table head: {error}")))
}

pub fn load_head(store: &dyn StateStore, table_id: u64) -> Result<Option<LogHead>> {
    let Some(value) = store.get(&head_key(table_id))? else {
        return Ok(None);
    };
    serde_json::from_slice(&value).map(Some).map_err(|error| {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!("the row count of table {table_id} cannot be decoded: {error}"),
        )
    })
}

/// An entry's value: flags and the event time before it, then the rows
/// (with the retractions as a last column when there are any).
pub fn encode_entry(changes: &TableChanges, max_event_before: Option<i64>) -> Result<Vec<u8>> {
    let rows = &changes.rows;
    // Not `get_array_memory_size`: for a slice that is the whole buffer's.
    let mut value = Vec::with_capacity(9 + rows.num_rows() * rows.num_columns() * 8);
    let mut flags = 0;
    if max_event_before.is_some() {
        flags |= HAS_EVENT_TIME;
    }
    if changes.retracts.is_some() {
        flags |= HAS_RETRACTIONS;
    }
    value.push(flags);
    value.extend_from_slice(&max_event_before.unwrap_or(0).to_be_bytes());
    value.extend_from_slice(&encode_batch_compressed(&changes.stored()?)?);
    Ok(value)
}

/// A table log's entries and stored bytes (committed or spilled), and the
/// first row still kept; from the keys and pointers only.
pub fn stored_size(store: &dyn StateStore, table_id: u64) -> Result<(StoredSize, Option<u64>)> {
    let size = store.stored_size(&entries_prefix(table_id), &entries_end(table_id))?;
    let first_row = size.first_key.as_deref().map(first_row_of);
    Ok((size, first_row))
}

fn first_row_of(stored_key: &[u8]) -> u64 {
    let tail = &stored_key[stored_key.len().saturating_sub(8)..];
    let mut bytes = [0u8; 8];
    bytes[8 - tail.len()..].copy_from_slice(tail);
    u64::from_be_bytes(bytes)
}

/// Decodes an entry; with a `projection`, only those columns (and `schema`
/// is then the projected schema).
pub fn decode_entry(
    stored_key: &[u8],
    value: &[u8],
    schema: &SchemaRef,
    projection: Option<&[usize]>,
) -> Result<Entry> {
    let what = format!("table rows at {:?}", String::from_utf8_lossy(stored_key));
    let corrupt = |message: String| WeirError::new(sqlstate::DATA_CORRUPTED, message);
    if value.len() < 9 || value[0] > HAS_EVENT_TIME | HAS_RETRACTIONS {
        return Err(corrupt(format!("{what} have a malformed header")));
    }
    let mut event = [0u8; 8];
    event.copy_from_slice(&value[1..9]);
    let max_event_before = (value[0] & HAS_EVENT_TIME != 0).then(|| i64::from_be_bytes(event));
    let retractions = value[0] & HAS_RETRACTIONS != 0;
    // The retractions are stored after the table's columns.
    let projection = match (retractions, projection) {
        (true, Some(columns)) => {
            let width = stored_columns(&value[9..], &what)?
                .checked_sub(1)
                .ok_or_else(|| corrupt(format!("{what} lack their retractions")))?;
            Some([columns, &[width]].concat())
        }
        (true, None) => None,
        (false, projection) => projection.map(<[usize]>::to_vec),
    };
    let batches = decode_batches_projected(&value[9..], &what, projection.as_deref())?;
    let mut parts = Vec::with_capacity(batches.len());
    for batch in batches {
        let part = if retractions {
            TableChanges::from_stored(batch, schema)
        } else {
            // A projection may keep no column at all (count(*)).
            let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
            RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)
                .map(TableChanges::inserts)
                .map_err(WeirError::from)
        };
        parts.push(
            part.map_err(|error| corrupt(format!("{what} do not match the table: {error}")))?,
        );
    }
    let changes = TableChanges::concat(schema, &parts)
        .map_err(|error| corrupt(format!("{what}: {error}")))?;
    Ok(Entry {
        first_row: first_row_of(stored_key),
        max_event_before,
        rows: changes.rows,
        retracts: changes.retracts,
    })
}

impl Entry {
    /// The entry's changes from row offset `from` on.
    pub fn changes_from(&self, from: u64) -> TableChanges {
        let skip = (from.saturating_sub(self.first_row) as usize).min(self.rows.num_rows());
        TableChanges {
            rows: self.rows.clone(),
            retracts: self.retracts.clone(),
        }
        .slice(skip, self.rows.num_rows() - skip)
    }
}

/// Reads the entries holding rows `from..to` of a table, in order; the
/// last is trimmed at `to`, the first is whole (see `Entry::rows_from`).
pub struct EntryReader {
    entries: Entries,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    from: u64,
    to: u64,
}

impl EntryReader {
    pub fn new(
        store: &dyn StateStore,
        table_id: u64,
        schema: SchemaRef,
        projection: Option<Vec<usize>>,
        from: u64,
        to: u64,
    ) -> Result<Self> {
        let prefix = entries_prefix(table_id);
        let start = match store.last_at_or_before(&prefix, &entry_key(table_id, from))? {
            Some((stored_key, _)) => stored_key,
            None => prefix,
        };
        Ok(EntryReader {
            entries: store.scan_range(&start, &entry_key(table_id, to)),
            schema,
            projection,
            from,
            to,
        })
    }
}

impl Iterator for EntryReader {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            let (stored_key, value) = match self.entries.next()? {
                Ok(entry) => entry,
                Err(error) => return Some(Err(error)),
            };
            let mut entry = match decode_entry(
                &stored_key,
                &value,
                &self.schema,
                self.projection.as_deref(),
            ) {
                Ok(entry) => entry,
                Err(error) => return Some(Err(error)),
            };
            let end = entry.first_row + entry.rows.num_rows() as u64;
            if end <= self.from {
                continue;
            }
            if end > self.to {
                let keep = self.to.saturating_sub(entry.first_row) as usize;
                entry.rows = entry.rows.slice(0, keep);
                entry.retracts = entry.retracts.map(|retracts| retracts.slice(0, keep));
            }
            return Some(Ok(entry));
        }
    }
}

/// Deletes entries at or past row `from` (spilled rows never committed).
pub fn delete_from(store: &dyn StateStore, table_id: u64, from: u64) -> Result<()> {
    let mut deletes = WriteBatch::new();
    for entry in store.scan_range(&entry_key(table_id, from), &entries_end(table_id)) {
        deletes.delete(entry?.0);
    }
    if !deletes.is_empty() {
        store.stage(deletes)?;
    }
    Ok(())
}
