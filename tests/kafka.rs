//! Kafka sources against a real broker (tansu, started here): every
//! partition is read, the watermark is the least of the partitions' own
//! (an idle partition stops counting after `watermark_idle_timeout`), bad
//! messages land in `<source>_errors` with the reason, and a weir killed
//! with SIGKILL while messages keep coming ends with each message once and
//! views equal to a source that read the topic without interruption — and
//! its sinks' topics (a PLAIN sink of an EMIT ON WINDOW CLOSE view, an
//! UPSERT sink of an updating one, 3 partitions each) hold every change
//! once and, compacted, equal their views.

#[path = "common/broker.rs"]
mod broker;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use broker::Broker;
use common::{kill_after, sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

fn event(id: i64, user: i64, second: i64) -> String {
    format!(
        "{{\"id\": {id}, \"user_id\": {user}, \"ts\": \"2026-01-01 00:{:02}:{:02}\"}}",
        second / 60,
        second % 60
    )
}

fn source_sql(name: &str, broker: &Broker, topic: &str) -> String {
    format!(
        "CREATE SOURCE {name} (id BIGINT, user_id BIGINT, ts TIMESTAMP, \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH (connector = 'kafka', topic = '{topic}', \
         properties.bootstrap.server = '{}', watermark_idle_timeout = '3s') \
         FORMAT PLAIN ENCODE JSON",
        broker.address
    )
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

async fn wait_for(client: &Client, sql: &str, expected: i64) {
    let mut last = -1;
    for _ in 0..600 {
        last = count(client, sql).await;
        if last == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{sql}: {last}, expected {expected}");
}

/// Keeps partitions 0 and 1 busy (events at their latest times, 00:10:00
/// and 00:05:00) until `stop` is set, so neither goes idle.
fn keep_busy(address: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let writer = broker::TopicWriter::connect(&address);
        let mut id = 10_000;
        while !stop.load(Ordering::Acquire) {
            writer.send("events", 0, Some(event(id, 0, 600).as_bytes()));
            writer.send("events", 1, Some(event(id + 1, 0, 300).as_bytes()));
            writer.flush();
            id += 2;
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

async fn source_watermark(client: &Client) -> Option<String> {
    let row = client
        .query_one(
            "SELECT watermark FROM weir_catalog.sources WHERE source_name = 'events'",
            &[],
        )
        .await
        .unwrap();
    row.get::<_, Option<chrono::NaiveDateTime>>(0)
        .map(|time| time.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_merged_and_bad_messages_kept() {
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let writer = broker.producer();
    // Partition 0 runs ahead to 00:10:00, partition 1 to 00:05:00, and
    // partition 2 stays empty (idle).
    for i in 0..600 {
        writer.send("events", 0, Some(event(i, i % 7, i + 1).as_bytes()));
    }
    for i in 0..300 {
        writer.send("events", 1, Some(event(1000 + i, i % 5, i + 1).as_bytes()));
    }
    writer.send("events", 1, Some(b"not json"));
    writer.send("events", 0, Some(b"{\"id\": \"seven\"}"));
    writer.send("events", 1, Some(&[0xff, 0xfe, 0x00]));
    writer.send("events", 0, None);
    writer.flush();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = keep_busy(broker.address.clone(), stop.clone());

    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&source_sql("events", &broker, "events"))
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW per_minute AS SELECT window_start, count(*) AS n \
             FROM TUMBLE(events, ts, INTERVAL '1' MINUTE) GROUP BY window_start \
             EMIT ON WINDOW CLOSE",
        )
        .await
        .unwrap();
    wait_for(&client, "SELECT count(*) FROM events WHERE id < 10000", 900).await;
    wait_for(
        &client,
        "SELECT count(DISTINCT id) FROM events WHERE id < 10000",
        900,
    )
    .await;
    wait_for(&client, "SELECT count(*) FROM events_errors", 3).await;
    let reasons = sorted_rows(&client, "SELECT record, reason FROM events_errors").await;
    let reason_of = |start: &str| -> String {
        reasons
            .iter()
            .find(|row| row[0].starts_with(start))
            .map(|row| row[1].clone())
            .unwrap_or_else(|| panic!("no rejected record {start}: {reasons:?}"))
    };
    assert!(reason_of("not json").contains("partition 1"), "{reasons:?}");
    assert!(reason_of("not json").contains("not JSON"), "{reasons:?}");
    assert!(reason_of("{\"id\": \"seven\"}").contains("partition 0"));
    assert!(reason_of("\\xfffe00").contains("not UTF-8"));
    // No watermark while partition 2 may still have data (3 s), then the
    // least of partitions 0 and 1: never partition 0's 00:09:59.
    let least = Some("2026-01-01 00:04:59".to_string());
    let mut seen = Vec::new();
    for _ in 0..60 {
        let now = source_watermark(&client).await;
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        if seen.last() == Some(&least) && seen.len() > 1 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.push(source_watermark(&client).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen,
        vec![None, least.clone(), least],
        "the watermark over time"
    );
    // Windows up to 00:04:00 closed; partition 0's later rows wait.
    let expected: Vec<Vec<String>> = (0..4)
        .map(|minute| {
            let n = if minute == 0 { 59 + 59 } else { 60 + 60 };
            vec![format!("2026-01-01 00:0{minute}:00"), n.to_string()]
        })
        .collect();
    let closed = sorted_rows(&client, "SELECT window_start, n FROM per_minute").await;
    assert_eq!(closed, expected);
    let state = "SELECT rejected FROM weir_catalog.sources WHERE source_name = 'events'";
    assert_eq!(count(&client, state).await, 3);
    // Every partition idle: all there is has been read, the largest counts.
    stop.store(true, Ordering::Release);
    busy.join().unwrap();
    for _ in 0..100 {
        if source_watermark(&client).await.as_deref() >= Some("2026-01-01 00:09:59") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the watermark stayed at {:?}",
        source_watermark(&client).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_does_not_answer_fails_create_source() {
    let server = TestServer::start();
    let client = server.connect().await;
    let error = client
        .batch_execute(
            "CREATE SOURCE s (id BIGINT) WITH (connector = 'kafka', topic = 't', \
             properties.bootstrap.server = '127.0.0.1:9', \
             properties.socket.connection.setup.timeout.ms = '1000') FORMAT PLAIN ENCODE JSON",
        )
        .await
        .unwrap_err();
    let error = error.as_db_error().unwrap();
    assert_eq!(error.code().code(), "08001", "{error:?}");
    assert!(error.message().contains("127.0.0.1:9"), "{error:?}");
    let broker = Broker::start();
    let error = client
        .batch_execute(&source_sql("s", &broker, "missing"))
        .await
        .unwrap_err();
    let error = error.as_db_error().unwrap();
    assert!(error.message().contains("does not exist"), "{error:?}");
    assert_eq!(
        count(&client, "SELECT count(*) FROM weir_catalog.sources").await,
        0
    );
}

/// Writes `total` events round-robin over partitions 0 and 1 (2 stays
/// idle), one in 50 malformed, slowly enough that kills land mid-stream.
fn produce(broker_address: String, total: i64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let writer = broker::TopicWriter::connect(&broker_address);
        for i in 0..total {
            let partition = (i % 2) as i32;
            if i % 50 == 49 {
                writer.send("stream", partition, Some(format!("broken {i}").as_bytes()));
            } else {
                let payload = event(i, i % 11, i / 20);
                writer.send("stream", partition, Some(payload.as_bytes()));
            }
            if i % 500 == 0 {
                writer.flush();
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        writer.flush();
    })
}

const VIEWS: &[(&str, &str)] = &[
    (
        "per_user",
        "SELECT user_id, count(*) AS n, max(id) AS top FROM {s} GROUP BY user_id",
    ),
    (
        "per_minute",
        "SELECT window_start, count(*) AS n FROM TUMBLE({s}, ts, INTERVAL '1' MINUTE) \
         GROUP BY window_start",
    ),
];

async fn create_views(client: &Client, source: &str) {
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!(
                "CREATE MATERIALIZED VIEW {source}_{name} AS {}",
                query.replace("{s}", source)
            ))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_lose_and_repeat_no_message() {
    let broker = Broker::start();
    broker.create_topic("stream", 3);
    let total = 40_000;
    let bad = total / 50;
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    client
        .batch_execute(&source_sql("stream", &broker, "stream"))
        .await
        .unwrap();
    create_views(&client, "stream").await;
    create_sinks(&client, &broker).await;
    let producing = produce(broker.address.clone(), total);
    let mut random = Lcg(5);
    for _ in 0..3 {
        kill_after(&server, 300 + random.below(700)).await.unwrap();
        server.kill();
        server = TestServer::start_on(&data);
    }
    producing.join().unwrap();
    let client = server.connect().await;
    let good = total - bad;
    wait_for(&client, "SELECT count(*) FROM stream", good).await;
    wait_for(&client, "SELECT count(*) FROM stream_errors", bad).await;
    assert_eq!(
        count(&client, "SELECT count(DISTINCT id) FROM stream").await,
        good
    );
    // Read to the end of every partition: nothing behind the high watermarks.
    wait_for(
        &client,
        "SELECT lag FROM weir_catalog.sources WHERE source_name = 'stream'",
        0,
    )
    .await;
    assert_eq!(
        count(&client, "SELECT count(DISTINCT record) FROM stream_errors").await,
        bad
    );
    // A source that read the same topic without interruption.
    client
        .batch_execute(&source_sql("reference", &broker, "stream"))
        .await
        .unwrap();
    create_views(&client, "reference").await;
    wait_for(&client, "SELECT count(*) FROM reference", good).await;
    client.batch_execute("FLUSH").await.unwrap();
    for (name, query) in VIEWS {
        let killed = sorted_rows(&client, &format!("SELECT * FROM stream_{name}")).await;
        let reference = sorted_rows(&client, &format!("SELECT * FROM reference_{name}")).await;
        assert_eq!(killed, reference, "view {name}");
        let batch = sorted_rows(&client, &query.replace("{s}", "stream")).await;
        assert_eq!(killed, batch, "view {name} against its query");
    }
    check_sinks(&client, &broker).await;
}

/// A PLAIN sink of closed minutes and an UPSERT sink of per-user counts,
/// each to a topic of 3 partitions.
async fn create_sinks(client: &Client, broker: &Broker) {
    broker.create_topic("closed_minutes", 3);
    broker.create_topic("user_counts", 3);
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW stream_closed AS SELECT window_start, count(*) AS n \
             FROM TUMBLE(stream, ts, INTERVAL '1' MINUTE) GROUP BY window_start EMIT ON WINDOW CLOSE;
             CREATE SINK closed_sink FROM stream_closed WITH (connector = 'kafka', \
             topic = 'closed_minutes', properties.bootstrap.server = '{address}') \
             FORMAT PLAIN ENCODE JSON;
             CREATE SINK users_sink FROM stream_per_user WITH (connector = 'kafka', \
             topic = 'user_counts', properties.bootstrap.server = '{address}') \
             FORMAT UPSERT ENCODE JSON (primary_key = 'user_id')",
            address = broker.address
        ))
        .await
        .unwrap();
}

/// Each sink's topic holds its view's rows, each change once.
async fn check_sinks(client: &Client, broker: &Broker) {
    let behind =
        "SELECT count(*) FROM weir_catalog.sinks WHERE shipped < committed OR state <> 'running'";
    for _ in 0..600 {
        if count(client, behind).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sinks = sorted_rows(client, "SELECT * FROM weir_catalog.sinks").await;
    assert_eq!(
        count(client, behind).await,
        0,
        "the sinks did not catch up: {sinks:?}"
    );
    let normalize = |text: String| text.replace('T', " ");
    let closed = broker::read_topic(&broker.address, "closed_minutes");
    assert_once(&closed);
    let mut shipped: Vec<Vec<String>> = closed
        .iter()
        .map(|message| {
            let row: serde_json::Value =
                serde_json::from_str(message.value.as_deref().unwrap()).unwrap();
            vec![
                normalize(row["window_start"].as_str().unwrap().to_string()),
                row["n"].to_string(),
            ]
        })
        .collect();
    shipped.sort();
    let mut rows = sorted_rows(
        client,
        "SELECT CAST(window_start AS TEXT), n FROM stream_closed",
    )
    .await;
    rows.iter_mut()
        .for_each(|row| row[0] = normalize(row[0].clone()));
    rows.sort();
    assert!(rows.len() > 10, "windows closed: {}", rows.len());
    assert_eq!(shipped, rows, "the PLAIN sink's topic");
    let upserts = broker::read_topic(&broker.address, "user_counts");
    assert_once(&upserts);
    let mut latest = std::collections::BTreeMap::new();
    for message in &upserts {
        latest.insert(message.key.clone().unwrap(), message.value.clone());
    }
    let mut compacted: Vec<Vec<String>> = latest
        .values()
        .flatten()
        .map(|value| {
            let row: serde_json::Value = serde_json::from_str(value).unwrap();
            ["user_id", "n", "top"]
                .iter()
                .map(|c| row[c].to_string())
                .collect()
        })
        .collect();
    compacted.sort();
    let mut users = sorted_rows(client, "SELECT user_id, n, top FROM stream_per_user").await;
    users.sort();
    assert_eq!(compacted, users, "the UPSERT sink's topic, compacted");
}

/// No change was written twice.
fn assert_once(messages: &[broker::ReadMessage]) {
    let mut seen = std::collections::HashMap::new();
    let mut twice = Vec::new();
    for (position, message) in messages.iter().enumerate() {
        let change = message.change.as_deref().unwrap();
        if let Some(first) = seen.insert(change, position) {
            twice.push((change, first, position, message.partition));
        }
    }
    assert!(
        twice.is_empty(),
        "{} of {} changes written twice (change, first, again, partition): {twice:?}",
        twice.len(),
        messages.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_skips_what_was_there_and_keeps_its_place_across_a_restart() {
    let broker = Broker::start();
    broker.create_topic("recent", 2);
    let writer = broker.producer();
    for i in 0..10 {
        writer.send("recent", (i % 2) as i32, Some(event(i, 0, i).as_bytes()));
    }
    writer.flush();
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE recent (id BIGINT, user_id BIGINT, ts TIMESTAMP) \
             WITH (connector = 'kafka', topic = 'recent', scan.startup.mode = 'latest', \
             properties.bootstrap.server = '{}') FORMAT PLAIN ENCODE JSON",
            broker.address
        ))
        .await
        .unwrap();
    // The offsets 'latest' stood for are committed before any message.
    let position = "SELECT position FROM weir_catalog.sources WHERE source_name = 'recent'";
    for _ in 0..100 {
        let stored: Option<String> = client.query_one(position, &[]).await.unwrap().get(0);
        if stored.is_some_and(|text| text.contains("\"offset\":5")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill();
    // Written while weir is down: read after the restart, not skipped.
    for i in 10..16 {
        writer.send("recent", (i % 2) as i32, Some(event(i, 0, i).as_bytes()));
    }
    writer.flush();
    let server = TestServer::start_on(&data);
    let client = server.connect().await;
    wait_for(&client, "SELECT count(*) FROM recent", 6).await;
    // librdkafka delivered these messages twice after the restart (seen
    // with tansu): the reader skips what is behind its position.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        count(&client, "SELECT count(DISTINCT id) FROM recent").await,
        6
    );
    assert_eq!(count(&client, "SELECT count(*) FROM recent").await, 6);
    assert_eq!(count(&client, "SELECT min(id) FROM recent").await, 10);
}
