//! Materialized views come back after SIGKILL with their rows, and keep
//! going from there exactly as a server that never crashed.

mod common;

use common::TestServer;
use tokio_postgres::{Client, SimpleQueryMessage};

const SETUP: &str = "
CREATE TABLE clicks (user_id BIGINT, page TEXT, at TIMESTAMP,
                     WATERMARK FOR at AS at - INTERVAL '3' SECOND) APPEND ONLY;
CREATE MATERIALIZED VIEW closed_windows AS
  SELECT window_start, page, COUNT(*) AS n, COUNT(DISTINCT user_id) AS users
  FROM TUMBLE(clicks, at, INTERVAL '10' SECOND) GROUP BY window_start, page
  EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW live_windows AS
  SELECT window_start, window_end, SUM(user_id) AS total
  FROM HOP(clicks, at, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW busy AS
  SELECT window_start AS ts, n FROM closed_windows WHERE n > 1;
CREATE MATERIALIZED VIEW per_page AS SELECT page, MAX(at) AS last_seen FROM clicks GROUP BY page;
";

const VIEWS: &[&str] = &["closed_windows", "live_windows", "busy", "per_page"];

/// Rows with event times that wander backwards now and then (some late).
fn insert_statements(from: u64, to: u64) -> Vec<String> {
    (from..to)
        .map(|step| {
            let rows: Vec<String> = (0..7u64)
                .map(|i| {
                    let second = (step * 7 + i) as i64 - if (step + i) % 5 == 0 { 14 } else { 0 };
                    format!(
                        "({}, '/p{}', TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{} seconds')",
                        (step * 3 + i) % 11,
                        (step + i) % 3,
                        second.max(0)
                    )
                })
                .collect();
            format!("INSERT INTO clicks VALUES {}", rows.join(", "))
        })
        .collect()
}

async fn run(client: &Client, statements: &[String]) {
    for statement in statements {
        client.batch_execute(statement).await.unwrap();
    }
}

/// Every view's rows and late count, as text, in a fixed order.
async fn snapshot(client: &Client) -> Vec<String> {
    let mut lines = Vec::new();
    for view in VIEWS {
        let sql = format!("SELECT * FROM {view} ORDER BY 1, 2");
        for message in client.simple_query(&sql).await.unwrap() {
            if let SimpleQueryMessage::Row(row) = message {
                let values: Vec<&str> = (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL"))
                    .collect();
                lines.push(format!("{view}: {}", values.join(" | ")));
            }
        }
    }
    let sql = "SELECT view_name, late_rows FROM weir_catalog.materialized_views ORDER BY 1";
    for message in client.simple_query(sql).await.unwrap() {
        if let SimpleQueryMessage::Row(row) = message {
            lines.push(format!(
                "late {} {}",
                row.get(0).unwrap(),
                row.get(1).unwrap()
            ));
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_survive_kill_9_and_continue_like_an_uninterrupted_run() {
    let before_crash = insert_statements(0, 40);
    let after_crash = insert_statements(40, 70);

    let reference = TestServer::start();
    let client = reference.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    run(&client, &before_crash).await;
    let expected_at_crash = snapshot(&client).await;
    run(&client, &after_crash).await;
    let expected_final = snapshot(&client).await;
    assert!(expected_final.iter().any(|line| line.starts_with("busy:")));
    assert!(expected_final
        .iter()
        .any(|line| line.starts_with("late closed_windows") && !line.ends_with(" 0")));

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut crashing = TestServer::start_on(&data_dir);
    let client = crashing.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    run(&client, &before_crash).await;
    crashing.kill();

    let restarted = TestServer::start_on(&data_dir);
    let client = restarted.connect().await;
    assert_eq!(snapshot(&client).await, expected_at_crash);
    run(&client, &after_crash).await;
    assert_eq!(snapshot(&client).await, expected_final);
}
