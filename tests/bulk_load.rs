//! Large COPYs stream into the table's log (issue 11): a COPY bigger than a
//! decode chunk and than the spill bound lands whole, with its views equal
//! to the same queries run as a batch; a COPY that fails, is abandoned, or
//! is cut short by kill -9 leaves nothing, even after it spilled rows; and a
//! restart replays only the rows after the last checkpoint.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{sorted_rows, TestServer};
use futures::SinkExt;
use tokio_postgres::Client;

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

/// Rows `from..to` as COPY text: 1,000 events per second of event time.
fn bids(from: u64, to: u64) -> String {
    (from..to)
        .map(|i| {
            let second = i / 1000;
            let millis = i % 1000;
            format!(
                "{}\t{}\t{}\t1970-01-02 {:02}:{:02}:{:02}.{millis:03}\n",
                i * 7 % 50,
                i * 13 % 101,
                i % 1000,
                second / 3600 % 24,
                second / 60 % 60,
                second % 60,
            )
        })
        .collect()
}

/// Sends `text` as COPY data in 64 KiB messages; returns the rows copied.
async fn copy(client: &Client, text: String) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in::<_, Bytes>("COPY bid FROM STDIN").await?;
    let mut sink = Box::pin(sink);
    for piece in text.as_bytes().chunks(64 * 1024) {
        sink.send(Bytes::copy_from_slice(piece)).await?;
    }
    sink.as_mut().finish().await
}

async fn count(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM bid", &[])
        .await
        .unwrap()
        .get(0)
}

/// The view equals its query run as a batch over the table.
async fn assert_view_matches(client: &Client) {
    let view = sorted_rows(client, "SELECT * FROM per_auction").await;
    let batch = sorted_rows(client, BATCH).await;
    assert!(!view.is_empty());
    assert_eq!(view.len(), batch.len());
    assert!(view == batch, "the view differs from its batch query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_copies_land_whole_or_not_at_all() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY",
        )
        .await
        .unwrap();
    client.batch_execute(VIEW).await.unwrap();

    // ~28 MB: several decode chunks, and past the spill bound.
    assert_eq!(copy(&client, bids(0, 700_000)).await.unwrap(), 700_000);
    assert_eq!(count(&client).await, 700_000);
    assert_view_matches(&client).await;

    // A bad value after 300k good rows: the error names its line; nothing lands.
    let mut bad = bids(700_000, 1_000_000);
    bad.push_str("oops\t1\t1\t1970-01-02 00:00:00\n");
    let error = copy(&client, bad).await.unwrap_err();
    let error = error.as_db_error().expect("a database error");
    assert_eq!(error.code().code(), "22P02");
    assert!(
        error.message().contains("line 300001"),
        "{}",
        error.message()
    );
    assert_eq!(count(&client).await, 700_000);

    // A client that goes away half way through a COPY.
    {
        let (abandoning, connection) = server.connect_abortable().await;
        let sink = abandoning
            .copy_in::<_, Bytes>("COPY bid FROM STDIN")
            .await
            .unwrap();
        let mut sink = Box::pin(sink);
        sink.send(Bytes::from(bids(1_000_000, 1_400_000)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        connection.abort();
    }
    assert_eq!(
        copy(&client, bids(2_000_000, 2_000_100)).await.unwrap(),
        100
    );
    assert_eq!(count(&client).await, 700_100);
    assert_view_matches(&client).await;

    // kill -9 while a COPY is sending: it was never acknowledged.
    let (killed, _connection) = server.connect_abortable().await;
    let sink = killed
        .copy_in::<_, Bytes>("COPY bid FROM STDIN")
        .await
        .unwrap();
    let mut sink = Box::pin(sink);
    sink.send(Bytes::from(bids(3_000_000, 3_400_000)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();

    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    assert_eq!(count(&client).await, 700_100);
    assert_view_matches(&client).await;
    // The log continues where the committed rows end.
    assert_eq!(copy(&client, bids(4_000_000, 4_000_010)).await.unwrap(), 10);
    assert_eq!(count(&client).await, 700_110);
    // Recovery started from a checkpoint, not from all 700k rows.
    let replayed: i64 = client
        .query_one("SELECT rows_replayed FROM weir_catalog.recovery", &[])
        .await
        .unwrap()
        .get(0);
    assert!(replayed < 700_000, "replayed {replayed} rows");
}
