//! Joins over windowed aggregates that emit on update (the default: Nexmark
//! q5 and q7 as written) forget rows as watermarks pass, like interval and
//! window joins of append-only streams: a window's row changes only while
//! the window is open, so once the watermark passes it nothing can retract
//! it or meet it. Checked: EXPLAIN bounds both sides, the state stays at
//! the open windows' rows while an unbounded control join keeps all, the
//! views equal their batch queries after inserts, a failed write and a
//! restart, and kill -9 resumes exactly like an uninterrupted run.

mod common;

use std::time::Duration;

use common::{crashes_match_an_uninterrupted_run, execute_all, sorted_rows, TestServer};

const TABLES: &str = "
    CREATE TABLE pings (k BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '20' SECOND) APPEND ONLY;
    CREATE TABLE pongs (k BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '20' SECOND) APPEND ONLY;
";

/// The tables, then a view of each query.
fn setup() -> String {
    let views = QUERIES
        .iter()
        .map(|(view, query)| format!("CREATE MATERIALIZED VIEW {view} AS {query};\n"));
    std::iter::once(TABLES.to_string()).chain(views).collect()
}

const VIEWS: [&str; 2] = ["top_pings", "busiest"];

/// Each view's query: the view, and the batch query it must equal.
const QUERIES: [(&str, &str); 2] = [
    (
        "top_pings",
        "SELECT p.k, p.ts FROM pings p JOIN (
            SELECT MAX(k) AS top, window_end AS ends
            FROM TUMBLE(pings, ts, INTERVAL '1' MINUTE) GROUP BY window_end) m
        ON p.k = m.top WHERE p.ts BETWEEN m.ends - INTERVAL '1' MINUTE AND m.ends",
    ),
    (
        "busiest",
        "SELECT a.k, a.n, a.starts FROM (
            SELECT k, COUNT(*) AS n, window_start AS starts
            FROM HOP(pings, ts, INTERVAL '20' SECOND, INTERVAL '1' MINUTE)
            GROUP BY k, window_start) a
        JOIN (
            SELECT MAX(n) AS most, starts FROM (
                SELECT k, COUNT(*) AS n, window_start AS starts
                FROM HOP(pongs, ts, INTERVAL '20' SECOND, INTERVAL '1' MINUTE)
                GROUP BY k, window_start) c
            GROUP BY starts) b
        ON a.starts = b.starts AND a.n >= b.most",
    ),
];

/// Step `step`: pings and pongs for up to seven keys around `step` × 10 s,
/// up to 15 s out of order (never under the watermark: the batch queries
/// see the same rows).
fn statements(from: u64, to: u64) -> Vec<String> {
    let at =
        |seconds: u64| format!("TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{seconds}' SECOND");
    (from..to)
        .map(|step| {
            let base = 100 + step * 10;
            let pings: Vec<String> = (0..5)
                .map(|i| {
                    format!(
                        "({}, {})",
                        (step + i * i) % 7,
                        at(base - (i * 6 + step) % 16)
                    )
                })
                .collect();
            let pongs: Vec<String> = (0..4)
                .map(|i| {
                    format!(
                        "({}, {})",
                        (step * 3 + i) % 5,
                        at(base - (i * 11 + step) % 16)
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

async fn equal_their_batch_queries(client: &tokio_postgres::Client, context: &str) {
    for (view, query) in QUERIES {
        let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        let expected = sorted_rows(client, query).await;
        assert!(!expected.is_empty(), "{view} has rows to compare");
        assert_eq!(actual, expected, "{view} after {context}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_over_updating_windows_continue_after_kill_9_like_an_uninterrupted_run() {
    let expected = crashes_match_an_uninterrupted_run(&setup(), statements, &VIEWS).await;
    let rows_of = |view: &str| expected.iter().filter(|l| l.starts_with(view)).count();
    assert!(
        rows_of("top_pings:") > 10 && rows_of("busiest:") > 20,
        "{expected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_over_updating_windows_keeps_only_the_open_windows() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let checkpoints = ["--checkpoint-interval-ms", "200"];
    let server = TestServer::start_with(&data_dir, &checkpoints);
    let client = server.connect().await;
    client.batch_execute(&setup()).await.unwrap();
    for (view, query) in QUERIES {
        let explain = format!("EXPLAIN CREATE MATERIALIZED VIEW {view}_plan AS {query}");
        let plan = sorted_rows(&client, &explain).await;
        let join = plan.iter().flatten().find(|line| line.contains("Join:"));
        let join = join.unwrap_or_else(|| panic!("{view}: {plan:?}"));
        assert!(
            join.contains("left rows until watermark") && join.contains("right rows until"),
            "{view}: {join}"
        );
    }
    // The control: the same aggregates joined without a time bound.
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW unbounded AS
             SELECT p.k, p.ts FROM pings p JOIN (
                 SELECT MAX(k) AS top, window_end AS ends
                 FROM TUMBLE(pings, ts, INTERVAL '1' MINUTE) GROUP BY window_end) m
             ON p.k = m.top",
        )
        .await
        .unwrap();
    execute_all(&client, &statements(0, 60)).await;
    equal_their_batch_queries(&client, "inserts").await;
    // A write that fails in one view takes its rows back from all of them.
    client
        .batch_execute("CREATE MATERIALIZED VIEW guard AS SELECT k, 10 / (k - 99) AS q FROM pings")
        .await
        .unwrap();
    let failed = client
        .batch_execute(&statements(60, 61)[0].replace(
            "VALUES (",
            "VALUES (99, TIMESTAMP '2026-01-01 00:12:00'), (",
        ))
        .await;
    assert!(failed.is_err(), "the write fails in guard");
    execute_all(&client, &statements(61, 150)).await;
    equal_their_batch_queries(&client, "a failed write").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let entries = sorted_rows(
        &client,
        "SELECT view_name, state_entries FROM weir_catalog.materialized_views",
    )
    .await;
    let of = |view: &str| -> i64 {
        let row = entries.iter().find(|row| row[0] == view);
        row.map(|row| row[1].parse().unwrap()).unwrap()
    };
    // 750 pings in 25 minutes of event time: the control keeps them all,
    // the bounded joins about a minute and a half of rows.
    assert!(of("unbounded") > 700, "{entries:?}");
    assert!(of("top_pings") < 250, "{entries:?}");
    assert!(of("busiest") < 250, "{entries:?}");
    drop(client);
    drop(server);
    let server = TestServer::start_with(&data_dir, &checkpoints);
    let client = server.connect().await;
    equal_their_batch_queries(&client, "a restart").await;
    execute_all(&client, &statements(150, 170)).await;
    equal_their_batch_queries(&client, "inserts after the restart").await;
}
