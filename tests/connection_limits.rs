//! Limits on connections that protect the clients already there: past
//! `--max-connections` a client is refused with 53300 and the others go on;
//! a startup packet without a user name is refused with 28000;
//! out of file descriptors, the accept loop waits instead of spinning (it
//! took ~97 % of a core and wrote ~1 GB of log lines in 10 s), and serves
//! again once descriptors are free.

mod common;

use std::process::Command;
use std::time::Duration;

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_refused_with_53300() {
    let directory = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(&directory.path().join("data"), &["--max-connections", "3"]);
    let first = server.connect().await;
    let _second = server.connect().await;
    let third = server.connect().await;
    let refused = tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
        .await
        .err()
        .expect("a fourth connection is refused");
    let error = refused.as_db_error().expect("a server error");
    assert_eq!(error.code().code(), "53300", "{error:?}");
    assert!(error.message().contains("too many clients"), "{error:?}");
    first.simple_query("SELECT 1").await.unwrap();
    // Once one goes, another may come.
    drop(third);
    for attempt in 0.. {
        match tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                client.simple_query("SELECT 1").await.unwrap();
                break;
            }
            Err(error) if attempt < 50 => {
                let code = error.as_db_error().map(|e| e.code().code().to_string());
                assert_eq!(code.as_deref(), Some("53300"), "{error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("no connection after one closed: {error}"),
        }
    }
}

/// CPU time the process has used, in clock ticks (user + system).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn soft_file_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().to_string()
}

fn set_soft_file_limit(pid: u32, limit: &str) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
        .status()
        .expect("prlimit (util-linux)");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_accept_loop_waits_and_recovers() {
    let server = TestServer::start();
    let pid = server.pid().unwrap();
    let client = server.connect().await;
    let original = soft_file_limit(pid);
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    set_soft_file_limit(pid, &(open + 2).to_string());
    // More connections than descriptors: they wait in the listen backlog
    // and every accept fails (EMFILE).
    let waiting: Vec<std::net::TcpStream> = (0..20)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(pid) - before;
    assert!(
        used < 40,
        "the server used {used} ticks of CPU in 2 s while accept failed"
    );
    client.simple_query("SELECT 1").await.unwrap();
    set_soft_file_limit(pid, &original);
    drop(waiting);
    let again = server.connect().await;
    again.simple_query("SELECT 1").await.unwrap();
}

/// The SQLSTATE of the ErrorResponse the server answers `startup` with.
fn startup_error_code(port: u16, startup: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.write_all(startup).unwrap();
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    // Messages: a type byte, a length (counting itself), the body.
    let mut rest = answer.as_slice();
    let error = loop {
        assert!(rest.len() >= 5, "no ErrorResponse in {answer:?}");
        let length = i32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        if rest[0] == b'E' {
            break &rest[..1 + length];
        }
        rest = &rest[1 + length..];
    };
    // Fields after the type byte and the length: a code byte, then text
    // up to a NUL.
    let mut fields = error[5..].split(|&byte| byte == 0);
    let code = fields
        .find(|field| field.first() == Some(&b'C'))
        .expect("a code field");
    String::from_utf8_lossy(&code[1..]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_without_a_user_is_refused_with_28000() {
    let server = TestServer::start();
    let mut startup = Vec::new();
    let body = b"database\0weir\0\0";
    startup.extend_from_slice(&((8 + body.len()) as i32).to_be_bytes());
    startup.extend_from_slice(&196_608_i32.to_be_bytes());
    startup.extend_from_slice(body);
    assert_eq!(startup_error_code(server.port, &startup), "28000");
    // The server goes on.
    server
        .connect()
        .await
        .simple_query("SELECT 1")
        .await
        .unwrap();
}
