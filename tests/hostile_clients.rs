//! Malformed wire traffic (issue 16): 100,000 malformed messages from 64
//! sockets at once — garbage startup packets, lying lengths, truncated
//! Parse/Bind/Execute bodies, negative counts, unknown message types —
//! while another client keeps querying. That client must never see an
//! error and its `SELECT 1` must stay fast; the server must not panic, and
//! its memory must come back down.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Lcg, TestServer};

const MESSAGES: u64 = 100_000;
const SOCKETS: u64 = 64;
const PER_CONNECTION: u64 = 25;

fn startup_packet() -> Vec<u8> {
    startup_packet_for(b"weir")
}

fn startup_packet_for(user: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608u32.to_be_bytes());
    for part in [&b"user"[..], user, b"database", b"weir", b""] {
        body.extend_from_slice(part);
        body.push(0);
    }
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = vec![kind];
    frame.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// One malformed message, chosen and filled from `random`.
fn malformed(random: &mut Lcg) -> Vec<u8> {
    let noise: Vec<u8> = (0..random.below(48))
        .map(|_| random.below(256) as u8)
        .collect();
    match random.below(10) {
        // A known type with a random body.
        0 | 1 => {
            let kinds = b"PBEDCSHQdcfp";
            frame(kinds[random.below(kinds.len() as u64) as usize], &noise)
        }
        // Parse: a name, a query, then 65,535 parameter types that are not there.
        2 => frame(b'P', b"s\0SELECT $1\0\xff\xff"),
        // Bind: more format codes than parameters, format code 7, counts past the end.
        3 => frame(b'B', b"\0\0\0\x02\0\x07\0\x01\0\x00\x00\x00\x01x\0\0"),
        4 => frame(b'B', b"\0\0\xff\xff"),
        // Execute with a negative row limit.
        5 => frame(b'E', b"\0\xff\xff\xff\xff"),
        // A length below the length field itself, or far past what follows.
        6 => vec![b'Q', 0, 0, 0, random.below(4) as u8],
        7 => {
            let mut lie = vec![b'Q', 0x3f, 0xff, 0xff, 0xf0];
            lie.extend_from_slice(&noise);
            lie
        }
        // A type that does not exist.
        8 => frame(b'~', &noise),
        // A Describe of something that is neither a statement nor a portal.
        _ => frame(b'D', b"Xnothing\0"),
    }
}

/// Sends `count` malformed messages over connections of `PER_CONNECTION`
/// each; some start with a garbage startup packet instead of a real one.
fn attack(port: u16, seed: u64, count: u64) {
    let mut random = Lcg(seed);
    let mut sent = 0;
    while sent < count {
        let Ok(mut socket) = TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
        if random.below(8) == 0 {
            // Garbage where the startup packet goes: a huge length, then noise.
            let _ = socket.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0, 1, 2, 3]);
            sent += 1;
        } else {
            let _ = socket.write_all(&startup_packet());
            let mut messages = Vec::new();
            for _ in 0..PER_CONNECTION {
                messages.extend(malformed(&mut random));
            }
            messages.extend(frame(b'S', b""));
            let _ = socket.write_all(&messages);
            sent += PER_CONNECTION;
        }
        // Read what the server says until it closes or goes quiet.
        let mut sink = [0u8; 4096];
        while let Ok(read) = socket.read(&mut sink) {
            if read == 0 {
                break;
            }
        }
    }
}

