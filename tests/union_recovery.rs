//! A view over a UNION ALL of two tables, and a windowed view over that,
//! survive kill -9: restored from the last checkpoint (the union's
//! watermarks included) and replayed, they continue exactly like a run that
//! never stopped.

mod common;

use common::crashes_match_an_uninterrupted_run;

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

const VIEWS: [&str; 3] = ["per_window", "per_user", "events"];

/// Killed with rows after a checkpoint, they are replayed; killed just
/// after one, nothing is, so only the union's checkpointed watermarks
/// judge the next (late) rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_continues_after_kill_9_like_an_uninterrupted_run() {
    let expected_final = crashes_match_an_uninterrupted_run(SETUP, statements, &VIEWS).await;
    let windows = expected_final
        .iter()
        .filter(|line| line.starts_with("per_window:"))
        .count();
    assert!(windows > 10);
}
