//! Interval and window joins forget rows as watermarks pass: their state
//! stays as large as the rows that can still match (a control join on the
//! same keys without a time bound keeps them all), and after kill -9 the
//! restored state (with when each row expires) continues exactly like a
//! run that never stopped.

mod common;

use std::time::Duration;

use common::{crashes_match_an_uninterrupted_run, execute_all, sorted_rows, TestServer};

const SETUP: &str = "
    CREATE TABLE pings (k BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '20' SECOND) APPEND ONLY;
    CREATE TABLE pongs (k BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '20' SECOND) APPEND ONLY;
    CREATE MATERIALIZED VIEW answered AS
        SELECT p.k, p.ts AS ping, q.ts AS pong FROM pings p JOIN pongs q
        ON p.k = q.k AND q.ts BETWEEN p.ts AND p.ts + INTERVAL '30' SECOND;
    CREATE MATERIALIZED VIEW per_minute AS
        SELECT p.k, p.window_end, COUNT(*) AS pairs
        FROM TUMBLE(pings, ts, INTERVAL '1' MINUTE) p
        JOIN TUMBLE(pongs, ts, INTERVAL '1' MINUTE) q
        ON p.k = q.k AND p.window_end = q.window_end
        GROUP BY p.k, p.window_end;
";

const VIEWS: [&str; 2] = ["answered", "per_minute"];

/// Step `step`: pings and pongs for five keys around `step` × 10 s, some
/// of them up to 25 s out of order (some later than the watermark).
fn statements(from: u64, to: u64) -> Vec<String> {
    let at =
        |seconds: u64| format!("TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{seconds}' SECOND");
    (from..to)
        .map(|step| {
            let base = 100 + step * 10;
            let pings: Vec<String> = (0..5)
                .map(|i| format!("({}, {})", (step + i) % 7, at(base - (i * 6 + step) % 26)))
                .collect();
            let pongs: Vec<String> = (0..5)
                .map(|i| {
                    format!(
                        "({}, {})",
                        (step * 3 + i) % 7,
                        at(base - (i * 11 + step) % 26)
                    )
                })
                .collect();
            format!(
                "INSERT INTO pings VALUES {}; INSERT INTO pongs VALUES {};",
                pings.join(", "),
                pongs.join(", ")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_joins_continue_after_kill_9_like_an_uninterrupted_run() {
    let expected = crashes_match_an_uninterrupted_run(SETUP, statements, &VIEWS).await;
    let rows_of = |view: &str| expected.iter().filter(|l| l.starts_with(view)).count();
    assert!(rows_of("answered:") > 50 && rows_of("per_minute:") > 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_join_keeps_only_the_rows_that_can_still_match() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &temp.path().join("data"),
        &["--checkpoint-interval-ms", "200"],
    );
    let client = server.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW unbounded AS
             SELECT p.k, p.ts AS ping, q.ts AS pong FROM pings p JOIN pongs q ON p.k = q.k",
        )
        .await
        .unwrap();
    execute_all(&client, &statements(0, 150)).await;
    // A checkpoint writes the state as it is now.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let entries = sorted_rows(
        &client,
        "SELECT view_name, state_entries FROM weir_catalog.materialized_views",
    )
    .await;
    let of = |view: &str| -> i64 {
        entries
            .iter()
            .find(|row| row[0] == view)
            .map(|row| row[1].parse().unwrap())
            .unwrap()
    };
    // 1,500 rows arrived; the unbounded join holds every distinct row, the
    // bounded ones about a minute of them.
    assert!(of("unbounded") > 1_000, "{entries:?}");
    assert!(of("answered") < 200, "{entries:?}");
    assert!(of("per_minute") < 300, "{entries:?}");
}
