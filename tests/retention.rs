//! `WITH (retention = ...)`: a stream's old rows leave its log (and
//! queries) in the background, while the views over it keep every result,
//! across a restart too.

mod common;

use std::time::{Duration, Instant};

use common::{sorted_rows, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_leave_the_table_but_not_the_views() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let arguments = ["--checkpoint-interval-ms", "100"];
    let mut server = TestServer::start_with(&data_dir, &arguments);
    let client = server.connect().await;
    let refused = client
        .batch_execute("CREATE TABLE plain (v BIGINT) WITH (retention = '1 day')")
        .await
        .unwrap_err();
    assert_eq!(refused.as_db_error().unwrap().code().code(), "22023");
    client
        .batch_execute(
            "CREATE TABLE clicks (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts) \
             WITH (retention = '10 seconds') APPEND ONLY; \
             CREATE MATERIALIZED VIEW per_window AS SELECT window_start, count(*) AS n \
             FROM TUMBLE(clicks, ts, INTERVAL '10' SECOND) GROUP BY window_start \
             EMIT ON WINDOW CLOSE",
        )
        .await
        .unwrap();
    // One write per second of event time, 10 rows each, up to 99 s.
    for second in 0..100 {
        let values: Vec<String> = (0..10)
            .map(|user| {
                format!("({user}, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{second}' SECOND)")
            })
            .collect();
        client
            .batch_execute(&format!("INSERT INTO clicks VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }
    let windows: Vec<Vec<String>> = (0..9)
        .map(|window| {
            vec![
                format!(
                    "2026-01-01 00:{:02}:{:02}",
                    window * 10 / 60,
                    window * 10 % 60
                ),
                "100".to_string(),
            ]
        })
        .collect();
    assert_eq!(
        sorted_rows(&client, "SELECT * FROM per_window").await,
        windows
    );

    // Watermark 99 s, retention 10 s: the writes of 0..88 s go (each is
    // wholly before 89 s) once a checkpoint covers them; 89..99 s stay.
    let deadline = Instant::now() + Duration::from_secs(60);
    let kept = loop {
        let kept: i64 = client
            .query_one("SELECT count(*) FROM clicks", &[])
            .await
            .unwrap()
            .get(0);
        if kept <= 110 || Instant::now() > deadline {
            break kept;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(kept, 110);
    // One entry per INSERT: 11 of the 100 are left on disk.
    let storage = client
        .query_one(
            "SELECT rows_committed, rows_kept, log_entries, disk_bytes, retention_ms \
             FROM weir_catalog.tables WHERE table_name = 'clicks'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(storage.get::<_, i64>(0), 1000);
    assert_eq!(storage.get::<_, i64>(1), 110);
    assert_eq!(storage.get::<_, i64>(2), 11);
    assert!(storage.get::<_, i64>(3) > 0);
    assert_eq!(storage.get::<_, Option<i64>>(4), Some(10_000));
    let older: i64 = client
        .query_one(
            "SELECT count(*) FROM clicks WHERE ts < TIMESTAMP '2026-01-01 00:01:29'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(older, 0);
    assert_eq!(
        sorted_rows(&client, "SELECT * FROM per_window").await,
        windows
    );

    server.kill();
    let server = TestServer::start_with(&data_dir, &arguments);
    let client = server.connect().await;
    assert_eq!(
        sorted_rows(&client, "SELECT * FROM per_window").await,
        windows
    );
    let after: i64 = client
        .query_one("SELECT count(*) FROM clicks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, kept, "expired rows stay gone");
    // The stream goes on; the view closes the next window as before.
    client
        .batch_execute(
            "INSERT INTO clicks VALUES (1, TIMESTAMP '2026-01-01 00:01:45'), \
             (1, TIMESTAMP '2026-01-01 00:02:00')",
        )
        .await
        .unwrap();
    let rows = sorted_rows(&client, "SELECT * FROM per_window").await;
    assert_eq!(rows.len(), 11);
    assert_eq!(rows[..9], windows[..]);
    assert_eq!(
        rows[9],
        vec!["2026-01-01 00:01:30".to_string(), "100".to_string()]
    );
    assert_eq!(
        rows[10],
        vec!["2026-01-01 00:01:40".to_string(), "1".to_string()]
    );
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Waits until `SELECT count(*) FROM clicks` is at most `expected`.
async fn kept_rows(client: &tokio_postgres::Client, expected: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let kept = count(client, "SELECT count(*) FROM clicks").await;
        if kept <= expected || Instant::now() > deadline {
            return kept;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn insert_seconds(client: &tokio_postgres::Client, seconds: std::ops::Range<u32>) {
    for second in seconds {
        client
            .batch_execute(&format!(
                "INSERT INTO clicks VALUES (1, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{second}' SECOND), \
                 (2, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{second}' SECOND)"
            ))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_sets_and_resets_retention_durably() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let arguments = ["--checkpoint-interval-ms", "100"];
    let mut server = TestServer::start_with(&data_dir, &arguments);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE clicks (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts) APPEND ONLY; \
             CREATE TABLE plain (v BIGINT); \
             CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n FROM clicks",
        )
        .await
        .unwrap();
    let code =
        |error: tokio_postgres::Error| error.as_db_error().unwrap().code().code().to_string();
    for (sql, expected) in [
        ("ALTER TABLE plain SET (retention = '1 day')", "22023"),
        ("ALTER TABLE totals SET (retention = '1 day')", "42809"),
        ("ALTER TABLE missing SET (retention = '1 day')", "42P01"),
        (
            "ALTER TABLE clicks SET (watermark_idle_timeout = '1s')",
            "0A000",
        ),
        ("ALTER TABLE clicks SET (retention = 'later')", "22023"),
    ] {
        let error = client.batch_execute(sql).await.unwrap_err();
        assert_eq!(code(error), expected, "{sql}");
    }
    client
        .batch_execute("ALTER TABLE IF EXISTS missing SET (retention = '1 day')")
        .await
        .unwrap();

    // Kept while no retention is set; 20 s of history go once it is.
    insert_seconds(&client, 0..30).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(count(&client, "SELECT count(*) FROM clicks").await, 60);
    client
        .batch_execute("ALTER TABLE clicks SET (retention = '10 seconds')")
        .await
        .unwrap();
    assert_eq!(kept_rows(&client, 22).await, 22, "19..29 s stay");

    // The retention survives a restart; RESET keeps everything again.
    server.kill();
    let server = TestServer::start_with(&data_dir, &arguments);
    let client = server.connect().await;
    insert_seconds(&client, 30..40).await;
    assert_eq!(kept_rows(&client, 22).await, 22, "29..39 s stay");
    client
        .batch_execute("ALTER TABLE clicks RESET (retention)")
        .await
        .unwrap();
    insert_seconds(&client, 40..60).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(count(&client, "SELECT count(*) FROM clicks").await, 62);
    assert_eq!(count(&client, "SELECT n FROM totals").await, 120);
}
