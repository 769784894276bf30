//! weir against a real PostgreSQL: the same statements sent to both, rows
//! compared as text (simple protocol) and as binary (extended protocol),
//! column types and SQLSTATEs too. Three inputs: generated scalar
//! expressions over every type, generated queries over three tables, and
//! each query also as a materialized view (whose rows must equal
//! PostgreSQL's answer to the query, before and after changes to the
//! tables). A difference is either fixed or allowed, with its reason, in
//! docs/postgres-differences.md; any other fails the test.
//!
//! `DIFFERENTIAL_SEEDS=0..40` runs more seeds (default 0..SEEDS);
//! `DIFFERENTIAL_REPORT=path` writes every difference found, allowed or
//! not.

mod common;
mod differential;

use std::collections::BTreeMap;
use std::fmt::Write;

use common::postgres::PostgresServer;
use common::TestServer;
use differential::allow_list::{self, Entry};
use differential::expressions::Generator;
use differential::outcome::{self, Outcome};
use differential::queries::{self, QueryGenerator};
use tokio_postgres::Client;

/// Seeds in CI; each gives EXPRESSIONS_PER_SEED expressions and
/// QUERIES_PER_SEED queries (each also as a view).
const SEEDS: u64 = 4;
const EXPRESSIONS_PER_SEED: usize = 1300;
const QUERIES_PER_SEED: usize = 80;

#[derive(Default)]
struct Tally {
    compared: usize,
    /// Allowed differences by the reason that allows them.
    allowed: BTreeMap<String, usize>,
    unexplained: Vec<String>,
    report: String,
}

impl Tally {
    fn record(
        &mut self,
        entries: &mut [Entry],
        statement: &str,
        postgres: &Outcome,
        weir: &Outcome,
    ) {
        self.compared += 1;
        let Some(difference) = outcome::difference(postgres, weir) else {
            return;
        };
        let detail = format!(
            "[{}] {statement}\n  postgres: {}\n  weir:     {}\n",
            match difference.kind {
                "error" => format!("error {}→{}", difference.states.0, difference.states.1),
                kind => kind.to_string(),
            },
            outcome::describe(postgres),
            outcome::describe(weir)
        );
        self.report.push_str(&detail);
        match allow_list::allows(entries, statement, &difference) {
            Some(entry) => *self.allowed.entry(entry.reason.clone()).or_default() += 1,
            None => self.unexplained.push(detail),
        }
    }
}

struct Servers<'a> {
    postgres: Client,
    weir: Client,
    weir_server: &'a TestServer,
}

impl Servers<'_> {
    async fn compare(
        &mut self,
        tally: &mut Tally,
        entries: &mut [Entry],
        sql: &str,
        ordered: bool,
    ) {
        let postgres = outcome::run(&self.postgres, sql, ordered).await;
        let weir = outcome::run(&self.weir, sql, ordered).await;
        self.reconnect_after(&weir, sql).await;
        tally.record(entries, sql, &postgres, &weir);
    }

    /// A statement that broke weir's connection (a panic in a query) is a
    /// difference; the run goes on over a new connection.
    async fn reconnect_after(&mut self, weir: &Outcome, sql: &str) {
        if let Outcome::Error { sqlstate, message } = weir {
            if sqlstate == "connection" {
                eprintln!("weir's connection broke at: {sql}\n  {message}");
                self.weir = self.weir_server.connect().await;
            }
        }
    }

    /// Runs a setup or change statement on both; they must agree on
    /// whether it worked, or the tables would no longer be the same.
    async fn execute_both(&self, sql: &str) {
        let postgres = outcome::execute(&self.postgres, sql).await;
        let weir = outcome::execute(&self.weir, sql).await;
        assert_eq!(
            postgres.is_ok(),
            weir.is_ok(),
            "{sql}\npostgres: {postgres:?}\nweir: {weir:?}"
        );
    }
}

