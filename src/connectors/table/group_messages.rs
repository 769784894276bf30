//! A group's writes as the views read them, and the one commit of a group
//! with the views' changes (`commit_with_views`).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::changes::TableChanges;
use super::entries::EntryReader;
use super::placement::Placement;
use super::streaming::{Part, StreamEnd, StreamReceiver};
use super::{lock, TableLog};
use crate::error::{Result, WeirError};
use crate::state::{StateStore, WriteBatch};
use crate::stream::append_observer::{AppendObserver, GroupFailure, WriteGroup};
use crate::stream::dataflow::source_messages;
use crate::stream::{Message, WatermarkTracker};

/// One write's rows as the views read them: spilled entries, then the
/// rows in memory; or, for a streamed write, its parts as they come.
pub(super) struct WriteSource {
    pub log: Arc<TableLog>,
    pub spilled: Option<EntryReader>,
    pub rows: Option<TableChanges>,
    pub stream: Option<(StreamReceiver, StreamEnd)>,
}

impl WriteSource {
    /// The write's next rows; None at its end.
    fn next_changes(&mut self, others_waiting: &dyn Fn() -> bool) -> Option<Result<TableChanges>> {
        if let Some((stream, end)) = self.stream.as_mut() {
            return match stream.next(others_waiting) {
                Ok(Part::Rows(rows)) => Some(Ok(rows)),
                Ok(Part::End { rows, events }) => {
                    *lock(end) = Some((rows, events));
                    self.stream = None;
                    None
                }
                Err(error) => Some(Err(error)),
            };
        }
        match self.spilled.as_mut().and_then(Iterator::next) {
            Some(entry) => Some(entry.map(|entry| entry.changes_from(entry.first_row))),
            None => self.rows.take().map(Ok),
        }
    }
}

/// The group's writes as messages, each row with the watermark it arrives
/// under (carried from write to write of a table).
pub(super) struct GroupMessages<'a> {
    sources: Vec<WriteSource>,
    trackers: HashMap<u64, Option<WatermarkTracker>>,
    /// Whether other writes wait for the committer (a streamed write's
    /// stalled client is then let go sooner).
    others_waiting: &'a dyn Fn() -> bool,
}

impl<'a> GroupMessages<'a> {
    pub fn new(
        sources: Vec<WriteSource>,
        placement: &Placement,
        others_waiting: &'a dyn Fn() -> bool,
    ) -> Self {
        let trackers = placement
            .logs()
            .map(|log| (log.id, log.visible_tracker()))
            .collect();
        GroupMessages {
            sources,
            trackers,
            others_waiting,
        }
    }
}

impl WriteGroup for GroupMessages<'_> {
    fn writes(&self) -> usize {
        self.sources.len()
    }

    fn table(&self, write: usize) -> &str {
        &self.sources[write].log.name
    }

    fn next_messages(&mut self, write: usize) -> Option<Result<Vec<Message>>> {
        let source = &mut self.sources[write];
        let changes = source.next_changes(self.others_waiting)?;
        let tracker = self.trackers.get_mut(&source.log.id)?.as_mut();
        Some(changes.and_then(|changes| {
            let diffs = changes.diffs();
            source_messages(changes.rows, diffs, tracker)
        }))
    }

    fn skip(&mut self, write: usize) -> Result<()> {
        let source = &mut self.sources[write];
        while source.stream.is_some() {
            if let Some(Err(error)) = source.next_changes(self.others_waiting) {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// A single write already in memory (a watermark raise).
struct SingleWrite<'a> {
    pub table: &'a str,
    pub messages: Option<Vec<Message>>,
}

impl WriteGroup for SingleWrite<'_> {
    fn writes(&self) -> usize {
        1
    }

    fn table(&self, _write: usize) -> &str {
        self.table
    }

    fn next_messages(&mut self, _write: usize) -> Option<Result<Vec<Message>>> {
        self.messages.take().map(Ok)
    }
}

/// What a group commits to its tables besides the views' changes (taken
/// once the views have read the group, so a streamed write's end is
/// known), and what follows once it is durable.
pub(super) trait TableWrites {
    fn take(&mut self) -> Result<WriteBatch>;
    /// The group is durable; runs while the views' lock is held.
    fn published(&mut self);
}

/// Runs a group through the views reading its tables, then commits its
/// writes and the views' changes in one atomic, durable batch.
pub(super) fn commit_with_views(
    store: &dyn StateStore,
    tables: &mut dyn TableWrites,
    observer: Option<Arc<dyn AppendObserver>>,
    group: &mut dyn WriteGroup,
) -> std::result::Result<(), GroupFailure> {
    let whole = |error| GroupFailure { write: None, error };
    let Some(observer) = observer else {
        for write in 0..group.writes() {
            group.skip(write).map_err(|error| GroupFailure {
                write: Some(write),
                error,
            })?;
        }
        store.commit(tables.take().map_err(whole)?).map_err(whole)?;
        tables.published();
        return Ok(());
    };
    let mut commit = |views: WriteBatch| {
        let mut all = tables.take()?;
        all.extend(views);
        store.commit(all)?;
        tables.published();
        Ok(())
    };
    // A failed group was undone by the observer; a bug in an operator
    // (a panic) must not leave views half-updated unnoticed.
    catch_unwind(AssertUnwindSafe(|| {
        observer.append_and_commit(group, &mut commit)
    }))
    .unwrap_or_else(|_| {
        observer.on_commit_failed();
        Err(whole(WeirError::internal(
            "a materialized view failed on this write; views are rebuilt",
        )))
    })
}

/// An entry logged between rows, and what follows once it is durable.
struct BetweenRows<'a> {
    write: Option<WriteBatch>,
    published: &'a mut dyn FnMut(),
}

impl TableWrites for BetweenRows<'_> {
    fn take(&mut self) -> Result<WriteBatch> {
        Ok(self.write.take().unwrap_or_default())
    }

    fn published(&mut self) {
        (self.published)()
    }
}

impl TableLog {
    /// Commits `write`, an entry logged between rows (a clock tick, a
    /// firing), with the views' changes `messages` cause, in one atomic,
    /// durable batch; `published` runs once it is durable.
    pub(super) fn commit_between_rows(
        &self,
        write: WriteBatch,
        messages: Vec<Message>,
        published: &mut dyn FnMut(),
    ) -> Result<()> {
        let mut group = SingleWrite {
            table: &self.name,
            messages: Some(messages),
        };
        let mut tables = BetweenRows {
            write: Some(write),
            published,
        };
        let observer = self.committer.observer();
        commit_with_views(&*self.store, &mut tables, observer, &mut group)
            .map_err(|failure| failure.error)
    }
}
