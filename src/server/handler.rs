//! pgwire handler traits implemented over a `Session`: simple and extended
//! query protocol, COPY FROM STDIN, startup and cancel.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_pg::datatypes::into_pg_type;
use async_trait::async_trait;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, ConnectionManager, PgWireServerHandlers, Type,
    DEFAULT_NAME,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyOutResponse};
use pgwire::messages::extendedquery::Sync as PgSync;
use pgwire::messages::response::{CommandComplete, NoticeResponse, ReadyForQuery};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;

use super::authentication::{Admission, Security, Startup};
use super::cancel::{CancelRequests, CommitGates};
use super::parameters::bound_values;
use super::response::{error_info, fields, query_response, tag, to_pgwire};
use super::simple_query::{self, transaction_status};
use super::{off_the_workers, off_the_workers_cancellable};
use crate::engine::{CommandDone, Engine};
use crate::error::{sqlstate, WeirError};
use crate::session::{bound_type, CopyInProgress, Outcome, Prepared, Session};

/// The handlers of one connection; cancel and startup share the server's
/// connection registry so a cancel request can find its target.
pub struct ConnectionHandlers {
    handler: Arc<SessionHandler>,
    startup: Arc<Startup>,
    cancel: Arc<CancelRequests>,
}

impl ConnectionHandlers {
    pub fn new(
        engine: Arc<Engine>,
        security: Arc<Security>,
        (connections, gates): (Arc<ConnectionManager>, Arc<CommitGates>),
        admission: Admission,
    ) -> Self {
        let session = Arc::new(Session::new(engine.clone()));
        let startup = Startup::new(
            engine,
            security,
            (connections.clone(), gates.clone()),
            session.clone(),
            admission,
        );
        ConnectionHandlers {
            handler: Arc::new(SessionHandler {
                parser: Arc::new(StatementParser {
                    session: session.clone(),
                }),
                session,
                pending_copy: Arc::new(Mutex::new(None)),
                copies: AtomicU64::new(0),
            }),
            startup: Arc::new(startup),
            cancel: Arc::new(CancelRequests { connections, gates }),
        }
    }
}

impl PgWireServerHandlers for ConnectionHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }
}

pub struct SessionHandler {
    session: Arc<Session>,
    parser: Arc<StatementParser>,
    pending_copy: Arc<Mutex<Option<PendingCopy>>>,
    /// COPYs started, numbering them for their statement_timeout.
    copies: AtomicU64,
}

struct PendingCopy {
    copy: CopyInProgress,
    number: u64,
}

impl SessionHandler {
    fn set_pending_copy(&self, pending: Option<PendingCopy>) {
        *self.pending_copy.lock().unwrap_or_else(|p| p.into_inner()) = pending;
    }

    /// A COPY FROM STDIN holds its table's writes while it waits for
    /// data, so it ends when a cancel request comes or its
    /// statement_timeout is up, whether or not the client sends anything
    /// (its rows go, the table's writes are free); CopyDone reports it.
    fn watch_copy(&self, number: u64, timeout: Option<std::time::Duration>) {
        const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
        let pending = Arc::downgrade(&self.pending_copy);
        let gate = self.session.commit_gate();
        let statement = gate.statement();
        let deadline = timeout.map(|timeout| tokio::time::Instant::now() + timeout);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LOOK_EVERY).await;
                let Some(pending) = pending.upgrade() else {
                    return;
                };
                let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
                let Some(copy) = pending.as_mut().filter(|copy| copy.number == number) else {
                    return;
                };
                let ended = match gate.check(statement) {
                    Err(cancelled) => Some(cancelled),
                    Ok(()) => deadline
                        .filter(|deadline| tokio::time::Instant::now() >= *deadline)
                        .map(|_| Session::copy_timed_out()),
                };
                if let Some(error) = ended {
                    copy.copy.fail(error);
                    return;
                }
            }
        });
    }

    /// Turns an outcome into a response, sending notices and parameter
    /// status messages on the way.
    async fn respond<C>(
        &self,
        client: &mut C,
        outcome: Outcome,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let response = match outcome {
            Outcome::Rows(batches) => {
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let cancel = client
                    .session_extensions()
                    .get::<Arc<ConnectionHandle>>()
                    .map(|handle| handle.as_ref().clone());
                Response::Query(query_response(batches, format, options, cancel)?)
            }
            Outcome::Done(done) => {
                send_notice(client, &done).await?;
                Response::Execution(tag(&done))
            }
            Outcome::TransactionStart(done) => {
                send_notice(client, &done).await?;
                Response::TransactionStart(tag(&done))
            }
            Outcome::TransactionEnd(done) => {
                send_notice(client, &done).await?;
                Response::TransactionEnd(tag(&done))
            }
            Outcome::Set(done, reported) => {
                if let Some(reported) = reported {
                    let status = ParameterStatus::new(reported.name, reported.value);
                    client
                        .feed(PgWireBackendMessage::ParameterStatus(status))
                        .await?;
                }
                Response::Execution(tag(&done))
            }
            Outcome::Deallocate(name, done) => {
                deallocate(client.portal_store(), name.as_deref())?;
                Response::Execution(tag(&done))
            }
            Outcome::CopyOut(copy) => {
                let rows = send_copy_out(client, copy).await?;
                Response::Execution(pgwire::api::results::Tag::new("COPY").with_rows(rows))
            }
            Outcome::CopySubscribe(feed) => return Err(stream_subscription(client, feed).await),
            Outcome::CopyIn(copy) => {
                let columns = copy.columns.fields().len();
                let copy = self.session.start_copy(copy).await;
                let number = self.copies.fetch_add(1, Ordering::Relaxed);
                self.set_pending_copy(Some(PendingCopy { copy, number }));
                self.watch_copy(number, self.session.copy_timeout());
                Response::CopyIn(CopyResponse::new(0, columns, futures::stream::empty()))
            }
        };
        Ok(response)
    }
}

