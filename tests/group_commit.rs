//! Concurrent writers share commits (group commit). Whatever happens to a
//! group — a write in it fails in a view, the server is SIGKILLed while it
//! is being written — every acknowledged row is kept exactly once, nothing
//! of a failed statement is kept, and the views equal the same query run
//! over the table.

mod common;

use common::{kill_after, Lcg, TestServer};
use tokio_postgres::Client;

const WRITERS: i64 = 8;

// The watermark stays an hour behind: no row is late, whatever the order
// the writers race in.
const SETUP: &str = "
CREATE TABLE events (writer BIGINT, seq BIGINT, v BIGINT, at TIMESTAMP,
  WATERMARK FOR at AS at - INTERVAL '1' HOUR, PRIMARY KEY (writer, seq)) APPEND ONLY;
CREATE MATERIALIZED VIEW per_writer AS
  SELECT writer, window_start, COUNT(*) AS n, SUM(v * 2) AS doubled
  FROM TUMBLE(events, at, INTERVAL '10' SECOND) GROUP BY writer, window_start;";

/// One writer's single-row INSERTs from `first` on, until one fails;
/// returns the sequence numbers acknowledged.
async fn insert_until_error(client: Client, writer: i64, first: i64) -> Vec<i64> {
    let mut acknowledged = Vec::new();
    for seq in first.. {
        let sql = format!(
            "INSERT INTO events VALUES ({writer}, {seq}, {seq}, \
             to_timestamp_millis(1767225600000 + {seq} * 37))"
        );
        if client.batch_execute(&sql).await.is_err() {
            break;
        }
        acknowledged.push(seq);
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_during_group_commits_keep_every_acknowledged_row_once() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_on(&data_dir);
    server.connect().await.batch_execute(SETUP).await.unwrap();
    drop(server);
    let mut random = Lcg(12);
    let mut next = vec![0i64; WRITERS as usize];
    for _ in 0..5 {
        let mut server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "5"]);
        let check = server.connect().await;
        let kept = rows_by_writer(&check).await;
        for (writer, kept) in kept.iter().enumerate() {
            // The statement in flight at the kill may or may not be kept.
            let expected = next[writer];
            assert!(
                *kept == expected || *kept == expected + 1,
                "writer {writer}: {kept} rows kept, {expected} acknowledged"
            );
            next[writer] = *kept;
        }
        assert_view_matches_table(&check).await;
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let client = server.connect().await;
            let first = next[writer as usize];
            tasks.push(tokio::spawn(insert_until_error(client, writer, first)));
        }
        let killer = kill_after(&server, 300 + random.below(1200));
        for (writer, task) in tasks.into_iter().enumerate() {
            let acknowledged = task.await.unwrap();
            if let Some(last) = acknowledged.last() {
                next[writer] = last + 1;
            }
        }
        killer.await.unwrap();
        server.kill();
    }
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    let kept = rows_by_writer(&client).await;
    assert!(kept.iter().zip(&next).all(|(k, n)| k == n || *k == n + 1));
    assert!(kept.iter().sum::<i64>() > 100, "the writers got going");
    assert_view_matches_table(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_failing_in_a_view_takes_nothing_of_it_or_its_group() {
    let server = TestServer::start();
    server.connect().await.batch_execute(SETUP).await.unwrap();
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let client = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for seq in 0..60 {
                // Writer 0's every tenth row overflows `v * 2` in the view.
                let v = if writer == 0 && seq % 10 == 5 {
                    i64::MAX
                } else {
                    seq
                };
                let sql = format!(
                    "INSERT INTO events VALUES ({writer}, {seq}, {v}, \
                     to_timestamp_millis(1767225600000 + {seq} * 37))"
                );
                // A write failed with another retries: 40001.
                loop {
                    match client.batch_execute(&sql).await {
                        Ok(()) => {
                            acknowledged.push(seq);
                            break;
                        }
                        Err(error) => {
                            let code = error.code().map(|c| c.code().to_string());
                            match code.as_deref() {
                                Some("40001") => continue,
                                Some("22003") if v == i64::MAX => break,
                                _ => panic!("writer {writer} row {seq}: {error}"),
                            }
                        }
                    }
                }
            }
            (writer, acknowledged)
        }));
    }
    let client = server.connect().await;
    for task in tasks {
        let (writer, acknowledged) = task.await.unwrap();
        let kept: Vec<i64> = client
            .query(
                "SELECT seq FROM events WHERE writer = $1 ORDER BY seq",
                &[&writer],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(kept, acknowledged, "writer {writer}");
    }
    // The failed rows' keys were taken back: they can be inserted now.
    client
        .batch_execute("INSERT INTO events VALUES (0, 5, 1, to_timestamp_millis(1767225600185))")
        .await
        .unwrap();
    assert_view_matches_table(&client).await;
}