fn resident_kilobytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kilobytes| kilobytes.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_never_disturb_other_clients() {
    let temp = tempfile::tempdir().unwrap();
    let log_path = temp.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = TestServer::start_with_stderr(&temp.path().join("data"), &[], Stdio::from(log));
    let pid = server.pid().unwrap();
    let client = server.connect().await;
    client.batch_execute("SELECT 1").await.unwrap();
    let baseline = resident_kilobytes(pid);

    // Two rounds: what the first leaves behind in the allocator's caches
    // the second reuses, so memory that keeps growing is a leak.
    let mut after_rounds = Vec::new();
    for round in 0..2 {
        let p99 = attack_while_querying(&client, server.port, round).await;
        assert!(p99 < Duration::from_millis(100), "p99 {p99:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        after_rounds.push(resident_kilobytes(pid));
    }
    client.simple_query("SELECT 1").await.unwrap();
    let said = std::fs::read_to_string(&log_path).unwrap();
    let panics = panic_summary(&said);
    assert!(panics.is_empty(), "the server panicked: {panics:#?}");
    eprintln!("RSS {baseline} kB before, {after_rounds:?} kB after each round");
    assert!(
        after_rounds[1] < after_rounds[0] + 16 * 1024,
        "memory keeps growing: {baseline} kB before, {after_rounds:?} kB after each round"
    );
}

/// Runs the attack from `SOCKETS` threads while `client` queries; returns
/// the p99 of the client's `SELECT 1`.
async fn attack_while_querying(client: &tokio_postgres::Client, port: u16, round: u64) -> Duration {
    let attackers: Vec<_> = (0..SOCKETS)
        .map(|socket| {
            let seed = 17 + socket + round * SOCKETS;
            std::thread::spawn(move || attack(port, seed, MESSAGES / SOCKETS))
        })
        .collect();
    let mut latencies = Vec::new();
    while attackers.iter().any(|attacker| !attacker.is_finished()) {
        let started = Instant::now();
        client
            .simple_query("SELECT 1")
            .await
            .expect("the querying client saw an error");
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for attacker in attackers {
        attacker.join().unwrap();
    }
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    eprintln!(
        "round {round}: {} SELECT 1 during the attack, p99 {p99:?}, max {:?}",
        latencies.len(),
        latencies.last().unwrap()
    );
    p99
}

/// Each distinct panic in the server's log, with how often it happened and
/// the pgwire decoder it happened in.
fn panic_summary(log: &str) -> Vec<(usize, String)> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let lines: Vec<&str> = log.lines().collect();
    for (at, line) in lines.iter().enumerate() {
        if !line.contains("panicked at") {
            continue;
        }
        let message = lines.get(at + 1).copied().unwrap_or_default();
        let decoder = lines[at..lines.len().min(at + 40)]
            .iter()
            .find(|frame| frame.contains("decode_body") || frame.contains("decode_"))
            .copied()
            .unwrap_or_default()
            .trim();
        *counts.entry(format!("{message} in {decoder}")).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(what, count)| (count, what))
        .collect()
}

/// What the server sends until its ReadyForQuery: each ErrorResponse's
/// SQLSTATE, and whether a BindComplete came.
fn read_until_ready(socket: &mut TcpStream) -> (Vec<String>, bool) {
    let (mut codes, mut bound) = (Vec::new(), false);
    loop {
        let mut header = [0u8; 5];
        socket.read_exact(&mut header).unwrap();
        let length = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; length - 4];
        socket.read_exact(&mut body).unwrap();
        match header[0] {
            b'E' => {
                let fields = body.split(|byte| *byte == 0);
                let code = fields
                    .filter_map(|field| field.strip_prefix(b"C"))
                    .next()
                    .unwrap_or_default();
                codes.push(String::from_utf8_lossy(code).to_string());
            }
            b'2' => bound = true,
            b'Z' => return (codes, bound),
            _ => {}
        }
    }
}

