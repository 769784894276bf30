//! `--memory-limit` caps the memory of views' running state, not of data:
//! a table loaded far past the limit stays queryable with its views
//! correct, while a view whose own state would pass the limit fails the
//! statement (53200, naming the view) and leaves nothing behind.

mod common;

use common::{copy_into, sorted_rows, TestServer};

const TABLE: &str = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP, \
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY";
const VIEW: &str = "CREATE MATERIALIZED VIEW per_auction AS \
    SELECT auction, window_start, count(*) AS bids, sum(price) AS volume, \
    count(DISTINCT bidder) AS bidders \
    FROM TUMBLE(bid, ts, INTERVAL '10' SECOND) \
    GROUP BY auction, window_start EMIT ON WINDOW CLOSE";
/// The view's query as a batch: the windows the final watermark has closed.
const BATCH: &str = "SELECT * FROM (SELECT auction, \
    date_bin(INTERVAL '10' SECOND, ts, TIMESTAMP '1970-01-01') AS window_start, \
    count(*) AS bids, sum(price) AS volume, count(DISTINCT bidder) AS bidders \
    FROM bid GROUP BY 1, 2) AS w \
    WHERE window_start + INTERVAL '10' SECOND <= (SELECT max(ts) - INTERVAL '1' SECOND FROM bid)";
/// Every bidder distinct, all in one day-long window: state grows per row.
const DISTINCT_VIEW: &str = "CREATE MATERIALIZED VIEW all_bidders AS \
    SELECT window_start, count(DISTINCT bidder) AS bidders \
    FROM TUMBLE(bid, ts, INTERVAL '1' DAY) GROUP BY window_start";

/// Rows `from..to` as COPY text: 1,000 events per second of event time,
/// `bidder` from `bidder_of`.
fn bids(from: u64, to: u64, bidder_of: impl Fn(u64) -> u64) -> String {
    (from..to)
        .map(|i| {
            let second = i / 1000;
            format!(
                "{}\t{}\t{}\t1970-01-02 {:02}:{:02}:{:02}.{:03}\n",
                i * 7 % 50,
                bidder_of(i),
                i % 1000,
                second / 3600 % 24,
                second / 60 % 60,
                second % 60,
                i % 1000,
            )
        })
        .collect()
}

async fn scalar(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

fn start(temp: &tempfile::TempDir) -> TestServer {
    TestServer::start_with(&temp.path().join("data"), &["--memory-limit", "8MB"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_past_the_limit_stays_queryable_and_views_correct() {
    let temp = tempfile::tempdir().unwrap();
    let server = start(&temp);
    let client = server.connect().await;
    let shown: String = client
        .query_one("SHOW memory_limit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "8 MB");
    client.batch_execute(TABLE).await.unwrap();
    client.batch_execute(VIEW).await.unwrap();
    // 1.2 M rows hold ~40 MB as Arrow columns, five times the limit.
    let rows = 1_200_000u64;
    for part in 0..4 {
        let (from, to) = (part * rows / 4, (part + 1) * rows / 4);
        let copied = copy_into(&client, "bid", bids(from, to, |i| i * 13 % 101)).await;
        assert_eq!(copied.unwrap(), to - from);
    }
    assert_eq!(
        scalar(&client, "SELECT count(*) FROM bid").await,
        rows as i64
    );
    let expected_sum: u64 = (0..rows).map(|i| i % 1000).sum();
    let sum = scalar(&client, "SELECT sum(price)::BIGINT FROM bid").await;
    assert_eq!(sum, expected_sum as i64);
    let view = sorted_rows(&client, "SELECT * FROM per_auction").await;
    assert!(view.len() > 1000, "windows closed: {}", view.len());
    assert_eq!(view, sorted_rows(&client, BATCH).await);
    let memory = scalar(
        &client,
        "SELECT state_memory_bytes FROM weir_catalog.materialized_views",
    )
    .await;
    assert!(memory > 0 && memory < 8 << 20, "view state {memory} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_past_the_limit_fails_the_statement_naming_the_view() {
    let temp = tempfile::tempdir().unwrap();
    let server = start(&temp);
    let client = server.connect().await;
    client.batch_execute(TABLE).await.unwrap();
    client.batch_execute(DISTINCT_VIEW).await.unwrap();
    // A million distinct bidders in one open window: tens of MB of state.
    let distinct = bids(0, 1_000_000, |i| i);
    let error = copy_into(&client, "bid", distinct.clone())
        .await
        .unwrap_err();
    let error = error.as_db_error().expect("a server error");
    assert_eq!(error.code().code(), "53200", "{error:?}");
    assert!(
        error.message().contains("\"all_bidders\""),
        "{}",
        error.message()
    );
    assert!(error.message().contains("8 MB"), "{}", error.message());
    assert!(error.hint().is_some());
    // All or nothing: no row, and the view as before.
    assert_eq!(scalar(&client, "SELECT count(*) FROM bid").await, 0);
    assert_eq!(scalar(&client, "SELECT count(*) FROM all_bidders").await, 0);
    // The server goes on: small writes work and reach the view.
    copy_into(&client, "bid", bids(0, 1000, |i| i % 10))
        .await
        .unwrap();
    let bidders = scalar(&client, "SELECT bidders FROM all_bidders").await;
    assert_eq!(bidders, 10);

    // Without the view the same rows load; a new view whose backfill
    // passes the limit is refused and not created.
    client
        .batch_execute("DROP MATERIALIZED VIEW all_bidders")
        .await
        .unwrap();
    copy_into(&client, "bid", bids(1000, 1_000_000, |i| i))
        .await
        .unwrap();
    assert_eq!(scalar(&client, "SELECT count(*) FROM bid").await, 1_000_000);
    let error = client.batch_execute(DISTINCT_VIEW).await.unwrap_err();
    let error = error.as_db_error().expect("a server error");
    assert_eq!(error.code().code(), "53200", "{error:?}");
    assert!(error.message().contains("\"all_bidders\""));
    let views = scalar(
        &client,
        "SELECT count(*) FROM weir_catalog.materialized_views",
    )
    .await;
    assert_eq!(views, 0);
    client.batch_execute(VIEW).await.unwrap();
    assert_eq!(
        sorted_rows(&client, "SELECT * FROM per_auction").await,
        sorted_rows(&client, BATCH).await
    );
}
