//! Transaction blocks are atomic across tables and views: a block's writes
//! land together at COMMIT or not at all — when the server is SIGKILLed
//! while blocks commit, and when another session takes one of the block's
//! keys before it commits.

mod common;

use common::{kill_after, Lcg, TestServer};
use tokio_postgres::Client;

const WRITERS: i64 = 4;

const SETUP: &str = "
CREATE TABLE debits (tx BIGINT PRIMARY KEY, amount BIGINT);
CREATE TABLE credits (tx BIGINT PRIMARY KEY, amount BIGINT);
CREATE MATERIALIZED VIEW debit_total AS SELECT count(*) AS n, sum(amount) AS s FROM debits;
CREATE MATERIALIZED VIEW credit_total AS SELECT count(*) AS n, sum(amount) AS s FROM credits;";

/// One writer's blocks (a debit and a credit each) from `first` on, until
/// one fails; returns the transaction numbers whose COMMIT was acknowledged.
async fn transfer_until_error(client: Client, writer: i64, first: i64) -> Vec<i64> {
    let mut acknowledged = Vec::new();
    for seq in first.. {
        let tx = writer * 1_000_000 + seq;
        let statements = [
            "BEGIN".to_string(),
            format!("INSERT INTO debits VALUES ({tx}, {seq})"),
            "SAVEPOINT s".to_string(),
            format!("INSERT INTO credits VALUES ({tx}, {seq})"),
            "RELEASE SAVEPOINT s".to_string(),
            "COMMIT".to_string(),
        ];
        for statement in &statements {
            if client.batch_execute(statement).await.is_err() {
                return acknowledged;
            }
        }
        acknowledged.push(seq);
    }
    acknowledged
}

/// The transactions in `table` per writer, as sorted numbers.
async fn kept(client: &Client, table: &str) -> Vec<Vec<i64>> {
    let mut per_writer = vec![Vec::new(); WRITERS as usize];
    let sql = format!("SELECT tx FROM {table} ORDER BY tx");
    for row in client.query(&sql, &[]).await.unwrap() {
        let tx: i64 = row.get(0);
        per_writer[(tx / 1_000_000) as usize].push(tx % 1_000_000);
    }
    per_writer
}

async fn assert_views_match_tables(client: &Client) {
    for (view, table) in [("debit_total", "debits"), ("credit_total", "credits")] {
        let sql = format!(
            "SELECT (SELECT n FROM {view}) = (SELECT count(*) FROM {table}) \
             AND (SELECT coalesce(s, 0) FROM {view}) = (SELECT coalesce(sum(amount), 0) FROM {table})"
        );
        let equal: bool = client.query_one(&sql, &[]).await.unwrap().get(0);
        assert!(equal, "{view} disagrees with {table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_during_commits_keep_each_block_whole() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_on(&data_dir);
    server.connect().await.batch_execute(SETUP).await.unwrap();
    drop(server);
    let mut random = Lcg(7);
    let mut next = vec![0i64; WRITERS as usize];
    for round in 0..5 {
        let mut server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "5"]);
        let check = server.connect().await;
        let (debits, credits) = (kept(&check, "debits").await, kept(&check, "credits").await);
        assert_eq!(
            debits, credits,
            "round {round}: a block was applied in part"
        );
        for (writer, kept) in debits.iter().enumerate() {
            let expected: Vec<i64> = (0..kept.len() as i64).collect();
            assert_eq!(
                kept, &expected,
                "writer {writer}: a block is missing or repeated"
            );
            // The block in flight at the kill may or may not be kept.
            let acknowledged = next[writer] as usize;
            assert!(
                kept.len() == acknowledged || kept.len() == acknowledged + 1,
                "writer {writer}: {} blocks kept, {acknowledged} acknowledged",
                kept.len()
            );
            next[writer] = kept.len() as i64;
        }
        assert_views_match_tables(&check).await;
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let client = server.connect().await;
            let first = next[writer as usize];
            tasks.push(tokio::spawn(transfer_until_error(client, writer, first)));
        }
        let killer = kill_after(&server, 300 + random.below(1200));
        for (writer, task) in tasks.into_iter().enumerate() {
            if let Some(last) = task.await.unwrap().last() {
                next[writer] = last + 1;
            }
        }
        killer.await.unwrap();
        server.kill();
    }
    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    let (debits, credits) = (
        kept(&client, "debits").await,
        kept(&client, "credits").await,
    );
    assert_eq!(debits, credits);
    assert!(
        debits.iter().map(Vec::len).sum::<usize>() > 20,
        "the writers got going"
    );
    assert_views_match_tables(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_taken_before_commit_fails_the_whole_block() {
    let server = TestServer::start();
    let (first, second) = (server.connect().await, server.connect().await);
    first.batch_execute(SETUP).await.unwrap();
    first
        .batch_execute(
            "BEGIN; INSERT INTO debits VALUES (1, 10); INSERT INTO credits VALUES (1, 10)",
        )
        .await
        .unwrap();
    // Not visible to others before COMMIT.
    let others: i64 = second
        .query_one("SELECT count(*) FROM debits", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(others, 0);
    second
        .batch_execute("INSERT INTO credits VALUES (1, 99)")
        .await
        .unwrap();
    let error = first.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(
        error.code().map(|code| code.code()),
        Some("23505"),
        "{error}"
    );
    // Nothing of the block is applied, and the session is out of it.
    let debits: i64 = first
        .query_one("SELECT count(*) FROM debits", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(debits, 0);
    assert_views_match_tables(&first).await;
    let credits = kept(&first, "credits").await;
    assert_eq!(credits[0], vec![1]);
}
