//! The updating path's known failures (issue 48), each as a user met it:
//! a restart after a group's last row was deleted, lookup joins over rows
//! that existed before the view and across a restart, a prepared query
//! after a failed write, a failed CREATE followed by more DDL, a statement
//! whose planning recursed without bound, and a constant subquery in a
//! view's HAVING.

mod common;

use std::time::Duration;

use common::{sorted_rows, TestServer};
use tokio_postgres::Client;

const CHECKPOINTS: [&str; 2] = ["--checkpoint-interval-ms", "50"];

/// Lets a checkpoint or two pass.
async fn checkpoint_passes() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// `view` holds what `query` gives as a batch.
async fn assert_view(client: &Client, view: &str, query: &str, context: &str) {
    let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
    let expected = sorted_rows(client, query).await;
    assert_eq!(actual, expected, "{view} {context}");
}

const EMPTIED_AGGREGATES: &[(&str, &str)] = &[
    ("sums", "SELECT k, SUM(v) AS s FROM a GROUP BY k"),
    ("least", "SELECT k, MIN(v) AS m FROM a GROUP BY k"),
    ("most", "SELECT k, MAX(v) AS m, AVG(v) AS mean FROM a GROUP BY k"),
    ("distinct_values", "SELECT k, COUNT(DISTINCT v) AS n FROM a GROUP BY k"),
    (
        "joined",
        "SELECT k, string_agg(v::text, ',' ORDER BY v) AS vs, array_agg(v ORDER BY v) AS arr FROM a GROUP BY k",
    ),
    ("counts", "SELECT k, COUNT(*) AS n FROM a GROUP BY k"),
    ("everything", "SELECT COUNT(*) AS n, SUM(v) AS s, MIN(v) AS m FROM a"),
    ("fewer_copies", "SELECT k FROM a EXCEPT ALL SELECT k FROM a WHERE v > 30"),
    ("shared_copies", "SELECT k FROM a INTERSECT ALL SELECT k FROM a WHERE v >= 30"),
];

async fn assert_emptied_views(client: &Client, context: &str) {
    for (view, query) in EMPTIED_AGGREGATES {
        assert_view(client, view, query, context).await;
    }
}

/// Case 1: `DELETE` of a group's last row, a checkpoint, a stop: the data
/// directory starts again, the views hold the batch answer, and a refill
/// and a failed write afterwards work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_every_row_of_a_group_was_deleted_restores_the_views() {
    emptied_groups_survive_restarts("CREATE TABLE a (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT)")
        .await;
}

/// The same over a table without a primary key, whose rows are known by
/// their log offsets alone (UPDATE and DELETE match them by value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_key_is_updated_through_restarts() {
    emptied_groups_survive_restarts("CREATE TABLE a (id BIGINT, k BIGINT, v BIGINT)").await;
}

async fn emptied_groups_survive_restarts(create_table: &str) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client.batch_execute(create_table).await.unwrap();
    for (view, query) in EMPTIED_AGGREGATES {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {view} AS {query}"))
            .await
            .unwrap();
    }
    client
        .batch_execute("INSERT INTO a VALUES (1, 1, 10), (2, 2, 20); DELETE FROM a WHERE k = 1")
        .await
        .unwrap();
    checkpoint_passes().await;
    client.batch_execute("DELETE FROM a").await.unwrap();
    checkpoint_passes().await;
    assert_emptied_views(&client, "after the deletes").await;
    assert!(server.terminate().success());

    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert_emptied_views(&client, "after a restart").await;
    client
        .batch_execute("INSERT INTO a VALUES (3, 1, 30), (4, 1, 31)")
        .await
        .unwrap();
    assert_emptied_views(&client, "after a refill").await;
    // A write that fails in one view changes nothing and leaves the
    // others writable.
    client
        .batch_execute("CREATE MATERIALIZED VIEW inverse AS SELECT id, 100 / (v - 7) AS q FROM a")
        .await
        .unwrap();
    let error = client
        .batch_execute("INSERT INTO a VALUES (5, 2, 7)")
        .await
        .unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012", "{error}");
    client
        .batch_execute("DELETE FROM a WHERE k = 1; INSERT INTO a VALUES (6, 2, 8)")
        .await
        .unwrap();
    assert_emptied_views(&client, "after a failed write").await;
    checkpoint_passes().await;
    server.kill();
    let server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert_emptied_views(&client, "after a kill").await;
    // Updates after the restart find the rows the log replayed.
    client
        .batch_execute("UPDATE a SET v = v + 1 WHERE k = 2; INSERT INTO a VALUES (9, 2, 8)")
        .await
        .unwrap();
    client
        .batch_execute("DELETE FROM a WHERE v = 9")
        .await
        .unwrap();
    assert_emptied_views(&client, "after updates past a restart").await;
    let rows = sorted_rows(&client, "SELECT id, k, v FROM a").await;
    assert_eq!(rows, [["9", "2", "8"]], "the table itself");
}

