//! Randomized test of UPDATE, DELETE and INSERT … ON CONFLICT on tables
//! with a primary key, an append-only stream, and the views over them.
//! For several seeds, random statements (some failing on a duplicate key,
//! some failing in one view — `fragile` divides by zero — some inside a
//! transaction block that commits or rolls back) change the tables, views
//! are created along the way (half at the start, the rest mid-run), and
//! the server is killed (-9) at random points, right after a write or
//! right after a checkpoint, and restarted cleanly at the end. After every
//! statement and every restart:
//! - each table equals a model kept by this test (`common/update_model.rs`,
//!   changed by the same statement's meaning, written independently);
//! - each materialized view equals its query run as a batch by DataFusion
//!   over the tables, read both unprepared and by a statement prepared
//!   once per connection: aggregates, joins of every kind, top-N,
//!   DISTINCT and DISTINCT ON, IN / EXISTS / NOT EXISTS, scalar
//!   subqueries, HAVING, OVER windows, TUMBLE, HOP and SESSION windows
//!   (emitted on update and on window close), unions, views over views;
//!   the lookup join equals the model's record of what each event
//!   met;
//! - no statement gets 40001, a failing one changes nothing, and the
//!   operators undo it themselves (`views_rebuilt` stays 0).
//!
//! `UPDATE_ORACLE_SEEDS=7` (or `UPDATE_ORACLE_SEEDS=0..40`) picks the seeds.

mod common;

use std::time::Duration;

use common::update_model::{
    nullable, statement, Model, Outcome, FRAGILE_MODULUS, FRAGILE_REMAINDER,
};
use common::{sorted_rows, Lcg, TestServer};
use tokio_postgres::{Client, Statement};

