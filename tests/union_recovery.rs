//! A view over a UNION ALL of two tables, and a windowed view over that,
//! survive kill -9: restored from the last checkpoint (the union's
//! watermarks included) and replayed, they continue exactly like a run that
//! never stopped.

mod common;

use common::{execute_all, sorted_rows, TestServer};
use tokio_postgres::Client;

const SETUP: &str = "
    CREATE TABLE web (user_id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY;
    CREATE TABLE app (uid BIGINT, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '2' SECOND) APPEND ONLY;
    CREATE MATERIALIZED VIEW events AS
        SELECT user_id, ts, 'web' AS source FROM web
        UNION ALL SELECT uid, at, 'app' FROM app;
    CREATE MATERIALIZED VIEW per_window AS
        SELECT window_start, source, COUNT(*) AS n, COUNT(DISTINCT user_id) AS users
        FROM TUMBLE(events, ts, INTERVAL '5' SECOND)
        GROUP BY window_start, source EMIT ON WINDOW CLOSE;
    CREATE MATERIALIZED VIEW per_user AS
        SELECT user_id, COUNT(*) AS n FROM events GROUP BY user_id;
";

/// Statement `step` writes to one table or the other; the two advance at
/// different paces, so each holds the union's watermark back in turn.
fn statements(from: u64, to: u64) -> Vec<String> {
    (from..to)
        .map(|step| {
            let (table, pace) = if step % 3 == 0 {
                ("app", 3)
            } else {
                ("web", 2)
            };
            let rows: Vec<String> = (0..4i64)
                .map(|i| {
                    let step = step as i64;
                    let second = step * pace / 2 + i - if (step + i) % 7 == 0 { 6 } else { 0 };
                    format!(
                        "({}, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{} seconds')",
                        (step * 5 + i) % 13,
                        second.max(0)
                    )
                })
                .collect();
            format!("INSERT INTO {table} VALUES {}", rows.join(", "))
        })
        .collect()
}

/// The views' rows, as sorted text.
async fn snapshot(client: &Client) -> Vec<String> {
    let mut lines = Vec::new();
    for view in ["per_window", "per_user", "events"] {
        let rows = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        lines.extend(
            rows.iter()
                .map(|row| format!("{view}: {}", row.join(" | "))),
        );
    }
    lines
}

async fn first_part(client: &Client) {
    client.batch_execute(SETUP).await.unwrap();
    execute_all(client, &statements(0, 20)).await;
    // A checkpoint lands here; what follows is replayed after the crash.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    execute_all(client, &statements(20, 40)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_continues_after_kill_9_like_an_uninterrupted_run() {
    let reference = TestServer::start();
    let client = reference.connect().await;
    first_part(&client).await;
    let expected_at_crash = snapshot(&client).await;
    execute_all(&client, &statements(40, 55)).await;
    let expected_at_second_crash = snapshot(&client).await;
    execute_all(&client, &statements(55, 80)).await;
    let expected_final = snapshot(&client).await;
    assert!(
        expected_final
            .iter()
            .filter(|line| line.starts_with("per_window:"))
            .count()
            > 10
    );

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let checkpoints = ["--checkpoint-interval-ms", "200"];
    let mut crashing = TestServer::start_with(&data_dir, &checkpoints);
    let client = crashing.connect().await;
    first_part(&client).await;
    crashing.kill();

    // Killed with rows after the checkpoint: they are replayed.
    let mut restarted = TestServer::start_with(&data_dir, &checkpoints);
    let client = restarted.connect().await;
    assert_eq!(snapshot(&client).await, expected_at_crash);
    execute_all(&client, &statements(40, 55)).await;
    // Killed just after a checkpoint: nothing to replay, so only the
    // checkpointed watermarks of the union judge the next (late) rows.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    restarted.kill();

    let restarted = TestServer::start_with(&data_dir, &checkpoints);
    let client = restarted.connect().await;
    assert_eq!(snapshot(&client).await, expected_at_second_crash);
    execute_all(&client, &statements(55, 80)).await;
    assert_eq!(snapshot(&client).await, expected_final);
}
