//! A checkpoint with many changes (every statement here extends 20,000
//! sessions) is written as a new generation of operator
//! state in pieces, switched to by its epoch record, and the old generation
//! deleted in pieces. SIGKILL at random moments of that — while a
//! generation is copied, before or after the switch, while the old one is
//! deleted — must never lose, double or corrupt state.

mod common;

use common::{kill_after, Lcg, TestServer};
use tokio_postgres::Client;

const KEYS: i64 = 20_000;

const SETUP: &str = "
CREATE TABLE events (k BIGINT, at TIMESTAMP, WATERMARK FOR at) APPEND ONLY;
CREATE MATERIALIZED VIEW sessions AS
  SELECT k, window_start, window_end, COUNT(*) AS n
  FROM SESSION(events, at, INTERVAL '5' SECOND) GROUP BY k, window_start, window_end;";

/// Every key once, 1 s after the previous statement's events: each key's
/// one session grows, so a view rebuilt from lost state would differ.
const LOAD: &str = "INSERT INTO events SELECT value, to_timestamp_seconds(1767225600 + \
                    (SELECT count(*) FROM events) / 20000) FROM generate_series(0, 19999)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_while_checkpoint_generations_change_lose_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_on(&data_dir);
    server.connect().await.batch_execute(SETUP).await.unwrap();
    drop(server);
    let mut random = Lcg(5);
    for _ in 0..8 {
        let mut server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "1"]);
        let client = server.connect().await;
        assert_sessions_match_events(&client).await;
        let killer = kill_after(&server, 200 + random.below(1500));
        while client.batch_execute(LOAD).await.is_ok() {}
        killer.await.unwrap();
        server.kill();
    }
    let server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "1"]);
    let client = server.connect().await;
    assert_sessions_match_events(&client).await;
    client.batch_execute(LOAD).await.unwrap();
    assert_sessions_match_events(&client).await;
    assert!(
        newest_generation(&client).await > 0,
        "the loads were big enough for a new generation"
    );
}

/// One session per key, from its first event to its last plus the gap.
async fn assert_sessions_match_events(client: &Client) {
    let events: i64 = client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        events % KEYS,
        0,
        "{events} rows: statements are all-or-nothing"
    );
    let expected =
        "SELECT k, min(at), max(at) + INTERVAL '5' SECOND, count(*) FROM events GROUP BY k";
    let difference = format!(
        "SELECT count(*) FROM (
        (SELECT k, window_start, window_end, n FROM sessions EXCEPT ALL {expected})
        UNION ALL
        ({expected} EXCEPT ALL SELECT k, window_start, window_end, n FROM sessions))"
    );
    let differing: i64 = client.query_one(&difference, &[]).await.unwrap().get(0);
    assert_eq!(differing, 0, "the view disagrees with {events} events");
}

/// The generation of the newest checkpoint, once one covers every row.
async fn newest_generation(client: &Client) -> i64 {
    for _ in 0..200 {
        let row = client
            .query_one(
                "SELECT coalesce(max(generation), -1) FROM weir_catalog.checkpoints",
                &[],
            )
            .await
            .unwrap();
        let generation: i64 = row.get(0);
        if generation > 0 {
            return generation;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    0
}
