//! `EMIT EVERY` end to end (issue 17): a subscriber sees nothing between
//! firings, each firing as one change of one epoch, a window's final row
//! at its close and late corrections batched per firing; after kill -9 the
//! views equal an uninterrupted run's, firings included. The clock is moved
//! on with `ALTER SYSTEM SET emit_clock_offset`, which fires what it makes
//! due before it completes.

mod common;

use common::TestServer;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The rows of a FETCH as (epoch, `diff|columns…`), sorted within an epoch.
async fn fetch(client: &Client, sql: &str) -> Vec<(i64, String)> {
    let messages = client.simple_query(sql).await.unwrap();
    let mut rows: Vec<(i64, String)> = messages
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => {
                let cells: Vec<&str> = (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL"))
                    .collect();
                Some((cells[0].parse().unwrap(), cells[1..].join("|")))
            }
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

/// The changes of one firing: everything the cursor has, all of one epoch.
async fn one_change(client: &Client) -> Vec<String> {
    let rows = fetch(client, "FETCH ALL feed WITH (timeout = '5s')").await;
    let mut epochs: Vec<i64> = rows.iter().map(|(epoch, _)| *epoch).collect();
    epochs.dedup();
    assert_eq!(epochs.len(), 1, "one epoch per firing: {rows:?}");
    rows.into_iter().map(|(_, row)| row).collect()
}

async fn nothing_published(client: &Client) {
    let rows = fetch(client, "FETCH ALL feed WITH (timeout = '300ms')").await;
    assert!(rows.is_empty(), "published between firings: {rows:?}");
}

async fn set_clock(client: &Client, offset: &str) {
    client
        .batch_execute(&format!("ALTER SYSTEM SET emit_clock_offset = '{offset}'"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_firings_closes_and_batched_corrections() {
    let server = TestServer::start();
    let client = server.connect().await;
    let writer = server.connect().await;
    writer
        .batch_execute(
            "CREATE TABLE clicks (user_id TEXT, ts TIMESTAMP, \
               WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE) APPEND ONLY; \
             INSERT INTO clicks VALUES ('a', '2026-01-01 10:00:00'); \
             CREATE MATERIALIZED VIEW users \
               WITH (late_data = 'update', allowed_lateness = '1 hour') AS \
               SELECT window_start, COUNT(DISTINCT user_id) AS users \
               FROM TUMBLE(clicks, ts, INTERVAL '5' MINUTE) GROUP BY window_start \
               EMIT ON WINDOW CLOSE AND EVERY INTERVAL '1' HOUR",
        )
        .await
        .unwrap();
    client
        .batch_execute("DECLARE feed CURSOR FOR SUBSCRIBE users")
        .await
        .unwrap();
    assert_eq!(one_change(&client).await, vec!["1|2026-01-01 10:00:00|1"]);

    // Three statements, two windows: nothing until the hour is up, then
    // one change with each window once.
    for (user, time) in [("b", "10:01:00"), ("c", "10:02:00"), ("a", "10:05:30")] {
        writer
            .batch_execute(&format!(
                "INSERT INTO clicks VALUES ('{user}', '2026-01-01 {time}')"
            ))
            .await
            .unwrap();
    }
    nothing_published(&client).await;
    set_clock(&client, "30min").await;
    nothing_published(&client).await;
    set_clock(&client, "1h").await;
    assert_eq!(
        one_change(&client).await,
        vec![
            "-1|2026-01-01 10:00:00|1",
            "1|2026-01-01 10:00:00|3",
            "1|2026-01-01 10:05:00|1"
        ]
    );

    // The close of 10:05 publishes its final row at once.
    writer
        .batch_execute("INSERT INTO clicks VALUES ('d', '2026-01-01 10:07:00')")
        .await
        .unwrap();
    nothing_published(&client).await;
    writer
        .batch_execute("INSERT INTO clicks VALUES ('e', '2026-01-01 10:12:00')")
        .await
        .unwrap();
    assert_eq!(
        one_change(&client).await,
        vec!["-1|2026-01-01 10:05:00|1", "1|2026-01-01 10:05:00|2"]
    );

    // Late rows for both closed windows: one correction each, at the next
    // firing (the new 10:10 window comes with them).
    for user in ["f", "g"] {
        writer
            .batch_execute(&format!(
                "INSERT INTO clicks VALUES ('{user}', '2026-01-01 10:03:00'), ('{user}', '2026-01-01 10:08:00')"
            ))
            .await
            .unwrap();
    }
    nothing_published(&client).await;
    set_clock(&client, "2h").await;
    assert_eq!(
        one_change(&client).await,
        vec![
            "-1|2026-01-01 10:00:00|3",
            "-1|2026-01-01 10:05:00|2",
            "1|2026-01-01 10:00:00|5",
            "1|2026-01-01 10:05:00|4",
            "1|2026-01-01 10:10:00|1"
        ]
    );
    // No rows since: the clock moving on publishes nothing.
    set_clock(&client, "10h").await;
    nothing_published(&client).await;
    client.batch_execute("CLOSE feed").await.unwrap();
}

/// Statements `from..to` of the crash test: a few rows each (every ninth
/// row late), and every fourth statement the clock an hour on.
fn statements(from: u64, to: u64) -> Vec<String> {
    let mut statements = Vec::new();
    for i in from..to {
        let minute = |j: u64| {
            if (i + j) % 9 == 0 {
                i.saturating_sub(7)
            } else {
                i
            }
        };
        let rows: Vec<String> = (0..3)
            .map(|j| {
                format!(
                    "('u{}', TIMESTAMP '2026-01-01 10:00:00' + INTERVAL '{}' MINUTE)",
                    (i * 3 + j) % 7,
                    minute(j)
                )
            })
            .collect();
        statements.push(format!("INSERT INTO hits VALUES {}", rows.join(", ")));
        if i % 4 == 3 {
            statements.push(format!("ALTER SYSTEM SET emit_clock_offset = '{}h'", i + 1));
        }
    }
    statements
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firings_are_replayed_where_they_happened_after_kill_9() {
    let setup = "CREATE TABLE hits (user_id TEXT, ts TIMESTAMP, \
                   WATERMARK FOR ts AS ts - INTERVAL '2' MINUTE) APPEND ONLY; \
                 CREATE MATERIALIZED VIEW hits_every AS \
                   SELECT window_start, COUNT(*) AS hits, COUNT(DISTINCT user_id) AS users \
                   FROM TUMBLE(hits, ts, INTERVAL '5' MINUTE) GROUP BY window_start \
                   EMIT EVERY INTERVAL '1' HOUR; \
                 CREATE MATERIALIZED VIEW hits_final \
                   WITH (late_data = 'update', allowed_lateness = '5 minutes') AS \
                   SELECT window_start, COUNT(*) AS hits \
                   FROM HOP(hits, ts, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) GROUP BY window_start \
                   EMIT ON WINDOW CLOSE AND EVERY INTERVAL '1' HOUR; \
                 CREATE MATERIALIZED VIEW hits_by_user AS \
                   SELECT user_id, COUNT(*) AS hits, MAX(ts) AS last_seen FROM hits GROUP BY user_id \
                   EMIT EVERY INTERVAL '1' HOUR";
    let views = ["hits_every", "hits_final", "hits_by_user"];
    let rows = common::crashes_match_an_uninterrupted_run(setup, statements, &views).await;
    // Seven users; the last firing (statement 79) showed every one.
    let users = rows.iter().filter(|row| row.starts_with("hits_by_user: "));
    assert_eq!(users.count(), 7, "{rows:?}");
}

/// A COPY whose client stops sending holds its table's writes, and so
/// that table's clock and firings; other tables' go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_copy_holds_back_only_its_own_table() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE held (v BIGINT, ts TIMESTAMP, WATERMARK FOR ts) \
               WITH (watermark_idle_timeout = '100ms') APPEND ONLY; \
             INSERT INTO held VALUES (1, '2026-01-01 00:00:00'); \
             CREATE TABLE free (v BIGINT, ts TIMESTAMP, WATERMARK FOR ts) \
               WITH (watermark_idle_timeout = '100ms') APPEND ONLY; \
             CREATE MATERIALIZED VIEW free_closed AS \
               SELECT window_start, SUM(v) AS total FROM TUMBLE(free, ts, INTERVAL '1' SECOND) \
               GROUP BY window_start EMIT ON WINDOW CLOSE; \
             CREATE MATERIALIZED VIEW free_every AS \
               SELECT COUNT(*) AS n FROM free EMIT EVERY INTERVAL '1' HOUR",
        )
        .await
        .unwrap();
    let copier = server.connect().await;
    let stalled = copier
        .copy_in::<_, bytes::Bytes>("COPY held FROM STDIN")
        .await
        .unwrap();
    // The held table is due for an idle raise the whole time.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    client
        .batch_execute("INSERT INTO free VALUES (5, '2026-01-01 00:00:00.500')")
        .await
        .unwrap();
    // The idle clock closes free's window though held's writes are held.
    let mut closed = Vec::new();
    for _ in 0..100 {
        closed = common::sorted_rows(&client, "SELECT * FROM free_closed").await;
        if !closed.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(closed, vec![vec!["2026-01-01 00:00:00", "5"]]);
    set_clock(&client, "1h").await;
    let every = common::sorted_rows(&client, "SELECT * FROM free_every").await;
    assert_eq!(every, vec![vec!["1"]]);
    client
        .batch_execute("ALTER SYSTEM RESET emit_clock_offset")
        .await
        .unwrap();
    drop(stalled);
}