const SEEDS: u64 = 5;
const STATEMENTS: usize = 60;

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
        "closed_windows",
        "SELECT window_start, window_end, COUNT(*) AS n, SUM(amount) AS total, MAX(owner) AS top \
         FROM TUMBLE(events, at, INTERVAL '10' SECOND) GROUP BY window_start, window_end \
         EMIT ON WINDOW CLOSE",
    ),
    (
        "closed_hops",
        "SELECT window_end, COUNT(DISTINCT owner) AS owners, MIN(amount) AS least \
         FROM HOP(events, at, INTERVAL '5' SECOND, INTERVAL '10' SECOND) GROUP BY window_end \
         EMIT ON WINDOW CLOSE",
    ),
    (
        "owner_sessions",
        "SELECT owner, window_start, window_end, COUNT(*) AS n, SUM(amount) AS total \
         FROM SESSION(events, at, INTERVAL '3' SECOND) GROUP BY owner, window_start, window_end",
    ),
    (
        "closed_sessions",
        "SELECT owner, window_end, COUNT(*) AS n, MAX(amount) AS most \
         FROM SESSION(events, at, INTERVAL '4' SECOND) GROUP BY owner, window_end \
         EMIT ON WINDOW CLOSE",
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
    (
        "events_per_owner",
        "SELECT owner, COUNT(*) AS n, SUM(amount) AS total FROM events GROUP BY owner",
    ),
    (
        "event_accounts",
        "SELECT e.id, a.balance FROM events e JOIN accounts a ON a.id = e.account",
    ),
    (
        "event_windows",
        "SELECT window_start, COUNT(*) AS n, MAX(amount) AS most \
         FROM TUMBLE(events, at, INTERVAL '10' SECOND) GROUP BY window_start",
    ),
    (
        "richest_per_owner",
        "SELECT DISTINCT ON (owner) owner, id, balance FROM accounts WHERE owner IS NOT NULL \
         ORDER BY owner, balance DESC NULLS LAST, id",
    ),
    (
        "lonely_owners",
        "SELECT id FROM owners o WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.owner = o.id)",
    ),
    (
        "northern_accounts",
        "SELECT id, balance FROM accounts WHERE owner IN (SELECT id FROM owners WHERE region = 'north')",
    ),
    (
        "big_owners",
        "SELECT owner, n FROM per_owner WHERE n > 1",
    ),
    (
        "region_sums",
        "SELECT region, SUM(total) AS total FROM per_region GROUP BY region",
    ),
    (
        "keys",
        "SELECT id AS k, 'account' AS kind FROM accounts UNION ALL SELECT id, 'owner' FROM owners",
    ),
    (
        "shared_owners",
        "SELECT owner, COUNT(*) AS n FROM accounts GROUP BY owner HAVING COUNT(*) >= 2",
    ),
    (
        "above_average",
        "SELECT id, balance FROM accounts WHERE balance > (SELECT AVG(balance) FROM accounts)",
    ),
    (
        "distinct_owners",
        "SELECT COUNT(DISTINCT owner) AS owners, COUNT(*) AS n FROM accounts",
    ),
    (
        "classes",
        "SELECT id, CASE WHEN balance > 5 THEN 'rich' WHEN balance IS NULL THEN 'unknown' \
         ELSE 'poor' END AS class FROM accounts",
    ),
    (
        "owner_accounts",
        "SELECT o.id, COUNT(a.id) AS accounts, SUM(a.balance) AS total \
         FROM owners o LEFT JOIN accounts a ON a.owner = o.id GROUP BY o.id",
    ),
    (
        "largest_events",
        "SELECT id, amount FROM events ORDER BY amount DESC, id LIMIT 3",
    ),
    (
        "running_events",
        "SELECT id, owner, SUM(amount) OVER (PARTITION BY owner ORDER BY id) AS running FROM events",
    ),
    (
        "region_bounds",
        "SELECT region, MIN(id) AS first, MAX(id) AS last FROM owners GROUP BY region",
    ),
    (
        "incomplete",
        "SELECT owner, COUNT(*) AS n FROM accounts WHERE owner IS NULL OR balance IS NULL GROUP BY owner",
    ),
    (
        "event_regions_now",
        "SELECT e.id, o.region FROM events e LEFT JOIN owners o ON o.id = e.owner",
    ),
    (
        "account_events",
        "SELECT a.id, COUNT(e.id) AS events FROM accounts a LEFT JOIN events e ON e.account = a.id GROUP BY a.id",
    ),
    (
        "top_events_per_window",
        "SELECT * FROM (SELECT window_start, id, amount, \
         ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY amount DESC, id) AS rn \
         FROM TUMBLE(events, at, INTERVAL '10' SECOND)) ranked WHERE rn <= 2",
    ),
    (
        "first_per_owner",
        "SELECT owner, id, balance FROM (SELECT *, \
         ROW_NUMBER() OVER (PARTITION BY owner ORDER BY balance DESC NULLS LAST, id) AS rn \
         FROM accounts) ranked WHERE rn <= 1",
    ),
    (
        "regions_listed",
        "SELECT string_agg(region, ',' ORDER BY region) AS regions, COUNT(*) AS n FROM owners",
    ),
];

/// Fails a write that makes a balance the model calls fragile.
fn fragile() -> String {
    format!(
        "SELECT id, 10 / (balance % {FRAGILE_MODULUS} - {FRAGILE_REMAINDER}) AS q FROM accounts"
    )
}

/// The lookup join: each event with its owner's region when it came.
const LOOKUP: &str = "SELECT e.id, o.region FROM events e \
     JOIN owners FOR SYSTEM_TIME AS OF PROCTIME() AS o ON e.owner = o.id";

/// The batch query that gives what a view holds: a view emitting on
/// window close holds the windows the watermark (the latest event's time
/// less 5 s: events come in time order, so none is late) has reached.
fn batch_query(query: &str) -> String {
    let mut query = match query.strip_suffix(" EMIT ON WINDOW CLOSE") {
        Some(grouped) => format!(
            "{grouped} HAVING window_end <= (SELECT MAX(at) - INTERVAL '5' SECOND FROM events)"
        ),
        None => query.to_string(),
    };
    for (view, definition) in VIEWS {
        let used = format!("FROM {view} ");
        query = query.replace(&used, &format!("FROM ({definition}) {view} "));
    }
    query
}

