//! One connection's expensive statement does not hold up the others:
//! parsing and planning a select of thousands of items takes seconds of
//! CPU, and it used to run on the server's async workers, so two of them
//! (as many as the cores) stopped every other session — and new
//! connections — for the whole time (a `SELECT 1` waited 25 s).

mod common;

use std::time::{Duration, Instant};

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_1_stays_quick_while_two_connections_plan_huge_statements() {
    let server = TestServer::start();
    let quick = server.connect().await;
    let items: Vec<String> = (1..=5_000).map(|i| i.to_string()).collect();
    let huge = format!("SELECT {}", items.join(", "));
    let mut heavy = Vec::new();
    for _ in 0..2 {
        let client = server.connect().await;
        let sql = huge.clone();
        heavy.push(tokio::spawn(async move {
            let started = Instant::now();
            client.simple_query(&sql).await.unwrap();
            started.elapsed()
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut latencies = Vec::new();
    let mut connect_times = Vec::new();
    while !heavy.iter().all(|task| task.is_finished()) {
        let started = Instant::now();
        quick.simple_query("SELECT 1").await.unwrap();
        latencies.push(started.elapsed());
        if latencies.len() % 10 == 0 {
            let started = Instant::now();
            server
                .connect()
                .await
                .simple_query("SELECT 1")
                .await
                .unwrap();
            connect_times.push(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut heavy_times = Vec::new();
    for task in heavy {
        heavy_times.push(task.await.unwrap());
    }
    // Each round takes ~10 ms when nothing waits: a held-up SELECT 1
    // leaves few rounds (the slowest shows how long it waited).
    assert!(
        latencies.len() >= 20,
        "only {} SELECT 1 answered while the huge statements ran for {heavy_times:?}; \
         slowest {:?}",
        latencies.len(),
        latencies.iter().max()
    );
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let slowest_connect = connect_times.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{} SELECT 1 while two huge statements ran for {heavy_times:?}: p99 {p99:?}, \
         slowest new connection {slowest_connect:?}",
        latencies.len()
    );
    // The target is 50 ms on a release build; this is a debug
    // build on a machine whose two cores the huge statements keep busy.
    assert!(p99 < Duration::from_millis(250), "SELECT 1 p99 {p99:?}");
    assert!(
        slowest_connect < Duration::from_millis(500),
        "a new connection took {slowest_connect:?}"
    );
}

/// Nested calls that sqlparser 0.62 parsed in exponential time (fuzzing
/// found them; 30 levels took hours) are answered at once, on the user
/// and the catalog parse paths alike; a malformed nest fails with 54001
/// once its parse has taken more steps than its length allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_are_answered_at_once() {
    let server = TestServer::start();
    let client = server.connect().await;
    let calls = format!("{}1{}", "abs(".repeat(30), ")".repeat(30));
    for sql in [
        format!("SELECT {calls}"),
        format!("SELECT {calls} FROM (SELECT version()) AS catalog_path"),
    ] {
        let started = Instant::now();
        let rows = client.query(&sql, &[]).await.unwrap();
        // `1` is an integer, as in Postgres.
        assert_eq!(rows[0].get::<_, i32>(0), 1);
        assert!(started.elapsed() < Duration::from_secs(10), "{sql}");
    }
    let malformed = format!("SELECT {}x{}", "CAST(CASE (".repeat(30), ")".repeat(90));
    let started = Instant::now();
    let error = client.simple_query(&malformed).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(error.as_db_error().unwrap().code().code(), "54001");
    client.simple_query("SELECT 1").await.unwrap();
}