/// COPY … TO STDOUT, sent here rather than by pgwire's COPY response: an
/// error part way (a cancel, statement_timeout, a failing expression) must
/// end it with an ErrorResponse, while pgwire would send the client a
/// CopyFail, which is a message only clients send, and drivers then drop
/// the connection. Inside the handler, a cancel request stops it too.
async fn send_copy_out<C>(client: &mut C, copy: crate::session::CopyOut) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let start = CopyOutResponse::new(0, copy.columns as i16, vec![0; copy.columns]);
    client
        .send(PgWireBackendMessage::CopyOutResponse(start))
        .await?;
    let header = copy.header;
    let mut lines = copy.lines;
    let mut rows = 0;
    while let Some(line) = lines.next().await {
        let line = line.map_err(to_pgwire)?;
        client
            .feed(PgWireBackendMessage::CopyData(CopyData::new(
                bytes::Bytes::from(line),
            )))
            .await?;
        rows += 1;
    }
    client
        .send(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    Ok(rows - usize::from(header && rows > 0))
}

/// COPY (SUBSCRIBE …) TO STDOUT: rows are sent (and flushed) as they come,
/// which pgwire's COPY response would hold in its buffer, until the client
/// cancels (pgwire then drops this future and reports 57014) or goes away.
async fn stream_subscription<C>(
    client: &mut C,
    mut feed: crate::session::CopySubscription,
) -> PgWireError
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let columns = feed.columns();
    let start = CopyOutResponse::new(0, columns as i16, vec![0; columns]);
    if let Err(error) = client
        .send(PgWireBackendMessage::CopyOutResponse(start))
        .await
    {
        return error.into();
    }
    loop {
        let lines = match feed.next_lines().await {
            Ok(lines) => lines,
            Err(error) => return to_pgwire(error),
        };
        for line in lines {
            let data = CopyData::new(bytes::Bytes::from(line));
            if let Err(error) = client.feed(PgWireBackendMessage::CopyData(data)).await {
                return error.into();
            }
        }
        if let Err(error) = client.flush().await {
            return error.into();
        }
    }
}

/// Forgets a prepared statement, like Close. pgwire's store cannot list its
/// statements, so DEALLOCATE ALL leaves them to be replaced when a driver
/// prepares its names again, or to go with the connection.
fn deallocate<S: PortalStore>(store: &S, name: Option<&str>) -> PgWireResult<()> {
    let Some(name) = name else {
        store.clear_statements();
        return Ok(());
    };
    if store.get_statement(name).is_none() {
        return Err(to_pgwire(WeirError::new(
            sqlstate::INVALID_STATEMENT_NAME,
            format!("prepared statement \"{name}\" does not exist"),
        )));
    }
    store.rm_statement(name);
    Ok(())
}

async fn send_notice<C>(client: &mut C, done: &CommandDone) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if let Some(notice) = &done.notice {
        let mut info = error_info(&WeirError::new("00000", notice.message.clone()));
        info.severity = notice.severity.to_string();
        if notice.severity == "WARNING" {
            info.code = "01000".to_string();
        }
        client
            .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                info,
            )))
            .await?;
    }
    Ok(())
}

