//! The Postgres wire protocol front end (pgwire): accepts connections, gives
//! each its own `Session`, and translates between protocol messages and
//! session calls. Nothing outside this module knows about pgwire.

mod authentication;
mod cancel;
mod handler;
mod parameters;
mod response;
mod simple_query;
mod text_format;
mod tls;
mod waiting_room;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;

use crate::engine::Engine;
use crate::error::{Result, WeirError};
use handler::ConnectionHandlers;

pub use authentication::Security;
pub use tls::acceptor as tls_acceptor;

pub use crate::session::SERVER_VERSION;

/// Runs a statement's work without holding up other connections: parsing
/// and planning a huge statement takes seconds of CPU (20,000 select items),
/// and while every async worker is busy with one no other session, not even
/// a new connection, is served. On the multi-threaded runtime the worker
/// first hands its other tasks to another (`block_in_place`) and then runs
/// `work` to the end; on a single-threaded one (tests) `work` just runs.
///
/// A panic while the statement runs (a bug, in weir or in DataFusion)
/// fails the statement with XX000 instead of ending the connection
/// without a word.
async fn off_the_workers<T>(
    work: impl Future<Output = pgwire::error::PgWireResult<T>>,
) -> pgwire::error::PgWireResult<T> {
    let work = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(work));
    let handle = tokio::runtime::Handle::current();
    let outcome = match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(work))
        }
        _ => work.await,
    };
    outcome.unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(response::to_pgwire(
            WeirError::internal(format!("the statement failed inside weir: {reason}")).with_hint(
                "This is a bug; the connection stays usable. Please report the statement.",
            ),
        ))
    })
}

/// `off_the_workers` for a handler pgwire would cancel by dropping it (an
/// Execute): pgwire's own race against a cancel request cannot run while
/// the worker is given over to `work`, so the race runs inside instead.
async fn off_the_workers_cancellable<T>(
    connection: Option<Arc<pgwire::api::ConnectionHandle>>,
    work: impl Future<Output = pgwire::error::PgWireResult<T>>,
) -> pgwire::error::PgWireResult<T> {
    let multi_threaded = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread;
    let Some(connection) = connection.filter(|_| multi_threaded) else {
        return work.await;
    };
    off_the_workers(async move {
        let cancelled = connection.start_query().await;
        let work = std::pin::pin!(work);
        match futures::future::select(work, cancelled).await {
            futures::future::Either::Left((outcome, _)) => outcome,
            futures::future::Either::Right((Ok(()), _)) => {
                Err(pgwire::error::PgWireError::QueryCanceled)
            }
            // Another query took the handle over: nothing to watch.
            futures::future::Either::Right((Err(_), work)) => work.await,
        }
    })
    .await
}

/// Binds `listen`; the returned listener is handed to `serve`.
/// The largest Query, Parse or Bind message clients may send, in bytes
/// (the vendored pgwire's limit; see vendor/README.md).
pub fn limit_statement_messages(bytes: u64) {
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    pgwire::messages::set_max_statement_message_bytes(bytes);
}

pub async fn bind(listen: &str) -> Result<TcpListener> {
    TcpListener::bind(listen).await.map_err(|error| {
        WeirError::io(format!("cannot listen on {listen}: {error}")).with_hint(
            "Is another server using the port? Pick another with --listen (e.g. 127.0.0.1:5456).",
        )
    })
}

/// Refuses to serve other hosts with nobody to authenticate: when the
/// listen address is not a loopback one and no role has a password, anyone
/// who can reach the port would log in, unless the operator said so
/// (`--insecure-trust-all`).
pub fn check_exposure(listener: &TcpListener, security: &Security, engine: &Engine) -> Result<()> {
    let address = listener
        .local_addr()
        .map_err(|error| WeirError::io(format!("cannot read the listen address: {error}")))?;
    let loopback_only = address.ip().to_canonical().is_loopback();
    if loopback_only || security.trust_everyone || engine.roles().any_password() {
        return Ok(());
    }
    Err(WeirError::new(
        crate::error::sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
        format!("refusing to listen on {address} without authentication: no role has a password"),
    )
    .with_hint(
        "Set a password for the superuser with --superuser-password (or WEIR_SUPERUSER_PASSWORD), \
         listen on 127.0.0.1, or pass --insecure-trust-all to let every client in unchecked.",
    ))
}

/// Serves connections until `shutdown` completes.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    security: Security,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let security = Arc::new(security);
    let connections = Arc::new(ConnectionManager::new());
    let gates = Arc::new(cancel::CommitGates::default());
    let waiting = Arc::new(waiting_room::WaitingRoom::default());
    let mut accept_failures = AcceptFailures::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    accept_failures.reset();
                    let shared = (connections.clone(), gates.clone());
                    let server = (engine.clone(), security.clone(), waiting.clone());
                    spawn_connection(server, shared, socket, peer)
                }
                Err(error) => accept_failures.wait_after(&error).await,
            },
            () = &mut shutdown => {
                tracing::info!("shutting down");
                return Ok(());
            }
        }
    }
}

