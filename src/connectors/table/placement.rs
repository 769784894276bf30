//! Where a group's writes go in their tables' logs: each write's rows
//! after everything queued before it, log entries for the rows still in
//! memory, and each table's new head once the group's rows are known.

use std::collections::HashMap;
use std::sync::Arc;

use super::changes::TableChanges;
use super::entries::{encode_entry, encode_head, entry_key, head_key, EntryReader};
use super::group_commit::PreparedWrite;
use super::group_messages::{TableWrites, WriteSource};
use super::locations::LocationChanges;
use super::streaming::{StreamEnd, StreamReceiver};
use super::{lock, TableLog, ROWS_PER_ENTRY};
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::WatermarkTracker;

/// Where a group's writes go in their tables' logs.
#[derive(Default)]
pub(super) struct Placement {
    tables: HashMap<u64, Placed>,
}

/// A table's log as the group has extended it so far.
struct Placed {
    log: Arc<TableLog>,
    rows: u64,
    events: Option<WatermarkTracker>,
    /// In-memory rows placed but not yet encoded: consecutive small writes
    /// share log entries (one entry, one compression, for many one-row
    /// INSERTs), starting at `unencoded_at`.
    unencoded: Vec<TableChanges>,
    unencoded_at: u64,
    /// What the group does to where the table's live rows are.
    locations: LocationChanges,
    /// A source's connector position after the placed rows.
    position: Option<String>,
    /// A streamed write's first row and, once it ended, its rows and
    /// event times: the table's head follows them.
    stream: Option<(u64, StreamEnd)>,
}

impl Placed {
    /// A streamed write (alone in its group): its rows, spilled by the
    /// writer, come through the stream; its end says how many.
    fn place_stream(
        &mut self,
        stream: StreamReceiver,
        batch: &mut WriteBatch,
    ) -> Result<WriteSource> {
        self.encode(batch)?;
        if stream.first_row != self.rows || self.log.locations.is_some() {
            return Err(WeirError::internal(format!(
                "a streamed write started at row {} of {}, which has {} rows",
                stream.first_row, self.log.name, self.rows
            )));
        }
        let end = StreamEnd::default();
        self.stream = Some((stream.first_row, end.clone()));
        Ok(WriteSource {
            log: self.log.clone(),
            spilled: None,
            rows: None,
            stream: Some((stream, end)),
        })
    }

    /// A streamed write ended: the table's rows and event times follow it.
    fn end_stream(&mut self) -> Result<()> {
        let Some((first_row, end)) = self.stream.take() else {
            return Ok(());
        };
        let (rows, events) = lock(&end)
            .take()
            .ok_or_else(|| WeirError::internal("a streamed write had not ended"))?;
        self.rows = first_row + rows;
        self.events = events;
        Ok(())
    }

    fn encode(&mut self, batch: &mut WriteBatch) -> Result<()> {
        if self.unencoded.is_empty() {
            return Ok(());
        }
        let rows = TableChanges::concat(&self.log.schema, &self.unencoded)?;
        self.unencoded.clear();
        encode_entries(
            self.log.id,
            &rows,
            self.unencoded_at,
            self.events.as_mut(),
            batch,
        )
    }
}

