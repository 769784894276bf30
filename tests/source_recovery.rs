//! A source's connector survives SIGKILL without losing or repeating a
//! row: nexmark and datagen sources are killed while generating, several
//! times, and once finished they hold exactly the rows of a source with
//! the same options that ran without interruption, in the same order, and
//! the views over them equal their queries run as a batch. A file source
//! with bad lines, killed while reading, ends with every good line once
//! and every bad one once in its `_errors` relation.

mod common;

use std::time::Duration;

use common::{kill_after, sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

const BID_OPTIONS: &str = "connector = 'nexmark', nexmark.table.type = 'Bid', \
    nexmark.event.num = 400000, nexmark.min.event.gap.in.ns = 5000";
const PEOPLE_OPTIONS: &str = "connector = 'datagen', rows-per-second = '40000', \
    number-of-rows = '60000', fields.id.kind = 'sequence', fields.name.length = '6'";

fn bid_source(name: &str) -> String {
    format!(
        "CREATE SOURCE {name} (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ({BID_OPTIONS})"
    )
}

fn people_source(name: &str) -> String {
    format!("CREATE SOURCE {name} (id BIGINT, name TEXT, score DOUBLE) WITH ({PEOPLE_OPTIONS})")
}

const VIEWS: &[(&str, &str)] = &[
    (
        "per_auction",
        "SELECT auction, count(*) AS bids, max(price) AS top FROM bid GROUP BY auction",
    ),
    (
        "per_minute",
        "SELECT window_start, count(*) AS bids, sum(price) AS total \
         FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
    ),
    (
        "names",
        "SELECT name, count(*) AS n FROM people GROUP BY name",
    ),
];

async fn state(client: &Client, name: &str) -> String {
    let row = client
        .query_one(
            "SELECT state FROM weir_catalog.sources WHERE source_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn wait_finished(client: &Client, names: &[&str]) {
    for _ in 0..600 {
        let mut done = true;
        for name in names {
            done &= state(client, name).await == "finished";
        }
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("sources {names:?} did not finish");
}

/// Every row of `source` in log order, as text.
async fn rows_in_order(client: &Client, source: &str) -> Vec<String> {
    let rows = client
        .simple_query(&format!("SELECT * FROM {source}"))
        .await
        .unwrap();
    rows.into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_resume_after_kills_without_losing_or_repeating_rows() {
    let directory = tempfile::tempdir().unwrap();
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    client.batch_execute(&bid_source("bid")).await.unwrap();
    client
        .batch_execute(&people_source("people"))
        .await
        .unwrap();
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let mut random = Lcg(7);
    for _ in 0..4 {
        kill_after(&server, 150 + random.below(500)).await.unwrap();
        server.kill();
        server = TestServer::start_on(&data);
    }
    let client = server.connect().await;
    wait_finished(&client, &["bid", "people"]).await;
    // The same options, never interrupted.
    client
        .batch_execute(&bid_source("bid_reference"))
        .await
        .unwrap();
    client
        .batch_execute(&people_source("people_reference"))
        .await
        .unwrap();
    wait_finished(&client, &["bid_reference", "people_reference"]).await;
    client.batch_execute("FLUSH").await.unwrap();
    let bids = rows_in_order(&client, "bid").await;
    assert_eq!(bids.len(), 368_000);
    assert_eq!(bids, rows_in_order(&client, "bid_reference").await);
    let people = rows_in_order(&client, "people").await;
    assert_eq!(people.len(), 60_000);
    let reference = rows_in_order(&client, "people_reference").await;
    let ids = |rows: &[String]| -> Vec<String> {
        rows.iter()
            .map(|row| row.split('|').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&people), ids(&reference));
    assert_eq!(people, reference);
    for (name, query) in VIEWS {
        let view = sorted_rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = match *name {
            // Only closed windows are in an EMIT ON WINDOW CLOSE view.
            "per_minute" => format!(
                "SELECT * FROM ({query_without_emit}) q WHERE window_start + INTERVAL '1' SECOND <= \
                 (SELECT watermark FROM weir_catalog.watermarks WHERE table_name = 'bid')",
                query_without_emit = query.trim_end_matches(" EMIT ON WINDOW CLOSE")
            ),
            _ => query.to_string(),
        };
        assert_eq!(view, sorted_rows(&client, &batch).await, "view {name}");
    }
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_source_keeps_each_line_once_across_kills() {
    let directory = tempfile::tempdir().unwrap();
    let files = directory.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let (mut good, mut bad) = (0, 0);
    for part in 0..3 {
        let mut text = String::new();
        for line in 0..60_000 {
            let id = part * 60_000 + line;
            if id % 997 == 0 {
                text.push_str(&format!("{id},not a number\n"));
                bad += 1;
            } else {
                text.push_str(&format!("{id},{}\n", id % 13));
                good += 1;
            }
        }
        std::fs::write(files.join(format!("part-{part}.csv")), text).unwrap();
    }
    let data = directory.path().join("data");
    let mut server = TestServer::start_on(&data);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE lines (id BIGINT, bucket BIGINT) WITH (connector = 'file', path = '{}') \
             FORMAT PLAIN ENCODE CSV; \
             CREATE MATERIALIZED VIEW per_bucket AS SELECT bucket, count(*) AS n FROM lines GROUP BY bucket",
            files.display()
        ))
        .await
        .unwrap();
    let mut random = Lcg(11);
    for _ in 0..3 {
        kill_after(&server, 100 + random.below(400)).await.unwrap();
        server.kill();
        server = TestServer::start_on(&data);
    }
    let client = server.connect().await;
    for _ in 0..600 {
        let read = count(&client, "SELECT count(*) FROM lines").await
            + count(&client, "SELECT count(*) FROM lines_errors").await;
        if read >= good + bad {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.batch_execute("FLUSH").await.unwrap();
    assert_eq!(count(&client, "SELECT count(*) FROM lines").await, good);
    assert_eq!(
        count(&client, "SELECT count(DISTINCT id) FROM lines").await,
        good
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM lines_errors").await,
        bad
    );
    assert_eq!(
        count(&client, "SELECT count(DISTINCT record) FROM lines_errors").await,
        bad
    );
    let view = sorted_rows(&client, "SELECT * FROM per_bucket").await;
    let batch = sorted_rows(
        &client,
        "SELECT bucket, count(*) FROM lines GROUP BY bucket",
    )
    .await;
    assert_eq!(view, batch);
}
