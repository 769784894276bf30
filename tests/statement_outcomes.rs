//! Every way a write statement can end — done, cancelled, timed out, client
//! gone — leaves it applied whole and acknowledged, or not applied at all
//! and reported so; views, table and the store agree, also after a SIGKILL.
//! And DDL from many connections at once keeps every relation.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use common::{sorted_rows as rows, TestServer};
use futures::SinkExt;
use tokio_postgres::{Client, NoTls};

/// splitmix64, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }
}

/// How statement `batch` is ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Cancel,
    Timeout,
    Disconnect,
}

/// What the client learnt of a statement.
#[derive(Debug, PartialEq)]
enum Outcome {
    Applied,
    Cancelled,
    /// The connection went away: either, but whole.
    Unknown,
}

const SIZE: u64 = 300_000;

async fn insert_select(server: &TestServer, batch: u64, ending: Ending, delay_ms: u64) -> Outcome {
    let (client, connection) = server.connect_abortable().await;
    if let Ending::Timeout = ending {
        client
            .batch_execute(&format!("SET statement_timeout = {}", delay_ms.max(1)))
            .await
            .unwrap();
    }
    // The sort makes the part before the commit long enough to cancel.
    let sql = format!(
        "INSERT INTO w SELECT value, {batch} FROM generate_series(1, {SIZE}) \
         ORDER BY md5(value::text)"
    );
    let statement = client.batch_execute(&sql);
    tokio::pin!(statement);
    let sleep = tokio::time::sleep(Duration::from_millis(delay_ms));
    tokio::select! {
        outcome = &mut statement => return classify(outcome),
        () = sleep => {}
    }
    match ending {
        Ending::Cancel => {
            let token = client.cancel_token();
            token.cancel_query(NoTls).await.unwrap();
            classify(statement.await)
        }
        Ending::Timeout => classify(statement.await),
        Ending::Disconnect => {
            connection.abort();
            Outcome::Unknown
        }
    }
}

fn classify(outcome: Result<(), tokio_postgres::Error>) -> Outcome {
    match outcome {
        Ok(()) => Outcome::Applied,
        Err(error) => {
            let code = error.code().map(|code| code.code().to_string());
            assert_eq!(code.as_deref(), Some("57014"), "unexpected error: {error}");
            Outcome::Cancelled
        }
    }
}

/// COPY of `SIZE` rows, cancelled after `delay_ms` (or done).
async fn copy_in(server: &TestServer, batch: u64, delay_ms: u64) -> Outcome {
    let client = server.connect().await;
    let sink = client
        .copy_in::<_, Bytes>("COPY w FROM STDIN")
        .await
        .unwrap();
    let mut text = String::new();
    for value in 1..=SIZE {
        text.push_str(&format!("{value}\t{batch}\n"));
    }
    let copy = async move {
        let mut sink = Box::pin(sink);
        sink.send(Bytes::from(text)).await?;
        sink.as_mut().finish().await.map(|_| ())
    };
    tokio::pin!(copy);
    tokio::select! {
        outcome = &mut copy => return classify(outcome),
        () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
    }
    client.cancel_token().cancel_query(NoTls).await.unwrap();
    classify(copy.await)
}