#[async_trait]
impl SimpleQueryHandler for SessionHandler {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        off_the_workers(Box::pin(simple_query::answer(
            self,
            &self.session,
            client,
            query,
        )))
        .await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.session.commit_gate().start_statement();
        let statements = match self.session.parse(query) {
            Ok(statements) => statements,
            Err(error) => return Ok(vec![Response::Error(Box::new(error_info(&error)))]),
        };
        if statements.is_empty() {
            // Only comments: Postgres answers EmptyQueryResponse, which
            // drivers wait for (psycopg: "got no result from the query").
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(statements.len());
        for statement in statements {
            let outcome = match self.session.prepare(statement).await {
                Ok(prepared) => self.session.execute(&prepared, None).await,
                Err(error) => Err(error),
            };
            match outcome {
                Ok(outcome) => {
                    let is_copy = matches!(outcome, Outcome::CopyIn(_));
                    responses.push(self.respond(client, outcome, &Format::UnifiedText).await?);
                    if is_copy {
                        // The copy sub-protocol takes over the connection.
                        break;
                    }
                }
                Err(error) => {
                    // Like Postgres: report the error, skip the rest.
                    responses.push(Response::Error(Box::new(error_info(&error))));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for SessionHandler {
    type Statement = Prepared;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    /// ReadyForQuery with the session's transaction status (see
    /// `simple_query`).
    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        let status = transaction_status(&self.session);
        client.set_transaction_status(status);
        let ready = ReadyForQuery::new(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ready))
            .await?;
        client.flush().await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.session.commit_gate().start_statement();
        let prepared = &portal.statement.statement;
        let parameters = bound_values(portal).inspect_err(|_| self.session.statement_failed())?;
        let connection = client
            .session_extensions()
            .get::<Arc<ConnectionHandle>>()
            .map(|handle| handle.as_ref().clone());
        // Boxed, as every statement's work: the future holds planning's
        // nested futures (tens of KB), and pgwire and the runtime move it
        // several times per statement — a memcpy that was ~11 % of the
        // CPU of 8 clients' single-row INSERTs.
        off_the_workers_cancellable(
            connection,
            Box::pin(async {
                let outcome = self
                    .session
                    .execute(prepared, Some(&parameters))
                    .await
                    .map_err(to_pgwire)?;
                self.respond(client, outcome, &portal.result_column_format)
                    .await
            }),
        )
        .await
    }
}

/// Parse-time half of the extended protocol: plans the statement so its
/// parameter and result types can be described.
pub struct StatementParser {
    session: Arc<Session>,
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        off_the_workers(Box::pin(async {
            let mut statements = self.session.parse(sql).map_err(to_pgwire)?;
            if statements.len() > 1 {
                return Err(to_pgwire(WeirError::syntax(
                    "cannot insert multiple commands into a prepared statement",
                )));
            }
            let Some(statement) = statements.pop() else {
                return Ok(None);
            };
            let prepared = self.session.prepare(statement).await.map_err(to_pgwire)?;
            Ok(Some(prepared))
        }))
        .await
    }

    /// ParameterDescription: the types values are bound as (text where none
    /// could be inferred, or the type has no Postgres name). Drivers that
    /// encode values by the described type (asyncpg, tokio-postgres) rely
    /// on it.
    fn get_parameter_types(&self, prepared: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(prepared
            .parameter_types
            .iter()
            .map(|inferred| into_pg_type(&bound_type(inferred.as_ref())).unwrap_or(Type::TEXT))
            .collect())
    }

    fn get_result_schema(
        &self,
        prepared: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        fields(
            &prepared.result_schema,
            format.unwrap_or(&Format::UnifiedText),
            None,
        )
    }
}

#[async_trait]
impl CopyHandler for SessionHandler {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let delivery = {
            let mut pending = self.pending_copy.lock().unwrap_or_else(|p| p.into_inner());
            let Some(pending) = pending.as_mut() else {
                return Err(to_pgwire(WeirError::new(
                    "08P01",
                    "CopyData without a COPY in progress",
                )));
            };
            pending.copy.data(&copy_data.data);
            pending.copy.delivery()
        };
        // Waits while the views are behind: the client is read no faster.
        if let Some(delivery) = delivery {
            delivery.send().await;
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let pending = self
            .pending_copy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(pending) = pending else {
            return Err(to_pgwire(WeirError::new(
                "08P01",
                "CopyDone without a COPY in progress",
            )));
        };
        let done = self
            .session
            .finish_copy(pending.copy)
            .await
            .map_err(to_pgwire)?;
        client
            .send(PgWireBackendMessage::CommandComplete(
                CommandComplete::from(tag(&done)),
            ))
            .await?;
        // pgwire sends ReadyForQuery with this status next.
        client.set_transaction_status(transaction_status(&self.session));
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.set_pending_copy(None);
        to_pgwire(WeirError::new(
            sqlstate::QUERY_CANCELED,
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}