/// The rows expected in `priced`, `all_priced` and `spent`.
type LookupRows = (Vec<Vec<String>>, Vec<Vec<String>>, Vec<Vec<String>>);

const LOOKUP_SETUP: &str = "
CREATE TABLE rates (currency TEXT PRIMARY KEY, rate BIGINT);
CREATE TABLE orders (id BIGINT, currency TEXT, amount BIGINT) APPEND ONLY;
INSERT INTO rates VALUES ('eur', 2), ('usd', 1);
INSERT INTO orders VALUES (1, 'eur', 10), (2, 'usd', 5), (3, 'gbp', 7);
CREATE MATERIALIZED VIEW priced AS
  SELECT o.id, o.amount * r.rate AS price
  FROM orders o JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency;
CREATE MATERIALIZED VIEW all_priced AS
  SELECT o.id, r.rate
  FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency;
CREATE MATERIALIZED VIEW spent AS
  SELECT r.currency, SUM(o.amount * r.rate) AS total
  FROM orders o JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.currency = r.currency
  GROUP BY r.currency;
";

/// Case 2: rows that existed before a lookup-join view meet the table as
/// it is when the view is created; later table changes never change rows
/// already joined, also across a restart that replays both tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_joins_keep_lookup_semantics_through_backfill_and_restarts() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    // Checkpoints far apart: the restart replays every row below.
    let mut server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "600000"]);
    let client = server.connect().await;
    client.batch_execute(LOOKUP_SETUP).await.unwrap();
    let expect = |priced: &[[&str; 2]], all: &[[&str; 2]], spent: &[[&str; 2]]| {
        let rows = |rows: &[[&str; 2]]| -> Vec<Vec<String>> {
            rows.iter()
                .map(|row| row.iter().map(|cell| cell.to_string()).collect())
                .collect()
        };
        (rows(priced), rows(all), rows(spent))
    };
    let check = |client: Client, expected: LookupRows, context: &'static str| async move {
        assert_eq!(
            sorted_rows(&client, "SELECT * FROM priced").await,
            expected.0,
            "priced {context}"
        );
        assert_eq!(
            sorted_rows(&client, "SELECT * FROM all_priced").await,
            expected.1,
            "all_priced {context}"
        );
        assert_eq!(
            sorted_rows(&client, "SELECT * FROM spent").await,
            expected.2,
            "spent {context}"
        );
        client
    };
    let backfilled = expect(
        &[["1", "20"], ["2", "5"]],
        &[["1", "2"], ["2", "1"], ["3", "NULL"]],
        &[["eur", "20"], ["usd", "5"]],
    );
    let client = check(client, backfilled, "after the backfill").await;
    client
        .batch_execute(
            "INSERT INTO rates VALUES ('gbp', 3);
             UPDATE rates SET rate = 4 WHERE currency = 'eur';
             INSERT INTO orders VALUES (4, 'eur', 1), (5, 'gbp', 1);
             DELETE FROM rates WHERE currency = 'usd';
             INSERT INTO orders VALUES (6, 'usd', 1);
             INSERT INTO orders VALUES (9, 'eur', 1);
             UPDATE rates SET rate = 6 WHERE currency = 'eur';",
        )
        .await
        .unwrap();
    let later = expect(
        &[["1", "20"], ["2", "5"], ["4", "4"], ["5", "3"], ["9", "4"]],
        &[
            ["1", "2"],
            ["2", "1"],
            ["3", "NULL"],
            ["4", "4"],
            ["5", "3"],
            ["6", "NULL"],
            ["9", "4"],
        ],
        &[["eur", "28"], ["gbp", "3"], ["usd", "5"]],
    );
    drop(check(client, later.clone(), "after table changes").await);
    assert!(server.terminate().success());

    let mut server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "600000"]);
    let client = check(server.connect().await, later, "after a restart").await;
    client
        .batch_execute(
            "UPDATE rates SET rate = 5 WHERE currency = 'eur';
             INSERT INTO rates VALUES ('usd', 7);
             INSERT INTO orders VALUES (7, 'usd', 2), (8, 'eur', 1);",
        )
        .await
        .unwrap();
    let after_restart = expect(
        &[
            ["1", "20"],
            ["2", "5"],
            ["4", "4"],
            ["5", "3"],
            ["7", "14"],
            ["8", "5"],
            ["9", "4"],
        ],
        &[
            ["1", "2"],
            ["2", "1"],
            ["3", "NULL"],
            ["4", "4"],
            ["5", "3"],
            ["6", "NULL"],
            ["7", "7"],
            ["8", "5"],
            ["9", "4"],
        ],
        &[["eur", "33"], ["gbp", "3"], ["usd", "19"]],
    );
    check(
        client,
        after_restart.clone(),
        "after changes past a restart",
    )
    .await;
    server.kill();
    let server = TestServer::start_with(&data_dir, &["--checkpoint-interval-ms", "600000"]);
    check(server.connect().await, after_restart, "after a kill").await;
}