/// Bind messages Postgres refuses are refused here too, with its codes,
/// and the connection goes on: format codes neither per parameter nor one
/// for all (08P01), and format codes other than text (0) and binary (1)
/// (22023).
#[test]
fn bind_format_codes_are_checked() {
    let server = TestServer::start();
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket.write_all(&startup_packet()).unwrap();
    assert!(read_until_ready(&mut socket).0.is_empty());
    // Parse a statement of two parameters, their types left to the server.
    let mut parse = frame(b'P', b"s\0SELECT $1::int + $2::int\0\0\0");
    parse.extend(frame(b'S', b""));
    socket.write_all(&parse).unwrap();
    assert!(read_until_ready(&mut socket).0.is_empty());
    // Bind "s" with the given parameter format codes, two text values "1"
    // and "2", and the given result format codes.
    let bind = |parameter_formats: &[i16], result_formats: &[i16]| {
        let mut body = b"\0s\0".to_vec();
        body.extend_from_slice(&(parameter_formats.len() as i16).to_be_bytes());
        for code in parameter_formats {
            body.extend_from_slice(&code.to_be_bytes());
        }
        body.extend_from_slice(&2i16.to_be_bytes());
        for value in [b"1", b"2"] {
            body.extend_from_slice(&1i32.to_be_bytes());
            body.extend_from_slice(value);
        }
        body.extend_from_slice(&(result_formats.len() as i16).to_be_bytes());
        for code in result_formats {
            body.extend_from_slice(&code.to_be_bytes());
        }
        let mut messages = frame(b'B', &body);
        messages.extend(frame(b'S', b""));
        messages
    };
    let cases: [(&[i16], &[i16], Option<&str>); 6] = [
        (&[], &[], None),
        (&[0], &[0], None),
        (&[0, 0], &[], None),
        (&[0, 0, 0], &[], Some("08P01")),
        (&[7], &[], Some("22023")),
        (&[0], &[-1], Some("22023")),
    ];
    for (parameter_formats, result_formats, expected) in cases {
        socket
            .write_all(&bind(parameter_formats, result_formats))
            .unwrap();
        let (codes, bound) = read_until_ready(&mut socket);
        let context = format!("formats {parameter_formats:?} / {result_formats:?}");
        match expected {
            None => assert!(bound && codes.is_empty(), "{context}: {codes:?}"),
            Some(code) => assert_eq!(codes, vec![code.to_string()], "{context}"),
        }
    }
}

/// An Execute with a negative row limit returns every row, as Postgres
/// does (pgwire panicked and dropped the connection without a word).
#[test]
fn a_negative_row_limit_means_all_rows() {
    let server = TestServer::start();
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket.write_all(&startup_packet()).unwrap();
    assert!(read_until_ready(&mut socket).0.is_empty());
    let mut messages = frame(
        b'P',
        b"\0SELECT * FROM (VALUES (1), (2), (3)) AS t(x)\0\0\0",
    );
    messages.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
    let mut execute = b"\0".to_vec();
    execute.extend_from_slice(&(-1i32).to_be_bytes());
    messages.extend(frame(b'E', &execute));
    messages.extend(frame(b'S', b""));
    socket.write_all(&messages).unwrap();
    let mut rows = 0;
    loop {
        let mut header = [0u8; 5];
        socket.read_exact(&mut header).expect("the server answers");
        let length = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; length - 4];
        socket.read_exact(&mut body).unwrap();
        match header[0] {
            b'D' => rows += 1,
            b'E' => panic!("an error: {}", String::from_utf8_lossy(&body)),
            b'Z' => break,
            _ => {}
        }
    }
    assert_eq!(rows, 3);
}

/// A statement name already in use is refused (42P05), as Postgres does;
/// the unnamed statement is replaced as before.
#[test]
fn a_prepared_statement_name_is_not_reused() {
    let server = TestServer::start();
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket.write_all(&startup_packet()).unwrap();
    assert!(read_until_ready(&mut socket).0.is_empty());
    let parse = |body: &[u8]| {
        let mut messages = frame(b'P', body);
        messages.extend(frame(b'S', b""));
        messages
    };
    for (body, expected) in [
        (&b"s\0SELECT 1\0\0\0"[..], Vec::<String>::new()),
        (&b"s\0SELECT 2\0\0\0"[..], vec!["42P05".to_string()]),
        (&b"\0SELECT 1\0\0\0"[..], vec![]),
        (&b"\0SELECT 2\0\0\0"[..], vec![]),
    ] {
        socket.write_all(&parse(body)).unwrap();
        assert_eq!(read_until_ready(&mut socket).0, expected);
    }
    // DEALLOCATE ALL (as pgbouncer and psycopg send it) and DISCARD ALL
    // forget protocol statements too: the name is free again.
    for reset in [&b"DEALLOCATE ALL\0"[..], &b"DISCARD ALL\0"[..]] {
        socket.write_all(&frame(b'Q', reset)).unwrap();
        assert!(read_until_ready(&mut socket).0.is_empty());
        socket.write_all(&parse(b"s\0SELECT 3\0\0\0")).unwrap();
        assert!(read_until_ready(&mut socket).0.is_empty());
    }
}