/// The batches in table `w` and in its view, with their row counts.
async fn applied(client: &Client) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let by_batch = |rows: Vec<Vec<String>>| {
        rows.into_iter()
            .map(|row| (row[0].clone(), row[1].clone()))
            .collect::<BTreeMap<_, _>>()
    };
    // A write whose client went away may still be committing; one more
    // write waits for it (writes to a table are serialized).
    client
        .batch_execute("INSERT INTO w VALUES (0, -1)")
        .await
        .unwrap();
    let table = rows(client, "SELECT v, count(*) FROM w WHERE v >= 0 GROUP BY v").await;
    let view = rows(client, "SELECT v, n FROM w_batches WHERE v >= 0").await;
    (by_batch(table), by_batch(view))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_all_or_nothing_however_they_end() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_with(&data, &["--checkpoint-interval-ms", "50"]);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE w (k BIGINT, v BIGINT);
             CREATE MATERIALIZED VIEW w_batches AS SELECT v, count(*) AS n FROM w GROUP BY v;
             CREATE MATERIALIZED VIEW w_total AS SELECT count(*) AS n FROM w;",
        )
        .await
        .unwrap();
    let mut rng = Rng(10);
    let (mut applied_batches, mut unknown) = (BTreeSet::new(), BTreeSet::new());
    // How long a statement takes here: the endings land anywhere in it.
    let started = std::time::Instant::now();
    let outcome = insert_select(&server, 100, Ending::Cancel, 60_000).await;
    assert_eq!(outcome, Outcome::Applied);
    applied_batches.insert("100".to_string());
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut cancelled = 0;
    for batch in 0..24u64 {
        let delay_ms = rng.below(duration_ms + 1);
        let outcome = match batch % 4 {
            0 => insert_select(&server, batch, Ending::Cancel, delay_ms).await,
            1 => insert_select(&server, batch, Ending::Timeout, delay_ms).await,
            2 => insert_select(&server, batch, Ending::Disconnect, delay_ms).await,
            _ => copy_in(&server, batch, delay_ms).await,
        };
        eprintln!("batch {batch}: {outcome:?} after {delay_ms} ms");
        match outcome {
            Outcome::Applied => drop(applied_batches.insert(batch.to_string())),
            Outcome::Unknown => drop(unknown.insert(batch.to_string())),
            Outcome::Cancelled => cancelled += 1,
        }
        let (table, view) = applied(&client).await;
        assert_eq!(
            table, view,
            "batch {batch}: the view disagrees with the table"
        );
        for (present, count) in &table {
            assert_eq!(
                count,
                &SIZE.to_string(),
                "batch {present} is partly applied"
            );
            assert!(
                applied_batches.contains(present) || unknown.contains(present),
                "batch {present} was reported cancelled but is applied"
            );
        }
        for acknowledged in &applied_batches {
            assert!(
                table.contains_key(acknowledged),
                "batch {acknowledged} was lost"
            );
        }
    }
    assert!(
        cancelled > 0,
        "no statement was cancelled: the test tests nothing"
    );
    let before = applied(&client).await;
    let total = rows(&client, "SELECT n FROM w_total").await;
    let markers = rows(&client, "SELECT count(*) FROM w WHERE v = -1").await;
    let markers: u64 = markers[0][0].parse().unwrap();
    assert_eq!(
        total[0][0],
        (before.0.len() as u64 * SIZE + markers).to_string()
    );
    server.kill();
    let server = TestServer::start_on(&data);
    let client = server.connect().await;
    let after = applied(&client).await;
    assert_eq!(after, before, "a restart changed what was applied");
    client
        .batch_execute("INSERT INTO w VALUES (1, 1000)")
        .await
        .unwrap();
    let (table, view) = applied(&client).await;
    assert_eq!(table.get("1000").map(String::as_str), Some("1"));
    assert_eq!(table, view);
}

