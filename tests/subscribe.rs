//! SUBSCRIBE through a driver (tokio-postgres): a cursor over a view shows
//! the view's rows at one epoch, then each commit's changes in commit
//! order with later epochs — corrections as -1/+1 pairs of one epoch; COPY
//! (SUBSCRIBE …) TO STDOUT streams the same rows until cancelled; and a
//! subscriber that does not read is cut off at its queue limit instead of
//! holding the server's memory.

mod common;

use std::time::Duration;

use common::TestServer;
use futures::StreamExt;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// The rows of a simple query as `epoch|diff|columns…` texts.
async fn fetch(client: &Client, sql: &str) -> Vec<Vec<String>> {
    let messages = client.simple_query(sql).await.unwrap();
    messages
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn without_epochs(rows: &[Vec<String>]) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(|row| row[1..].join("|")).collect();
    rows.sort();
    rows
}

fn epochs(rows: &[Vec<String>]) -> Vec<i64> {
    let mut epochs: Vec<i64> = rows.iter().map(|row| row[0].parse().unwrap()).collect();
    epochs.dedup();
    epochs
}

async fn setup(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE sales (region TEXT, amount BIGINT); \
             INSERT INTO sales VALUES ('north', 1), ('south', 2); \
             CREATE MATERIALIZED VIEW totals AS \
             SELECT region, CAST(sum(amount) AS BIGINT) AS total FROM sales GROUP BY region",
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_sees_the_snapshot_then_changes_in_commit_order() {
    let server = TestServer::start();
    let client = server.connect().await;
    let writer = server.connect().await;
    setup(&client).await;
    client
        .batch_execute("DECLARE feed CURSOR FOR SUBSCRIBE totals")
        .await
        .unwrap();
    let snapshot = fetch(&client, "FETCH ALL feed WITH (timeout = '0s')").await;
    assert_eq!(without_epochs(&snapshot), vec!["1|north|1", "1|south|2"]);
    assert_eq!(epochs(&snapshot).len(), 1, "one epoch: {snapshot:?}");

    writer
        .batch_execute("INSERT INTO sales VALUES ('north', 10)")
        .await
        .unwrap();
    writer
        .batch_execute("INSERT INTO sales VALUES ('east', 5), ('south', 1)")
        .await
        .unwrap();
    // The first FETCH waits for the first commit; read until both are in.
    let mut changes = Vec::new();
    while changes.len() < 5 {
        let rows = fetch(&client, "FETCH 100 feed WITH (timeout = '10s')").await;
        assert!(!rows.is_empty(), "no changes within 10 s: {changes:?}");
        changes.extend(rows);
    }
    let order = epochs(&changes);
    assert_eq!(order.len(), 2, "two commits, in order: {changes:?}");
    assert!(order[0] > epochs(&snapshot)[0] && order[1] > order[0]);
    let first: Vec<Vec<String>> = changes
        .iter()
        .filter(|row| row[0] == order[0].to_string())
        .cloned()
        .collect();
    assert_eq!(without_epochs(&first), vec!["-1|north|1", "1|north|11"]);
    let second: Vec<Vec<String>> = changes[first.len()..].to_vec();
    assert_eq!(
        without_epochs(&second),
        vec!["-1|south|2", "1|east|5", "1|south|3"]
    );
    // Nothing more: a timeout gives an empty answer.
    assert!(fetch(&client, "FETCH 5 feed WITH (timeout = '200ms')")
        .await
        .is_empty());

    // The extended protocol: FETCH is described with the view's columns.
    let statement = client
        .prepare("FETCH 10 FROM feed WITH (timeout = '5s')")
        .await
        .unwrap();
    let names: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, vec!["epoch", "diff", "region", "total"]);
    client.batch_execute("CLOSE feed").await.unwrap();
    client
        .batch_execute("DECLARE quiet CURSOR FOR SUBSCRIBE totals WITH (SNAPSHOT = false)")
        .await
        .unwrap();
    assert!(fetch(&client, "FETCH ALL quiet WITH (timeout = '100ms')")
        .await
        .is_empty());
    client.batch_execute("CLOSE ALL").await.unwrap();
}

