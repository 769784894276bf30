//! Randomized test of UPDATE, DELETE and INSERT … ON CONFLICT on tables
//! with a primary key, and of the views over them. For several seeds,
//! random statements (some failing on a duplicate key, some inside a
//! transaction block that commits or rolls back) change two tables. After
//! every statement:
//! - each table equals a model kept by this test (a map from key to row,
//!   changed by the same statement's meaning, written here independently);
//! - each materialized view equals its query run as a batch by DataFusion
//!   over the tables: aggregates, joins of every kind, top-N, DISTINCT,
//!   EXISTS, OVER windows (lag, lead, frames, running totals), a join of
//!   a join, filters, and a view over a view.
//!
//! `UPDATE_ORACLE_SEEDS=7` (or `UPDATE_ORACLE_SEEDS=0..40`) picks the seeds.

mod common;

use std::collections::BTreeMap;

use common::{sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

const SEEDS: u64 = 5;
const STATEMENTS: usize = 40;

const VIEWS: &[(&str, &str)] = &[
    (
        "per_owner",
        "SELECT owner, COUNT(*) AS n, SUM(balance) AS total, MIN(balance) AS least, \
         MAX(balance) AS most, COUNT(DISTINCT balance) AS balances FROM accounts GROUP BY owner",
    ),
    (
        "overall",
        "SELECT COUNT(*) AS n, SUM(balance) AS total, MAX(id) AS last FROM accounts",
    ),
    (
        "with_region",
        "SELECT a.id, a.balance, o.region FROM accounts a JOIN owners o ON a.owner = o.id",
    ),
    (
        "all_owners",
        "SELECT o.id, o.region, a.id AS account FROM owners o LEFT JOIN accounts a ON a.owner = o.id",
    ),
    (
        "both_sides",
        "SELECT a.id AS account, o.id AS owner FROM accounts a FULL JOIN owners o ON a.owner = o.id",
    ),
    (
        "per_region",
        "SELECT o.region, COUNT(*) AS n, SUM(a.balance) AS total \
         FROM accounts a JOIN owners o ON a.owner = o.id GROUP BY o.region",
    ),
    (
        "richest",
        "SELECT id, balance FROM accounts ORDER BY balance DESC NULLS LAST, id LIMIT 3",
    ),
    (
        "top_per_owner",
        "SELECT owner, balance, r FROM (SELECT owner, balance, \
         RANK() OVER (PARTITION BY owner ORDER BY balance DESC) AS r FROM accounts) x WHERE r <= 2",
    ),
    ("regions", "SELECT DISTINCT region FROM owners"),
    (
        "owners_with_accounts",
        "SELECT id, region FROM owners o WHERE EXISTS (SELECT 1 FROM accounts a WHERE a.owner = o.id)",
    ),
    (
        "positive",
        "SELECT id, balance * 10 AS scaled FROM accounts WHERE balance > 0",
    ),
    (
        "ordered_per_owner",
        "SELECT owner, string_agg(id::text, ',' ORDER BY balance DESC NULLS LAST, id) AS ids, \
         array_agg(balance ORDER BY id) AS balances, first_value(id ORDER BY balance, id) AS poorest, \
         last_value(balance ORDER BY id) AS newest FROM accounts GROUP BY owner",
    ),
    (
        "neighbours",
        "SELECT id, owner, balance, lag(balance) OVER (PARTITION BY owner ORDER BY id) AS previous, \
         lead(id, 2) OVER (PARTITION BY owner ORDER BY id) AS after_next, \
         SUM(balance) OVER (PARTITION BY owner ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS around \
         FROM accounts",
    ),
    (
        "running",
        "SELECT id, SUM(balance) OVER (ORDER BY id) AS running, \
         ROW_NUMBER() OVER (ORDER BY balance DESC NULLS LAST, id) AS place, \
         COUNT(*) OVER (PARTITION BY owner) AS owner_accounts FROM accounts",
    ),
    (
        "same_balance",
        "SELECT a.id, o.region, b.id AS twin FROM accounts a JOIN owners o ON a.owner = o.id \
         LEFT JOIN accounts b ON b.balance = a.balance",
    ),
    (
        "owner_sizes",
        "SELECT n, COUNT(*) AS owners FROM per_owner GROUP BY n",
    ),
];

fn batch_query(query: &str) -> String {
    let mut query = query.to_string();
    for (view, definition) in VIEWS {
        let used = format!("FROM {view} ");
        query = query.replace(&used, &format!("FROM ({definition}) {view} "));
    }
    query
}

/// A row of `accounts`: owner and balance (id is the key).
type Account = (Option<i64>, Option<i64>);

/// What the tables should hold.
#[derive(Default, Clone)]
struct Model {
    accounts: BTreeMap<i64, Account>,
    owners: BTreeMap<i64, Option<String>>,
}

fn nullable(value: Option<i64>) -> String {
    value.map_or("NULL".to_string(), |v| v.to_string())
}

fn maybe(random: &mut Lcg, bound: u64) -> Option<i64> {
    match random.below(bound + 1) {
        0 => None,
        n => Some(n as i64 - 1),
    }
}

/// A random statement, and what it does to `model` (None: it fails and
/// changes nothing).
fn statement(random: &mut Lcg, model: &Model) -> (String, Option<Model>) {
    let mut next = model.clone();
    let key = random.below(12) as i64;
    let sql = match random.below(9) {
        0 | 1 => {
            let (owner, balance) = (maybe(random, 5), maybe(random, 9));
            let sql = format!(
                "INSERT INTO accounts VALUES ({key}, {}, {}) ON CONFLICT (id) DO UPDATE \
                 SET balance = accounts.balance + excluded.balance, owner = excluded.owner",
                nullable(owner),
                nullable(balance)
            );
            let row = match model.accounts.get(&key) {
                Some((_, old)) => (owner, old.zip(balance).map(|(a, b)| a + b)),
                None => (owner, balance),
            };
            next.accounts.insert(key, row);
            sql
        }
        2 => {
            let other = random.below(12) as i64;
            let (owner, balance) = (maybe(random, 5), maybe(random, 9));
            for id in [key, other] {
                next.accounts.entry(id).or_insert((owner, balance));
            }
            format!(
                "INSERT INTO accounts VALUES ({key}, {o}, {b}), ({other}, {o}, {b}) ON CONFLICT DO NOTHING",
                o = nullable(owner),
                b = nullable(balance)
            )
        }
        3 => {
            let (owner, delta) = (random.below(5) as i64, random.below(7) as i64 - 3);
            for (row_owner, balance) in next.accounts.values_mut() {
                if *row_owner == Some(owner) {
                    *balance = balance.map(|b| b + delta);
                }
            }
            format!("UPDATE accounts SET balance = balance + {delta} WHERE owner = {owner}")
        }
        4 => {
            let owner = maybe(random, 5);
            if let Some(row) = next.accounts.get_mut(&key) {
                row.0 = owner;
            }
            format!(
                "UPDATE accounts SET owner = {} WHERE id = {key}",
                nullable(owner)
            )
        }
        5 => {
            // Moves a row to another key: fails if that key is taken.
            let to = random.below(12) as i64;
            let sql = format!("UPDATE accounts SET id = {to} WHERE id = {key}");
            if let Some(row) = next.accounts.remove(&key) {
                if to != key && next.accounts.contains_key(&to) {
                    return (sql, None);
                }
                next.accounts.insert(to, row);
            }
            sql
        }
        6 => {
            let below = random.below(8) as i64;
            next.accounts
                .retain(|_, (_, balance)| !balance.is_some_and(|b| b < below));
            format!("DELETE FROM accounts WHERE balance < {below}")
        }
        7 => {
            let id = random.below(5) as i64;
            let region = ["'north'", "'south'", "NULL"][random.below(3) as usize];
            next.owners.insert(
                id,
                (region != "NULL").then(|| region.trim_matches('\'').to_string()),
            );
            format!(
                "INSERT INTO owners VALUES ({id}, {region}) ON CONFLICT (id) DO UPDATE SET region = excluded.region"
            )
        }
        _ => {
            let id = random.below(5) as i64;
            next.owners.remove(&id);
            format!("DELETE FROM owners WHERE id = {id}")
        }
    };
    (sql, Some(next))
}

async fn check_tables(client: &Client, model: &Model, context: &str) {
    let accounts: Vec<Vec<String>> = model
        .accounts
        .iter()
        .map(|(id, (owner, balance))| vec![id.to_string(), nullable(*owner), nullable(*balance)])
        .collect();
    let mut accounts = accounts;
    accounts.sort();
    let actual = sorted_rows(client, "SELECT id, owner, balance FROM accounts").await;
    assert_eq!(actual, accounts, "accounts after {context}");
    let mut owners: Vec<Vec<String>> = model
        .owners
        .iter()
        .map(|(id, region)| vec![id.to_string(), region.clone().unwrap_or("NULL".into())])
        .collect();
    owners.sort();
    let actual = sorted_rows(client, "SELECT id, region FROM owners").await;
    assert_eq!(actual, owners, "owners after {context}");
}

async fn check_views(client: &Client, context: &str) {
    for (view, query) in VIEWS {
        let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        let expected = sorted_rows(client, &batch_query(query)).await;
        assert_eq!(actual, expected, "{view} after {context}");
    }
}

/// Runs `sql`, alone or in a transaction block that commits or rolls
/// back; returns whether it changed the tables.
async fn run(client: &Client, random: &mut Lcg, sql: &str, succeeds: bool) -> bool {
    let wrapped = match random.below(5) {
        0 => format!("BEGIN; {sql}; COMMIT"),
        1 => format!("BEGIN; {sql}; ROLLBACK"),
        _ => sql.to_string(),
    };
    let rolled_back = wrapped.ends_with("ROLLBACK");
    match client.batch_execute(&wrapped).await {
        Ok(()) => !rolled_back,
        Err(error) => {
            let code = error.code().map(|code| code.code().to_string());
            assert!(
                !succeeds && code.as_deref() == Some("23505"),
                "{wrapped}: {error:?}"
            );
            if wrapped.starts_with("BEGIN") {
                client.batch_execute("ROLLBACK").await.unwrap();
            }
            false
        }
    }
}

async fn run_seed(client: &Client, seed: u64) {
    client
        .batch_execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner BIGINT, balance BIGINT);
             CREATE TABLE owners (id BIGINT PRIMARY KEY, region TEXT);",
        )
        .await
        .unwrap();
    let mut random = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) + 3);
    let mut model = Model::default();
    for step in 0..STATEMENTS {
        if step == 4 {
            // Views created over rows already updated: their backfill
            // replays the table's retractions.
            for (view, query) in VIEWS {
                let sql = format!("CREATE MATERIALIZED VIEW {view} AS {query}");
                client
                    .batch_execute(&sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
        let (sql, outcome) = statement(&mut random, &model);
        if run(client, &mut random, &sql, outcome.is_some()).await {
            model = outcome.expect("a failing statement changed nothing");
        }
        let context = format!("seed {seed}, statement {step}: {sql}");
        check_tables(client, &model, &context).await;
        if step >= 4 {
            check_views(client, &context).await;
        }
    }
    for (view, _) in VIEWS.iter().rev() {
        client
            .batch_execute(&format!("DROP MATERIALIZED VIEW {view}"))
            .await
            .unwrap();
    }
    client
        .batch_execute("DROP TABLE accounts; DROP TABLE owners;")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_views_over_updates_equal_a_model_and_batch_queries() {
    let server = TestServer::start();
    let client = server.connect().await;
    for seed in common::seeds("UPDATE_ORACLE_SEEDS", SEEDS) {
        run_seed(&client, seed).await;
    }
}

/// The same statements as a driver prepares them: parameters in SET,
/// WHERE and an upsert's VALUES.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_updates_deletes_and_upserts_take_parameters() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE prepared (id BIGINT PRIMARY KEY, note TEXT, n BIGINT);
             CREATE MATERIALIZED VIEW prepared_total AS SELECT COUNT(*) AS rows, SUM(n) AS n FROM prepared;",
        )
        .await
        .unwrap();
    let upsert = "INSERT INTO prepared VALUES ($1, $2, $3) \
                  ON CONFLICT (id) DO UPDATE SET n = prepared.n + excluded.n, note = excluded.note";
    for (id, note, n) in [(1i64, "a", 10i64), (2, "b", 20), (1, "c", 5)] {
        assert_eq!(client.execute(upsert, &[&id, &note, &n]).await.unwrap(), 1);
    }
    let updated = client
        .execute(
            "UPDATE prepared SET n = n * $1 WHERE id = $2",
            &[&3i64, &2i64],
        )
        .await
        .unwrap();
    assert_eq!(updated, 1);
    let deleted = client
        .execute("DELETE FROM prepared WHERE note = $1", &[&"zzz"])
        .await
        .unwrap();
    assert_eq!(deleted, 0);
    let rows = sorted_rows(&client, "SELECT id, note, n FROM prepared").await;
    assert_eq!(rows, [["1", "c", "15"], ["2", "b", "60"]]);
    let total = sorted_rows(&client, "SELECT * FROM prepared_total").await;
    assert_eq!(total, [["2", "75"]]);
}
