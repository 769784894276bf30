//! Limits on connections that protect the clients already there: past
//! `--max-connections` a client is refused with 53300 and the others go on;
//! the last slots are the superusers'; sockets that never log in take no
//! slot and are closed after `--authentication-timeout-ms`;
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

/// Connects as `user`, or returns the SQLSTATE the server refused with.
async fn connect_as(server: &TestServer, user: &str) -> Result<tokio_postgres::Client, String> {
    let config = format!(
        "host=127.0.0.1 port={} user={user} dbname=weir",
        server.port
    );
    match tokio_postgres::connect(&config, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            Ok(client)
        }
        Err(error) => Err(error
            .as_db_error()
            .map(|error| format!("{} {}", error.code().code(), error.message()))
            .unwrap_or_else(|| error.to_string())),
    }
}

/// The last `--superuser-reserved-connections` slots are the superusers':
/// an administrator still logs in when applications hold every other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_slots_are_reserved_for_superusers() {
    let directory = tempfile::tempdir().unwrap();
    let arguments = [
        "--max-connections",
        "4",
        "--superuser-reserved-connections",
        "2",
    ];
    let server = TestServer::start_with(&directory.path().join("data"), &arguments);
    let admin = server.connect().await;
    admin.batch_execute("CREATE ROLE app LOGIN").await.unwrap();
    let _app = connect_as(&server, "app").await.unwrap();
    let refused = connect_as(&server, "app").await.expect_err("refused");
    assert!(
        refused.starts_with("53300 remaining connection slots are reserved"),
        "{refused}"
    );
    let second_admin = connect_as(&server, "weir").await.unwrap();
    let _third_admin = connect_as(&server, "weir").await.unwrap();
    let refused = connect_as(&server, "weir").await.expect_err("refused");
    assert_eq!(refused, "53300 sorry, too many clients already");
    // A refused login takes no slot; a closed one gives its slot back.
    drop(second_admin);
    for attempt in 0.. {
        match connect_as(&server, "weir").await {
            Ok(client) => {
                client.simple_query("SELECT 1").await.unwrap();
                break;
            }
            Err(error) if attempt < 50 => {
                assert!(error.starts_with("53300"), "{error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("no slot after one closed: {error}"),
        }
    }
    admin.simple_query("SELECT 1").await.unwrap();
}

/// Sockets that connect and never log in (the 100, here 200 past
/// a limit of 10) take no logged-in slot: clients and the superuser log
/// in at once, and the server closes the silent sockets after
/// `--authentication-timeout-ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_that_never_log_in_lock_nobody_out() {
    use std::io::Read;
    let directory = tempfile::tempdir().unwrap();
    let arguments = [
        "--max-connections",
        "10",
        "--authentication-timeout-ms",
        "3000",
    ];
    let server = TestServer::start_with(&directory.path().join("data"), &arguments);
    let admin = server.connect().await;
    admin.batch_execute("CREATE ROLE app LOGIN").await.unwrap();
    let silent: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let clients: Vec<_> =
        futures::future::join_all((0..6).map(|_| connect_as(&server, "app"))).await;
    for client in &clients {
        client
            .as_ref()
            .unwrap()
            .simple_query("SELECT 1")
            .await
            .unwrap();
    }
    connect_as(&server, "weir").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "logging in took {:?} beside the silent sockets",
        started.elapsed()
    );
    // Every silent socket is closed by the server (read gives EOF) within
    // the timeout and some slack: evicted by newcomers, or timed out.
    for mut socket in silent {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buffer = [0u8; 16];
        assert_eq!(socket.read(&mut buffer).unwrap(), 0, "the server closed it");
    }
    admin.simple_query("SELECT 1").await.unwrap();
}
