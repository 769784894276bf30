//! Materialized views come back after SIGKILL with their rows, and keep
//! going from there exactly as a server that never crashed — also when
//! killed at random points, mid-statement, ten times over. Besides every
//! window kind × emit mode × late policy: window top-N (on update and on
//! window close), ordered aggregates, a temporal filter (whose bound is
//! years away, so its held rows must come back), OVER windows (lag, a
//! ROWS frame, a row number), and a join of a join.

mod common;

use common::{execute_all, kill_after, Lcg, TestServer};
use tokio_postgres::{Client, SimpleQueryMessage};

const SETUP: &str = "
CREATE TABLE clicks (seq BIGINT, user_id BIGINT, page TEXT, at TIMESTAMP,
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
CREATE MATERIALIZED VIEW sessions AS
  SELECT page, window_start, window_end, COUNT(*) AS n
  FROM SESSION(clicks, at, INTERVAL '4' SECOND) GROUP BY page, window_start, window_end
  EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW corrected WITH (late_data = 'update', allowed_lateness = '10 seconds') AS
  SELECT window_start, COUNT(*) AS n FROM TUMBLE(clicks, at, INTERVAL '10' SECOND)
  GROUP BY window_start EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW kept WITH (late_data = 'side_output') AS
  SELECT window_start, window_end, COUNT(*) AS n
  FROM CUMULATE(clicks, at, INTERVAL '5' SECOND, INTERVAL '20' SECOND) GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW late_pages AS SELECT page, COUNT(*) AS misses FROM kept_late GROUP BY page;
CREATE MATERIALIZED VIEW top_users AS
  SELECT * FROM (SELECT window_end, user_id, seq,
                        ROW_NUMBER() OVER (PARTITION BY window_end ORDER BY seq DESC, user_id) AS rn
                 FROM TUMBLE(clicks, at, INTERVAL '10' SECOND)) ranked WHERE rn <= 2;
CREATE MATERIALIZED VIEW final_top_users AS
  SELECT * FROM (SELECT window_start, user_id, seq,
                        RANK() OVER (PARTITION BY window_start ORDER BY seq DESC, user_id) AS r
                 FROM TUMBLE(clicks, at, INTERVAL '10' SECOND)) ranked WHERE r <= 2 EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW paths AS
  SELECT user_id, string_agg(page, ',' ORDER BY seq, page) AS pages,
         array_agg(seq ORDER BY seq DESC) AS seqs, first_value(page ORDER BY at, seq) AS first_page
  FROM clicks GROUP BY user_id;
CREATE MATERIALIZED VIEW this_decade AS
  SELECT page, COUNT(*) AS n FROM clicks WHERE at > now() - INTERVAL '3650' DAY GROUP BY page;
CREATE MATERIALIZED VIEW neighbours AS
  SELECT seq, user_id, lag(page) OVER (PARTITION BY user_id ORDER BY seq) AS previous_page,
         COUNT(*) OVER (PARTITION BY user_id ORDER BY seq ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS recent,
         ROW_NUMBER() OVER (PARTITION BY page ORDER BY seq, user_id) AS visit
  FROM clicks;
CREATE MATERIALIZED VIEW next_clicks AS
  SELECT a.seq, b.seq AS next_seq, c.last_seen
  FROM clicks a JOIN clicks b ON b.user_id = a.user_id AND b.seq = a.seq + 1
  JOIN per_page c ON c.page = b.page;
";

const VIEWS: &[&str] = &[
    "closed_windows",
    "live_windows",
    "busy",
    "per_page",
    "sessions",
    "corrected",
    "kept",
    "kept_late",
    "late_pages",
    "top_users",
    "final_top_users",
    "paths",
    "this_decade",
    "neighbours",
    "next_clicks",
];

/// Every window kind × emit mode × late data policy, each a view of its
/// own (with `<view>_late` under side_output).
fn matrix() -> Vec<(String, String)> {
    let kinds = [
        ("tumble", "TUMBLE(clicks, at, INTERVAL '10' SECOND)"),
        (
            "hop",
            "HOP(clicks, at, INTERVAL '5' SECOND, INTERVAL '10' SECOND)",
        ),
        (
            "cumulate",
            "CUMULATE(clicks, at, INTERVAL '5' SECOND, INTERVAL '20' SECOND)",
        ),
        ("session", "SESSION(clicks, at, INTERVAL '4' SECOND)"),
    ];
    let policies = [
        ("drop", ""),
        ("side", "WITH (late_data = 'side_output') "),
        (
            "update",
            "WITH (late_data = 'update', allowed_lateness = '20 seconds') ",
        ),
    ];
    let mut views = Vec::new();
    for (kind, source) in kinds {
        for (emit, clause) in [("live", ""), ("closed", " EMIT ON WINDOW CLOSE")] {
            for (policy, with) in policies {
                let name = format!("m_{kind}_{emit}_{policy}");
                let sql = format!(
                    "CREATE MATERIALIZED VIEW {name} {with}AS SELECT page, window_start, window_end, \
                     COUNT(*) AS n, COUNT(DISTINCT user_id) AS users, SUM(user_id) AS total \
                     FROM {source} GROUP BY page, window_start, window_end{clause};"
                );
                if policy == "side" {
                    views.push((format!("{name}_late"), String::new()));
                }
                views.push((name, sql));
            }
        }
    }
    views
}

/// SETUP and the matrix of views.
fn setup_sql() -> String {
    let matrix: Vec<String> = matrix().into_iter().map(|(_, sql)| sql).collect();
    format!("{SETUP}\n{}", matrix.join("\n"))
}

/// Every relation a snapshot shows.
fn views() -> Vec<String> {
    let mut all: Vec<String> = VIEWS.iter().map(|view| view.to_string()).collect();
    all.extend(matrix().into_iter().map(|(name, _)| name));
    all
}

/// Rows with event times that wander backwards now and then (some late).
fn insert_statements(from: u64, to: u64) -> Vec<String> {
    (from..to)
        .map(|step| {
            let rows: Vec<String> = (0..7u64)
                .map(|i| {
                    let second = (step * 7 + i) as i64 - if (step + i) % 5 == 0 { 14 } else { 0 };
                    format!(
                        "({step}, {}, '/p{}', TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{} seconds')",
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

/// Every view's rows and late count, as text, in a fixed order.
async fn snapshot(client: &Client) -> Vec<String> {
    let mut lines = Vec::new();
    for view in views() {
        let sql = format!("SELECT * FROM {view}");
        let mut rows = Vec::new();
        for message in client.simple_query(&sql).await.unwrap() {
            if let SimpleQueryMessage::Row(row) = message {
                let values: Vec<&str> = (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL"))
                    .collect();
                rows.push(format!("{view}: {}", values.join(" | ")));
            }
        }
        rows.sort();
        lines.extend(rows);
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
    client.batch_execute(&setup_sql()).await.unwrap();
    execute_all(&client, &before_crash).await;
    let expected_at_crash = snapshot(&client).await;
    execute_all(&client, &after_crash).await;
    let expected_final = snapshot(&client).await;
    assert!(expected_final.iter().any(|line| line.starts_with("busy:")));
    assert!(expected_final
        .iter()
        .any(|line| line.starts_with("late closed_windows") && !line.ends_with(" 0")));

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut crashing = TestServer::start_on(&data_dir);
    let client = crashing.connect().await;
    client.batch_execute(&setup_sql()).await.unwrap();
    execute_all(&client, &before_crash).await;
    crashing.kill();

    let restarted = TestServer::start_on(&data_dir);
    let client = restarted.connect().await;
    assert_eq!(snapshot(&client).await, expected_at_crash);
    execute_all(&client, &after_crash).await;
    assert_eq!(snapshot(&client).await, expected_final);
}

/// The statements already committed: each statement's rows share its `seq`.
async fn committed_statements(client: &Client) -> usize {
    let row = client
        .query_one("SELECT coalesce(max(seq), -1) + 1 FROM clicks", &[])
        .await
        .unwrap();
    row.get::<_, i64>(0) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_never_lose_or_double_count_rows() {
    let statements = insert_statements(0, 300);
    let reference = TestServer::start();
    let client = reference.connect().await;
    client.batch_execute(&setup_sql()).await.unwrap();
    execute_all(&client, &statements).await;
    let expected = snapshot(&client).await;
    // A side output may be empty; every other view must not be.
    for view in views()
        .iter()
        .filter(|view| !(view.starts_with("m_") && view.ends_with("_late")))
    {
        let prefix = format!("{view}: ");
        assert!(
            expected.iter().any(|line| line.starts_with(&prefix)),
            "{view} is empty"
        );
    }

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_on(&data_dir);
    server
        .connect()
        .await
        .batch_execute(&setup_sql())
        .await
        .unwrap();
    drop(server);
    let mut random = Lcg(7);
    let mut kills = 0;
    loop {
        // Frequent checkpoints, so kills land before, during and after them;
        // the partition count changes across restarts (checkpoints do not
        // depend on it) and the reference ran at 1.
        let parallelism = ["2", "4", "1"][kills % 3];
        let mut server = TestServer::start_with(
            &data_dir,
            &[
                "--checkpoint-interval-ms",
                "50",
                "--parallelism",
                parallelism,
            ],
        );
        let client = server.connect().await;
        let next = committed_statements(&client).await;
        if kills == 10 {
            execute_all(&client, &statements[next..]).await;
            let actual = snapshot(&client).await;
            let missing: Vec<_> = expected.iter().filter(|l| !actual.contains(l)).collect();
            let extra: Vec<_> = actual.iter().filter(|l| !expected.contains(l)).collect();
            assert!(
                missing.is_empty() && extra.is_empty() && actual.len() == expected.len(),
                "missing {missing:?}\nextra {extra:?}"
            );
            let row = client
                .query_one("SELECT count(*) FROM clicks", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 300 * 7);
            return;
        }
        // Kill it at a random moment while statements are running.
        let killer = kill_after(&server, 20 + random.below(200));
        for statement in &statements[next..] {
            if client.batch_execute(statement).await.is_err() {
                break;
            }
        }
        killer.await.unwrap();
        server.kill();
        kills += 1;
    }
}

/// A regression test for a race: a checkpoint taken between a write's push
/// through the views and its commit recorded offsets for rows that were never
/// stored, and the next start refused the data directory. Large statements
/// and 1 ms checkpoints make that window wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_bulk_load_with_constant_checkpoints_restarts_cleanly() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_on(&data_dir);
    server
        .connect()
        .await
        .batch_execute(
            "CREATE TABLE events (n BIGINT, at TIMESTAMP, WATERMARK FOR at) APPEND ONLY;
             CREATE MATERIALIZED VIEW per_second AS
               SELECT window_start, COUNT(*) AS c, SUM(n) AS total
               FROM TUMBLE(events, at, INTERVAL '1' SECOND) GROUP BY window_start;",
        )
        .await
        .unwrap();
    drop(server);
    let mut random = Lcg(11);
    for _ in 0..12 {
        // 50,000-row statements: two partitions updated on two threads.
        let mut server = TestServer::start_with(
            &data_dir,
            &["--checkpoint-interval-ms", "1", "--parallelism", "2"],
        );
        let client = server.connect().await;
        assert_view_matches_table(&client).await;
        let killer = kill_after(&server, 30 + random.below(300));
        loop {
            // One event time per statement, later each time: no row is late,
            // however DataFusion orders the statement's batches.
            let load = "INSERT INTO events SELECT value, to_timestamp_seconds(1767225600 + \
                        (SELECT count(*) FROM events) / 50000) FROM generate_series(0, 49999)";
            if client.batch_execute(load).await.is_err() {
                break;
            }
        }
        killer.await.unwrap();
        server.kill();
    }
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    assert_view_matches_table(&client).await;
    let rows: i64 = client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        rows > 0 && rows % 50_000 == 0,
        "{rows} rows: statements are all-or-nothing"
    );
}

/// The view must hold exactly what a batch query over the stored rows gives
/// (event times only grow, so no row is late).
async fn assert_view_matches_table(client: &Client) {
    let difference = "SELECT count(*) FROM (
        (SELECT window_start, c, total FROM per_second
         EXCEPT ALL
         SELECT window_start, COUNT(*), SUM(n) FROM TUMBLE(events, at, INTERVAL '1' SECOND) GROUP BY window_start)
        UNION ALL
        (SELECT window_start, COUNT(*), SUM(n) FROM TUMBLE(events, at, INTERVAL '1' SECOND) GROUP BY window_start
         EXCEPT ALL
         SELECT window_start, c, total FROM per_second))";
    let late: i64 = client
        .query_one("SELECT late_rows FROM weir_catalog.materialized_views", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(late, 0);
    let row = client.query_one(difference, &[]).await.unwrap();
    if row.get::<_, i64>(0) != 0 {
        let sql = "SELECT 'view', * FROM per_second UNION ALL SELECT 'table', window_start, COUNT(*), SUM(n) \
                   FROM TUMBLE(events, at, INTERVAL '1' SECOND) GROUP BY window_start ORDER BY 2, 1";
        let rows = client.simple_query(sql).await.unwrap();
        let lines: Vec<String> = rows
            .iter()
            .filter_map(|message| match message {
                SimpleQueryMessage::Row(row) => Some(format!(
                    "{} {} {} {}",
                    row.get(0).unwrap(),
                    row.get(1).unwrap(),
                    row.get(2).unwrap(),
                    row.get(3).unwrap_or("NULL")
                )),
                _ => None,
            })
            .collect();
        panic!("view and table disagree:\n{}", lines.join("\n"));
    }
}

/// Watermarks raised while a source was idle are logged with its rows: a
/// restart that replays the log (no checkpoint here) judges rows late
/// exactly as the live run did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watermarks_replay_the_same_after_a_crash() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let no_checkpoints = ["--checkpoint-interval-ms", "0"];
    let mut server = TestServer::start_with(&data_dir, &no_checkpoints);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE quiet (v BIGINT, ts TIMESTAMP, WATERMARK FOR ts)
               WITH (watermark_idle_timeout = '100ms') APPEND ONLY;
             CREATE MATERIALIZED VIEW quiet_sums AS
               SELECT window_start, SUM(v) AS total FROM TUMBLE(quiet, ts, INTERVAL '1' SECOND)
               GROUP BY window_start EMIT ON WINDOW CLOSE;
             INSERT INTO quiet VALUES (1, '2026-01-01 00:00:00.500');",
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // Late only because the idle watermark passed 00:00:01.
    client
        .batch_execute("INSERT INTO quiet VALUES (2, '2026-01-01 00:00:00.900')")
        .await
        .unwrap();
    let before = snapshot_of(&client, "quiet_sums").await;
    assert_eq!(before, vec!["2026-01-01 00:00:00 | 1", "late 1"]);
    server.kill();

    let server = TestServer::start_with(&data_dir, &no_checkpoints);
    let client = server.connect().await;
    assert_eq!(snapshot_of(&client, "quiet_sums").await, before);
    // The rebuilt state has the window closed: another row for it is late.
    client
        .batch_execute("INSERT INTO quiet VALUES (4, '2026-01-01 00:00:00.950')")
        .await
        .unwrap();
    let after = snapshot_of(&client, "quiet_sums").await;
    assert_eq!(after, vec!["2026-01-01 00:00:00 | 1", "late 2"]);
}

async fn snapshot_of(client: &Client, view: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let sql = format!("SELECT * FROM {view} ORDER BY 1");
    for message in client.simple_query(&sql).await.unwrap() {
        if let SimpleQueryMessage::Row(row) = message {
            let values: Vec<&str> = (0..row.len())
                .map(|i| row.get(i).unwrap_or("NULL"))
                .collect();
            lines.push(values.join(" | "));
        }
    }
    let sql =
        format!("SELECT late_rows FROM weir_catalog.materialized_views WHERE view_name = '{view}'");
    for message in client.simple_query(&sql).await.unwrap() {
        if let SimpleQueryMessage::Row(row) = message {
            lines.push(format!("late {}", row.get(0).unwrap()));
        }
    }
    lines
}
