//! The Postgres wire protocol front end (pgwire): accepts connections, gives
//! each its own `Session`, and translates between protocol messages and
//! session calls. Nothing outside this module knows about pgwire.

mod cancel;
mod handler;
mod parameters;
mod response;
mod simple_query;
mod text_format;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;

use crate::engine::Engine;
use crate::error::{Result, WeirError};
use handler::ConnectionHandlers;

pub use crate::session::SERVER_VERSION;

/// Binds `listen`; the returned listener is handed to `serve`.
pub async fn bind(listen: &str) -> Result<TcpListener> {
    TcpListener::bind(listen).await.map_err(|error| {
        WeirError::io(format!("cannot listen on {listen}: {error}")).with_hint(
            "Is another server using the port? Pick another with --listen (e.g. 127.0.0.1:5456).",
        )
    })
}

/// Serves connections until `shutdown` completes.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let connections = Arc::new(ConnectionManager::new());
    let gates = Arc::new(cancel::CommitGates::default());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let handlers =
                        ConnectionHandlers::new(engine.clone(), connections.clone(), gates.clone());
                    spawn_connection(engine.clone(), handlers, socket, peer)
                }
                Err(error) => tracing::warn!(%error, "accept failed"),
            },
            () = &mut shutdown => {
                tracing::info!("shutting down");
                return Ok(());
            }
        }
    }
}

fn spawn_connection(
    engine: Arc<Engine>,
    handlers: ConnectionHandlers,
    socket: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let _ = socket.set_nodelay(true);
    tokio::spawn(async move {
        tracing::debug!(%peer, "connection opened");
        let _open = engine.connections().opened();
        if let Err(error) = pgwire::tokio::process_socket(socket, None, handlers).await {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
        tracing::debug!(%peer, "connection closed");
    });
}