/// Rows kept per writer, checking they are 0, 1, … with no repeats.
async fn rows_by_writer(client: &Client) -> Vec<i64> {
    let mut kept = Vec::new();
    for writer in 0..WRITERS {
        let row = client
            .query_one(
                "SELECT count(*), count(DISTINCT seq), coalesce(max(seq) + 1, 0) \
                 FROM events WHERE writer = $1",
                &[&writer],
            )
            .await
            .unwrap();
        let (rows, distinct, past_last): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(rows, distinct, "writer {writer}: a row is kept twice");
        assert_eq!(rows, past_last, "writer {writer}: a row is missing");
        kept.push(rows);
    }
    kept
}

async fn assert_view_matches_table(client: &Client) {
    let expected = "SELECT writer, date_bin(INTERVAL '10' SECOND, at, TIMESTAMP '1970-01-01'), \
                    COUNT(*), SUM(v * 2) FROM events GROUP BY 1, 2";
    let difference = format!(
        "SELECT count(*) FROM (
        (SELECT writer, window_start, n, doubled FROM per_writer EXCEPT ALL {expected})
        UNION ALL
        ({expected} EXCEPT ALL SELECT writer, window_start, n, doubled FROM per_writer))"
    );
    let differing: i64 = client.query_one(&difference, &[]).await.unwrap().get(0);
    if differing != 0 {
        let view = common::sorted_rows(
            client,
            "SELECT writer, window_start, n, doubled FROM per_writer",
        )
        .await;
        let table = common::sorted_rows(client, expected).await;
        panic!("the view disagrees with the table:\nview {view:?}\ntable {table:?}");
    }
}

/// A write failing in a view fails only its own statement: writes to
/// other tables committed in the same group are committed again without
/// it, so their statements never see 40001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_fails_only_its_statement_not_writes_to_other_tables() {
    let server = TestServer::start();
    let setup = server.connect().await;
    setup.batch_execute(SETUP).await.unwrap();
    for writer in 1..WRITERS {
        setup
            .batch_execute(&format!(
                "CREATE TABLE quiet_{writer} (seq BIGINT PRIMARY KEY, v BIGINT);
                 CREATE MATERIALIZED VIEW quiet_sum_{writer} AS SELECT COUNT(*) AS n, SUM(v) AS s FROM quiet_{writer};"
            ))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let client = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for seq in 0..80 {
                let sql = match writer {
                    // Every fourth row overflows `v * 2` in the view.
                    0 => format!(
                        "INSERT INTO events VALUES (0, {seq}, {}, to_timestamp_millis(1767225600000 + {seq}))",
                        if seq % 4 == 1 { i64::MAX } else { seq }
                    ),
                    _ => format!("INSERT INTO quiet_{writer} VALUES ({seq}, {seq})"),
                };
                if let Err(error) = client.batch_execute(&sql).await {
                    failures.push((seq, error.code().map(|c| c.code().to_string())));
                }
            }
            (writer, failures)
        }));
    }
    for task in tasks {
        let (writer, failures) = task.await.unwrap();
        match writer {
            0 => assert!(failures
                .iter()
                .all(|(seq, code)| seq % 4 == 1 && code.as_deref() == Some("22003"))),
            _ => assert!(failures.is_empty(), "writer {writer}: {failures:?}"),
        }
    }
    let client = server.connect().await;
    for writer in 1..WRITERS {
        let rows = common::sorted_rows(&client, &format!("SELECT * FROM quiet_sum_{writer}")).await;
        assert_eq!(rows, [["80", "3160"]], "writer {writer}");
    }
}