/// Case 3: a prepared query of a view reads its current rows after a
/// write failed in another view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_query_reads_a_view_s_current_rows_after_a_failed_write() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE p (id BIGINT PRIMARY KEY, v BIGINT);
             CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS n, SUM(v) AS s FROM p;
             CREATE MATERIALIZED VIEW fragile AS SELECT id, 10 / v AS q FROM p;
             INSERT INTO p VALUES (1, 1);",
        )
        .await
        .unwrap();
    let statement = client.prepare("SELECT n, s FROM total").await.unwrap();
    let read = |row: tokio_postgres::Row| {
        (
            row.get::<_, i64>(0),
            row.get::<_, Option<rust_decimal::Decimal>>(1),
        )
    };
    for _ in 0..6 {
        let row = client.query_one(&statement, &[]).await.unwrap();
        assert_eq!(read(row), (1, Some(1.into())));
    }
    let error = client
        .batch_execute("INSERT INTO p VALUES (2, 0)")
        .await
        .unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012");
    client
        .batch_execute("INSERT INTO p VALUES (3, 5)")
        .await
        .unwrap();
    for _ in 0..6 {
        let row = client.query_one(&statement, &[]).await.unwrap();
        assert_eq!(read(row), (2, Some(6.into())), "the prepared read");
    }
}

/// Case 4: a CREATE that fails in its backfill (as the query fails in
/// Postgres) leaves DDL and writes working at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_create_leaves_ddl_working() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE e2 (a BIGINT); CREATE TABLE other (x BIGINT)")
        .await
        .unwrap();
    let error = client
        .batch_execute(
            "CREATE MATERIALIZED VIEW m AS SELECT count(*)/count(DISTINCT a) AS r FROM e2",
        )
        .await
        .unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012", "{error}");
    client
        .batch_execute("CREATE MATERIALIZED VIEW fine AS SELECT count(*) AS n FROM other")
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO other VALUES (1)")
        .await
        .unwrap();
    assert_eq!(sorted_rows(&client, "SELECT * FROM fine").await, [["1"]]);
    let missing = client.batch_execute("SELECT * FROM m").await.unwrap_err();
    assert_eq!(missing.code().unwrap().code(), "42P01");
}

/// Case 5: a correlated EXISTS over a join with the outer row in its ON
/// is a clean error in a view, not a stack overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correlated_join_in_exists_is_refused_without_taking_the_server_down() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t1 (x BIGINT, y BIGINT); CREATE TABLE t2 (x BIGINT);
             CREATE TABLE t3 (x BIGINT, y BIGINT);",
        )
        .await
        .unwrap();
    for join in ["JOIN", "LEFT JOIN"] {
        let sql = format!(
            "CREATE MATERIALIZED VIEW v AS SELECT * FROM t1 WHERE EXISTS \
             (SELECT 1 FROM t2 {join} t3 ON t2.x = t3.x AND t1.y = t3.y WHERE t1.x = t2.x)"
        );
        let outcome = client.batch_execute(&sql).await;
        if let Err(error) = &outcome {
            assert!(error.code().is_some(), "{sql}: {error}");
        } else {
            client
                .batch_execute("DROP MATERIALIZED VIEW v")
                .await
                .unwrap();
        }
    }
    client
        .batch_execute("INSERT INTO t1 VALUES (1, 1)")
        .await
        .unwrap();
    assert_eq!(
        sorted_rows(&client, "SELECT count(*) FROM t1").await,
        [["1"]]
    );
}

