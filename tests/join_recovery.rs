//! Views over joins survive kill -9: each join's state (both inputs' rows,
//! as multisets per key) is restored from the last checkpoint and the rows
//! after it are replayed, so the views continue exactly like a run that
//! never stopped — inner and outer joins, an aggregate over a join, a
//! join over a view whose rows are updated, and aggregates over retracting
//! rows (their sliding and multiset accumulators are restored too), and
//! top-N views over appended rows (bounded state) and over an updating
//! view (every row kept), and views over a table changed by UPDATE, DELETE
//! and INSERT … ON CONFLICT (the table itself must come back too: its log
//! of retractions and where its live rows are).

mod common;

use common::crashes_match_an_uninterrupted_run;

const SETUP: &str = "
    CREATE TABLE customers (id BIGINT, region TEXT);
    CREATE TABLE orders (id BIGINT, customer_id BIGINT, amount BIGINT);
    CREATE MATERIALIZED VIEW named AS
        SELECT o.id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id;
    CREATE MATERIALIZED VIEW everyone AS
        SELECT c.id, c.region, o.id AS order_id FROM customers c FULL JOIN orders o ON o.customer_id = c.id;
    CREATE MATERIALIZED VIEW per_region AS
        SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total
        FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region;
    CREATE MATERIALIZED VIEW order_counts AS
        SELECT customer_id, COUNT(*) AS n FROM orders GROUP BY customer_id;
    CREATE MATERIALIZED VIEW counted AS
        SELECT c.region, k.n FROM order_counts k LEFT JOIN customers c ON c.id = k.customer_id;
    CREATE MATERIALIZED VIEW histogram AS
        SELECT n, COUNT(*) AS customers, SUM(n) AS orders FROM order_counts GROUP BY n;
    CREATE MATERIALIZED VIEW region_extremes AS
        SELECT c.region, MIN(o.amount) AS least, MAX(o.amount) AS most,
               COUNT(DISTINCT o.amount) AS amounts, AVG(o.amount) AS mean
        FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.region;
    CREATE MATERIALIZED VIEW top_orders AS
        SELECT customer_id, id, amount, rn FROM (
            SELECT customer_id, id, amount,
                   ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY amount DESC, id) AS rn
            FROM orders) ranked WHERE rn <= 2;
    CREATE MATERIALIZED VIEW busiest AS
        SELECT customer_id, n FROM (
            SELECT customer_id, n, RANK() OVER (ORDER BY n DESC) AS r FROM order_counts) ranked
        WHERE r <= 3;
    CREATE MATERIALIZED VIEW idle_customers AS
        SELECT id, region FROM customers c
        WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id);
    CREATE TABLE balances (customer_id BIGINT PRIMARY KEY, amount BIGINT);
    CREATE MATERIALIZED VIEW balance_by_region AS
        SELECT c.region, COUNT(*) AS n, SUM(b.amount) AS total, MAX(b.amount) AS most
        FROM balances b JOIN customers c ON c.id = b.customer_id GROUP BY c.region;
    CREATE MATERIALIZED VIEW top_balances AS
        SELECT customer_id, amount FROM balances ORDER BY amount DESC, customer_id LIMIT 3;
";

const VIEWS: [&str; 13] = [
    "named",
    "everyone",
    "per_region",
    "order_counts",
    "counted",
    "histogram",
    "region_extremes",
    "top_orders",
    "busiest",
    "idle_customers",
    "balances",
    "balance_by_region",
    "top_balances",
];

/// Statement `step` adds customers (every fourth), changes balances
/// (upserts, updates and deletes, in turn) or adds orders, some for
/// customers that do not exist yet (and customers 29 to 36 never order).
fn statements(from: u64, to: u64) -> Vec<String> {
    (from..to)
        .map(|step| {
            if step % 4 == 2 {
                let customer = (step * 5) % 37;
                match (step / 4) % 3 {
                    0 => format!(
                        "INSERT INTO balances VALUES ({customer}, {step}), ({}, 1) \
                         ON CONFLICT (customer_id) DO UPDATE SET amount = balances.amount + excluded.amount",
                        (customer + 11) % 37
                    ),
                    1 => format!("UPDATE balances SET amount = amount * 2 WHERE customer_id % 3 = {}", step % 3),
                    _ => format!("DELETE FROM balances WHERE amount % 5 = {}", step % 5),
                }
            } else if step % 4 == 0 {
                let rows: Vec<String> = (0..3)
                    .map(|i| format!("({}, 'r{}')", (step * 3 + i) % 37, (step + i) % 4))
                    .collect();
                format!("INSERT INTO customers VALUES {}", rows.join(", "))
            } else {
                let rows: Vec<String> = (0..5)
                    .map(|i| {
                        format!(
                            "({}, {}, {})",
                            step * 5 + i,
                            (step * 7 + i * 3) % 29,
                            i + step
                        )
                    })
                    .collect();
                format!("INSERT INTO orders VALUES {}", rows.join(", "))
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_continue_after_kill_9_like_an_uninterrupted_run() {
    let expected_final = crashes_match_an_uninterrupted_run(SETUP, statements, &VIEWS).await;
    let rows_of = |view: &str| {
        expected_final
            .iter()
            .filter(|line| line.starts_with(view))
            .count()
    };
    assert!(rows_of("named:") > 100 && rows_of("counted:") > 10);
    assert!(rows_of("balances:") > 5 && rows_of("balance_by_region:") > 1);
    assert!(
        rows_of("idle_customers:") > 3,
        "customers 29 to 36 never order"
    );
}
