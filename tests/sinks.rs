//! File sinks across SIGKILL: a server killed at random points while rows
//! keep coming ends with each view change in the sink's file exactly once
//! — a PLAIN file equal to its append-only view, an UPSERT file whose
//! counts only grow (no line twice) and that, applied line by line, gives
//! its updating view. (Kafka sinks are killed
//! the same way in `tests/kafka.rs`.)

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{kill_after, sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

fn setup(directory: &Path) -> String {
    format!(
        "CREATE TABLE clicks (seq BIGINT, user_id BIGINT, at TIMESTAMP,
                              WATERMARK FOR at AS at - INTERVAL '2' SECOND) APPEND ONLY;
         CREATE MATERIALIZED VIEW per_window AS
           SELECT window_start, count(*) AS n, max(seq) AS last
           FROM TUMBLE(clicks, at, INTERVAL '1' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE;
         CREATE MATERIALIZED VIEW per_user AS
           SELECT user_id, count(*) AS n, max(seq) AS last FROM clicks GROUP BY user_id;
         CREATE SINK windows_out FROM per_window
           WITH (connector = 'file', path = '{windows}') FORMAT PLAIN ENCODE JSON;
         CREATE SINK users_out FROM per_user
           WITH (connector = 'file', path = '{users}') FORMAT UPSERT ENCODE JSON (primary_key = 'user_id');",
        windows = directory.join("windows.jsonl").display(),
        users = directory.join("users.jsonl").display(),
    )
}

/// Inserts rows of 20 clicks each, one second apart, until an insert fails
/// (the server was killed) or `last` is reached; returns where it stopped.
async fn insert_from(client: &Client, first: i64, last: i64) -> i64 {
    let mut next = first;
    while next < last {
        let values: Vec<String> = (next..next + 20)
            .map(|seq| {
                format!(
                    "({seq}, {}, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{}' SECOND)",
                    seq % 7,
                    seq / 20
                )
            })
            .collect();
        let insert = format!("INSERT INTO clicks VALUES {}", values.join(", "));
        if client.batch_execute(&insert).await.is_err() {
            return next;
        }
        next += 20;
    }
    next
}

async fn wait_until_shipped(client: &Client) {
    let sql =
        "SELECT count(*) FROM weir_catalog.sinks WHERE shipped < committed OR state <> 'running'";
    for _ in 0..300 {
        let behind: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
        if behind == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sinks = sorted_rows(client, "SELECT * FROM weir_catalog.sinks").await;
    panic!("the sinks did not catch up: {sinks:?}");
}

fn json_rows(text: &str, columns: &[&str]) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            columns.iter().map(|c| cell(&row[c])).collect()
        })
        .collect()
}

fn cell(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.replace('T', " "),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_file_sinks_hold_each_change_once() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    client
        .batch_execute(&setup(directory.path()))
        .await
        .unwrap();
    let total = 6_000;
    let mut next = 0;
    let mut random = Lcg(11);
    for _ in 0..8 {
        let client = server.connect().await;
        let killing = kill_after(&server, 100 + random.below(400));
        next = insert_from(&client, next, total).await;
        killing.await.unwrap();
        server.kill();
        server = TestServer::start_on(&data);
    }
    let client = server.connect().await;
    insert_from(&client, next, total).await;
    wait_until_shipped(&client).await;

    let rows = file_and_relation(
        &client,
        &directory.path().join("windows.jsonl"),
        &["window_start", "n", "last"],
        "SELECT CAST(window_start AS TEXT), n, last FROM per_window",
    )
    .await;
    assert!(rows > 250, "windows closed: {rows}");

    let users = std::fs::read_to_string(directory.path().join("users.jsonl")).unwrap();
    let mut applied = BTreeMap::new();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for line in users.lines() {
        let change: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = change["key"]["user_id"].to_string();
        // A user's count only grows: a line written twice would repeat one.
        let n = change["value"]["n"].as_i64().unwrap();
        let before = counts.insert(key.clone(), n).unwrap_or(0);
        assert!(
            n > before,
            "user {key}: count {n} after {before}: a change written twice"
        );
        match &change["value"] {
            serde_json::Value::Null => applied.remove(&key),
            value => applied.insert(
                key,
                vec![
                    cell(&value["user_id"]),
                    cell(&value["n"]),
                    cell(&value["last"]),
                ],
            ),
        };
    }
    let applied: Vec<Vec<String>> = applied.into_values().collect();
    let mut rows = sorted_rows(&client, "SELECT user_id, n, last FROM per_user").await;
    rows.sort();
    let mut applied = applied;
    applied.sort();
    assert_eq!(applied, rows, "the UPSERT file, applied, is the view");
}