/// Case 6: a constant subquery in HAVING is evaluated over the table's
/// rows, as the same SELECT is; emptying the table then fails the write
/// that would divide by zero, as the SELECT would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_constant_subquery_in_having_is_evaluated_as_in_a_select() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE b (id BIGINT PRIMARY KEY, a BIGINT);
             INSERT INTO b VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 3)",
        )
        .await
        .unwrap();
    let query =
        "SELECT a FROM b GROUP BY a HAVING count(*) >= (SELECT count(*)/count(DISTINCT a) FROM b)";
    assert_eq!(sorted_rows(&client, query).await, [["1"], ["2"]]);
    client
        .batch_execute(&format!("CREATE MATERIALIZED VIEW h AS {query}"))
        .await
        .unwrap();
    assert_view(&client, "h", query, "after its creation").await;
    client
        .batch_execute("INSERT INTO b VALUES (7, 3), (8, 4)")
        .await
        .unwrap();
    assert_view(&client, "h", query, "after an insert").await;
    let error = client.batch_execute("DELETE FROM b").await.unwrap_err();
    let message = error.as_db_error().map(|e| e.message().to_string());
    assert_eq!(error.code().unwrap().code(), "22012", "{message:?}");
    assert_view(&client, "h", query, "after a failed delete").await;
}

/// A view whose checkpointed state does not restore is marked failed
/// with the reason; the server starts, the other views serve, a query of
/// the failed one says why, and dropping and creating it again mends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_whose_state_does_not_restore_fails_alone() {
    use weir::state::{key, SledStore, StateStore, WriteBatch};
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE f (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT);
             CREATE MATERIALIZED VIEW damaged AS SELECT k, SUM(v) AS s FROM f GROUP BY k;
             CREATE MATERIALIZED VIEW above AS SELECT COUNT(*) AS n FROM damaged;
             CREATE MATERIALIZED VIEW healthy AS SELECT k, COUNT(*) AS n FROM f GROUP BY k;
             INSERT INTO f VALUES (1, 1, 10), (2, 2, 20);",
        )
        .await
        .unwrap();
    checkpoint_passes().await;
    assert!(server.terminate().success());

    // Every operator slot of `damaged` gets a window bin that is not one.
    {
        let store = SledStore::open(&data_dir.join("state")).unwrap();
        let relations = store.scan_prefix(b"catalog/relation/").unwrap();
        let (_, definition) = relations
            .iter()
            .find(|(_, value)| String::from_utf8_lossy(value).contains("\"damaged\""))
            .expect("the view's definition");
        let definition: serde_json::Value = serde_json::from_slice(definition).unwrap();
        let id = definition["id"].as_u64().unwrap();
        let mut batch = WriteBatch::new();
        for slot in 0..6u32 {
            let mut name = key(&[b"checkpoint", b"op", &id.to_be_bytes(), &slot.to_be_bytes()]);
            name.extend_from_slice(b"/bin/");
            name.extend_from_slice(&i64::MAX.to_be_bytes());
            batch.put(name, b"R\x00\x00\x00\x09garbage".to_vec());
        }
        store.commit(batch).unwrap();
    }

    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    let statuses = sorted_rows(
        &client,
        "SELECT view_name, status, failure IS NOT NULL FROM weir_catalog.materialized_views",
    )
    .await;
    assert_eq!(
        statuses,
        [
            ["above", "failed", "t"],
            ["damaged", "failed", "t"],
            ["healthy", "running", "f"]
        ]
    );
    let error = client
        .batch_execute("SELECT * FROM damaged")
        .await
        .unwrap_err();
    let message = error.as_db_error().unwrap().message().to_string();
    assert!(
        message.contains("\"damaged\" failed to recover"),
        "{message}"
    );
    client
        .batch_execute("INSERT INTO f VALUES (3, 1, 5)")
        .await
        .unwrap();
    assert_view(
        &client,
        "healthy",
        "SELECT k, COUNT(*) FROM f GROUP BY k",
        "beside a failed view",
    )
    .await;
    // It stays failed across a restart, until dropped.
    assert!(server.terminate().success());
    let server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    assert!(client.batch_execute("SELECT * FROM damaged").await.is_err());
    client
        .batch_execute(
            "DROP MATERIALIZED VIEW above; DROP MATERIALIZED VIEW damaged;
             CREATE MATERIALIZED VIEW damaged AS SELECT k, SUM(v) AS s FROM f GROUP BY k;",
        )
        .await
        .unwrap();
    assert_view(
        &client,
        "damaged",
        "SELECT k, SUM(v) FROM f GROUP BY k",
        "created again",
    )
    .await;
}

