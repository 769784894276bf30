//! Cancel requests. A request first asks the target session's commit gate:
//! a write that has started committing is not cancelled (it completes and
//! is reported as done), anything else is, through pgwire's connection
//! registry. pgwire cancels a query only while its handler runs; weir's
//! rows are produced later, while the client reads them, so the row stream
//! registers for cancellation itself when it is first polled and ends with
//! 57014 when a cancel request arrives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use futures::channel::oneshot;
use futures::{stream, Stream, StreamExt};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ConnectionHandle, ConnectionManager};
use pgwire::error::PgWireResult;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::data::DataRow;
use pgwire::messages::startup::SecretKey;

use crate::session::CommitGate;

use super::response::to_pgwire;
use crate::error::{sqlstate, WeirError};

/// Every connected session's commit gate, by its (pid, secret key).
#[derive(Default)]
pub struct CommitGates {
    gates: Mutex<HashMap<(i32, Bytes), Weak<CommitGate>>>,
}

impl CommitGates {
    pub fn register(&self, pid: i32, secret_key: &SecretKey, gate: &Arc<CommitGate>) {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.retain(|_, gate| gate.strong_count() > 0);
        gates.insert((pid, secret_key.to_bytes()), Arc::downgrade(gate));
    }

    fn find(&self, pid: i32, secret_key: &SecretKey) -> Option<Arc<CommitGate>> {
        let gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        gates.get(&(pid, secret_key.to_bytes()))?.upgrade()
    }
}

/// Answers CancelRequest messages (which arrive on a connection of their own).
pub struct CancelRequests {
    pub connections: Arc<ConnectionManager>,
    pub gates: Arc<CommitGates>,
}

#[async_trait]
impl CancelHandler for CancelRequests {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let Some(gate) = self.gates.find(request.pid, &request.secret_key) else {
            return;
        };
        if gate.cancel() {
            self.connections
                .cancel(request.pid, &request.secret_key)
                .await;
        }
    }
}

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
