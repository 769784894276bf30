//! Every aggregate weir allows in a view, over every column type it accepts,
//! keeps exact state across checkpoints, SESSION merges and a SIGKILL: each
//! view must equal the same query run as a batch over the table's rows.
//! (Issue 10: a checkpoint once consumed COUNT(DISTINCT) state of text
//! columns, because `Accumulator::state` may take what it reports.)

mod common;

use std::time::{Duration, Instant};

use common::{sorted_rows as rows, TestServer};
use tokio_postgres::Client;

/// Column, its SQL type, and the aggregates to run over it (`@` stands for
/// the column).
const COLUMNS: &[(&str, &str, &[&str])] = &[
    ("i2", "SMALLINT", NUMERIC_AGGREGATES),
    ("i4", "INT", NUMERIC_AGGREGATES),
    ("i8", "BIGINT", NUMERIC_AGGREGATES),
    ("f4", "REAL", FLOAT_AGGREGATES),
    ("f8", "DOUBLE PRECISION", FLOAT_AGGREGATES),
    ("dec", "NUMERIC(12,2)", DECIMAL_AGGREGATES),
    ("txt", "TEXT", TEXT_AGGREGATES),
    ("vc", "VARCHAR", TEXT_AGGREGATES),
    ("flag", "BOOLEAN", BOOLEAN_AGGREGATES),
    ("day", "DATE", TIME_AGGREGATES),
    ("at", "TIMESTAMP", TIME_AGGREGATES),
];

const NUMERIC_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "sum(@)",
    "sum(DISTINCT @)",
    "avg(@)",
    "min(@)",
    "max(@)",
    "median(@)",
    "stddev(@)",
    "var_pop(@)",
    "bit_and(@)",
    "bit_or(@)",
    "bit_xor(@)",
    "approx_distinct(@)",
    "cardinality(array_agg(@))",
    "approx_percentile_cont(@, 0.5)",
    "array_agg(@ ORDER BY @ DESC)",
    "first_value(@ ORDER BY @ DESC)",
];

const FLOAT_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "sum(@)",
    "avg(@)",
    "min(@)",
    "max(@)",
    "median(@)",
    "stddev(@)",
    "cardinality(array_agg(@))",
    "array_agg(@ ORDER BY @)",
];

const DECIMAL_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "sum(@)",
    "avg(@)",
    "min(@)",
    "max(@)",
    "median(@)",
    "cardinality(array_agg(DISTINCT @))",
    "last_value(@ ORDER BY @)",
];

const TEXT_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "min(@)",
    "max(@)",
    "approx_distinct(@)",
    "length(string_agg(@, ','))",
    "cardinality(array_agg(DISTINCT @))",
    "string_agg(@, ',' ORDER BY @ DESC)",
    "array_agg(@ ORDER BY @)",
];

const BOOLEAN_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "bool_and(@)",
    "bool_or(@)",
    "min(@)",
    "max(@)",
];

const TIME_AGGREGATES: &[&str] = &[
    "count(@)",
    "count(DISTINCT @)",
    "min(@)",
    "max(@)",
    "array_agg(@ ORDER BY @ DESC)",
];