/// A late-data trigger downstream (issue 17): a sink on a view's `_late`
/// side output, killed at random points while late rows keep coming, ends
/// with each late row in its file exactly once, equal to the side output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_side_output_sinks_hold_each_late_row_once() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    let path = directory.path().join("late.jsonl");
    client
        .batch_execute(&format!(
            "CREATE TABLE taps (seq BIGINT, at TIMESTAMP,
                                WATERMARK FOR at AS at - INTERVAL '2' SECOND) APPEND ONLY;
             CREATE MATERIALIZED VIEW tap_counts WITH (late_data = 'side_output') AS
               SELECT window_start, count(*) AS n
               FROM TUMBLE(taps, at, INTERVAL '1' SECOND) GROUP BY window_start;
             CREATE SINK late_out FROM tap_counts_late
               WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;",
            path.display()
        ))
        .await
        .unwrap();
    let total = 4_000;
    let mut next = 0;
    let mut random = Lcg(17);
    for _ in 0..6 {
        let client = server.connect().await;
        let killing = kill_after(&server, 100 + random.below(400));
        insert_taps(&client, next, total).await;
        killing.await.unwrap();
        server.kill();
        server = TestServer::start_on(&data);
        // A statement the kill cut off may have committed: go on after
        // the rows that are in.
        next = next_tap(&server.connect().await).await;
    }
    let client = server.connect().await;
    insert_taps(&client, next, total).await;
    wait_until_shipped(&client).await;

    let rows = file_and_relation(
        &client,
        &path,
        &["seq", "window_start"],
        "SELECT seq, CAST(window_start AS TEXT) FROM tap_counts_late",
    )
    .await;
    assert!(rows > 100, "late rows: {rows}");
}

/// Checks that a PLAIN sink's file holds each row of `query` once (no
/// line twice, none missing) and that the relation has no row twice;
/// answers how many rows there are. Timestamps compare as text, the
/// file's `T` read as a space.
async fn file_and_relation(client: &Client, file: &Path, columns: &[&str], query: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let mut written = json_rows(&text, columns);
    written.sort();
    let mut rows = sorted_rows(client, query).await;
    for row in &mut rows {
        row.iter_mut()
            .for_each(|value| *value = value.replace('T', " "));
    }
    rows.sort();
    for (what, lines) in [("the file", &written), ("the relation", &rows)] {
        let twice: Vec<_> = lines.windows(2).filter(|pair| pair[0] == pair[1]).collect();
        assert!(twice.is_empty(), "rows twice in {what}: {twice:?}");
    }
    assert_eq!(written, rows, "the file holds each row once");
    rows.len()
}

async fn next_tap(client: &Client) -> i64 {
    let row = client
        .query_one("SELECT coalesce(max(seq) + 1, 0) FROM taps", &[])
        .await
        .unwrap();
    row.get(0)
}

/// Like `insert_from`, into `taps`: 20 rows a second, the first of each
/// statement 5 s behind, so late for its window.
async fn insert_taps(client: &Client, first: i64, last: i64) -> i64 {
    let mut next = first;
    while next < last {
        let values: Vec<String> = (next..next + 20)
            .map(|seq| {
                let second = seq / 20 - if seq % 20 == 0 { 5 } else { 0 };
                format!("({seq}, TIMESTAMP '2026-01-01 00:01:00' + INTERVAL '{second}' SECOND)")
            })
            .collect();
        let insert = format!("INSERT INTO taps VALUES {}", values.join(", "));
        if client.batch_execute(&insert).await.is_err() {
            return next;
        }
        next += 20;
    }
    next
}
