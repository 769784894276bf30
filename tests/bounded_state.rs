//! State stays bounded: after windows close (plus the allowed lateness) and
//! sessions end, their state is gone. A long run through the live server
//! keeps each view's checkpointed state the same size while the data grows.

mod common;

use common::TestServer;
use tokio_postgres::Client;

const SETUP: &str = "
CREATE TABLE readings (sensor BIGINT, v BIGINT, ts TIMESTAMP,
                       WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY;
CREATE MATERIALIZED VIEW corrected WITH (late_data = 'update', allowed_lateness = '20 seconds') AS
  SELECT window_start, sensor, COUNT(*) AS n, COUNT(DISTINCT v) AS distinct_values
  FROM TUMBLE(readings, ts, INTERVAL '10' SECOND) GROUP BY window_start, sensor
  EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW sliding WITH (late_data = 'side_output') AS
  SELECT window_start, window_end, SUM(v) AS total
  FROM HOP(readings, ts, INTERVAL '5' SECOND, INTERVAL '20' SECOND) GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW bursts AS
  SELECT sensor, window_start, window_end, COUNT(*) AS n
  FROM SESSION(readings, ts, INTERVAL '3' SECOND) GROUP BY sensor, window_start, window_end
  EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW growing AS
  SELECT window_end, MAX(v) AS top
  FROM CUMULATE(readings, ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) GROUP BY window_end;
";

const VIEWS: [&str; 4] = ["corrected", "sliding", "bursts", "growing"];

/// One simulated minute of readings: 8 sensors, a reading every second
/// each but for a 5 s pause every 20 s (so sessions end), some 15 s late.
fn minute(index: i64) -> String {
    let mut rows = Vec::new();
    for second in 0..60 {
        for sensor in 0..8 {
            if (second / 5 + sensor) % 4 == 0 {
                continue;
            }
            let late = if (second + sensor) % 17 == 0 { 15 } else { 0 };
            let at = (index * 60 + second - late).max(0);
            rows.push(format!(
                "({sensor}, {}, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{at} seconds')",
                (second * sensor) % 23
            ));
        }
    }
    format!("INSERT INTO readings VALUES {}", rows.join(", "))
}

/// Each view's checkpointed state in bytes, after a fresh checkpoint, and
/// the bytes of memory its operators held then.
async fn state_bytes(client: &Client, views: &[&str]) -> Vec<(i64, i64)> {
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut sizes = Vec::new();
    for view in views {
        let row = client
            .query_one(
                "SELECT state_bytes, state_memory_bytes FROM weir_catalog.materialized_views \
                 WHERE view_name = $1",
                &[&view],
            )
            .await
            .unwrap();
        sizes.push((row.get(0), row.get(1)));
    }
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_does_not_grow_over_a_long_run() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &temp.path().join("data"),
        &["--checkpoint-interval-ms", "50"],
    );
    let client = server.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    for index in 0..10 {
        client.batch_execute(&minute(index)).await.unwrap();
    }
    let early = state_bytes(&client, &VIEWS).await;
    for index in 10..60 {
        client.batch_execute(&minute(index)).await.unwrap();
    }
    let late = state_bytes(&client, &VIEWS).await;
    eprintln!("state bytes after 10 minutes {early:?}, after 60 {late:?}");
    for ((view, early), late) in VIEWS.iter().zip(&early).zip(&late) {
        let ((early, early_memory), (late, late_memory)) = (*early, *late);
        assert!(early > 0, "{view} has no checkpointed state");
        assert!(early_memory > 0, "{view} reports no state in memory");
        // Same shape of data, six times as much of it: the state must not
        // follow the data (a little slack for accumulator encodings, more
        // for hash tables' capacity in memory).
        assert!(
            late <= early + early / 4,
            "{view}: state grew from {early} to {late} bytes"
        );
        assert!(
            late_memory <= 2 * early_memory,
            "{view}: memory grew from {early_memory} to {late_memory} bytes"
        );
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM sliding_late", &[])
        .await
        .unwrap()
        .get(0);
    assert!(rows > 0, "the run has late rows");
}

/// The other side: `allowed_lateness = 'unbounded'` keeps every window, so
/// its state follows the data, and a row an hour late still corrects the
/// first window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_lateness_keeps_every_window() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &temp.path().join("data"),
        &["--checkpoint-interval-ms", "50"],
    );
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE readings (sensor BIGINT, v BIGINT, ts TIMESTAMP,
                                    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY;
             CREATE MATERIALIZED VIEW kept
               WITH (late_data = 'update', allowed_lateness = 'unbounded') AS
               SELECT window_start, sensor, COUNT(DISTINCT v) AS distinct_values, COUNT(*) AS n
               FROM TUMBLE(readings, ts, INTERVAL '10' SECOND) GROUP BY window_start, sensor
               EMIT ON WINDOW CLOSE;",
        )
        .await
        .unwrap();
    for index in 0..10 {
        client.batch_execute(&minute(index)).await.unwrap();
    }
    let early = state_bytes(&client, &["kept"]).await[0].0;
    for index in 10..40 {
        client.batch_execute(&minute(index)).await.unwrap();
    }
    let late = state_bytes(&client, &["kept"]).await[0].0;
    eprintln!("unbounded state bytes after 10 minutes {early}, after 40 {late}");
    assert!(
        late > 3 * early,
        "state grew only from {early} to {late} bytes"
    );
    let first_window =
        "SELECT n FROM kept WHERE sensor = 1 AND window_start = '2026-01-01 00:00:00'";
    let before: i64 = client.query_one(first_window, &[]).await.unwrap().get(0);
    client
        .batch_execute("INSERT INTO readings VALUES (1, 99, '2026-01-01 00:00:01')")
        .await
        .unwrap();
    let after: i64 = client.query_one(first_window, &[]).await.unwrap().get(0);
    assert_eq!(after, before + 1);
}
