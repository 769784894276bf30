//! Test support: a real `weir` server process on a free port with its own
//! data directory, and clients for it.
#![allow(dead_code)]

pub mod postgres;
pub mod update_model;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    /// The metrics endpoint's port, when started with `--metrics-listen`.
    pub metrics_port: Option<u16>,
    pub data_dir: PathBuf,
    /// What it was started with besides the data directory, for the store
    /// check.
    arguments: Vec<String>,
    /// Whether dropping it checks that weir starts again on its data
    /// directory (off for a test that damages the directory on purpose).
    pub store_check: bool,
    _temp: Option<tempfile::TempDir>,
}

/// Reads the server's log (its stdout) until the ready line and returns
/// the port it names, and the metrics port a line before it named; the
/// rest of the log is read and dropped, so the server never waits on a
/// full pipe.
fn ready_ports(log: ChildStdout) -> (u16, Option<u16>) {
    let (port_sender, ports) = mpsc::channel();
    std::thread::spawn(move || {
        let mut port_sender = Some(port_sender);
        let mut metrics_port = None;
        for line in BufReader::new(log).lines() {
            let Ok(line) = line else { break };
            metrics_port = metrics_port.or_else(|| metrics_port_in(&line));
            if let Some(port) = port_in(&line) {
                if let Some(sender) = port_sender.take() {
                    let _ = sender.send((port, metrics_port));
                }
            }
        }
    });
    ports
        .recv_timeout(Duration::from_secs(60))
        .expect("weir did not say it was ready (it exited, or took over 60 s)")
}

/// The port in the metrics line (`… metrics at http://H:PORT/metrics`).
fn metrics_port_in(line: &str) -> Option<u16> {
    let (_, after) = line.split_once("metrics at http://")?;
    let (address, _) = after.split_once("/metrics")?;
    address.rsplit_once(':')?.1.parse().ok()
}

