//! Large COPYs stream into the table's log (issue 11): a COPY bigger than a
//! decode chunk and than the spill bound lands whole, with its views equal
//! to the same queries run as a batch; a COPY that fails, is abandoned, or
//! is cut short by kill -9 leaves nothing, even after it spilled rows; and a
//! restart replays only the rows after the last checkpoint.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{copy_into, sorted_rows, TestServer};
use futures::SinkExt;
use tokio_postgres::Client;

const TABLE: &str = "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, \
    ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY";
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
    client.batch_execute(TABLE).await.unwrap();
    client.batch_execute(VIEW).await.unwrap();

    // ~28 MB: several decode chunks, and past the spill bound.
    assert_eq!(
        copy_into(&client, "bid", bids(0, 700_000)).await.unwrap(),
        700_000
    );
    assert_eq!(count(&client).await, 700_000);
    assert_view_matches(&client).await;

    // A bad value after 300k good rows: the error names its line; nothing lands.
    let mut bad = bids(700_000, 1_000_000);
    bad.push_str("oops\t1\t1\t1970-01-02 00:00:00\n");
    let error = copy_into(&client, "bid", bad).await.unwrap_err();
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
        copy_into(&client, "bid", bids(2_000_000, 2_000_100))
            .await
            .unwrap(),
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
    assert_eq!(
        copy_into(&client, "bid", bids(4_000_000, 4_000_010))
            .await
            .unwrap(),
        10
    );
    assert_eq!(count(&client).await, 700_110);
    // Recovery started from a checkpoint, not from all 700k rows.
    let replayed: i64 = client
        .query_one("SELECT rows_replayed FROM weir_catalog.recovery", &[])
        .await
        .unwrap()
        .get(0);
    assert!(replayed < 700_000, "replayed {replayed} rows");
}

/// `k, v` rows as COPY text; `v` cycles 0..7 (never 7).
fn pairs(from: u64, to: u64) -> String {
    (from..to).map(|k| format!("{k}\t{}\n", k % 7)).collect()
}

/// One row of text values.
async fn text_row(client: &Client, sql: &str) -> Vec<Option<String>> {
    let messages = client.simple_query(sql).await.unwrap();
    let row = messages
        .iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .expect("a row");
    (0..row.len())
        .map(|i| row.get(i).map(str::to_string))
        .collect()
}

async fn assert_quotients_match(client: &Client) {
    let view = text_row(client, "SELECT count(*), sum(q), sum(k) FROM quotients").await;
    let batch = text_row(client, "SELECT count(*), sum(100 / (v - 7)), sum(k) FROM r").await;
    assert_eq!(view, batch);
}

/// A view with one row per input row: a big COPY's view changes pass the
/// spill bound and go to the store before the commit. A COPY whose view
/// fails after that leaves no trace in the view, before and after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_changes_spilled_by_a_failed_statement_are_never_read() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE r (k BIGINT, v BIGINT); \
             CREATE MATERIALIZED VIEW quotients AS \
             SELECT k, v, 100 / (v - 7) AS q, 'padding to make each row wider' AS note FROM r",
        )
        .await
        .unwrap();
    assert_eq!(
        copy_into(&client, "r", pairs(0, 600_000)).await.unwrap(),
        600_000
    );
    assert_quotients_match(&client).await;

    // The view divides by zero on the last row, long after it spilled.
    let mut failing = pairs(1_000_000, 1_600_000);
    failing.push_str("9999999\t7\n");
    let error = copy_into(&client, "r", failing).await.unwrap_err();
    assert_eq!(error.as_db_error().unwrap().code().code(), "22012");
    assert_quotients_match(&client).await;
    assert_eq!(
        copy_into(&client, "r", pairs(2_000_000, 2_000_100))
            .await
            .unwrap(),
        100
    );
    assert_quotients_match(&client).await;

    server.kill();
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    assert_quotients_match(&client).await;
    assert_eq!(
        copy_into(&client, "r", pairs(3_000_000, 3_000_100))
            .await
            .unwrap(),
        100
    );
    assert_quotients_match(&client).await;
}

