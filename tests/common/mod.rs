//! Test support: a real `weir` server process on a free port with its own
//! data directory, and clients for it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    pub data_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

impl TestServer {
    /// Starts a server on a fresh data directory.
    pub fn start() -> TestServer {
        let temp = tempfile::tempdir().expect("temp dir");
        let data_dir = temp.path().join("data");
        let mut server = TestServer::start_on(&data_dir);
        server._temp = Some(temp);
        server
    }

    /// Starts a server on an existing (or new) data directory.
    pub fn start_on(data_dir: &Path) -> TestServer {
        TestServer::start_with(data_dir, &[])
    }

    /// Like `start_on`, with extra `weir serve` arguments.
    pub fn start_with(data_dir: &Path, arguments: &[&str]) -> TestServer {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .args(arguments)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data_dir)
            .env("WEIR_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start weir");
        let server = TestServer {
            child: Some(child),
            port,
            data_dir: data_dir.to_path_buf(),
            _temp: None,
        };
        server.wait_until_ready();
        server
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            // A connect to a port nobody listens on can pick that same port
            // as its own and connect to itself (TCP simultaneous open):
            // only a connection to another socket means the server is up.
            if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                if stream.local_addr().ok() != stream.peer_addr().ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("weir did not start listening on port {}", self.port);
    }

    pub fn connection_string(&self) -> String {
        format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port)
    }

    pub fn url(&self) -> String {
        format!("postgresql://weir@127.0.0.1:{}/weir", self.port)
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(), tokio_postgres::NoTls)
                .await
                .expect("connect to weir");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// A connection whose socket the caller can close abruptly (abort the
    /// handle), as a client that goes away mid-statement.
    pub async fn connect_abortable(&self) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(), tokio_postgres::NoTls)
                .await
                .expect("connect to weir");
        let handle = tokio::spawn(async move {
            let _ = connection.await;
        });
        (client, handle)
    }

    /// The server's process id, for killing it from another task.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|child| child.id())
    }

    /// SIGKILL: no shutdown code runs, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill weir");
            child.wait().expect("reap weir");
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server running");
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("send SIGTERM");
        child.wait().expect("reap weir")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs each statement in turn; panics on the first error.
pub async fn execute_all(client: &tokio_postgres::Client, statements: &[String]) {
    for statement in statements {
        client
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// A query's rows as text (NULL for null), sorted.
pub async fn sorted_rows(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for message in client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            rows.push(
                (0..row.len())
                    .map(|index| row.get(index).unwrap_or("NULL").to_string())
                    .collect(),
            );
        }
    }
    rows.sort();
    rows
}

/// Sends `text` to `COPY <table> FROM STDIN` in 64 KiB messages; returns
/// the rows copied.
pub async fn copy_into(
    client: &tokio_postgres::Client,
    table: &str,
    text: String,
) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let sql = format!("COPY {table} FROM STDIN");
    let sink = client.copy_in::<_, bytes::Bytes>(&sql).await?;
    let mut sink = Box::pin(sink);
    for piece in text.as_bytes().chunks(64 * 1024) {
        sink.send(bytes::Bytes::copy_from_slice(piece)).await?;
    }
    sink.as_mut().finish().await
}

/// SIGKILLs the server after `milliseconds`, from another task.
pub fn kill_after(server: &TestServer, milliseconds: u64) -> tokio::task::JoinHandle<()> {
    let pid = server.pid().unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(milliseconds)).await;
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    })
}

/// A tiny deterministic generator for kill delays.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}
