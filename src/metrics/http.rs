//! Serves `GET /metrics` over HTTP/1.1, one request per connection. A
//! scraper that sends too much, or too slowly, is answered 400 or
//! dropped; it never holds more than a request head of memory.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::engine::Engine;
use crate::error::{Result, WeirError};

/// The most a request head may take (Prometheus sends a few hundred bytes).
const MOST_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn bind(listen: &str) -> Result<TcpListener> {
    TcpListener::bind(listen).await.map_err(|error| {
        WeirError::io(format!("cannot serve metrics on {listen}: {error}")).with_hint(
            "Is another program using the port? Pick another with --metrics-listen \
             (e.g. 127.0.0.1:9187).",
        )
    })
}

/// Answers scrapes until the task is dropped.
pub async fn serve(engine: Arc<Engine>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((socket, _)) => {
                let engine = engine.clone();
                tokio::spawn(async move {
                    if let Err(error) = answer(&engine, socket).await {
                        tracing::debug!(%error, "a metrics request failed");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a metrics connection failed");
                // Out of file descriptors, say: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(engine: &Engine, mut socket: TcpStream) -> std::io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut socket)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()),
    };
    let Some(head) = head else {
        respond(&mut socket, "400 Bad Request", "request head too large\n").await?;
        // Closing with the rest of the request unread would reset the
        // connection before the client read the answer.
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, drain(&mut socket)).await;
        return Ok(());
    };
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => match super::render(engine).await {
            Ok(text) => respond(&mut socket, "200 OK", &text).await,
            Err(error) => {
                let body = format!("{}\n", error.message);
                respond(&mut socket, "500 Internal Server Error", &body).await
            }
        },
        ("GET", _) => respond(&mut socket, "404 Not Found", "weir serves /metrics\n").await,
        _ => respond(&mut socket, "405 Method Not Allowed", "only GET\n").await,
    }
}

/// The request line and headers, or None when they pass the limit.
async fn read_head(socket: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::with_capacity(512);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = socket.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
        if head.len() > MOST_REQUEST_BYTES {
            return Ok(None);
        }
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// Reads and drops what the client still sends, until it closes (at most
/// a megabyte).
async fn drain(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut buffer = [0u8; 4096];
    let mut left = 1usize << 20;
    while left > 0 {
        let read = socket.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        left = left.saturating_sub(read);
    }
    Ok(())
}

async fn respond(socket: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.shutdown().await
}
