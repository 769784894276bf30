//! Logins (issue 16): SCRAM-SHA-256 and md5 password exchanges with real
//! clients (tokio-postgres, psql, libpq through psycopg), roles surviving
//! a restart, what a non-superuser may not do, TLS with psql's
//! `verify-full` and `--require-tls`, and the refusal to listen beyond
//! loopback with nobody to authenticate.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;

const SUPERUSER_PASSWORD: &str = "s3cret-Ü";

/// A server that asks every client for its password, loopback included.
fn password_server(data_dir: &std::path::Path, extra: &[&str]) -> TestServer {
    let mut arguments = vec![
        "--trust-loopback=false",
        "--superuser-password",
        SUPERUSER_PASSWORD,
    ];
    arguments.extend_from_slice(extra);
    TestServer::start_with(data_dir, &arguments)
}

async fn login(
    server: &TestServer,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let settings = format!(
        "host=127.0.0.1 port={} user='{user}' password='{password}' dbname=weir",
        server.port
    );
    let (client, connection) = tokio_postgres::connect(&settings, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn code(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map(|db| db.code().code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {error}"))
}

async fn login_fails_with(server: &TestServer, user: &str, password: &str, expected: &str) {
    match login(server, user, password).await {
        Ok(_) => panic!("{user} logged in with password {password:?}"),
        Err(error) => assert_eq!(code(&error), expected, "{user}: {error}"),
    }
}

async fn current_user(client: &tokio_postgres::Client) -> (String, String) {
    let row = client
        .query_one("SELECT current_user, session_user", &[])
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn passwords_are_checked_and_roles_survive_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = password_server(&data_dir, &[]);

    // SCRAM-SHA-256 (tokio-postgres's default when offered).
    let admin = login(&server, "weir", SUPERUSER_PASSWORD).await.unwrap();
    login_fails_with(&server, "weir", "wrong", "28P01").await;
    login_fails_with(&server, "weir", "", "28P01").await;
    login_fails_with(&server, "nobody", "anything", "28P01").await;

    admin
        .batch_execute(
            "CREATE USER alice PASSWORD 'alice-pw';
             CREATE ROLE no_login PASSWORD 'x';
             CREATE ROLE no_password LOGIN;
             SET password_encryption = 'md5';
             CREATE USER old_client PASSWORD 'old-pw'",
        )
        .await
        .unwrap();
    let alice = login(&server, "alice", "alice-pw").await.unwrap();
    assert_eq!(current_user(&alice).await, ("alice".into(), "alice".into()));
    login_fails_with(&server, "alice", "Alice-pw", "28P01").await;
    // The right password, but the role may not log in: said only after it.
    login_fails_with(&server, "no_login", "x", "28000").await;
    login_fails_with(&server, "no_login", "y", "28P01").await;
    login_fails_with(&server, "no_password", "", "28P01").await;
    // md5, for a role whose stored secret is md5.
    let old = login(&server, "old_client", "old-pw").await.unwrap();
    assert_eq!(current_user(&old).await.0, "old_client");
    login_fails_with(&server, "old_client", "old-pw2", "28P01").await;

    // A non-superuser changes its own password and nothing else.
    alice
        .batch_execute("ALTER USER alice PASSWORD 'alice-pw2'")
        .await
        .unwrap();
    for (sql, expected) in [
        ("CREATE USER mallory", "42501"),
        ("ALTER USER alice SUPERUSER", "42501"),
        ("ALTER USER weir PASSWORD 'mine'", "42501"),
        ("DROP USER old_client", "42501"),
        ("ALTER SYSTEM SET checkpoint_interval_ms = 5", "42501"),
    ] {
        let error = alice.batch_execute(sql).await.expect_err(sql);
        assert_eq!(code(&error), expected, "{sql}: {error}");
    }
    login_fails_with(&server, "alice", "alice-pw", "28P01").await;
    login(&server, "alice", "alice-pw2").await.unwrap();

    // Roles and their secrets are durable; the flag's password stays.
    drop((admin, alice, old));
    server.kill();
    let server = password_server(&data_dir, &[]);
    login(&server, "alice", "alice-pw2").await.unwrap();
    login(&server, "old_client", "old-pw").await.unwrap();
    let admin = login(&server, "weir", SUPERUSER_PASSWORD).await.unwrap();
    let error = admin.batch_execute("DROP USER weir").await.unwrap_err();
    assert_eq!(code(&error), "2BP01");
    admin.batch_execute("DROP USER alice").await.unwrap();
    login_fails_with(&server, "alice", "alice-pw2", "28P01").await;
}

/// libpq computes the SCRAM secret on the client (psql's `\password`
/// does the same) and sends it in ALTER USER; the stored secret must then
/// accept the password from psql, and refuse another.
#[tokio::test]
async fn a_secret_libpq_computed_logs_in_with_psql() {
    let temp = tempfile::tempdir().unwrap();
    let server = password_server(&temp.path().join("data"), &[]);
    let script = format!(
        "import psycopg\n\
         with psycopg.connect(host='127.0.0.1', port={port}, user='weir', \
         password='{SUPERUSER_PASSWORD}', dbname='weir', autocommit=True) as c:\n\
         \x20   secret = c.pgconn.encrypt_password(b'from-libpq', b'carol').decode()\n\
         \x20   assert secret.startswith('SCRAM-SHA-256$'), secret\n\
         \x20   c.execute(\"CREATE USER carol PASSWORD '\" + secret + \"'\")\n",
        port = server.port
    );
    let output = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let psql = |password: &str| {
        Command::new("psql")
            .args([
                "-X",
                "-At",
                "-h",
                "127.0.0.1",
                "-p",
                &server.port.to_string(),
            ])
            .args(["-U", "carol", "-d", "weir", "-c", "SELECT current_user"])
            .env("PGPASSWORD", password)
            .output()
            .expect("psql must be installed")
    };
    let right = psql("from-libpq");
    assert_eq!(
        String::from_utf8_lossy(&right.stdout).trim(),
        "carol",
        "{right:?}"
    );
    let wrong = psql("from-libpq!");
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        said.contains("password authentication failed for user \"carol\""),
        "{said}"
    );
}

/// Makes a self-signed certificate for localhost and 127.0.0.1.
fn make_certificate(directory: &std::path::Path) -> (String, String) {
    let certificate = directory.join("server.crt").display().to_string();
    let key = directory.join("server.key").display().to_string();
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-keyout",
            &key,
            "-out",
            &certificate,
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .stderr(Stdio::null())
        .status()
        .expect("openssl must be installed");
    assert!(status.success());
    (certificate, key)
}

fn psql_with(server: &TestServer, options: &str) -> (bool, String) {
    let connection = format!(
        "host=localhost port={} user=weir dbname=weir {options}",
        server.port
    );
    let output = Command::new("psql")
        .args(["-X", "-At", &connection, "-c", "SELECT current_user"])
        .env("PGPASSWORD", SUPERUSER_PASSWORD)
        .output()
        .expect("psql must be installed");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

#[tokio::test]
async fn tls_with_verify_full_and_plain_refused_when_required() {
    let temp = tempfile::tempdir().unwrap();
    let (certificate, key) = make_certificate(temp.path());
    let tls = ["--tls-cert", &certificate, "--tls-key", &key];
    let server = password_server(&temp.path().join("offered"), &tls);
    let root = format!("sslrootcert={certificate}");
    let (ok, said) = psql_with(&server, &format!("sslmode=verify-full {root}"));
    assert!(ok && said.trim() == "weir", "{said}");
    // Offered, not required: plain still works.
    let (ok, said) = psql_with(&server, "sslmode=disable");
    assert!(ok, "{said}");
    drop(server);

    let mut required = tls.to_vec();
    required.push("--require-tls");
    let server = password_server(&temp.path().join("required"), &required);
    let (ok, said) = psql_with(&server, &format!("sslmode=verify-full {root}"));
    assert!(ok, "{said}");
    let (ok, said) = psql_with(&server, "sslmode=disable");
    assert!(
        !ok && said.contains("connection without TLS refused"),
        "{said}"
    );
    // A client that trusts another authority refuses the server.
    let elsewhere = temp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let (other, _) = make_certificate(&elsewhere);
    let (ok, said) = psql_with(&server, &format!("sslmode=verify-full sslrootcert={other}"));
    assert!(!ok && said.contains("certificate verify failed"), "{said}");
}

/// How `weir serve` with `arguments` ended: `Started` once it says it is
/// ready (it is then killed), or `Exited` with its exit status; and what
/// it logged.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Started,
    Exited(bool),
}

fn serve_outcome(arguments: &[&str]) -> (Outcome, String) {
    use std::io::BufRead;
    let temp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .args(arguments)
        .arg("--data-dir")
        .arg(temp.path().join("data"))
        .env("WEIR_LOG", "warn,weir::ready=info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, read) = std::sync::mpsc::channel();
    let log = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(log).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said = String::new();
    let outcome = loop {
        assert!(
            Instant::now() < deadline,
            "weir neither started nor exited: {said}"
        );
        if let Ok(line) = read.recv_timeout(Duration::from_millis(50)) {
            said.push_str(&line);
            said.push('\n');
            if line.contains("weir is ready") {
                child.kill().unwrap();
                break Outcome::Started;
            }
        } else if let Some(status) = child.try_wait().unwrap() {
            break Outcome::Exited(status.success());
        }
    };
    let _ = child.wait();
    // The rest of what it logged before exiting.
    said.extend(read.try_iter().map(|line| line + "\n"));
    (outcome, said)
}

#[test]
fn listening_beyond_loopback_needs_a_password_or_an_explicit_flag() {
    let (outcome, said) = serve_outcome(&["--listen", "0.0.0.0:0"]);
    assert_eq!(outcome, Outcome::Exited(false), "{said}");
    assert!(said.contains("refusing to listen on 0.0.0.0"), "{said}");
    assert!(said.contains("--superuser-password"), "{said}");
    for allowed in [
        vec!["--listen", "0.0.0.0:0", "--superuser-password", "pw"],
        vec!["--listen", "0.0.0.0:0", "--insecure-trust-all"],
        vec!["--listen", "127.0.0.1:0"],
    ] {
        let (outcome, said) = serve_outcome(&allowed);
        assert_eq!(outcome, Outcome::Started, "{allowed:?}: {said}");
    }
}

/// The address this host reaches the outside from, if it has one: a
/// client connecting to it from here is not on loopback.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let address = socket.local_addr().ok()?.ip();
    (!address.is_loopback()).then_some(address)
}

#[tokio::test]
async fn by_default_loopback_is_trusted_and_other_addresses_need_the_password() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_listening(
        &temp.path().join("data"),
        "0.0.0.0:0",
        &["--superuser-password", SUPERUSER_PASSWORD],
    );
    // Loopback: any password, or none, is not asked for.
    login(&server, "weir", "not the password").await.unwrap();
    let Some(address) = non_loopback_address() else {
        eprintln!("this host has no non-loopback address; only loopback was checked");
        return;
    };
    let connect = |password: &str| {
        let settings = format!(
            "host={address} port={} user=weir password='{password}' dbname=weir",
            server.port
        );
        async move { tokio_postgres::connect(&settings, tokio_postgres::NoTls).await }
    };
    let error = connect("not the password").await.err().expect("refused");
    assert_eq!(code(&error), "28P01", "{error}");
    assert!(connect(SUPERUSER_PASSWORD).await.is_ok());
}

async fn trusted(server: &TestServer, user: &str) -> tokio_postgres::Client {
    let settings = format!(
        "host=127.0.0.1 port={} user={user} dbname=weir",
        server.port
    );
    let (client, connection) = tokio_postgres::connect(&settings, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Runs each statement as `client`, expecting the SQLSTATE given ("" for
/// success).
async fn expect(client: &tokio_postgres::Client, who: &str, cases: &[(&str, &str)]) {
    for (sql, expected) in cases {
        let outcome = client.batch_execute(sql).await;
        let got = match &outcome {
            Ok(()) => String::new(),
            Err(error) => code(error),
        };
        assert_eq!(&got, expected, "{who}: {sql}: {outcome:?}");
    }
}

/// Owner, granted and not granted, for tables, views, materialized views,
/// sources and sinks; through queries, writes, COPY, SUBSCRIBE and DDL.
/// Trust on loopback logs in as the named role, with that role's rights.
#[tokio::test]
async fn the_privilege_matrix_holds() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let admin = server.connect().await;
    admin
        .batch_execute(
            "CREATE USER alice; CREATE USER bob; CREATE USER carol;
             CREATE TABLE t (a BIGINT); INSERT INTO t VALUES (1);
             CREATE VIEW v AS SELECT a FROM t;
             CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS c FROM t;
             CREATE SOURCE src (id BIGINT) WITH (connector = 'datagen', datagen.rows.per.second = 10);
             GRANT CREATE ON SCHEMA public TO alice",
        )
        .await
        .unwrap();
    let bob = trusted(&server, "bob").await;
    let denied = "42501";
    expect(
        &bob,
        "bob, granted nothing",
        &[
            ("SELECT * FROM t", denied),
            ("SELECT * FROM v", denied),
            ("SELECT * FROM mv", denied),
            ("SELECT (SELECT max(a) FROM t)", denied),
            ("INSERT INTO t VALUES (2)", denied),
            ("DELETE FROM t", denied),
            ("COPY (SELECT * FROM t) TO STDOUT", denied),
            ("COPY t TO STDOUT", denied),
            ("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE mv; ROLLBACK", denied),
            ("ROLLBACK", ""),
            ("DROP TABLE t", denied),
            ("DROP VIEW v", denied),
            ("DROP MATERIALIZED VIEW mv", denied),
            ("SELECT * FROM src", denied),
            ("DROP SOURCE src", denied),
            ("CREATE TABLE mine (a INT)", denied),
            (
                "CREATE SOURCE mine (id BIGINT) WITH (connector = 'datagen')",
                denied,
            ),
            ("GRANT SELECT ON t TO bob", denied),
            ("SELECT count(*) FROM pg_class", ""),
            ("SELECT count(*) FROM weir_catalog.materialized_views", ""),
        ],
    )
    .await;
    // On a connection of its own: after a failed COPY FROM, tokio-postgres
    // sends CopyFail and a second Sync, whose ReadyForQuery it then does
    // not expect.
    let copier = trusted(&server, "bob").await;
    let copy_in = copier.copy_in::<_, bytes::Bytes>("COPY t FROM STDIN").await;
    assert_eq!(code(&copy_in.err().expect("COPY FROM denied")), denied);

    // A statement prepared while allowed fails once the grant is revoked.
    admin
        .batch_execute("GRANT SELECT ON v TO bob; GRANT INSERT ON t TO bob")
        .await
        .unwrap();
    let prepared = bob.prepare("SELECT a FROM v").await.unwrap();
    assert_eq!(bob.query(&prepared, &[]).await.unwrap().len(), 1);
    expect(
        &bob,
        "bob, granted SELECT on v and INSERT on t",
        &[
            // The view reads t with its owner's rights.
            ("SELECT * FROM v", ""),
            ("SELECT * FROM v JOIN v AS w ON true", ""),
            // A subquery merely named v is what it reads.
            ("SELECT * FROM (SELECT a FROM t WHERE a > 0) AS v", denied),
            ("SELECT * FROM t", denied),
            ("INSERT INTO t VALUES (2)", ""),
            ("DELETE FROM t", denied),
            ("UPDATE t SET a = 3", denied),
            ("DROP VIEW v", denied),
        ],
    )
    .await;
    admin
        .batch_execute("REVOKE SELECT ON v FROM bob")
        .await
        .unwrap();
    let error = bob.query(&prepared, &[]).await.unwrap_err();
    assert_eq!(code(&error), denied);

    let sinks = temp.path().join("sinks");
    std::fs::create_dir(&sinks).unwrap();
    let sink = |name: &str, view: &str| {
        format!(
            "CREATE SINK {name} FROM {view} WITH (connector = 'file', path = '{}') FORMAT UPSERT ENCODE JSON (primary_key = 'c')",
            sinks.join(name).display()
        )
    };
    // An owner: alice may create, and owns what she creates.
    let alice = trusted(&server, "alice").await;
    expect(
        &alice,
        "alice, with CREATE",
        &[
            ("CREATE TABLE at (a BIGINT)", ""),
            ("INSERT INTO at VALUES (10)", ""),
            (
                "CREATE MATERIALIZED VIEW amv AS SELECT sum(a) AS c FROM at",
                "",
            ),
            ("SELECT * FROM amv", ""),
            (
                "CREATE MATERIALIZED VIEW bad AS SELECT count(*) FROM t",
                denied,
            ),
            ("CREATE VIEW bad AS SELECT * FROM t", denied),
            ("DROP TABLE t", denied),
            ("GRANT SELECT ON at TO bob", ""),
            (&sink("mv_out", "mv"), denied),
            (&sink("amv_out", "amv"), ""),
            (
                "CREATE SOURCE asrc (id BIGINT) WITH (connector = 'datagen')",
                "",
            ),
            ("SELECT count(*) >= 0 FROM asrc", ""),
        ],
    )
    .await;
    expect(
        &bob,
        "bob, not the owner of alice's sink and source",
        &[("DROP SINK amv_out", denied), ("DROP SOURCE asrc", denied)],
    )
    .await;
    let carol = trusted(&server, "carol").await;
    expect(
        &bob,
        "bob, granted SELECT on alice's table",
        &[("SELECT * FROM at", ""), ("SELECT * FROM amv", denied)],
    )
    .await;
    expect(
        &carol,
        "carol, not the owner",
        &[
            ("GRANT SELECT ON at TO carol", denied),
            ("SELECT * FROM at", denied),
        ],
    )
    .await;
    admin
        .batch_execute("GRANT SELECT ON t TO PUBLIC")
        .await
        .unwrap();
    expect(&carol, "carol, through PUBLIC", &[("SELECT * FROM t", "")]).await;
    // pg_class says the same: owners (psql's Owner column) and grants
    // (`\dp`), PUBLIC as an empty name, NULL while nothing was granted.
    let catalog = common::sorted_rows(
        &admin,
        "SELECT relname, pg_get_userbyid(relowner), array_to_string(relacl, ' ') \
         FROM pg_class WHERE relname IN ('t', 'v', 'mv', 'at', 'amv')",
    )
    .await;
    let expected = [
        ["amv", "alice", "NULL"],
        ["at", "alice", "alice=arwd/alice bob=r/alice"],
        ["mv", "weir", "NULL"],
        ["t", "weir", "weir=arwd/weir bob=a/weir =r/weir"],
        ["v", "weir", "NULL"],
    ];
    assert_eq!(catalog, expected.map(|row| row.map(String::from).to_vec()));
    // has_table_privilege and has_schema_privilege answer the same (BI
    // tools list what a role may read with them).
    let answers = common::sorted_rows(
        &bob,
        "SELECT has_table_privilege('t', 'SELECT'), has_table_privilege('t', 'insert'), \
                has_table_privilege('T', 'DELETE'), has_table_privilege('\"public\".\"at\"', 'SELECT'), \
                has_table_privilege('amv', 'SELECT, UPDATE'), \
                has_table_privilege('alice', 'at', 'DELETE'), \
                has_table_privilege('carol', 'at', 'SELECT'), \
                has_table_privilege('t', 'SELECT WITH GRANT OPTION'), \
                has_table_privilege('pg_class', 'SELECT'), \
                has_schema_privilege('public', 'USAGE'), has_schema_privilege('public', 'CREATE'), \
                has_schema_privilege('alice', 'public', 'CREATE')",
    )
    .await;
    let expected = "t t f t f t f f t t f t";
    assert_eq!(
        answers,
        vec![expected.split(' ').map(String::from).collect::<Vec<_>>()]
    );
    let readable = common::sorted_rows(
        &bob,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'public' AND has_table_privilege(c.oid, 'SELECT')",
    )
    .await;
    assert_eq!(
        readable,
        vec![vec!["at".to_string()], vec!["t".to_string()]]
    );
    let unknown = bob
        .simple_query("SELECT has_table_privilege('nothing_here', 'SELECT')")
        .await
        .unwrap_err();
    assert_eq!(code(&unknown), "42P01");
    let bad = bob
        .simple_query("SELECT has_table_privilege('t', 'FLY')")
        .await
        .unwrap_err();
    assert_eq!(code(&bad), "22023");
    let error = admin.batch_execute("DROP USER alice").await.unwrap_err();
    assert_eq!(code(&error), "2BP01", "alice owns relations");

    // Owners, grants and CREATE survive a restart.
    drop((admin, alice, bob, carol));
    server.kill();
    let server = TestServer::start_on(&data_dir);
    let bob = trusted(&server, "bob").await;
    let alice = trusted(&server, "alice").await;
    expect(
        &bob,
        "bob, after a restart",
        &[
            ("INSERT INTO t VALUES (4)", ""),
            ("SELECT * FROM v", denied),
            ("SELECT * FROM at", ""),
        ],
    )
    .await;
    expect(
        &alice,
        "alice, after a restart",
        &[
            ("REVOKE SELECT ON at FROM bob", ""),
            ("DROP SINK amv_out", ""),
            ("DROP SOURCE asrc", ""),
            ("DROP MATERIALIZED VIEW amv", ""),
            ("DROP TABLE at", ""),
            ("CREATE TABLE again (a INT)", ""),
            ("DROP TABLE again", ""),
        ],
    )
    .await;
    expect(&bob, "bob, revoked", &[("SELECT * FROM at", "42P01")]).await;
    let admin = server.connect().await;
    admin
        .batch_execute("REVOKE CREATE ON SCHEMA public FROM alice; DROP USER alice")
        .await
        .unwrap();
}
