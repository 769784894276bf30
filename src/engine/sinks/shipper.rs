//! A sink's shipper: takes the view's committed changes from the outbox in
//! sequence order, writes them through the connector's writer, makes them
//! durable there, and then moves the mark and deletes what it shipped in
//! one commit. After an error the writer is opened again and put back to
//! the mark before anything more is written.

use std::sync::Weak;
use std::time::Duration;

use super::{encode_mark, SinkRun};
use crate::catalog::SinkDefinition;
use crate::connectors::sink::{open_writer, RecordFormat, SinkMark, SinkWriter};
use crate::engine::relations::sink_entries::sink_mark_key;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{StateStore, WriteBatch};

/// How long a failing shipper waits before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a shipper waits for a commit before looking at its stop flag.
const WAIT_FOR_CHANGES: Duration = Duration::from_millis(200);
/// Records a shipper writes at most before it makes them durable.
const RECORDS_PER_MARK: usize = 64 * 1024;

/// The shipper's loop: until stopped (or the store is closed), ship what
/// is committed.
pub(super) fn ship(
    store: &Weak<dyn StateStore>,
    definition: &SinkDefinition,
    format: &RecordFormat,
    run: &SinkRun,
) {
    let mut writing: Option<(Box<dyn SinkWriter>, SinkMark)> = None;
    while !run.stopped() {
        let Some(store) = store.upgrade() else {
            return;
        };
        if let Err(error) = ship_some(&*store, definition, format, run, &mut writing) {
            writing = None;
            tracing::warn!(sink = %definition.name, "{}", error.message);
            run.update(|status| {
                status.state = "retrying";
                status.errors += 1;
                status.last_error = Some(format!("{}: {}", error.code, error.message));
            });
            let _ = run.outbox.wait_beyond(u64::MAX, RETRY_AFTER);
        }
    }
}

fn ship_some(
    store: &dyn StateStore,
    definition: &SinkDefinition,
    format: &RecordFormat,
    run: &SinkRun,
    writing: &mut Option<(Box<dyn SinkWriter>, SinkMark)>,
) -> Result<()> {
    if writing.is_none() {
        let mark = read_mark(store, definition.id)?;
        let mut writer = open_writer(definition)?;
        writer.resume(&mark)?;
        run.update(|status| status.shipped = mark.shipped);
        *writing = Some((writer, mark));
    }
    let Some((writer, mark)) = writing.as_mut() else {
        return Ok(());
    };
    let committed = run.outbox.wait_beyond(mark.shipped, WAIT_FOR_CHANGES);
    if committed <= mark.shipped || run.stopped() {
        return Ok(());
    }
    let mut shipped = mark.shipped;
    let mut shipped_keys = WriteBatch::new();
    let mut records_written = 0;
    while shipped < committed && records_written < RECORDS_PER_MARK {
        let sequence = shipped + 1;
        let (chunks, keys) = run.outbox.read(store, sequence)?;
        let records = format.records(&chunks)?;
        writer.write(sequence, &records)?;
        records_written += records.len();
        keys.into_iter().for_each(|key| shipped_keys.delete(key));
        shipped = sequence;
    }
    let next = SinkMark {
        shipped,
        position: writer.sync()?,
    };
    shipped_keys.put(sink_mark_key(definition.id), encode_mark(&next)?);
    store.commit(shipped_keys)?;
    *mark = next;
    run.update(|status| {
        status.state = "running";
        status.shipped = shipped;
        status.records += records_written as u64;
        status.last_error = None;
    });
    Ok(())
}

fn read_mark(store: &dyn StateStore, id: u64) -> Result<SinkMark> {
    match store.get(&sink_mark_key(id))? {
        Some(value) => serde_json::from_slice(&value).map_err(|error| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!("sink {id}: its mark cannot be decoded: {error}"),
            )
        }),
        None => Ok(SinkMark::default()),
    }
}