/// The port in the ready line (`… connect with: psql -h H -p PORT -U weir`).
fn port_in(line: &str) -> Option<u16> {
    let (_, after) = line.split_once("weir is ready")?;
    let (_, after) = after.split_once(" -p ")?;
    after.split_whitespace().next()?.parse().ok()
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

    /// Like `start_on`, with extra `weir serve` arguments. The server
    /// binds a port of its own choosing (`--listen 127.0.0.1:0`) and says
    /// which in its ready line: a port picked here and bound later could
    /// be taken in between by another test's server or client.
    pub fn start_with(data_dir: &Path, arguments: &[&str]) -> TestServer {
        TestServer::start_listening(data_dir, "127.0.0.1:0", arguments)
    }

    /// Like `start_with`, listening on `listen` (a port of 0 lets the
    /// server choose).
    pub fn start_listening(data_dir: &Path, listen: &str, arguments: &[&str]) -> TestServer {
        TestServer::start_full(data_dir, listen, arguments, Stdio::inherit())
    }

    /// Like `start_with`, with the server's standard error (where a panic
    /// would be reported) going to `stderr`.
    pub fn start_with_stderr(data_dir: &Path, arguments: &[&str], stderr: Stdio) -> TestServer {
        TestServer::start_full(data_dir, "127.0.0.1:0", arguments, stderr)
    }

    fn start_full(data_dir: &Path, listen: &str, arguments: &[&str], stderr: Stdio) -> TestServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .args(arguments)
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(data_dir)
            .env("WEIR_LOG", "warn,weir::ready=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start weir");
        let log = child.stdout.take().expect("the server's log");
        let (port, metrics_port) = ready_ports(log);
        TestServer {
            child: Some(child),
            port,
            metrics_port,
            data_dir: data_dir.to_path_buf(),
            arguments: arguments.iter().map(|a| a.to_string()).collect(),
            store_check: true,
            _temp: None,
        }
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

/// The store check: after every test that wrote, weir must start again
/// on the data directory it left (a test that never restarted would not
/// see a directory weir refuses). Run when a server still running is
/// dropped at the end of a test that passed.
impl Drop for TestServer {
    fn drop(&mut self) {
        let running = self.child.is_some();
        self.kill();
        if !running || !self.store_check || std::thread::panicking() {
            return;
        }
        let arguments: Vec<&str> = self.arguments.iter().map(String::as_str).collect();
        let mut again =
            TestServer::start_full(&self.data_dir, "127.0.0.1:0", &arguments, Stdio::inherit());
        again.store_check = false;
        again.kill();
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

/// Runs psql, logged in as `user`, with `script` on standard input (errors
/// do not stop it); returns stdout and stderr together.
pub fn psql_script(server: &TestServer, user: &str, script: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args([
            "-U",
            user,
            "-d",
            "weir",
            "-v",
            "ON_ERROR_STOP=0",
            "-P",
            "pager=off",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql must be installed (Debian package postgresql-client)");
    let mut input = child.stdin.take().unwrap();
    input.write_all(script.as_bytes()).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The views' rows, as sorted text lines `view: a | b`.
pub async fn views_snapshot(client: &tokio_postgres::Client, views: &[&str]) -> Vec<String> {
    let mut lines = Vec::new();
    for view in views {
        let rows = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        lines.extend(
            rows.iter()
                .map(|row| format!("{view}: {}", row.join(" | "))),
        );
    }
    lines
}

/// The recovery tests' kill -9 scenario: `setup`, statements 0..20, a
/// checkpoint, statements 20..40, a kill (those 20 are replayed), 40..55,
/// a checkpoint and a kill just after it (nothing to replay), then 55..80.
/// After each restart the views must equal an uninterrupted run's at the
/// same point. Returns that run's final rows, for the test's own checks.
pub async fn crashes_match_an_uninterrupted_run(
    setup: &str,
    statements: fn(u64, u64) -> Vec<String>,
    views: &[&str],
) -> Vec<String> {
    let first_part = |client: tokio_postgres::Client| async move {
        client.batch_execute(setup).await.unwrap();
        execute_all(&client, &statements(0, 20)).await;
        // A checkpoint lands here; what follows is replayed after a crash.
        tokio::time::sleep(Duration::from_millis(600)).await;
        execute_all(&client, &statements(20, 40)).await;
        client
    };
    let reference = TestServer::start();
    let client = first_part(reference.connect().await).await;
    let expected_at_crash = views_snapshot(&client, views).await;
    execute_all(&client, &statements(40, 55)).await;
    let expected_at_second_crash = views_snapshot(&client, views).await;
    execute_all(&client, &statements(55, 80)).await;
    let expected_final = views_snapshot(&client, views).await;

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let checkpoints = ["--checkpoint-interval-ms", "200"];
    let mut crashing = TestServer::start_with(&data_dir, &checkpoints);
    first_part(crashing.connect().await).await;
    crashing.kill();

    let mut restarted = TestServer::start_with(&data_dir, &checkpoints);
    let client = restarted.connect().await;
    assert_eq!(views_snapshot(&client, views).await, expected_at_crash);
    execute_all(&client, &statements(40, 55)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    restarted.kill();

    let restarted = TestServer::start_with(&data_dir, &checkpoints);
    let client = restarted.connect().await;
    assert_eq!(
        views_snapshot(&client, views).await,
        expected_at_second_crash
    );
    execute_all(&client, &statements(55, 80)).await;
    assert_eq!(views_snapshot(&client, views).await, expected_final);
    expected_final
}

/// The seeds a randomized test runs: `variable` set to `7` or `0..40`,
/// else `0..default`.
pub fn seeds(variable: &str, default: u64) -> Vec<u64> {
    match std::env::var(variable) {
        Ok(text) => match text.split_once("..") {
            Some((from, to)) => (from.parse().unwrap()..to.parse().unwrap()).collect(),
            None => vec![text.parse().unwrap()],
        },
        Err(_) => (0..default).collect(),
    }
}