async fn error_code(client: &Client, sql: &str) -> String {
    let error = client.batch_execute(sql).await.unwrap_err();
    error.as_db_error().unwrap().code().code().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_get_postgres_errors() {
    let server = TestServer::start();
    let client = server.connect().await;
    setup(&client).await;
    assert_eq!(error_code(&client, "FETCH 1 nothing").await, "34000");
    assert_eq!(error_code(&client, "CLOSE nothing").await, "34000");
    assert_eq!(error_code(&client, "SUBSCRIBE totals").await, "0A000");
    assert_eq!(
        error_code(&client, "DECLARE c CURSOR FOR SUBSCRIBE sales").await,
        "42809"
    );
    assert_eq!(
        error_code(&client, "DECLARE c CURSOR FOR SUBSCRIBE nope").await,
        "42P01"
    );
    client
        .batch_execute("DECLARE c CURSOR FOR SUBSCRIBE totals")
        .await
        .unwrap();
    assert_eq!(
        error_code(&client, "DECLARE c CURSOR FOR SUBSCRIBE totals").await,
        "42P03"
    );
    assert_eq!(
        error_code(&client, "FETCH 1 c WITH (timeout = 'later')").await,
        "22023"
    );
    assert_eq!(
        error_code(&client, "SET subscribe_queue_limit = 'lots'").await,
        "22023"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_subscribe_streams_rows_until_cancelled() {
    let server = TestServer::start();
    let client = server.connect().await;
    setup(&client).await;
    let (reader, connection) = tokio_postgres::connect(&server.connection_string(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let token = reader.cancel_token();
    let stream = reader
        .copy_out("COPY (SUBSCRIBE totals) TO STDOUT")
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    let mut lines = Vec::new();
    let mut next_line = async || {
        let data = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("a row within 10 s")
            .expect("the stream goes on")
            .unwrap();
        String::from_utf8(data.to_vec()).unwrap()
    };
    for _ in 0..2 {
        lines.push(next_line().await);
    }
    client
        .batch_execute("INSERT INTO sales VALUES ('west', 7)")
        .await
        .unwrap();
    let live = next_line().await;
    let fields: Vec<&str> = live.trim_end().split('\t').collect();
    assert_eq!(&fields[1..], &["1", "west", "7"], "{live:?}");
    let mut snapshot: Vec<String> = lines
        .iter()
        .map(|line| {
            line.trim_end()
                .split('\t')
                .skip(1)
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    snapshot.sort();
    assert_eq!(snapshot, vec!["1|north|1", "1|south|2"]);
    token.cancel_query(NoTls).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the COPY ends after the cancel");
    let error = ended.expect("an error, not the end").unwrap_err();
    assert_eq!(error.as_db_error().unwrap().code().code(), "57014");
    // The connection is usable again.
    let one: i32 = reader.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_is_cut_off() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE events (id BIGINT, note TEXT); \
             CREATE MATERIALIZED VIEW everything AS SELECT id, note FROM events; \
             SET subscribe_queue_limit = '1MB'; \
             DECLARE slow CURSOR FOR SUBSCRIBE everything WITH (SNAPSHOT = false)",
        )
        .await
        .unwrap();
    let writer = server.connect().await;
    for round in 0..20 {
        writer
            .batch_execute(&format!(
                "INSERT INTO events SELECT value, repeat('x', 100) FROM generate_series({}, {})",
                round * 10_000,
                round * 10_000 + 9_999
            ))
            .await
            .unwrap();
    }
    let error = client
        .batch_execute("FETCH ALL slow WITH (timeout = '0s')")
        .await
        .unwrap_err();
    let error = error.as_db_error().unwrap();
    assert_eq!(error.code().code(), "54000", "{error:?}");
    assert!(error.message().contains("fell behind"), "{error:?}");
    // Another subscriber that keeps up sees every row.
    client
        .batch_execute(
            "SET subscribe_queue_limit = '64MB'; DECLARE fast CURSOR FOR SUBSCRIBE everything",
        )
        .await
        .unwrap();
    let rows = fetch(&client, "FETCH ALL fast WITH (timeout = '0s')").await;
    assert_eq!(rows.len(), 200_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_from_a_busy_source_add_up_to_the_view() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SOURCE readings (id BIGINT, k BIGINT) WITH (connector = 'datagen', \
             rows-per-second = '40000', number-of-rows = '80000', fields.id.kind = 'sequence', \
             fields.k.min = '0', fields.k.max = '9'); \
             CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM readings GROUP BY k",
        )
        .await
        .unwrap();
    // Subscribes while the source commits back to back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .batch_execute("DECLARE c CURSOR FOR SUBSCRIBE per_k")
        .await
        .unwrap();
    let mut held: std::collections::BTreeMap<String, i64> = Default::default();
    let mut last_epoch = 0i64;
    let finished = "SELECT count(*) FROM weir_catalog.sources WHERE state = 'finished'";
    loop {
        let done: i64 = client.query_one(finished, &[]).await.unwrap().get(0);
        if done == 1 {
            client.batch_execute("FLUSH").await.unwrap();
        }
        let rows = fetch(&client, "FETCH ALL c WITH (timeout = '200ms')").await;
        for row in &rows {
            let epoch: i64 = row[0].parse().unwrap();
            assert!(epoch >= last_epoch, "epochs go forward: {row:?}");
            last_epoch = epoch;
            *held.entry(row[2..].join("|")).or_insert(0) += row[1].parse::<i64>().unwrap();
        }
        if done == 1 && rows.is_empty() {
            break;
        }
    }
    held.retain(|_, count| *count != 0);
    assert!(held.values().all(|&count| count == 1), "{held:?}");
    let mut from_changes: Vec<String> = held.into_keys().collect();
    from_changes.sort();
    let mut view: Vec<String> = fetch(&client, "SELECT k, n FROM per_k")
        .await
        .into_iter()
        .map(|row| row.join("|"))
        .collect();
    view.sort();
    assert_eq!(from_changes, view);
    let total: i64 = client
        .query_one("SELECT CAST(sum(n) AS BIGINT) FROM per_k", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 80_000);
}

/// Late data downstream: a subscription on a view's `_late` side output
/// gets each late row as it is set aside, and one on a `late_data =
/// 'update'` view gets the correction of a closed window as a -1/+1 pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_and_corrections_reach_subscribers() {
    let server = TestServer::start();
    let client = server.connect().await;
    let writer = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE visits (user_id BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE) APPEND ONLY; \
             CREATE MATERIALIZED VIEW side WITH (late_data = 'side_output') AS \
             SELECT window_start, COUNT(DISTINCT user_id) AS users \
             FROM TUMBLE(visits, ts, INTERVAL '5' MINUTE) GROUP BY window_start; \
             CREATE MATERIALIZED VIEW corrected WITH (late_data = 'update', allowed_lateness = '1 hour') AS \
             SELECT window_start, COUNT(DISTINCT user_id) AS users \
             FROM TUMBLE(visits, ts, INTERVAL '5' MINUTE) GROUP BY window_start EMIT ON WINDOW CLOSE; \
             INSERT INTO visits VALUES (1, '2026-01-01 10:00:00'), (2, '2026-01-01 10:07:00'); \
             DECLARE late CURSOR FOR SUBSCRIBE side_late WITH (SNAPSHOT = false); \
             DECLARE fixes CURSOR FOR SUBSCRIBE corrected WITH (SNAPSHOT = false)",
        )
        .await
        .unwrap();
    // The 10:00 window closed at 10:05; user 3 comes at 10:02, late.
    writer
        .batch_execute("INSERT INTO visits VALUES (3, '2026-01-01 10:02:00')")
        .await
        .unwrap();
    let late = fetch(&client, "FETCH ALL late WITH (timeout = '10s')").await;
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0][1], "1");
    assert!(late[0].iter().any(|value| value == "3"), "{late:?}");
    let fixes = fetch(&client, "FETCH ALL fixes WITH (timeout = '10s')").await;
    assert_eq!(
        without_epochs(&fixes),
        vec!["-1|2026-01-01 10:00:00|1", "1|2026-01-01 10:00:00|2"]
    );
}
