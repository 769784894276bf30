//! Creating a materialized view: its input's history pushed through its
//! new pipeline (a cancel stops it before the commit), then the view, its
//! state and (for `EMIT EVERY`) its first firing committed with a
//! checkpoint in one batch.

use std::sync::Arc;

use super::Engine;
use crate::catalog::RelationDefinition;
use crate::connectors::table::{CommitGate, History, TableLog};
use crate::connectors::view_result::ViewResult;
use crate::engine::relations::{Relations, ViewResults};
use crate::error::{Result, WeirError};
use crate::state::WriteBatch;
use crate::stream::checkpoint::view_prefix;
use crate::stream::dataflow::{SharedDataflow, ViewPipeline};
use crate::stream::{Chunk, Message};

/// A view being created: its definition, pipeline and what it backfills.
pub(super) struct NewView {
    pub(super) name: String,
    pub(super) definition: RelationDefinition,
    pub(super) results: ViewResults,
    pub(super) pipeline: ViewPipeline,
    pub(super) inputs: Vec<NewViewInput>,
    pub(super) firing: Option<NewViewFiring>,
}

/// An `EMIT EVERY` view fires once when created: through this table, at
/// this time; `offset` is the row it fired at, once committed.
pub(super) struct NewViewFiring {
    pub(super) table: Arc<TableLog>,
    pub(super) interval_ns: i64,
    pub(super) unix_ns: i64,
    pub(super) offset: Option<u64>,
}

/// A relation a new view reads, and its history.
pub(super) struct NewViewInput {
    pub(super) name: String,
    /// The table's history (None when the input is a view).
    pub(super) table_history: Option<History>,
    pub(super) table_rows: Option<u64>,
}

/// Runs the view's backfill and commits the view with a checkpoint, so a
/// restart never has a view without state. With a `gate` (and the number
/// of the statement creating the view), a cancel stops the backfill at its
/// next chunk and, before the commit starts, leaves nothing behind.
pub(super) fn backfill_and_commit(
    dataflow: &SharedDataflow,
    catalog: &Relations,
    view: NewView,
    gate: Option<(Arc<CommitGate>, u64)>,
) -> Result<Option<NewViewFiring>> {
    let mut guard = dataflow.lock();
    let flow = &mut *guard;
    if flow.is_broken() {
        return Err(WeirError::new(
            "40001",
            "materialized views are being rebuilt after a failed write",
        )
        .with_hint("Retry the statement."));
    }
    let mut histories = Vec::new();
    let mut offsets = Vec::new();
    for input in view.inputs {
        let history: Box<dyn Iterator<Item = Result<Vec<Message>>> + Send> =
            match input.table_history {
                Some(history) => Box::new(history),
                None => view_history(catalog.view_result(&input.name))?,
            };
        offsets.extend(input.table_rows.map(|rows| (input.name.clone(), rows)));
        histories.push((input.name, history));
    }
    flow.add_view(view.pipeline);
    // One input after the other: rows of a UNION ALL's first input are
    // judged before the others have a watermark (docs/decisions.md).
    let backfilled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut writes = WriteBatch::new();
        for (input, history) in histories {
            for chunk in history {
                if let Some((gate, statement)) = &gate {
                    gate.check(*statement)?;
                }
                writes.extend(flow.push_to(Some(&view.name), &input, chunk?)?);
                flow.spill_if_large(&mut writes)?;
            }
        }
        if let Some(firing) = &view.firing {
            // What the backfill found is shown at once.
            let fire = vec![Message::Fire(view.definition.id)];
            writes.extend(flow.push_to(Some(&view.name), firing.table.name(), fire)?);
        }
        writes.extend(flow.flush()?);
        Ok(writes)
    }))
    .unwrap_or_else(|_| Err(WeirError::internal("the view's backfill failed")));
    // The cancel point: past it the view commits (or the store fails).
    let started = backfilled.and_then(|writes| match &gate {
        Some((gate, statement)) => gate.begin_commit_of(*statement).map(|()| writes),
        None => Ok(writes),
    });
    let mut writes = match started {
        Ok(writes) => writes,
        Err(error) => {
            flow.discard();
            flow.remove_failed_view(&view.name);
            return Err(error);
        }
    };
    for (table, rows) in offsets {
        flow.set_offset(&table, rows);
    }
    writes.delete_prefix(view_prefix(view.definition.id));
    let mut firing = view.firing;
    let logged = firing.as_mut().map(|firing| {
        let (offset, write, entry) = firing
            .table
            .firing_write(&[view.definition.id], firing.unix_ns);
        writes.extend(write);
        firing.offset = Some(offset);
        (offset, entry)
    });
    let outcome = Engine::checkpoint_into(dataflow, flow, &mut writes)
        .and_then(|()| catalog.commit_materialized_view(view.definition, view.results, writes));
    if let Some((gate, _)) = &gate {
        gate.end_commit();
    }
    match &outcome {
        Ok(()) => {
            flow.publish();
            flow.commit_group();
            if let (Some(firing), Some((offset, entry))) = (&firing, logged) {
                firing.table.firing_logged(offset, entry);
            }
        }
        Err(_) => {
            // The checkpoint moved every view's state past the store.
            flow.discard();
            flow.remove_view(&view.name);
            flow.mark_broken();
        }
    }
    outcome.map(|()| firing)
}

/// A materialized view's current rows as the messages a new reader starts
/// from, a batch at a time.
pub(super) fn view_history(
    result: Option<Arc<ViewResult>>,
) -> Result<Box<dyn Iterator<Item = Result<Vec<Message>>> + Send>> {
    let result = result.ok_or_else(|| WeirError::internal("view input is missing"))?;
    let rows = result
        .rows(None)?
        .read()?
        .map(|batch| batch.map(|rows| vec![Message::batch(Chunk::inserts(rows))]));
    let watermark = result
        .watermark_ns()
        .map(|watermark| Ok(vec![Message::Watermark(watermark)]));
    Ok(Box::new(rows.chain(watermark)))
}