impl Placement {
    /// Puts the write's in-memory rows after everything before them.
    pub(super) fn place(
        &mut self,
        write: &PreparedWrite,
        batch: &mut WriteBatch,
    ) -> Result<WriteSource> {
        let log = &write.log;
        let placed = self.tables.entry(log.id).or_insert_with(|| Placed {
            log: log.clone(),
            rows: log.row_count(),
            events: log.visible_tracker(),
            unencoded: Vec::new(),
            unencoded_at: 0,
            locations: LocationChanges::default(),
            position: log.source_position(),
            stream: None,
        });
        if write.position.is_some() {
            placed.position = write.position.clone();
        }
        if let Some(stream) = lock(&write.stream).take() {
            return placed.place_stream(stream, batch);
        }
        let (first_row, spilled_rows) = match &write.spilled {
            Some(spilled) => {
                placed.encode(batch)?;
                // Spilled writes wait for the table's earlier writes.
                if spilled.first_row != placed.rows {
                    return Err(WeirError::internal(format!(
                        "a write spilled at row {} of {} but its table has {} rows",
                        spilled.first_row, log.name, placed.rows
                    )));
                }
                placed.events = spilled.events.clone();
                (spilled.first_row, spilled.rows)
            }
            None => (placed.rows, 0),
        };
        let at = first_row + spilled_rows;
        if let Some(locations) = &log.locations {
            let locations = lock(locations);
            if spilled_rows > 0 {
                let schema = log.schema.clone();
                let reader = EntryReader::new(&*log.store, log.id, schema, None, first_row, at)?;
                for entry in reader {
                    let entry = entry?;
                    let changes = entry.changes_from(entry.first_row);
                    locations.place(&changes, entry.first_row, &mut placed.locations)?;
                }
            }
            if let Some(rows) = &write.rows {
                locations.place(rows, at, &mut placed.locations)?;
            }
        }
        if let Some(rows) = &write.rows {
            if placed.unencoded.is_empty() {
                placed.unencoded_at = at;
            }
            placed.unencoded.push(rows.clone());
        }
        let in_memory = write.rows.as_ref().map_or(0, |rows| rows.num_rows() as u64);
        placed.rows = at + in_memory;
        let spilled = match spilled_rows {
            0 => None,
            _ => Some(EntryReader::new(
                &*log.store,
                log.id,
                log.schema.clone(),
                None,
                first_row,
                at,
            )?),
        };
        Ok(WriteSource {
            log: log.clone(),
            spilled,
            rows: write.rows.clone(),
            stream: None,
        })
    }

    /// The rest of the entries, and each table's new head.
    pub(super) fn finish(&mut self, batch: &mut WriteBatch) -> Result<()> {
        for placed in self.tables.values_mut() {
            placed.end_stream()?;
            placed.encode(batch)?;
            let head =
                placed
                    .log
                    .head_after(placed.rows, placed.events.as_ref(), placed.position.clone());
            batch.put(head_key(placed.log.id), encode_head(&head)?);
        }
        Ok(())
    }

    /// The group is durable: its rows become visible.
    pub(super) fn logs(&self) -> impl Iterator<Item = &Arc<TableLog>> {
        self.tables.values().map(|placed| &placed.log)
    }

    pub(super) fn publish(&mut self) {
        for placed in self.tables.values_mut() {
            if let Some(locations) = &placed.log.locations {
                lock(locations).apply(std::mem::take(&mut placed.locations));
            }
            placed.log.published(placed.rows, placed.events.clone());
            placed.log.set_source_position(placed.position.take());
        }
    }
}

/// Appends `rows` as log entries from row `at`, moving `events` along.
pub(super) fn encode_entries(
    table_id: u64,
    rows: &TableChanges,
    at: u64,
    mut events: Option<&mut WatermarkTracker>,
    batch: &mut WriteBatch,
) -> Result<()> {
    let mut offset = 0;
    while offset < rows.num_rows() {
        let length = ROWS_PER_ENTRY.min(rows.num_rows() - offset);
        let slice = rows.slice(offset, length);
        let before = events.as_deref().and_then(WatermarkTracker::max_event_ns);
        if let Some(events) = events.as_deref_mut() {
            events.advance(&slice.rows)?;
        }
        batch.put_log(
            entry_key(table_id, at + offset as u64),
            encode_entry(&slice, before)?,
        );
        offset += length;
    }
    Ok(())
}

/// A group's placed writes: its log entries and heads, committed with the
/// views' changes.
pub(super) struct PlacedGroup {
    pub placement: Placement,
    pub batch: WriteBatch,
}

impl TableWrites for PlacedGroup {
    fn take(&mut self) -> Result<WriteBatch> {
        self.placement.finish(&mut self.batch)?;
        Ok(std::mem::take(&mut self.batch))
    }

    fn published(&mut self) {
        self.placement.publish();
    }
}