async fn expressions(
    servers: &mut Servers<'_>,
    tally: &mut Tally,
    entries: &mut [Entry],
    seed: u64,
) {
    let mut generator = Generator::new(seed);
    for _ in 0..EXPRESSIONS_PER_SEED {
        let sql = generator.statement();
        servers.compare(tally, entries, &sql, true).await;
    }
}

/// Each query as a query, then as a view read right after it is made and
/// again after a few changes to the tables.
async fn queries(servers: &mut Servers<'_>, tally: &mut Tally, entries: &mut [Entry], seed: u64) {
    for sql in queries::setup(seed) {
        servers.execute_both(&sql).await;
    }
    let mut generator = QueryGenerator::new(seed);
    let mut changes = queries::changes(seed);
    let mut next_id = queries::FIRST_NEW_ID + seed as usize * 1000;
    for number in 0..QUERIES_PER_SEED {
        let query = generator.query();
        servers
            .compare(tally, entries, &query.sql, query.ordered)
            .await;
        let view = format!("dv_{seed}_{number}");
        let create = format!("CREATE MATERIALIZED VIEW {view} AS {}", query.sql);
        if let Err(failure) = outcome::execute(&servers.weir, &create).await {
            let postgres = outcome::run(&servers.postgres, &query.sql, false).await;
            servers.reconnect_after(&failure, &create).await;
            tally.record(entries, &create, &postgres, &failure);
            continue;
        }
        let read = format!("SELECT * FROM {view}");
        for round in 0..2 {
            if round == 1 {
                for _ in 0..3 {
                    let change = queries::change(&mut changes, &mut next_id);
                    servers.execute_both(&change).await;
                }
            }
            let postgres = outcome::run(&servers.postgres, &query.sql, false).await;
            let weir = outcome::run(&servers.weir, &read, false).await;
            servers.reconnect_after(&weir, &read).await;
            tally.record(entries, &create, &postgres, &weir);
        }
        outcome::execute(&servers.weir, &format!("DROP MATERIALIZED VIEW {view}"))
            .await
            .expect("drop the view");
    }
    for table in ["t1", "t2", "t3"] {
        servers.execute_both(&format!("DROP TABLE {table}")).await;
    }
}

fn summary(tally: &Tally, entries: &[Entry]) -> String {
    let mut text = format!(
        "{} comparisons, {} allowed differences, {} unexplained\n",
        tally.compared,
        tally.allowed.values().sum::<usize>(),
        tally.unexplained.len()
    );
    for (reason, count) in &tally.allowed {
        let _ = writeln!(text, "  {count:5} allowed: {reason}");
    }
    for entry in entries.iter().filter(|entry| entry.used == 0) {
        let _ = writeln!(text, "  unused entry: {}", entry.pattern);
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_answers_as_postgres_does() {
    let postgres_server = PostgresServer::start();
    let weir_server = TestServer::start();
    let mut servers = Servers {
        postgres: postgres_server.connect().await,
        weir: weir_server.connect().await,
        weir_server: &weir_server,
    };
    let mut entries = allow_list::load();
    let mut tally = Tally::default();
    for seed in common::seeds("DIFFERENTIAL_SEEDS", SEEDS) {
        expressions(&mut servers, &mut tally, &mut entries, seed).await;
        queries(&mut servers, &mut tally, &mut entries, seed).await;
    }
    let summary = summary(&tally, &entries);
    eprintln!("{summary}");
    if let Ok(path) = std::env::var("DIFFERENTIAL_REPORT") {
        std::fs::write(&path, format!("{summary}\n{}", tally.report)).expect("write the report");
    }
    let shown: Vec<&String> = tally.unexplained.iter().take(40).collect();
    assert!(
        tally.unexplained.is_empty(),
        "{} differences from PostgreSQL that docs/postgres-differences.md does not allow \
         (first 40):\n{}",
        tally.unexplained.len(),
        shown
            .iter()
            .map(|detail| detail.as_str())
            .collect::<String>()
    );
}
