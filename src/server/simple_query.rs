//! The simple query protocol's message loop, written here rather than
//! taken from pgwire's default because ReadyForQuery must carry the
//! session's transaction status: pgwire derives it from the responses
//! alone, and cannot tell that ROLLBACK TO SAVEPOINT reopens an aborted
//! block or that a failed COMMIT ends one.

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::{select, Either};
use futures::{Sink, SinkExt};
use pgwire::api::copy::{send_copy_both_response, send_copy_in_response, send_copy_out_response};
use pgwire::api::query::{
    send_execution_response, send_query_response, send_ready_for_query, SimpleQueryHandler,
};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionHandle, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;

use crate::session::{Session, TransactionStatus as SessionStatus};

/// What ReadyForQuery reports for `session`.
pub fn transaction_status(session: &Session) -> TransactionStatus {
    match session.transaction_status() {
        SessionStatus::Idle => TransactionStatus::Idle,
        SessionStatus::InBlock => TransactionStatus::Transaction,
        SessionStatus::Failed => TransactionStatus::Error,
    }
}

/// Answers one Query message: runs its statements through `handler` and
/// sends their responses, then ReadyForQuery with `session`'s status
/// (unless a COPY took the connection over).
pub async fn answer<H, C>(
    handler: &H,
    session: &Session,
    client: &mut C,
    query: Query,
) -> PgWireResult<()>
where
    H: SimpleQueryHandler,
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
        return Err(PgWireError::NotReadyForQuery);
    }
    client.set_state(PgWireConnectionState::QueryInProgress);
    let text = query.query;
    let responses = if text.chars().all(|c| c == ';' || c.is_whitespace()) {
        vec![Response::EmptyQuery]
    } else {
        run(handler, client, &text).await?
    };
    for response in responses {
        send(client, response).await?;
    }
    if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
        let status = transaction_status(session);
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(status);
        send_ready_for_query(client, status).await?;
    }
    Ok(())
}

/// The handler's responses, unless the client cancels first.
async fn run<H, C>(handler: &H, client: &mut C, text: &str) -> PgWireResult<Vec<Response>>
where
    H: SimpleQueryHandler,
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let handle = client
        .session_extensions()
        .get::<Arc<ConnectionHandle>>()
        .map(|handle| handle.as_ref().clone());
    let Some(handle) = handle else {
        return handler.do_query(client, text).await;
    };
    let cancelled = handle.start_query().await;
    let query = Box::pin(handler.do_query(client, text));
    match select(query, cancelled).await {
        Either::Left((responses, _)) => responses,
        Either::Right(_) => Err(PgWireError::QueryCanceled),
    }
}

async fn send<C>(client: &mut C, response: Response) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match response {
        Response::EmptyQuery => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?
        }
        Response::Query(results) => send_query_response(client, results, true).await?,
        Response::Execution(tag)
        | Response::TransactionStart(tag)
        | Response::TransactionEnd(tag) => send_execution_response(client, tag).await?,
        Response::Error(error) => {
            client
                .feed(PgWireBackendMessage::ErrorResponse((*error).into()))
                .await?
        }
        Response::CopyIn(copy) => {
            send_copy_in_response(client, copy).await?;
            client.set_state(PgWireConnectionState::CopyInProgress(false));
        }
        Response::CopyOut(copy) => send_copy_out_response(client, copy).await?,
        Response::CopyBoth(copy) => {
            send_copy_both_response(client, copy).await?;
            client.set_state(PgWireConnectionState::CopyInProgress(false));
        }
    }
    Ok(())
}
