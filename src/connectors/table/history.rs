//! A table's stored rows replayed as the messages live appends produced:
//! each row with the watermark it arrived under, and watermarks raised
//! between rows where they were raised, and `EMIT EVERY` firings between
//! the rows they happened after. Read entry by entry from the store,
//! so backfilling a view or recovering one holds one entry at a time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::compute::filter_record_batch;

use super::entries::{Entry, EntryReader};
use super::locations::RowLocations;
use super::lock;
use crate::error::Result;
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};

pub struct History {
    entries: EntryReader,
    /// The table's watermark definition with nothing seen; None without one.
    tracker: Option<WatermarkTracker>,
    ticks: BTreeMap<u64, i64>,
    /// Views fired, by the row count they fired at (from `from` on).
    firings: BTreeMap<u64, Vec<u64>>,
    /// Messages start at this row; earlier rows only move the watermark.
    from: u64,
    to: u64,
    /// Ticks before this row have been applied.
    ticks_applied_to: u64,
    finished: bool,
    /// Only the rows live now, as inserts (a new view's backfill).
    live: Option<Arc<Mutex<RowLocations>>>,
}

impl History {
    pub(super) fn new(
        entries: EntryReader,
        tracker: Option<WatermarkTracker>,
        (ticks, firings): (BTreeMap<u64, i64>, BTreeMap<u64, Vec<u64>>),
        from: u64,
        to: u64,
    ) -> Self {
        History {
            entries,
            tracker,
            ticks,
            firings,
            from,
            to,
            ticks_applied_to: 0,
            finished: false,
            live: None,
        }
    }

    /// Gives only the rows live at the end, as inserts.
    pub(super) fn only_live(&mut self, locations: Arc<Mutex<RowLocations>>) {
        self.live = Some(locations);
    }

    /// Raises the watermark by the ticks logged up to row `at` (inclusive),
    /// emitting those at or after the replay's start, and fires the views
    /// fired there (a firing at a tick's row after the tick: the order of
    /// the two does not change what the views hold after both).
    fn apply_ticks(&mut self, at: u64, messages: &mut Vec<Message>) {
        if at < self.ticks_applied_to {
            return;
        }
        let range = self.ticks_applied_to..=at;
        let mut firings = self.firings.range(range.clone()).peekable();
        if let Some(tracker) = self.tracker.as_mut() {
            for (&row, &watermark) in self.ticks.range(range) {
                while let Some((_, views)) = firings.next_if(|(&fired, _)| fired < row) {
                    messages.extend(views.iter().map(|&view| Message::Fire(view)));
                }
                tracker.raise_to(watermark);
                if row >= self.from {
                    messages.push(Message::Watermark(watermark));
                }
            }
        }
        for (_, views) in firings {
            messages.extend(views.iter().map(|&view| Message::Fire(view)));
        }
        self.ticks_applied_to = at.saturating_add(1);
    }

    fn entry_messages(&mut self, entry: Entry) -> Result<Vec<Message>> {
        let mut messages = Vec::new();
        if let Some(tracker) = self.tracker.as_mut() {
            tracker.seen_up_to(entry.max_event_before);
        }
        self.apply_ticks(entry.first_row, &mut messages);
        if entry.first_row < self.from {
            let skipped = (self.from - entry.first_row) as usize;
            if let Some(tracker) = self.tracker.as_mut() {
                tracker.advance(&entry.rows.slice(0, skipped.min(entry.rows.num_rows())))?;
            }
        }
        let changes = entry.changes_from(self.from);
        if let Some(locations) = &self.live {
            let start = self.from.max(entry.first_row);
            let shown = lock(locations).visible(&changes, start, self.to);
            let rows = filter_record_batch(&changes.rows, &shown)?;
            if rows.num_rows() > 0 {
                messages.extend(source_messages(rows, None, self.tracker.as_mut())?);
            }
            return Ok(messages);
        }
        if changes.num_rows() > 0 {
            let diffs = changes.diffs();
            messages.extend(source_messages(changes.rows, diffs, self.tracker.as_mut())?);
        }
        Ok(messages)
    }
}

impl Iterator for History {
    type Item = Result<Vec<Message>>;

    fn next(&mut self) -> Option<Result<Vec<Message>>> {
        if self.finished {
            return None;
        }
        match self.entries.next() {
            Some(Ok(entry)) => Some(self.entry_messages(entry)),
            Some(Err(error)) => {
                self.finished = true;
                Some(Err(error))
            }
            None => {
                self.finished = true;
                let mut messages = Vec::new();
                self.apply_ticks(self.to, &mut messages);
                (!messages.is_empty()).then_some(Ok(messages))
            }
        }
    }
}