/// A statement message past `--max-message-size` ends its connection with
/// 08P01 before its body is read; others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_messages_past_the_limit_are_refused() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(&temp.path().join("data"), &["--max-message-size", "1MB"]);
    let client = server.connect().await;
    let small = format!("SELECT length('{}')", "x".repeat(500_000));
    client.simple_query(&small).await.unwrap();
    let large = format!("SELECT length('{}')", "x".repeat(2_000_000));
    // The server answers FATAL 08P01 and closes; a client still writing
    // its message may only see the close.
    let error = client.simple_query(&large).await.unwrap_err();
    let code = error.as_db_error().map(|db| db.code().code().to_string());
    assert!(
        code.as_deref() == Some("08P01") || error.is_closed(),
        "{error:?}"
    );
    // A header claiming 512 MB, with no body: refused at once.
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket.write_all(&startup_packet()).unwrap();
    assert!(read_until_ready(&mut socket).0.is_empty());
    socket.write_all(&[b'Q', 0x20, 0, 0, 0]).unwrap();
    let (codes, _) = read_until_ready_or_closed(&mut socket);
    assert_eq!(codes, vec!["08P01".to_string()]);
    let other = server.connect().await;
    other.simple_query(&small).await.unwrap();
}

/// `read_until_ready`, for a connection the server may close instead.
fn read_until_ready_or_closed(socket: &mut TcpStream) -> (Vec<String>, bool) {
    let mut codes = Vec::new();
    loop {
        let mut header = [0u8; 5];
        if socket.read_exact(&mut header).is_err() {
            return (codes, false);
        }
        let length = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; length - 4];
        if socket.read_exact(&mut body).is_err() {
            return (codes, false);
        }
        if header[0] == b'E' {
            let code = body
                .split(|byte| *byte == 0)
                .find_map(|field| field.strip_prefix(b"C"))
                .unwrap_or_default();
            codes.push(String::from_utf8_lossy(code).to_string());
        }
        if header[0] == b'Z' {
            return (codes, true);
        }
    }
}

/// Strings that are not UTF-8 — a user name, a query, a statement name —
/// are refused with 22021, as Postgres refuses them, where pgwire used to
/// decode them lossily (a query's literal stored U+FFFD for the client's
/// bytes). Other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_that_are_not_utf8_are_refused() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .simple_query("CREATE TABLE utf8_checked (t TEXT)")
        .await
        .unwrap();
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket.write_all(&startup_packet_for(b"we\xffir")).unwrap();
    assert_eq!(read_until_ready_or_closed(&mut socket).0, vec!["22021"]);
    let invalid_messages = [
        frame(b'Q', b"INSERT INTO utf8_checked VALUES ('\xff\xfe')\0"),
        frame(b'P', b"\0INSERT INTO utf8_checked VALUES ('\xc3')\0\0\0"),
        frame(b'P', b"s\xff\0SELECT 1\0\0\0"),
    ];
    for message in invalid_messages {
        let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        socket.write_all(&startup_packet()).unwrap();
        assert!(read_until_ready(&mut socket).0.is_empty());
        socket.write_all(&message).unwrap();
        socket.write_all(&frame(b'S', b"")).unwrap();
        let (codes, ready) = read_until_ready_or_closed(&mut socket);
        assert_eq!(codes, vec!["22021"]);
        assert!(!ready);
    }
    let rows = client
        .query("SELECT count(*) FROM utf8_checked", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 0);
    client
        .simple_query("INSERT INTO utf8_checked VALUES ('weir ✓')")
        .await
        .unwrap();
    client
        .simple_query("DROP TABLE utf8_checked")
        .await
        .unwrap();
}
