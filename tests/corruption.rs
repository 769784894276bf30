//! A damaged data directory never starts with fewer rows than were
//! acknowledged: bytes flipped at many offsets of every store file, and the
//! store truncated at several lengths, each give either a server holding
//! every acknowledged row (and the view over them) or a refusal to start
//! that names the problem and what to do.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::TestServer;

const STATEMENTS: u64 = 120;
const ROWS_PER_STATEMENT: u64 = 100;

/// What a start on a damaged copy came to.
enum Outcome {
    /// It refused to start; its log.
    Refused(String),
    /// It became ready on this port.
    Ready(Child, u16),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_stores_start_whole_or_refuse() {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().join("base");
    let expected = load(&base).await;
    let mut damages = Vec::new();
    for file in store_files(&base) {
        let length = std::fs::metadata(&file).unwrap().len();
        let relative = file.strip_prefix(&base).unwrap().to_path_buf();
        // The store's log itself at many offsets; the small files at a few.
        let flips = if length > 100_000 { 160 } else { 4 };
        for step in 0..flips {
            let offset = length * step / flips + (length / flips) / 2;
            damages.push(Damage::Flip(relative.clone(), offset));
        }
        if length > 100_000 {
            for percent in [10, 30, 50, 70, 90, 99] {
                damages.push(Damage::Truncate(relative.clone(), length * percent / 100));
            }
        }
    }
    let (mut whole, mut refused) = (0, 0);
    for damage in &damages {
        let trial = temp.path().join("trial");
        copy_directory(&base, &trial);
        damage.apply(&trial);
        match start(&trial) {
            Outcome::Refused(log) => {
                assert_clear_refusal(damage, &log);
                println!("{damage:?}: {}", reason(&log, &trial));
                refused += 1;
            }
            Outcome::Ready(mut child, port) => {
                let held = contents(port).await;
                child.kill().unwrap();
                child.wait().unwrap();
                match held {
                    Ok(held) => {
                        assert_eq!(held, expected, "{damage:?} started with other rows");
                        whole += 1;
                    }
                    // A damaged value is reported where it is read.
                    Err(error) => {
                        assert!(error.contains("XX001"), "{damage:?}: {error}");
                        refused += 1;
                    }
                }
            }
        }
        std::fs::remove_dir_all(&trial).unwrap();
    }
    println!(
        "{} damaged copies: {whole} started with every acknowledged row, {refused} refused",
        damages.len()
    );
    assert!(
        refused > 0 && whole > 0,
        "the damages exercised one outcome only"
    );
}

#[derive(Debug)]
enum Damage {
    Flip(PathBuf, u64),
    Truncate(PathBuf, u64),
}

impl Damage {
    fn apply(&self, directory: &Path) {
        match self {
            Damage::Flip(file, offset) => {
                let path = directory.join(file);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[*offset as usize] ^= 0xff;
                std::fs::write(&path, bytes).unwrap();
            }
            Damage::Truncate(file, length) => {
                let handle = std::fs::OpenOptions::new()
                    .write(true)
                    .open(directory.join(file))
                    .unwrap();
                handle.set_len(*length).unwrap();
            }
        }
    }
}

/// Many acknowledged statements (each its own commit), a view over them,
/// then a crash; returns what the server held.
async fn load(data_dir: &Path) -> Vec<Vec<String>> {
    let mut server = TestServer::start_on(data_dir);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, note TEXT); \
             CREATE MATERIALIZED VIEW per_bucket AS \
             SELECT id % 7 AS bucket, count(*) AS n, sum(id) AS total FROM t GROUP BY id % 7",
        )
        .await
        .unwrap();
    for statement in 0..STATEMENTS {
        let first = statement * ROWS_PER_STATEMENT;
        let last = first + ROWS_PER_STATEMENT - 1;
        client
            .batch_execute(&format!(
                "INSERT INTO t SELECT n, 'note ' || n FROM generate_series({first}, {last}) AS g(n)"
            ))
            .await
            .unwrap();
    }
    let held = contents(server.port).await.unwrap();
    assert_eq!(held[0][0], (STATEMENTS * ROWS_PER_STATEMENT).to_string());
    server.kill();
    held
}

/// The table's count and checksums, then the view's rows.
async fn contents(port: u16) -> Result<Vec<Vec<String>>, String> {
    let url = format!("host=127.0.0.1 port={port} user=weir dbname=weir");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    let mut held = rows(
        &client,
        "SELECT count(*), sum(id), sum(length(note)) FROM t",
    )
    .await?;
    held.extend(rows(&client, "SELECT * FROM per_bucket ORDER BY bucket").await?);
    Ok(held)
}

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|error| match error.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => error.to_string(),
        })?;
    Ok(messages
        .iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|index| row.get(index).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// Starts weir on `data_dir`: ready, or exited with its log.
fn start(data_dir: &Path) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("WEIR_LOG", "warn,weir::ready=info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    drop(lines);
    let mut log = String::new();
    loop {
        match received.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                if let Some(port) = ready_port(&line) {
                    return Outcome::Ready(child, port);
                }
                log.push_str(&line);
                log.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().unwrap();
                return Outcome::Refused(format!("{status}\n{log}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                child.kill().unwrap();
                panic!("weir neither started nor refused within 60 s:\n{log}");
            }
        }
    }
}

fn ready_port(line: &str) -> Option<u16> {
    let (_, after) = line.split_once("weir is ready")?;
    let (_, after) = after.split_once(" -p ")?;
    after.split_whitespace().next()?.parse().ok()
}

/// The refusal's first line, without the time and path.
fn reason(log: &str, data_dir: &Path) -> String {
    let line = log
        .lines()
        .find(|line| line.contains("ERROR weir:"))
        .unwrap_or("");
    let message = line.split("ERROR weir:").nth(1).unwrap_or("").trim();
    message.replace(&data_dir.display().to_string(), "<data-dir>")
}

/// A refusal must be weir's own error with a hint, not a crash.
fn assert_clear_refusal(damage: &Damage, log: &str) {
    assert!(
        !log.contains("panicked") && log.contains("ERROR weir:") && log.contains("hint:"),
        "{damage:?} ended the server without a clear error:\n{log}"
    );
}

/// Every file of the store, largest first.
fn store_files(data_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![data_dir.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::metadata(&path).unwrap().len() > 0 {
                files.push(path);
            }
        }
    }
    files.sort_by_key(|file| std::cmp::Reverse(std::fs::metadata(file).unwrap().len()));
    files
}

fn copy_directory(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_directory(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}
