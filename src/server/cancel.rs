//! Cancel requests for streaming results. pgwire cancels a query only while
//! its handler runs; weir's rows are produced later, while the client reads
//! them, so the row stream registers for cancellation itself when it is
//! first polled and ends with 57014 when a cancel request arrives.

use std::sync::Arc;

use futures::channel::oneshot;
use futures::{stream, Stream, StreamExt};
use pgwire::api::ConnectionHandle;
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use super::response::to_pgwire;
use crate::error::{sqlstate, WeirError};

enum Watch {
    Unregistered(Arc<ConnectionHandle>),
    Armed(oneshot::Receiver<()>),
    Unwatched,
    Finished,
}

pub fn cancellable<S>(
    rows: S,
    handle: Option<Arc<ConnectionHandle>>,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send
where
    S: Stream<Item = PgWireResult<DataRow>> + Send + 'static,
{
    let watch = handle.map_or(Watch::Unwatched, Watch::Unregistered);
    stream::unfold((Box::pin(rows), watch), |(mut rows, watch)| async move {
        // Registering replaces the handle's previous receiver, which is why
        // it happens here, once pgwire's own wait for the handler is over.
        let mut watch = match watch {
            Watch::Unregistered(handle) => Watch::Armed(handle.start_query().await),
            other => other,
        };
        loop {
            match watch {
                Watch::Finished | Watch::Unregistered(_) => return None,
                Watch::Unwatched => {
                    return rows.next().await.map(|row| (row, (rows, Watch::Unwatched)))
                }
                Watch::Armed(mut cancelled) => {
                    tokio::select! {
                        biased;
                        signal = &mut cancelled => match signal {
                            Ok(()) => return Some((Err(canceled()), (rows, Watch::Finished))),
                            // Another query took over the handle: stop watching.
                            Err(_) => watch = Watch::Unwatched,
                        },
                        row = rows.next() => return row.map(|row| (row, (rows, Watch::Armed(cancelled)))),
                    }
                }
            }
        }
    })
}

fn canceled() -> pgwire::error::PgWireError {
    to_pgwire(WeirError::new(
        sqlstate::QUERY_CANCELED,
        "canceling statement due to user request",
    ))
}