async fn check_tables(client: &Client, model: &Model, context: &str) {
    let mut accounts: Vec<Vec<String>> = model
        .accounts
        .iter()
        .map(|(id, (owner, balance))| vec![id.to_string(), nullable(*owner), nullable(*balance)])
        .collect();
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

/// The server of one seed, its client, and the views created so far
/// with their prepared row counts.
struct Run {
    server: TestServer,
    client: Client,
    data_dir: std::path::PathBuf,
    created: Vec<(&'static str, &'static str)>,
    prepared: Vec<Statement>,
    lookup: bool,
    fragile: bool,
    fragile_events: bool,
    seed: u64,
    /// How many times the server started.
    starts: u64,
}

/// The server's arguments for its `starts`-th start in seed `seed`: every
/// other start keeps almost no top-N or OVER state in memory, so it spills
/// after each statement and reads state back from disk (and a restart
/// moves between the two).
fn arguments(seed: u64, starts: u64) -> [&'static str; 4] {
    let cache = match (seed + starts) % 2 {
        0 => "64MB",
        _ => "1kB",
    };
    [
        "--checkpoint-interval-ms",
        "50",
        "--operator-cache-size",
        cache,
    ]
}

impl Run {
    async fn prepare(&mut self) {
        self.prepared.clear();
        for (view, _) in &self.created {
            let sql = format!("SELECT count(*) FROM {view}");
            self.prepared.push(self.client.prepare(&sql).await.unwrap());
        }
    }

    async fn create(&mut self, view: &'static str, query: &'static str) {
        let sql = format!("CREATE MATERIALIZED VIEW {view} AS {query}");
        self.client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        self.created.push((view, query));
        let count = format!("SELECT count(*) FROM {view}");
        self.prepared
            .push(self.client.prepare(&count).await.unwrap());
    }

    /// SIGKILL and start again on the same directory.
    async fn restart(&mut self, clean: bool) {
        if clean {
            assert!(self.server.terminate().success());
        } else {
            self.server.kill();
        }
        self.starts += 1;
        let arguments = arguments(self.seed, self.starts);
        self.server = TestServer::start_with(&self.data_dir, &arguments);
        self.client = self.server.connect().await;
        self.prepare().await;
    }

    async fn check(&self, model: &Model, context: &str) {
        let client = &self.client;
        check_tables(client, model, context).await;
        for ((view, query), prepared) in self.created.iter().zip(&self.prepared) {
            let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
            let expected = sorted_rows(client, &batch_query(query)).await;
            assert_eq!(actual, expected, "{view} after {context}");
            let counted: i64 = client.query_one(prepared, &[]).await.unwrap().get(0);
            assert_eq!(
                counted as usize,
                actual.len(),
                "prepared count of {view} after {context}"
            );
        }
        if self.lookup {
            let mut expected: Vec<Vec<String>> = model
                .events
                .iter()
                .filter_map(|(id, _, _, met)| {
                    let region = met.as_ref()?;
                    Some(vec![
                        id.to_string(),
                        region.clone().unwrap_or("NULL".into()),
                    ])
                })
                .collect();
            expected.sort();
            let actual = sorted_rows(client, "SELECT * FROM event_regions").await;
            assert_eq!(actual, expected, "event_regions after {context}");
        }
        // A failed write was undone by the operators, not by rebuilding
        // the views from their checkpoint.
        let rebuilt = sorted_rows(client, "SELECT views_rebuilt FROM weir_catalog.recovery").await;
        assert_eq!(rebuilt, [["0"]], "views rebuilt after {context}");
        if self.fragile {
            let rows = sorted_rows(client, "SELECT count(*) FROM fragile").await;
            assert_eq!(
                rows,
                [[model.accounts.len().to_string()]],
                "fragile after {context}"
            );
        }
    }
}

/// Runs `sql`, alone or in a transaction block that commits or rolls
/// back; returns whether it changed the tables. It must fail with
/// `fails` if given (unless rolled back), and succeed otherwise.
async fn execute(client: &Client, random: &mut Lcg, sql: &str, fails: Option<&str>) -> bool {
    let wrapped = match random.below(5) {
        0 => format!("BEGIN; {sql}; COMMIT"),
        1 => format!("BEGIN; {sql}; ROLLBACK"),
        _ => sql.to_string(),
    };
    let rolled_back = wrapped.ends_with("ROLLBACK");
    match client.batch_execute(&wrapped).await {
        Ok(()) => {
            // A block that rolls back never reaches the views; a unique
            // key is checked when the statement runs, inside it too.
            assert!(
                fails.is_none() || (rolled_back && fails == Some("22012")),
                "{wrapped} succeeded, expected {fails:?}"
            );
            !rolled_back
        }
        Err(error) => {
            let code = error.code().map(|code| code.code().to_string());
            assert_eq!(code.as_deref(), fails, "{wrapped}: {error:?}");
            if wrapped.starts_with("BEGIN") {
                client.batch_execute("ROLLBACK").await.unwrap();
            }
            false
        }
    }
}

/// When each view is created: the first half at step 4, the rest at
/// random steps before the last third.
fn schedule(random: &mut Lcg) -> Vec<usize> {
    (0..VIEWS.len())
        .map(|index| match index < VIEWS.len() / 2 {
            true => 4,
            false => 5 + random.below(STATEMENTS as u64 * 2 / 3 - 5) as usize,
        })
        .collect()
}

async fn run_seed(seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let server = TestServer::start_with(&data_dir, &arguments(seed, 0));
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner BIGINT, balance BIGINT);
             CREATE TABLE owners (id BIGINT PRIMARY KEY, region TEXT);
             CREATE TABLE events (id BIGINT, account BIGINT, owner BIGINT, amount BIGINT, at TIMESTAMP,
                                  WATERMARK FOR at AS at - INTERVAL '5' SECOND) APPEND ONLY;",
        )
        .await
        .unwrap();
    let mut run = Run {
        server,
        client,
        data_dir,
        created: Vec::new(),
        prepared: Vec::new(),
        lookup: false,
        fragile: false,
        fragile_events: false,
        seed,
        starts: 0,
    };
    let mut random = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) + 3);
    let schedule = schedule(&mut random);
    let mut model = Model::default();
    for step in 0..STATEMENTS {
        for (index, (view, query)) in VIEWS.iter().enumerate() {
            if schedule[index] == step {
                run.create(view, query).await;
            }
        }
        if step == 4 {
            // Events already there meet the owners as they are now.
            run.client
                .batch_execute(&format!(
                    "CREATE MATERIALIZED VIEW event_regions AS {LOOKUP}"
                ))
                .await
                .unwrap();
            for event in &mut model.events {
                event.3 = model.owners.get(&event.2).cloned();
            }
            run.lookup = true;
        }
        if step >= 6 && !run.fragile {
            let created = run
                .client
                .batch_execute(&format!(
                    "CREATE MATERIALIZED VIEW fragile AS {}",
                    fragile()
                ))
                .await;
            match model.trips_fragile() {
                true => assert_eq!(created.unwrap_err().code().unwrap().code(), "22012"),
                false => {
                    created.unwrap();
                    run.fragile = true;
                }
            }
        }
        if step >= 4 && !run.fragile_events {
            let created = run
                .client
                .batch_execute(
                    "CREATE MATERIALIZED VIEW fragile_events AS \
                     SELECT id, 10 / (account % 4 - 3) AS q FROM events",
                )
                .await;
            match model.trips_fragile_events() {
                true => assert_eq!(created.unwrap_err().code().unwrap().code(), "22012"),
                false => {
                    created.unwrap();
                    run.fragile_events = true;
                }
            }
        }
        let (sql, outcome) = statement(&mut random, &model, step);
        let (next, fails) = match outcome {
            Outcome::Applied(next) if run.fragile && next.trips_fragile() => (None, Some("22012")),
            Outcome::Applied(next) if run.fragile_events && next.trips_fragile_events() => {
                (None, Some("22012"))
            }
            Outcome::Applied(next) => (Some(next), None),
            Outcome::Fails(code) => (None, Some(code)),
        };
        if execute(&run.client, &mut random, &sql, fails).await {
            model = next.expect("a failing statement changed nothing");
        }
        let context = format!("seed {seed}, statement {step}: {sql}");
        run.check(&model, &context).await;
        match random.below(16) {
            0 => run.restart(false).await,
            1 => {
                // Right after a checkpoint.
                tokio::time::sleep(Duration::from_millis(120)).await;
                run.restart(false).await;
            }
            _ => continue,
        }
        run.check(&model, &format!("a kill after {context}")).await;
    }
    run.restart(true).await;
    run.check(&model, &format!("seed {seed}: a clean restart"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_views_over_updates_equal_a_model_and_batch_queries() {
    for seed in common::seeds("UPDATE_ORACLE_SEEDS", SEEDS) {
        run_seed(seed).await;
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
