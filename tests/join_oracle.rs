//! Randomized test of joins and of aggregates over retracting rows: for
//! several seeds, random rows (NULL keys, repeated rows, keys that match
//! nothing yet) go into two tables in random statements, and after every
//! statement each materialized view must equal its query run as a batch by
//! DataFusion over the tables — an independent implementation of the same
//! SQL. The views cover every join kind, conditions pushed into one input
//! and on joined rows, aggregates (COUNT, SUM, AVG, MIN, MAX, COUNT
//! DISTINCT) over an outer join and over a view whose rows are updated,
//! groups that vanish, a join of an updating view, IN / EXISTS / NOT EXISTS
//! subqueries (semi and anti joins), DISTINCT / UNION and
//! top-N (RANK, DENSE_RANK — ties make ROW_NUMBER's choice arbitrary —,
//! ORDER BY … LIMIT and DISTINCT ON with total orders) over appended and
//! retracting rows, and trees of joins and unions (a three-way join, an
//! outer join of an outer join, a UNION ALL of a join, a join of a UNION
//! ALL).
//!
//! `JOIN_ORACLE_SEEDS=7` (or `JOIN_ORACLE_SEEDS=0..40`) picks the seeds.

mod common;

use common::{sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

const SEEDS: u64 = 6;
const STATEMENTS: usize = 30;

/// (view name, query): each view is created as the query, and compared
/// with the query itself (views in FROM are replaced by their query, so a
/// view is read under its own name, without an alias).
const VIEWS: &[(&str, &str)] = &[
    (
        "inner_join",
        "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id",
    ),
    (
        "left_join",
        "SELECT c.id, c.name, o.amount FROM customers c LEFT JOIN orders o ON c.id = o.customer_id",
    ),
    (
        "right_join",
        "SELECT c.name, o.id FROM customers c RIGHT JOIN orders o ON c.id = o.customer_id AND c.name <> 'b'",
    ),
    (
        "full_join",
        "SELECT c.id AS customer, o.id AS order_id FROM customers c FULL JOIN orders o ON c.id = o.customer_id",
    ),
    (
        "comma_join",
        "SELECT c.name, o.amount FROM customers c, orders o WHERE c.id = o.customer_id AND o.amount < c.id * 3",
    ),
    (
        "cross_join",
        "SELECT c.name, o.amount FROM customers c CROSS JOIN orders o WHERE o.amount > c.id",
    ),
    (
        "per_name",
        "SELECT c.name, COUNT(*) AS n, COUNT(o.amount) AS orders, SUM(o.amount) AS total, \
         AVG(o.amount) AS mean, MIN(o.amount) AS least, MAX(o.amount) AS most, \
         COUNT(DISTINCT o.amount) AS amounts \
         FROM customers c LEFT JOIN orders o ON c.id = o.customer_id GROUP BY c.name",
    ),
    (
        "order_counts",
        "SELECT customer_id, COUNT(*) AS n, MAX(amount) AS most FROM orders GROUP BY customer_id",
    ),
    (
        "histogram",
        "SELECT n, COUNT(*) AS customers, MIN(most) AS least_most, SUM(n) AS orders \
         FROM order_counts GROUP BY n",
    ),
    (
        "everything",
        "SELECT COUNT(*) AS n, SUM(n) AS orders, MAX(n) AS most, MIN(customer_id) AS first \
         FROM order_counts",
    ),
    (
        "named_counts",
        "SELECT order_counts.customer_id, order_counts.n, c.name \
         FROM order_counts FULL JOIN customers c ON c.id = order_counts.customer_id",
    ),
    (
        "with_orders",
        "SELECT id, name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
    ),
    (
        "without_big_orders",
        "SELECT id, name FROM customers c \
         WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.amount > 1)",
    ),
    (
        "counts_of_named",
        "SELECT customer_id, n FROM order_counts WHERE customer_id IN (SELECT id FROM customers WHERE name <> 'a')",
    ),
    ("distinct_pairs", "SELECT DISTINCT name, amount FROM left_join"),
    (
        "top_amounts",
        "SELECT name, amount, r FROM (SELECT name, amount, \
         RANK() OVER (PARTITION BY name ORDER BY amount DESC) AS r FROM left_join ) ranked WHERE r <= 2",
    ),
    (
        "cheapest",
        "SELECT customer_id, amount, d FROM (SELECT customer_id, amount, \
         DENSE_RANK() OVER (PARTITION BY customer_id ORDER BY amount) AS d FROM orders) x WHERE d <= 2",
    ),
    (
        "largest_orders",
        "SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 3",
    ),
    (
        "best_per_name",
        "SELECT DISTINCT ON (name) name, amount, id FROM left_join ORDER BY name, amount DESC, id",
    ),
    (
        "busiest",
        "SELECT customer_id, n FROM (SELECT customer_id, n, \
         RANK() OVER (ORDER BY n DESC, customer_id) AS r FROM order_counts ) x WHERE r < 3",
    ),
    (
        "either",
        "SELECT customer_id FROM orders UNION SELECT id FROM customers",
    ),
    (
        "names_seen",
        "SELECT name, COUNT(DISTINCT id) AS ids, MIN(amount) AS least FROM left_join GROUP BY name",
    ),
    (
        "above_customer_average",
        "SELECT id, amount FROM orders o \
         WHERE amount > (SELECT AVG(amount) FROM orders i WHERE i.customer_id = o.customer_id)",
    ),
    (
        "at_most_amount",
        "SELECT id, amount FROM orders WHERE amount >= (SELECT MAX(amount) FROM orders)",
    ),
    (
        "three_way",
        "SELECT o.id, c.name, o2.id AS same_amount FROM orders o JOIN customers c ON c.id = o.customer_id \
         JOIN orders o2 ON o2.customer_id = c.id AND o2.amount = o.amount",
    ),
    (
        "nested_outer",
        "SELECT c.name, o.id, c2.id AS namesake FROM customers c LEFT JOIN orders o ON c.id = o.customer_id \
         FULL JOIN customers c2 ON c2.name = c.name",
    ),
    (
        "union_of_joins",
        "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id \
         UNION ALL SELECT id, 'none' FROM orders WHERE customer_id IS NULL",
    ),
    (
        "join_of_union",
        "SELECT u.key, c.name FROM (SELECT customer_id AS key FROM orders UNION ALL SELECT id FROM customers) u \
         JOIN customers c ON c.id = u.key",
    ),
    (
        "ordered_names",
        "SELECT name, string_agg(amount::text, ';' ORDER BY amount DESC) AS amounts, \
         array_agg(id ORDER BY id, amount) AS ids, last_value(amount ORDER BY amount) AS most \
         FROM left_join GROUP BY name",
    ),
];

fn batch_query(query: &str) -> String {
    let mut query = query.to_string();
    for (view, definition) in VIEWS {
        query = query.replace(
            &format!("FROM {view} "),
            &format!("FROM ({definition}) {view} "),
        );
        if query.ends_with(&format!("FROM {view}")) {
            query = query.replace(
                &format!("FROM {view}"),
                &format!("FROM ({definition}) {view}"),
            );
        }
    }
    query
}

fn value(random: &mut Lcg, bound: u64) -> String {
    match random.below(bound + 1) {
        0 => "NULL".to_string(),
        n => (n - 1).to_string(),
    }
}

fn statement(random: &mut Lcg, next_order: &mut u64) -> String {
    let rows = 1 + random.below(4);
    if random.below(3) == 0 {
        let rows: Vec<String> = (0..rows)
            .map(|_| {
                let name = ["'a'", "'b'", "'c'", "NULL"][random.below(4) as usize];
                format!("({}, {name})", value(random, 6))
            })
            .collect();
        format!("INSERT INTO customers VALUES {}", rows.join(", "))
    } else {
        let rows: Vec<String> = (0..rows)
            .map(|_| {
                *next_order += 1;
                format!(
                    "({}, {}, {})",
                    next_order,
                    value(random, 7),
                    value(random, 5)
                )
            })
            .collect();
        format!("INSERT INTO orders VALUES {}", rows.join(", "))
    }
}

async fn check_views(client: &Client, context: &str) {
    for (view, query) in VIEWS {
        let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        let expected = sorted_rows(client, &batch_query(query)).await;
        assert_eq!(actual, expected, "{view} after {context}");
    }
}

async fn run_seed(client: &Client, seed: u64) {
    client
        .batch_execute(
            "CREATE TABLE customers (id BIGINT, name TEXT);
             CREATE TABLE orders (id BIGINT, customer_id BIGINT, amount BIGINT);",
        )
        .await
        .unwrap();
    let mut random = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) + 1);
    let mut next_order = 0;
    // Some rows before the views: their backfill reads them.
    for _ in 0..3 {
        let sql = statement(&mut random, &mut next_order);
        client.batch_execute(&sql).await.unwrap();
    }
    for (view, query) in VIEWS {
        let sql = format!("CREATE MATERIALIZED VIEW {view} AS {query}");
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    check_views(client, &format!("seed {seed}, backfill")).await;
    for step in 0..STATEMENTS {
        let sql = statement(&mut random, &mut next_order);
        client.batch_execute(&sql).await.unwrap();
        check_views(client, &format!("seed {seed}, statement {step}: {sql}")).await;
    }
    for (view, _) in VIEWS.iter().rev() {
        client
            .batch_execute(&format!("DROP MATERIALIZED VIEW {view}"))
            .await
            .unwrap();
    }
    client
        .batch_execute("DROP TABLE orders; DROP TABLE customers;")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_joins_and_retractions_equal_their_batch_queries() {
    let server = TestServer::start();
    let client = server.connect().await;
    for seed in common::seeds("JOIN_ORACLE_SEEDS", SEEDS) {
        run_seed(&client, seed).await;
    }
}

/// The same seeds with almost no join state kept in memory: each side
/// spills its rows after every statement and reads them back from disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_joins_with_spilled_sides_equal_their_batch_queries() {
    let directory = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &directory.path().join("data"),
        &["--operator-cache-size", "1kB"],
    );
    let client = server.connect().await;
    for seed in common::seeds("JOIN_ORACLE_SEEDS", SEEDS) {
        run_seed(&client, seed).await;
    }
}