async fn assert_matched(client: &Client) {
    let view = text_row(client, "SELECT count(*), sum(k), sum(w) FROM matched").await;
    let batch = text_row(
        client,
        "SELECT count(*), sum(a.k), sum(b.v) FROM j a JOIN j b ON a.k = b.k",
    )
    .await;
    assert_eq!(view, batch);
}

/// A join view whose undo a big COPY outgrows (more than 64 MB of join
/// changes): when another view fails on the COPY's last row, the join is
/// rebuilt from its checkpoint instead of undone, and equals its batch
/// query, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_whose_undo_a_failed_copy_outgrew_is_rebuilt() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE j (k BIGINT, v BIGINT); \
             CREATE MATERIALIZED VIEW matched AS \
             SELECT a.k, a.v, b.v AS w FROM \
             (SELECT k, v, 'padding that makes each joined row wider' AS pad FROM j) a \
             JOIN j b ON a.k = b.k; \
             CREATE MATERIALIZED VIEW guard AS SELECT k, 100 / (v - 7) AS q FROM j",
        )
        .await
        .unwrap();
    copy_into(&client, "j", pairs(0, 1_000)).await.unwrap();
    assert_matched(&client).await;
    let mut failing = pairs(10_000, 1_300_000);
    failing.push_str("9999999\t7\n");
    let error = copy_into(&client, "j", failing).await.unwrap_err();
    assert_eq!(error.as_db_error().unwrap().code().code(), "22012");
    assert_matched(&client).await;
    // Keys of the failed COPY: a join that kept its rows would match them.
    copy_into(&client, "j", pairs(10_000, 10_100))
        .await
        .unwrap();
    assert_matched(&client).await;
    server.kill();
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    assert_matched(&client).await;
}

/// A COPY FROM STDIN holds its table's writes until it ends; at its
/// statement_timeout, or on a cancel request, it ends even if the client
/// sends nothing more, so other writers go on, and its CopyDone gets 57014
/// (nothing copied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_copy_ends_at_its_statement_timeout() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE stalled (v BIGINT)")
        .await
        .unwrap();
    let copier = server.connect().await;
    copier
        .batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    stall_copy_then_insert(&copier, &client, 2, || async {}).await;
    assert!(started.elapsed() >= Duration::from_millis(150));
    // Without a timeout a cancel request ends a stalled COPY the same way.
    copier
        .batch_execute("SET statement_timeout = 0")
        .await
        .unwrap();
    let cancel = copier.cancel_token();
    stall_copy_then_insert(&copier, &client, 4, || async move {
        cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
    })
    .await;
    let sum = client
        .query_one("SELECT count(*), CAST(sum(v) AS BIGINT) FROM stalled", &[])
        .await
        .unwrap();
    assert_eq!((sum.get::<_, i64>(0), sum.get::<_, i64>(1)), (2, 6));
    // The connection goes on.
    copier.batch_execute("SELECT 1").await.unwrap();
}

/// Starts a COPY on `copier` that sends one row and stops, runs `end`,
/// then INSERTs `value` from `writer` (which waits until the COPY has
/// ended) and finishes the COPY, which must fail with 57014.
async fn stall_copy_then_insert<F, E>(copier: &Client, writer: &Client, value: i64, end: E)
where
    E: FnOnce() -> F,
    F: std::future::Future<Output = ()>,
{
    let sink = copier
        .copy_in::<_, Bytes>("COPY stalled FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1000\n")).await.unwrap();
    end().await;
    let sql = format!("INSERT INTO stalled VALUES ({value})");
    let insert = writer.batch_execute(&sql);
    tokio::time::timeout(Duration::from_secs(20), insert)
        .await
        .expect("the stalled COPY still holds the table's writes")
        .unwrap();
    let error = sink.finish().await.unwrap_err();
    assert_eq!(
        error.as_db_error().map(|e| e.code().code()),
        Some("57014"),
        "{error}"
    );
}

