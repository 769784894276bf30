//! Schemas through restarts: relations in a schema (tables, views,
//! materialized views reading both schemas) keep their rows and keep
//! following writes after a restart and a kill -9; DROP SCHEMA CASCADE is
//! durable, and a schema made again with the same names starts empty.

mod common;

use std::time::Duration;

use common::{sorted_rows, TestServer};
use tokio_postgres::Client;

const CHECKPOINTS: [&str; 2] = ["--checkpoint-interval-ms", "50"];

const SETUP: &str = "CREATE SCHEMA sales; \
    CREATE TABLE sales.orders (id INT PRIMARY KEY, shop TEXT, amount INT); \
    CREATE TABLE shops (shop TEXT PRIMARY KEY, city TEXT); \
    CREATE TABLE sales.notes (note TEXT); \
    CREATE INDEX orders_shop ON sales.orders (shop); \
    CREATE MATERIALIZED VIEW sales.totals AS \
        SELECT shop, count(*) AS n, sum(amount) AS total FROM sales.orders GROUP BY shop; \
    CREATE VIEW sales.big AS SELECT id FROM sales.orders WHERE amount > 5; \
    CREATE MATERIALIZED VIEW cities AS SELECT s.city, sum(o.amount) AS total \
        FROM sales.orders o JOIN public.shops s ON o.shop = s.shop GROUP BY s.city";

fn rows(text: &[&str]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = text
        .iter()
        .map(|row| row.split(' ').map(str::to_string).collect())
        .collect();
    rows.sort();
    rows
}

async fn assert_rows(client: &Client, query: &str, expected: &[&str], context: &str) {
    assert_eq!(
        sorted_rows(client, query).await,
        rows(expected),
        "{query} {context}"
    );
}

async fn assert_state(client: &Client, context: &str) {
    assert_rows(
        client,
        "SELECT * FROM sales.totals",
        &["a 2 11", "b 1 7"],
        context,
    )
    .await;
    assert_rows(client, "SELECT * FROM sales.big", &["2", "3"], context).await;
    assert_rows(
        client,
        "SELECT * FROM cities",
        &["oslo 11", "rome 7"],
        context,
    )
    .await;
}

#[tokio::test]
async fn relations_in_a_schema_survive_restarts_and_a_dropped_schema_stays_dropped() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client.batch_execute(SETUP).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO shops VALUES ('a', 'oslo'), ('b', 'rome'); \
             INSERT INTO sales.orders VALUES (1, 'a', 5), (2, 'a', 6), (3, 'b', 7), (4, 'c', 1); \
             DELETE FROM sales.orders WHERE shop = 'c'; \
             UPDATE sales.orders SET amount = 5 WHERE id = 1",
        )
        .await
        .unwrap();
    assert_state(&client, "before a restart").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.terminate().success());

    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert_state(&client, "after a restart").await;
    // Writes after the restart reach the views in both schemas.
    client
        .batch_execute(
            "DELETE FROM sales.orders WHERE id = 3; INSERT INTO sales.orders VALUES (3, 'b', 7)",
        )
        .await
        .unwrap();
    assert_state(&client, "after writes following a restart").await;
    server.kill();

    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert_state(&client, "after a kill").await;
    // CASCADE takes the view in public that reads the schema too.
    client
        .batch_execute("DROP SCHEMA sales CASCADE")
        .await
        .unwrap();
    for gone in ["sales.orders", "sales.totals", "cities"] {
        let error = client
            .simple_query(&format!("SELECT * FROM {gone}"))
            .await
            .unwrap_err();
        assert_eq!(error.code().unwrap().code(), "42P01", "{gone}: {error}");
    }
    assert!(server.terminate().success());

    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    let schemas = sorted_rows(
        &client,
        "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname = 'sales'",
    )
    .await;
    assert!(
        schemas.is_empty(),
        "sales is back after a restart: {schemas:?}"
    );
    assert_rows(
        &client,
        "SELECT * FROM shops",
        &["a oslo", "b rome"],
        "kept",
    )
    .await;
    // The same names again start empty.
    client
        .batch_execute(
            "CREATE SCHEMA sales; \
             CREATE TABLE sales.orders (id INT PRIMARY KEY, shop TEXT, amount INT); \
             CREATE MATERIALIZED VIEW sales.totals AS SELECT shop, count(*) AS n FROM sales.orders GROUP BY shop; \
             INSERT INTO sales.orders VALUES (1, 'z', 1)",
        )
        .await
        .unwrap();
    server.kill();
    let server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert_rows(&client, "SELECT * FROM sales.totals", &["z 1"], "recreated").await;
}

/// A view made on another search path keeps reading what its names meant
/// then, after a restart on the default path.
#[tokio::test]
async fn a_view_made_on_a_search_path_means_the_same_after_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE SCHEMA staging; \
             CREATE TABLE events (k INT, v INT); \
             CREATE TABLE staging.events (k INT, v INT)",
        )
        .await
        .unwrap();
    // One statement at a time: each is qualified on the path in force.
    for statement in [
        "SET search_path TO staging, public",
        "CREATE MATERIALIZED VIEW sums AS SELECT k, sum(v) AS total FROM events GROUP BY k",
        "INSERT INTO events VALUES (1, 10), (1, 5)",
        "SET search_path TO public",
        "INSERT INTO events VALUES (1, 1000)",
    ] {
        client.batch_execute(statement).await.unwrap();
    }
    assert_rows(&client, "SELECT * FROM staging.sums", &["1 15"], "made").await;
    assert!(server.terminate().success());
    let server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client
        .batch_execute("INSERT INTO staging.events VALUES (1, 1); INSERT INTO events VALUES (1, 1)")
        .await
        .unwrap();
    assert_rows(
        &client,
        "SELECT * FROM staging.sums",
        &["1 16"],
        "after a restart",
    )
    .await;
}