/// A view whose stored definition no longer plans at start (here its SQL
/// names a column that is not there) does not keep the server down: it
/// and the view reading it show as failed with the reason, the others
/// serve, reading it says why, and DROP removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_that_no_longer_plans_fails_alone() {
    use weir::state::{SledStore, StateStore, WriteBatch};
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE f (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT);
             CREATE MATERIALIZED VIEW stale AS SELECT k, SUM(v) AS s FROM f GROUP BY k;
             CREATE MATERIALIZED VIEW above AS SELECT COUNT(*) AS n FROM stale;
             CREATE MATERIALIZED VIEW healthy AS SELECT k, COUNT(*) AS n FROM f GROUP BY k;
             INSERT INTO f VALUES (1, 1, 10), (2, 2, 20);",
        )
        .await
        .unwrap();
    assert!(server.terminate().success());
    {
        let store = SledStore::open(&data_dir.join("state")).unwrap();
        let relations = store.scan_prefix(b"catalog/relation/").unwrap();
        let (name, definition) = relations
            .iter()
            .find(|(_, value)| String::from_utf8_lossy(value).contains("\"stale\""))
            .expect("the view's definition");
        let mut definition: serde_json::Value = serde_json::from_slice(definition).unwrap();
        let sql = definition["sql"]
            .as_str()
            .unwrap()
            .replace("SUM(v)", "SUM(gone)");
        definition["sql"] = serde_json::Value::String(sql);
        let mut batch = WriteBatch::new();
        batch.put(name.clone(), serde_json::to_vec(&definition).unwrap());
        store.commit(batch).unwrap();
    }
    let mut server = TestServer::start_with(&data_dir, &CHECKPOINTS);
    let client = server.connect().await;
    let statuses = sorted_rows(
        &client,
        "SELECT view_name, status, failure IS NOT NULL FROM weir_catalog.materialized_views",
    )
    .await;
    assert_eq!(
        statuses,
        [
            ["above", "failed", "t"],
            ["healthy", "running", "f"],
            ["stale", "failed", "t"]
        ]
    );
    let error = client
        .batch_execute("SELECT count(*) FROM stale")
        .await
        .unwrap_err();
    let error = error.as_db_error().unwrap();
    assert!(
        error.message().contains("\"stale\" no longer plans"),
        "{}",
        error.message()
    );
    assert_eq!(error.code().code(), "55000");
    client
        .batch_execute("INSERT INTO f VALUES (3, 1, 5)")
        .await
        .unwrap();
    assert_view(
        &client,
        "healthy",
        "SELECT k, COUNT(*) FROM f GROUP BY k",
        "beside a view that no longer plans",
    )
    .await;
    client
        .batch_execute(
            "DROP MATERIALIZED VIEW above; DROP MATERIALIZED VIEW stale;
             CREATE MATERIALIZED VIEW stale AS SELECT k, SUM(v) AS s FROM f GROUP BY k;",
        )
        .await
        .unwrap();
    assert_view(
        &client,
        "stale",
        "SELECT k, SUM(v) FROM f GROUP BY k",
        "created again",
    )
    .await;
    assert!(server.terminate().success());
}

/// An EMIT EVERY view undoes a failed write like the others: its
/// subscribers stay subscribed (a rebuild would end them), and the next
/// firing shows exactly the committed rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emit_every_view_undoes_a_failed_write_without_a_rebuild() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE ev (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT);
             CREATE MATERIALIZED VIEW every_sum AS SELECT k, SUM(v) AS s FROM ev GROUP BY k
               EMIT EVERY INTERVAL '1' MINUTE;
             CREATE MATERIALIZED VIEW ev_fragile AS SELECT id, 10 / (v - 7) AS q FROM ev;
             INSERT INTO ev VALUES (1, 1, 1);
             ALTER SYSTEM SET emit_clock_offset = '1h';
             DECLARE feed CURSOR FOR SUBSCRIBE every_sum;",
        )
        .await
        .unwrap();
    let error = client
        .batch_execute("INSERT INTO ev VALUES (2, 1, 7)")
        .await
        .unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012");
    client
        .batch_execute(
            "INSERT INTO ev VALUES (3, 2, 5), (4, 1, 2);
             ALTER SYSTEM SET emit_clock_offset = '2h';",
        )
        .await
        .unwrap();
    assert_view(
        &client,
        "every_sum",
        "SELECT k, SUM(v) FROM ev GROUP BY k",
        "after a firing",
    )
    .await;
    let fetched = client
        .simple_query("FETCH ALL feed WITH (timeout = '0s')")
        .await
        .expect("the subscription outlives the failed write");
    assert!(fetched.len() > 1);
    client
        .batch_execute("ALTER SYSTEM RESET emit_clock_offset")
        .await
        .unwrap();
}