/// Sends `text` into an open COPY in 64 kB pieces.
async fn send_rows<S>(sink: &mut std::pin::Pin<Box<S>>, text: String)
where
    S: futures::Sink<Bytes, Error = tokio_postgres::Error>,
{
    for piece in text.as_bytes().chunks(64 * 1024) {
        sink.send(Bytes::copy_from_slice(piece)).await.unwrap();
    }
}

/// A COPY runs through the views while its data comes. A client that
/// stops sending part way is let go of — at once when another write waits
/// (which then goes on while the COPY is still open), after a while when
/// nothing does — and its rows still land whole, views included, at its
/// end; before and after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_whose_client_pauses_lets_other_writes_on_and_lands_whole() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{TABLE}; {VIEW}; CREATE TABLE other (v BIGINT); \
             CREATE MATERIALIZED VIEW others AS SELECT count(*) AS n FROM other"
        ))
        .await
        .unwrap();
    // The default: a view that emits on update (one row per open group).
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW live AS SELECT auction, count(*) AS bids, \
             sum(price) AS volume FROM bid GROUP BY auction",
        )
        .await
        .unwrap();
    let copier = server.connect().await;
    let sink = copier
        .copy_in::<_, Bytes>("COPY bid FROM STDIN")
        .await
        .unwrap();
    let mut sink = Box::pin(sink);
    // Past one spilled part: the views have taken rows of the open COPY.
    send_rows(&mut sink, bids(0, 300_000)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let insert = client.batch_execute("INSERT INTO other VALUES (1)");
    tokio::time::timeout(Duration::from_secs(10), insert)
        .await
        .expect("a paused COPY holds other tables' writes")
        .unwrap();
    let others: i64 = client
        .query_one("SELECT n FROM others", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(others, 1);
    assert_eq!(count(&client).await, 0, "the COPY is not committed yet");
    send_rows(&mut sink, bids(300_000, 600_000)).await;
    assert_eq!(sink.as_mut().finish().await.unwrap(), 600_000);
    assert_live_matches(&client).await;
    assert_view_matches(&client).await;
    assert_eq!(copies(&client).await, (0, 1));
    // Sent at once, a COPY streams to its end.
    assert_eq!(
        copy_into(&client, "bid", bids(600_000, 900_000))
            .await
            .unwrap(),
        300_000
    );
    assert_eq!(copies(&client).await, (1, 1));

    // A pause with nothing else waiting is let go of too, later.
    let sink = copier
        .copy_in::<_, Bytes>("COPY bid FROM STDIN")
        .await
        .unwrap();
    let mut sink = Box::pin(sink);
    send_rows(&mut sink, bids(900_000, 1_200_000)).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    send_rows(&mut sink, bids(1_200_000, 1_300_000)).await;
    assert_eq!(sink.as_mut().finish().await.unwrap(), 400_000);
    assert_eq!(copies(&client).await, (1, 2));
    assert_eq!(count(&client).await, 1_300_000);
    assert_live_matches(&client).await;
    assert_view_matches(&client).await;

    server.kill();
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    assert_eq!(count(&client).await, 1_300_000);
    assert_live_matches(&client).await;
    assert_view_matches(&client).await;
}

/// The view `live` equals its query run as a batch.
async fn assert_live_matches(client: &Client) {
    let view = sorted_rows(client, "SELECT * FROM live").await;
    let batch = sorted_rows(
        client,
        "SELECT auction, count(*), sum(price) FROM bid GROUP BY auction",
    )
    .await;
    assert_eq!(view.len(), batch.len());
    assert!(view == batch, "the view differs from its batch query");
}

/// COPYs into `bid` streamed through the views, and let go of part way.
async fn copies(client: &Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT copies_streamed, copies_detached FROM weir_catalog.tables \
             WHERE table_name = 'bid'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}