/// What the accept loop does after accept fails (out of file descriptors,
/// say): it waits, longer after each failure up to a second, so it does not
/// spin; and it logs once a second at most, with the count.
#[derive(Default)]
struct AcceptFailures {
    delay: Duration,
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl AcceptFailures {
    async fn wait_after(&mut self, error: &std::io::Error) {
        self.unlogged += 1;
        if self
            .logged_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(%error, failures = self.unlogged, "accept failed; waiting before the next");
            self.logged_at = Some(Instant::now());
            self.unlogged = 0;
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
        tokio::time::sleep(self.delay).await;
    }

    fn reset(&mut self) {
        self.delay = Duration::ZERO;
    }
}

fn spawn_connection(
    (engine, security, waiting): (Arc<Engine>, Arc<Security>, Arc<waiting_room::WaitingRoom>),
    shared: (Arc<ConnectionManager>, Arc<cancel::CommitGates>),
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let _ = socket.set_nodelay(true);
    tokio::spawn(async move {
        tracing::debug!(%peer, "connection opened");
        let _open = engine.connections().opened();
        // Waiting until it logs in, when it takes a logged-in slot
        // (authentication::Admission); evicted if the waiting room fills.
        let evicted = Arc::new(tokio::sync::Notify::new());
        let ticket = waiting.enter(engine.connections().limit(), evicted.clone());
        let logged_in = Arc::new(tokio::sync::Notify::new());
        let admission = authentication::Admission::new(ticket, logged_in.clone());
        let tls = security.tls.clone();
        let timeout = security.authentication_timeout;
        let handlers = ConnectionHandlers::new(engine.clone(), security, shared, admission);
        let serving = pgwire::tokio::process_socket(socket, tls, handlers);
        tokio::select! {
            served = serving => if let Err(error) = served {
                tracing::debug!(%peer, %error, "connection ended with an error");
            },
            reason = not_logged_in(timeout, &logged_in, &evicted) => {
                tracing::info!(%peer, "connection closed before it logged in: {reason}");
            }
        }
        tracing::debug!(%peer, "connection closed");
    });
}

/// Completes, with the reason, when a connection that has not logged in
/// must end: `timeout` after it was accepted (Postgres's
/// authentication_timeout), or when the waiting room evicts it; never once
/// it has logged in. Dropping the connection then ends it.
async fn not_logged_in(
    timeout: Duration,
    logged_in: &tokio::sync::Notify,
    evicted: &tokio::sync::Notify,
) -> &'static str {
    tokio::select! {
        biased;
        () = logged_in.notified() => std::future::pending().await,
        () = evicted.notified() => "too many connections are waiting to log in; the longest waiting was closed",
        () = tokio::time::sleep(timeout) => "authentication timed out",
    }
}

#[cfg(test)]
mod numeric_encoding_tests {
    //! arrow-pg's NUMERIC encoder as weir changed it (vendor/README.md);
    //! here because vendored crates' own tests do not run in CI.
    use arrow_pg::numeric::PgNumeric;
    use bytes::BytesMut;

    fn binary(value: i128, scale: i8) -> Vec<u8> {
        let mut out = BytesMut::new();
        PgNumeric::new(value, scale).write_binary(&mut out);
        out.to_vec()
    }

    #[test]
    fn as_postgres_sends_them() {
        // Postgres: 0.2 is 0001 ffff 0000 0001 07d0.
        assert_eq!(binary(2, 1), vec![0, 1, 0xff, 0xff, 0, 0, 0, 1, 0x07, 0xd0]);
        // 1000 at scale 0: one digit 1000, weight 0.
        assert_eq!(binary(1000, 0), vec![0, 1, 0, 0, 0, 0, 0, 0, 0x03, 0xe8]);
        // -103.14159: digits 0103 1415 9000, weight 0, negative, scale 5.
        assert_eq!(
            binary(-10314159, 5),
            vec![0, 3, 0, 0, 0x40, 0, 0, 5, 0, 0x67, 0x05, 0x87, 0x23, 0x28]
        );
        // Zero at scale 2: no digits.
        assert_eq!(binary(0, 2), vec![0, 0, 0, 0, 0, 0, 0, 2]);
        // A 33-digit value rust_decimal could not hold.
        let big = 123456789012345678901230000000000i128;
        assert_eq!(binary(big, 10)[..8], [0, 6, 0, 5, 0, 0, 0, 10]);
    }
}
