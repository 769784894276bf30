//! Postgres drivers against weir: tokio-postgres here, psycopg 3, asyncpg
//! and SQLAlchemy (psycopg2) through the Python scripts in tests/drivers
//! (their packages come from tests/drivers/requirements.txt; `.ci/run`
//! installs them).

mod common;

use chrono::NaiveDateTime;
use common::TestServer;
use tokio_postgres::SimpleQueryMessage;

fn timestamp(text: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_prepared_statements_and_binary_results() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE drv (i INT, b BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP)",
        )
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO drv VALUES ($1, $2, $3, $4, $5)")
        .await
        .unwrap();
    let at = timestamp("2026-01-02 03:04:05.25");
    client
        .execute(&insert, &[&1i32, &(1i64 << 40), &1.5f64, &"one", &at])
        .await
        .unwrap();
    client
        .execute(&insert, &[&2i32, &-5i64, &-0.25f64, &"two", &at])
        .await
        .unwrap();
    let none: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
        &None::<i32>,
        &None::<i64>,
        &None::<f64>,
        &None::<String>,
        &None::<NaiveDateTime>,
    ];
    client.execute(&insert, &none).await.unwrap();

    let select = client
        .prepare("SELECT i, b, f, t, ts FROM drv WHERE i = $1")
        .await
        .unwrap();
    let row = client.query_one(&select, &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
    assert_eq!(row.get::<_, i64>(1), 1 << 40);
    assert_eq!(row.get::<_, f64>(2), 1.5);
    assert_eq!(row.get::<_, &str>(3), "one");
    assert_eq!(row.get::<_, NaiveDateTime>(4), at);

    let count = client
        .query_one(
            "SELECT count(*) FROM drv WHERE ts >= $1 AND t <> $2",
            &[&at, &"two"],
        )
        .await
        .unwrap();
    assert_eq!(count.get::<_, i64>(0), 1);
    let nulls = client
        .query("SELECT i, t FROM drv WHERE i IS NULL", &[])
        .await
        .unwrap();
    assert_eq!(nulls.len(), 1);
    assert_eq!(nulls[0].get::<_, Option<i32>>(0), None);
    assert_eq!(nulls[0].get::<_, Option<&str>>(1), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portals_return_rows_in_limited_fetches() {
    let server = TestServer::start();
    let mut client = server.connect().await;
    client
        .batch_execute("CREATE TABLE nums AS SELECT * FROM generate_series(1, 10) AS g(n)")
        .await
        .unwrap();
    let transaction = client.transaction().await.unwrap();
    let portal = transaction
        .bind("SELECT n FROM nums ORDER BY n", &[])
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let rows = transaction.query_portal(&portal, 3).await.unwrap();
        if rows.is_empty() {
            break;
        }
        assert!(rows.len() <= 3);
        seen.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
    }
    assert_eq!(seen, (1..=10).collect::<Vec<i64>>());
    transaction.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_statements_stop_at_the_first_error() {
    let server = TestServer::start();
    let client = server.connect().await;
    let error = client
        .simple_query("CREATE TABLE ms (id INT); INSERT INTO ms VALUES (1); SELECT * FROM ms_missing; INSERT INTO ms VALUES (2)")
        .await
        .unwrap_err();
    assert_eq!(error.code().unwrap().code(), "42P01");
    let messages = client
        .simple_query("SELECT count(*) FROM ms")
        .await
        .unwrap();
    let count = messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(count.as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deallocate_is_accepted_for_statements_that_exist() {
    let server = TestServer::start();
    let client = server.connect().await;
    let unknown = client.simple_query("DEALLOCATE nosuch").await.unwrap_err();
    assert_eq!(unknown.code().unwrap().code(), "26000");
    // psycopg sends this after a DROP once it has prepared statements
    // (tests/drivers/psycopg_check.py).
    let statement = client.prepare("SELECT 1").await.unwrap();
    client.simple_query("DEALLOCATE ALL").await.unwrap();
    client.batch_execute("SELECT 1").await.unwrap();
    drop(statement);
}

/// Postgres allows repeated output names and reports them as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_output_names_are_reported_as_postgres_does() {
    let server = TestServer::start();
    let client = server.connect().await;
    let names = |statement: &tokio_postgres::Statement| -> Vec<String> {
        let columns = statement.columns().iter();
        columns.map(|column| column.name().to_string()).collect()
    };
    let literals = client
        .prepare("SELECT -1, -1, 2 AS x, 3 AS x")
        .await
        .unwrap();
    assert_eq!(names(&literals), ["?column?", "?column?", "x", "x"]);
    let users = client
        .prepare("SELECT session_user, session_user")
        .await
        .unwrap();
    assert_eq!(names(&users), ["session_user", "session_user"]);
    let row = client.query_one(&literals, &[]).await.unwrap();
    // Integer literals are integers, as in Postgres.
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (-1, -1));
}

fn run_python(script: &str, server: &TestServer) {
    let path = format!("{}/tests/drivers/{script}", env!("CARGO_MANIFEST_DIR"));
    run_check(
        std::process::Command::new("python3")
            .arg(&path)
            .arg(server.url()),
        "python3 -m pip install -r tests/drivers/requirements.txt",
    );
}

/// Runs one driver's check program; `install` says how to get what it needs.
fn run_check(command: &mut std::process::Command, install: &str) {
    let output = command
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers"))
        .output()
        .unwrap_or_else(|error| panic!("{command:?} did not start ({error}); install: {install}"));
    assert!(
        output.status.success(),
        "{command:?} failed (its requirements: {install})\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// node-postgres, the driver of most Node.js applications and of
/// Metabase's and Grafana's JavaScript siblings.
#[test]
fn node_postgres_queries_types_transactions_and_pool() {
    let server = TestServer::start();
    run_check(
        std::process::Command::new("node")
            .arg("node_check.js")
            .arg(server.url()),
        "node and `npm ci --prefix tests/drivers`",
    );
}

/// pgjdbc's DatabaseMetaData: what DBeaver, Metabase and Tableau read.
/// Java 11+ runs the one-file program without compiling it first.
#[test]
fn jdbc_database_metadata_describes_tables_keys_and_indexes() {
    let server = TestServer::start();
    let url = format!("jdbc:postgresql://127.0.0.1:{}/weir?user=weir", server.port);
    run_check(
        std::process::Command::new("java")
            .args(["-cp", "/usr/share/java/postgresql.jar", "JdbcCheck.java"])
            .arg(url),
        "a JDK and Debian's libpostgresql-jdbc-java",
    );
}

#[test]
fn psycopg3_server_side_binding() {
    let server = TestServer::start();
    run_python("psycopg_check.py", &server);
}

/// SQLAlchemy's first connect parses version() ("Could not determine
/// version" when it reads DataFusion's) and reads settings.
#[test]
fn sqlalchemy_connects_and_runs_core_statements() {
    let server = TestServer::start();
    run_python("sqlalchemy_check.py", &server);
}

/// Grafana's and Metabase's connect and sync queries (cited in
/// tests/drivers/bi_queries.py; compared with Postgres in
/// docs/bi-tool-queries.md) run, and key answers match Postgres.
#[test]
fn grafana_and_metabase_catalog_queries_run() {
    let server = TestServer::start();
    run_python("bi_queries_check.py", &server);
}

#[test]
fn asyncpg_prepared_statements() {
    let server = TestServer::start();
    run_python("asyncpg_check.py", &server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let server = TestServer::start();
    let client = server.connect().await;
    let token = client.cancel_token();
    let running = tokio::spawn(async move {
        let result = client
            .simple_query("SELECT count(*) FROM generate_series(1, 100000000000)")
            .await;
        (client, result)
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let (client, result) = tokio::time::timeout(std::time::Duration::from_secs(60), running)
        .await
        .expect("the cancelled query must end")
        .unwrap();
    assert_eq!(result.unwrap_err().code().unwrap().code(), "57014");
    // The connection is still usable.
    let messages = client.simple_query("SELECT 1").await.unwrap();
    assert!(messages
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_results_for_every_common_type() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE typed (s SMALLINT, r REAL, n NUMERIC(10, 2), flag BOOLEAN, d DATE,
                                 t TIME, tz TIMESTAMPTZ, raw BYTEA, list BIGINT[])",
        )
        .await
        .unwrap();
    let sink = client.copy_in("COPY typed FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    use futures::SinkExt;
    let line = "7\t1.5\t12.34\tt\t2026-02-03\t04:05:06\t2026-02-03 04:05:06+00\t\\\\x01ff\t\\N\n";
    sink.send(bytes::Bytes::from(line)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 1);
    client
        .batch_execute("INSERT INTO typed (list) VALUES ([1, 2, 3])")
        .await
        .unwrap();

    let row = client
        .query_one(
            "SELECT s, r, n, flag, d, t, tz, raw FROM typed WHERE s = 7",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i16>(0), 7);
    assert_eq!(row.get::<_, f32>(1), 1.5);
    assert_eq!(row.get::<_, rust_decimal::Decimal>(2).to_string(), "12.34");
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, chrono::NaiveDate>(4).to_string(), "2026-02-03");
    assert_eq!(row.get::<_, chrono::NaiveTime>(5).to_string(), "04:05:06");
    assert_eq!(
        row.get::<_, chrono::DateTime<chrono::Utc>>(6).to_rfc3339(),
        "2026-02-03T04:05:06+00:00"
    );
    assert_eq!(row.get::<_, Vec<u8>>(7), vec![0x01, 0xff]);

    let list = client
        .query_one("SELECT list FROM typed WHERE list IS NOT NULL", &[])
        .await
        .unwrap();
    assert_eq!(list.get::<_, Vec<i64>>(0), vec![1, 2, 3]);
    let interval = client
        .simple_query("SELECT INTERVAL '1 day 2 hours' AS i")
        .await
        .unwrap();
    let text = interval.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(text.as_deref(), Some("1 day 02:00:00"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameter_numbers_past_65535_are_errors_and_the_server_stays_up() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE numbered (id BIGINT)")
        .await
        .unwrap();
    for sql in [
        "SELECT $2000000000",
        "SELECT $65536",
        "INSERT INTO numbered VALUES ($2000000000)",
    ] {
        let simple = client.simple_query(sql).await.unwrap_err();
        assert_eq!(simple.code().unwrap().code(), "42P02", "{sql}");
        let extended = client.prepare(sql).await.unwrap_err();
        assert_eq!(extended.code().unwrap().code(), "42P02", "{sql}");
    }
    // The simple protocol has no values for parameters at all.
    let unbound = client.simple_query("SELECT $1").await.unwrap_err();
    assert_eq!(unbound.code().unwrap().code(), "42P02");
    assert_eq!(
        unbound.as_db_error().unwrap().message(),
        "there is no parameter $1"
    );
    // The connection and the server are still there.
    let row = client.query_one("SELECT $1::bigint + 1", &[&41i64]).await;
    assert_eq!(row.unwrap().get::<_, i64>(0), 42);
    let other = server.connect().await;
    other.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn described_parameter_types_follow_their_context() {
    use tokio_postgres::types::Type;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE described (id BIGINT, name TEXT, day DATE, score REAL)")
        .await
        .unwrap();
    let cases: [(&str, &[Type]); 8] = [
        ("SELECT $1::bigint + 1", &[Type::INT8]),
        (
            "SELECT $1::double precision, $2::date",
            &[Type::FLOAT8, Type::DATE],
        ),
        ("SELECT $1 + 1", &[Type::INT8]),
        ("SELECT upper($1)", &[Type::TEXT]),
        (
            "SELECT name FROM described WHERE id = $1 AND day < $2",
            &[Type::INT8, Type::DATE],
        ),
        (
            "INSERT INTO described VALUES ($1, $2, $3, $4)",
            &[Type::INT8, Type::TEXT, Type::DATE, Type::FLOAT4],
        ),
        ("SELECT $1", &[Type::TEXT]),
        ("SELECT $2::int", &[Type::TEXT, Type::INT4]),
    ];
    for (sql, expected) in cases {
        let statement = client.prepare(sql).await.unwrap();
        assert_eq!(statement.params(), expected, "{sql}");
    }
    let day = chrono::NaiveDate::from_ymd_opt(2026, 3, 4).unwrap();
    client
        .execute(
            "INSERT INTO described VALUES ($1, $2, $3, $4)",
            &[&7i64, &"seven", &day, &1.5f32],
        )
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT name, $2::date - day, $3::text IS NULL FROM described WHERE id = $1",
            &[&7i64, &day, &None::<String>],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "seven");
    assert!(row.get::<_, bool>(2));
}