/// A table of `rows` rows for a long backfill.
const BIG_ROWS: u64 = 300_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_ddl_from_many_connections_keeps_every_relation() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let setup = server.connect().await;
    setup
        .batch_execute(&format!(
            "CREATE TABLE big (k BIGINT, v BIGINT);
             INSERT INTO big SELECT value % 100, value FROM generate_series(1, {BIG_ROWS});"
        ))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for connection in 0..5u64 {
        let client = server.connect().await;
        tasks.push(tokio::spawn(async move {
            for round in 0..3u64 {
                let n = connection * 10 + round;
                let sql = match (connection + round) % 3 {
                    0 => format!(
                        "CREATE MATERIALIZED VIEW mv_{n} AS SELECT k, count(*) AS c, sum(v) AS s \
                         FROM big GROUP BY k"
                    ),
                    1 => format!(
                        "CREATE TABLE t_{n} (a BIGINT); INSERT INTO t_{n} VALUES ({n}); \
                         CREATE MATERIALIZED VIEW mt_{n} AS SELECT count(*) AS c FROM t_{n}"
                    ),
                    _ => format!(
                        "CREATE VIEW v_{n} AS SELECT k FROM big WHERE k = {n}; \
                         CREATE TABLE t_{n} (a BIGINT)"
                    ),
                };
                client.batch_execute(&sql).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    setup
        .batch_execute("INSERT INTO big VALUES (1, 1)")
        .await
        .unwrap();
    let expected = check_relations(&setup).await;
    server.kill();
    let server = TestServer::start_on(&data);
    let client = server.connect().await;
    assert_eq!(
        check_relations(&client).await,
        expected,
        "a restart lost relations"
    );
    client
        .batch_execute("INSERT INTO big VALUES (2, 2)")
        .await
        .unwrap();
    check_relations(&client).await;
}

/// Checks every relation the DDL test made against a batch query; returns
/// the list of relations.
async fn check_relations(client: &Client) -> Vec<Vec<String>> {
    let batch = rows(client, "SELECT k, count(*), sum(v) FROM big GROUP BY k").await;
    let relations = rows(
        client,
        // Materialized views are in pg_class, not information_schema.tables.
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON c.relnamespace = n.oid \
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm') ORDER BY 1",
    )
    .await;
    let names: BTreeSet<String> = relations.iter().map(|row| row[0].clone()).collect();
    for connection in 0..5u64 {
        for round in 0..3u64 {
            let n = connection * 10 + round;
            let expected: &[String] = match (connection + round) % 3 {
                0 => &[format!("mv_{n}")],
                1 => &[format!("t_{n}"), format!("mt_{n}")],
                _ => &[format!("v_{n}"), format!("t_{n}")],
            };
            for name in expected {
                assert!(names.contains(name), "{name} is missing: {names:?}");
            }
            match (connection + round) % 3 {
                0 => assert_eq!(rows(client, &format!("SELECT * FROM mv_{n}")).await, batch),
                1 => {
                    let count = rows(client, &format!("SELECT c FROM mt_{n}")).await;
                    assert_eq!(count, vec![vec!["1".to_string()]], "mt_{n}");
                }
                _ => {}
            }
        }
    }
    relations
}

/// A COPY … TO STDOUT whose client reads slowly is cancelled between its
/// lines (they are sent after the statement's handler returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stdout_stops_on_cancel() {
    use futures::StreamExt;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE big (id BIGINT, note TEXT); \
             INSERT INTO big SELECT value, repeat('y', 200) FROM generate_series(1, 300000)",
        )
        .await
        .unwrap();
    let stream = client.copy_out("COPY big TO STDOUT").await.unwrap();
    let mut stream = Box::pin(stream);
    let mut lines = 0;
    while lines < 10 {
        stream.next().await.unwrap().unwrap();
        lines += 1;
    }
    client.cancel_token().cancel_query(NoTls).await.unwrap();
    let mut ended = None;
    while let Some(item) = stream.next().await {
        lines += 1;
        if let Err(error) = item {
            ended = Some(error);
            break;
        }
    }
    let error = ended.expect("the COPY was cancelled, not finished");
    let code = error
        .as_db_error()
        .map(|error| error.code().code().to_string());
    assert_eq!(code.as_deref(), Some("57014"), "{error:?}");
    assert!(lines < 300_000, "{lines} lines came");
    let count: i64 = client
        .query_one("SELECT count(*) FROM big", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 300_000);
}

const VIEW: &str = "CREATE MATERIALIZED VIEW by_key AS \
    SELECT k, count(*) AS n, sum(v) AS total FROM history GROUP BY k";

/// The error code and message of a statement that failed.
fn failure(outcome: Result<(), tokio_postgres::Error>) -> (String, String) {
    let error = outcome.expect_err("the statement was expected to fail");
    let db = error.as_db_error().expect("a server error");
    (db.code().code().to_string(), db.message().to_string())
}

/// A view's backfill stops when its CREATE is cancelled or times out: the
/// statement ends long before a whole backfill would, and no view appears
/// later (the backfill runs on a thread of its own, and must not commit
/// after the session has moved on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_view_creation_stops_its_backfill_and_leaves_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE history (k BIGINT, v BIGINT); \
             INSERT INTO history SELECT value % 1000, value FROM generate_series(1, 3000000)",
        )
        .await
        .unwrap();
    client
        .batch_execute("SET statement_timeout = '200ms'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (code, message) = failure(client.batch_execute(VIEW).await);
    let timed_out_after = started.elapsed();
    assert_eq!(code, "57014", "{message}");
    assert!(message.contains("statement timeout"), "{message}");
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .unwrap();

    let cancel = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel_query(NoTls).await.unwrap();
    });
    let started = std::time::Instant::now();
    let (code, message) = failure(client.batch_execute(VIEW).await);
    let cancelled_after = started.elapsed();
    canceller.await.unwrap();
    assert_eq!(code, "57014", "{message}");

    // Nothing appears later either.
    client.batch_execute("SELECT 1").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, _) = failure(client.batch_execute("SELECT * FROM by_key").await);
    assert_eq!(code, "42P01");

    let started = std::time::Instant::now();
    client.batch_execute(VIEW).await.unwrap();
    let whole = started.elapsed();
    println!("timed out after {timed_out_after:?}, cancelled after {cancelled_after:?}, whole backfill {whole:?}");
    // Stopped, not run to the end and then thrown away.
    assert!(timed_out_after * 4 < whole && cancelled_after * 4 < whole);
    let batch = rows(
        &client,
        "SELECT k, count(*), sum(v) FROM history GROUP BY k",
    )
    .await;
    assert_eq!(rows(&client, "SELECT * FROM by_key").await, batch);
}