/// `aggregates` over `column`, named a0, a1, …
fn select_list(column: &str, aggregates: &[&str]) -> String {
    aggregates
        .iter()
        .enumerate()
        .map(|(index, aggregate)| format!("{} AS a{index}", aggregate.replace('@', column)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The three shapes of view: unwindowed, TUMBLE, SESSION (whose sessions
/// merge in later rounds).
fn queries(column: &str, aggregates: &[&str]) -> Vec<(String, String)> {
    let list = select_list(column, aggregates);
    vec![
        (
            format!("by_key_{column}"),
            format!("SELECT k, {list} FROM agg_input GROUP BY k"),
        ),
        (
            format!("tumble_{column}"),
            format!(
                "SELECT window_start, k, {list} FROM TUMBLE(agg_input, ts, INTERVAL '1' HOUR) \
                 GROUP BY window_start, k"
            ),
        ),
        (
            format!("session_{column}"),
            format!(
                "SELECT k, window_start, window_end, {list} \
                 FROM SESSION(agg_input, ts, INTERVAL '10' MINUTE) \
                 GROUP BY k, window_start, window_end"
            ),
        ),
    ]
}

/// TUMBLE with EMIT ON WINDOW CLOSE (the vectorised operator): its windows
/// stay open through the rounds, checkpoints and the crash (the watermark
/// is a day behind), and close when `CLOSING_ROW` arrives. Returns the view
/// and the batch query it must then equal.
fn closing_view(column: &str, aggregates: &[&str]) -> ((String, String), String) {
    let list = select_list(column, aggregates);
    let select =
        format!("SELECT window_start, k, {list} FROM TUMBLE(agg_input, ts, INTERVAL '1' HOUR)");
    (
        (
            format!("closing_{column}"),
            format!("{select} GROUP BY window_start, k EMIT ON WINDOW CLOSE"),
        ),
        format!("{select} WHERE ts < TIMESTAMP '2026-01-02 00:00:00' GROUP BY window_start, k"),
    )
}

/// Moves the watermark past every window of the rounds.
const CLOSING_ROW: &str =
    "INSERT INTO agg_input (k, ts) VALUES (0, TIMESTAMP '2026-01-03 00:00:00')";

/// Round `round`'s rows. Values repeat across rounds (so DISTINCT state
/// matters after a checkpoint); times put each round's rows in the same
/// hour, and round 2 bridges round 0's and round 1's sessions.
fn insert_sql(round: i64) -> String {
    let minutes: &[i64] = match round {
        0 => &[0, 5, 40],
        1 => &[22, 28, 45],
        2 => &[12, 17, 33],
        _ => &[1, 26, 50],
    };
    let mut rows = Vec::new();
    for (index, minute) in minutes.iter().enumerate() {
        for k in 0..3i64 {
            let j = index as i64 + k;
            let v = (j * 7 + round * 3) % 11 - 4;
            rows.push(format!(
                "({k}, {v}, {v}, {}, {v}.5, {v}.25, {v}.75, 'u{}', 'v{}', {}, \
                 DATE '2026-01-0{}', TIMESTAMP '2026-01-01 00:00:0{}', \
                 TIMESTAMP '2026-01-01 10:00:00' + INTERVAL '{minute} minutes')",
                v * 1_000_000_007,
                v.rem_euclid(4),
                v.rem_euclid(3),
                v % 2 == 0,
                v.rem_euclid(5) + 1,
                v.rem_euclid(7),
            ));
        }
    }
    format!("INSERT INTO agg_input VALUES {}", rows.join(", "))
}

fn create_table_sql() -> String {
    let columns: Vec<String> = COLUMNS
        .iter()
        .map(|(name, sql_type, _)| format!("{name} {sql_type}"))
        .collect();
    format!(
        "CREATE TABLE agg_input (k BIGINT, {}, ts TIMESTAMP, \
         WATERMARK FOR ts AS ts - INTERVAL '1' DAY) APPEND ONLY",
        columns.join(", ")
    )
}

/// Equal, up to rounding in the last digits of floating-point results
/// (the order of additions differs between a stream and a batch).
fn same_cell(view: &str, batch: &str) -> bool {
    if view == batch {
        return true;
    }
    match (view.parse::<f64>(), batch.parse::<f64>()) {
        (Ok(a), Ok(b)) => (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

async fn check_all(client: &Client, views: &[(String, String)], moment: &str) {
    for (name, query) in views {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = rows(client, query).await;
        let equal = view.len() == batch.len()
            && view
                .iter()
                .zip(&batch)
                .all(|(a, b)| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_cell(x, y)));
        assert!(
            equal,
            "{moment}: view {name} differs from its query run as a batch\nquery: {query}\n\
             view:  {view:?}\nbatch: {batch:?}"
        );
    }
}

async fn last_epoch(client: &Client) -> i64 {
    let found = rows(
        client,
        "SELECT coalesce(max(epoch), 0) FROM weir_catalog.checkpoints",
    )
    .await;
    found[0][0].parse().unwrap()
}

/// Waits until a checkpoint newer than `after` has committed.
async fn wait_for_checkpoint(client: &Client, after: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let epoch = last_epoch(client).await;
        if epoch > after {
            return epoch;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint after epoch {after}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_aggregate_and_type_survives_checkpoints_merges_and_a_crash() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let arguments = ["--checkpoint-interval-ms", "100"];
    let mut server = TestServer::start_with(&data, &arguments);
    let client = server.connect().await;
    client.batch_execute(&create_table_sql()).await.unwrap();
    let views: Vec<(String, String)> = COLUMNS
        .iter()
        .flat_map(|(column, _, aggregates)| queries(column, aggregates))
        .collect();
    let closing: Vec<((String, String), String)> = COLUMNS
        .iter()
        .map(|(column, _, aggregates)| closing_view(column, aggregates))
        .collect();
    for (name, query) in views.iter().chain(closing.iter().map(|(view, _)| view)) {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE {name}: {e}"));
    }
    let mut epoch = last_epoch(&client).await;
    for round in 0..3 {
        client.batch_execute(&insert_sql(round)).await.unwrap();
        epoch = wait_for_checkpoint(&client, epoch).await;
        check_all(&client, &views, &format!("after round {round}")).await;
    }
    server.kill();
    let server = TestServer::start_with(&data, &arguments);
    let client = server.connect().await;
    check_all(&client, &views, "after a restart").await;
    client.batch_execute(&insert_sql(3)).await.unwrap();
    check_all(&client, &views, "after a restart and one more round").await;
    for ((name, _), _) in &closing {
        let shown = rows(&client, &format!("SELECT count(*) FROM {name}")).await;
        assert_eq!(shown[0][0], "0", "{name} showed a window before it closed");
    }
    client.batch_execute(CLOSING_ROW).await.unwrap();
    check_all(&client, &views, "after the closing row").await;
    let closed: Vec<(String, String)> = closing
        .into_iter()
        .map(|((name, _), expected)| (name, expected))
        .collect();
    check_all(&client, &closed, "windows closed").await;
}
