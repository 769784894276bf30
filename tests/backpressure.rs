//! A slow view bounds memory (issue 12): a client COPYs wide rows into a
//! table read by an expensive view faster than the view can keep up. The
//! server must not hold the input in memory on the way: the COPY's rows
//! spill to the table's log past a bound in bytes (not only in rows), and
//! the view reads them back from there chunk by chunk, so the server's peak
//! RSS grows by far less than the input.

mod common;

use bytes::Bytes;
use common::TestServer;
use futures::SinkExt;

const ROWS: u64 = 400_000;
const PAD_BYTES: usize = 1_000;

/// Ten windows per row (200 ms slide, 2 s size): the view does ten times
/// the work of the table per row.
const SETUP: &str = "
CREATE TABLE wide (k BIGINT, pad TEXT, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY;
CREATE MATERIALIZED VIEW slow AS
  SELECT k, window_start, count(*) AS n, max(length(pad)) AS widest
  FROM HOP(wide, ts, INTERVAL '200' MILLISECOND, INTERVAL '2' SECOND)
  GROUP BY k, window_start EMIT ON WINDOW CLOSE;";

fn peak_rss_bytes(server: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid().unwrap()))
        .expect("the server's /proc status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM in /proc status");
    let kilobytes: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kilobytes * 1024
}

/// Row `index`: four keys, a hundred rows per second of event time.
fn line(index: u64, pad: &str) -> String {
    let seconds = 1_767_225_600 + index / 100;
    let centis = index % 100;
    format!("{}\t{pad}\t{}.{centis:02}\n", index % 4, timestamp(seconds))
}

fn timestamp(unix_seconds: u64) -> String {
    let (days, rest) = (unix_seconds / 86_400, unix_seconds % 86_400);
    // 2026-01-01 is day 20454; the rows span a little over an hour of it.
    assert_eq!(days, 20_454);
    format!(
        "2026-01-01 {:02}:{:02}:{:02}",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_through_a_slow_view_does_not_hold_its_input_in_memory() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(&temp.path().join("data"), &["--store-cache-mb", "16"]);
    let client = server.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    let before = peak_rss_bytes(&server);

    let pad = "x".repeat(PAD_BYTES);
    let sink = client
        .copy_in::<_, Bytes>("COPY wide FROM STDIN")
        .await
        .unwrap();
    let mut sink = Box::pin(sink);
    let mut sent_bytes = 0u64;
    let mut piece = String::new();
    for index in 0..ROWS {
        piece.push_str(&line(index, &pad));
        if piece.len() >= 256 * 1024 {
            sent_bytes += piece.len() as u64;
            sink.send(Bytes::from(std::mem::take(&mut piece)))
                .await
                .unwrap();
        }
    }
    sent_bytes += piece.len() as u64;
    sink.send(Bytes::from(piece)).await.unwrap();
    assert_eq!(sink.as_mut().finish().await.unwrap(), ROWS);

    let grown = peak_rss_bytes(&server).saturating_sub(before);
    assert!(
        grown < sent_bytes / 2,
        "peak RSS grew by {} MB for a {} MB COPY",
        grown >> 20,
        sent_bytes >> 20
    );
    // Every window the watermark closed is in the view, for each key: the
    // last row is at ROWS / 100 - 0.01 s and the watermark a second behind,
    // so the windows starting from -1.8 s (holding the first row) to
    // ROWS / 100 - 3.2 s.
    let row = client
        .query_one(
            "SELECT count(*), CAST(min(widest) AS BIGINT), max(n) FROM slow",
            &[],
        )
        .await
        .unwrap();
    let last_start_ms = (ROWS / 100) as i64 * 1_000 - 3_200;
    let windows_per_key = (last_start_ms + 1_800) / 200 + 1;
    assert_eq!(row.get::<_, i64>(0), 4 * windows_per_key);
    assert_eq!(row.get::<_, i64>(1), PAD_BYTES as i64);
    assert_eq!(
        row.get::<_, i64>(2),
        50,
        "200 rows per 2 s window, a quarter per key"
    );
}
