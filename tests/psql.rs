//! psql itself against weir: its catalog commands (\dt, \dm, \d, \l, \dn),
//! a typo that leaves the session connected, and the design's example.

mod common;

use common::TestServer;

/// Runs psql as `weir` with `script` on standard input.
fn psql(server: &TestServer, script: &str) -> String {
    psql_as(server, "weir", script)
}

fn psql_as(server: &TestServer, user: &str, script: &str) -> String {
    common::psql_script(server, user, script)
}

#[test]
fn psql_catalog_commands() {
    let server = TestServer::start();
    psql(
        &server,
        "CREATE TABLE trips (id BIGINT NOT NULL, city TEXT, started_at TIMESTAMP)",
    );
    psql(
        &server,
        "CREATE VIEW trip_cities AS SELECT DISTINCT city FROM trips",
    );
    psql(
        &server,
        "CREATE MATERIALIZED VIEW trips_per_city AS SELECT city, count(*) AS trips FROM trips GROUP BY city",
    );

    let tables = psql(&server, "\\dt");
    assert!(
        tables.contains("trips") && tables.contains("table"),
        "{tables}"
    );
    assert!(
        !tables.contains("trip_cities") && !tables.contains("trips_per_city"),
        "\\dt lists only tables: {tables}"
    );
    let materialized = psql(&server, "\\dm");
    assert!(
        materialized.contains("trips_per_city") && materialized.contains("materialized view"),
        "{materialized}"
    );
    let described = psql(&server, "\\d trips_per_city");
    assert!(described.contains("Materialized view"), "{described}");
    // A view's columns are never NOT NULL (count(*) is, in the plan).
    let detailed = psql(&server, "\\d+ trips_per_city");
    assert!(
        detailed.contains("trips") && !detailed.contains("not null"),
        "{detailed}"
    );

    let described = psql(&server, "\\d trips");
    for expected in [
        "id",
        "bigint",
        "not null",
        "city",
        "text",
        "started_at",
        "timestamp without time zone",
    ] {
        assert!(
            described.contains(expected),
            "missing {expected:?} in:\n{described}"
        );
    }

    // The detailed forms: storage details, sizes (psql's \d+ and \dt+).
    let detailed = psql(&server, "\\d+ trips");
    assert!(
        detailed.contains("Storage") && detailed.contains("started_at"),
        "{detailed}"
    );
    let sized = psql(&server, "\\dt+");
    assert!(
        sized.contains("Size") && sized.contains("trips") && sized.contains("bytes"),
        "{sized}"
    );
    // No privileges or policies yet, but the list runs and names the tables.
    let privileges = psql(&server, "\\dp");
    assert!(
        privileges.contains("Access privileges") && privileges.contains("trips"),
        "{privileges}"
    );
    let views = psql(&server, "\\dv");
    assert!(views.contains("trip_cities"), "{views}");
    let databases = psql(&server, "\\l");
    assert!(databases.contains("weir"), "{databases}");
    let schemas = psql(&server, "\\dn");
    assert!(schemas.contains("public"), "{schemas}");
    // With sizes, tablespaces, conversions: psql's queries run.
    let sized = psql(&server, "\\l+");
    assert!(
        sized.contains("weir") && (sized.contains(" bytes") || sized.contains(" kB")),
        "{sized}"
    );
    let tablespaces = psql(&server, "\\db");
    assert!(tablespaces.contains("List of tablespaces"), "{tablespaces}");
    let conversions = psql(&server, "\\dc");
    assert!(conversions.contains("List of conversions"), "{conversions}");
    // Schemas with their owners and privileges, domains (none), settings
    // changed from their built-in values.
    psql(&server, "CREATE SCHEMA psql_sales AUTHORIZATION weir");
    let schemas = psql(&server, "\\dn+");
    assert!(
        schemas.contains("Access privileges") && schemas.contains(" psql_sales   | weir "),
        "{schemas}"
    );
    let domains = psql(&server, "\\dD");
    assert!(domains.contains("List of domains"), "{domains}");
    let descriptions = psql(&server, "\\dd");
    assert!(
        descriptions.contains("Object descriptions"),
        "{descriptions}"
    );
    let changed = psql(&server, "SET TimeZone = 'Europe/Oslo';\n\\dconfig");
    assert!(
        changed.contains("non-default configuration parameters")
            && changed.contains("timezone  | Europe/Oslo"),
        "{changed}"
    );
    let table = psql(
        &server,
        "CREATE TABLE psql_sales.orders (id INT PRIMARY KEY, shop TEXT);\n\
         CREATE INDEX orders_shop ON psql_sales.orders (shop);\n\
         \\d psql_sales.orders",
    );
    assert!(
        table.contains("Table \"psql_sales.orders\"")
            && table.contains("\"orders_pkey\" PRIMARY KEY, btree (id)")
            && table.contains("\"orders_shop\" btree (shop)"),
        "{table}"
    );
    let listed = psql(&server, "\\dt psql_sales.*");
    assert!(listed.contains("psql_sales | orders | table"), "{listed}");
    // The roles, with the bootstrap superuser weir owning everything;
    // analyst, trusted on loopback, is not a role.
    let roles = psql_as(&server, "analyst", "\\du");
    assert!(
        roles.contains("List of roles")
            && roles.contains(" weir ")
            && roles.contains("| Superuser")
            && !roles.contains("analyst"),
        "{roles}"
    );
    let owned = psql_as(&server, "analyst", "\\dt trips");
    assert!(owned.contains("| table | weir"), "{owned}");
    // Types and functions: weir has no user-defined ones, so the lists are
    // empty, but psql's queries run.
    let types = psql(&server, "\\dT");
    assert!(
        types.contains("List of data types") && types.contains("(0 rows)"),
        "{types}"
    );
    let functions = psql(&server, "\\df");
    assert!(
        functions.contains("List of functions") && functions.contains("(0 rows)"),
        "{functions}"
    );
}

/// Keys are visible the way Postgres shows them: NOT NULL key columns, an
/// "Indexes:" section in \d, the key indexes in \di.
#[test]
fn psql_shows_primary_keys_and_unique_constraints() {
    let server = TestServer::start();
    psql(
        &server,
        "CREATE TABLE riders (id BIGINT, region TEXT, email TEXT, PRIMARY KEY (id, region), UNIQUE (email))",
    );
    let described = psql(&server, "\\d riders");
    for expected in [
        "Indexes:",
        "\"riders_pkey\" PRIMARY KEY, btree (id, region)",
        "\"riders_email_key\" UNIQUE CONSTRAINT, btree (email)",
    ] {
        assert!(
            described.contains(expected),
            "missing {expected:?} in:\n{described}"
        );
    }
    let id = described
        .lines()
        .find(|line| line.trim_start().starts_with("id"));
    assert!(
        id.is_some_and(|line| line.contains("not null")),
        "{described}"
    );
    let email = described
        .lines()
        .find(|line| line.trim_start().starts_with("email"));
    assert!(
        email.is_some_and(|line| !line.contains("not null")),
        "{described}"
    );
    let indexes = psql(&server, "\\di");
    assert!(
        indexes.contains("riders_pkey") && indexes.contains("riders_email_key"),
        "{indexes}"
    );
}

#[test]
fn psql_session_survives_a_typo() {
    let server = TestServer::start();
    let output = psql(
        &server,
        "CREATE TABLE t (id INT, name TEXT);
         INSERT INTO t VALUES (1, 'a'), (2, 'b');
         SELEC * FROM t;
         SELECT count(*) AS n FROM t;
         \\copy t FROM stdin
3\tc
\\.
         SELECT max(id) AS top FROM t;",
    );
    assert!(output.contains("ERROR:  syntax error"), "{output}");
    assert!(output.contains("HINT:"), "{output}");
    assert!(output.contains("COPY 1"), "{output}");
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    assert!(
        lines.windows(3).any(|w| w[0] == "n" && w[2] == "2"),
        "{output}"
    );
    assert!(
        lines.windows(3).any(|w| w[0] == "top" && w[2] == "3"),
        "{output}"
    );
}

/// The example of ../shared/design.md, pasted into psql as written (with
/// real rows where the design has `...`).
#[test]
fn design_example_runs_in_psql() {
    let server = TestServer::start();
    let output = psql(
        &server,
        "-- a stream of page views; events may arrive up to 5 seconds out of order
CREATE TABLE page_views (
    user_id   BIGINT,
    url       TEXT,
    viewed_at TIMESTAMP,
    WATERMARK FOR viewed_at AS viewed_at - INTERVAL '5' SECOND
) APPEND ONLY;

-- unique users per 5-minute window, final rows only once a window closes
CREATE MATERIALIZED VIEW unique_users AS
SELECT window_start, window_end, COUNT(DISTINCT user_id) AS users
FROM TUMBLE(page_views, viewed_at, INTERVAL '5' MINUTE)
GROUP BY window_start, window_end
EMIT ON WINDOW CLOSE;

INSERT INTO page_views VALUES (1, '/a', '2026-01-01 10:00:01'), (2, '/b', '2026-01-01 10:01:00'),
  (1, '/c', '2026-01-01 10:04:59'), (3, '/a', '2026-01-01 10:05:10');
SELECT * FROM unique_users ORDER BY window_start;   -- ad-hoc query of the view
",
    );
    assert!(!output.contains("ERROR"), "{output}");
    assert!(
        output.contains("2026-01-01 10:00:00 | 2026-01-01 10:05:00 |     2"),
        "{output}"
    );
    assert!(output.contains("(1 row)"), "{output}");
}

/// COPY … TO STDOUT (and psql's \copy … TO, which uses it) in both
/// formats, from a table, a column list, a query and a view; what it
/// writes loads back with COPY FROM into equal rows.
#[test]
fn copy_to_stdout_writes_what_copy_from_reads() {
    let server = TestServer::start();
    psql(
        &server,
        "CREATE TABLE notes (id BIGINT, body TEXT, ok BOOLEAN, score DOUBLE, at TIMESTAMP);
         INSERT INTO notes VALUES (1, 'tab\there, \"quoted\"', true, 0.5, TIMESTAMP '2026-01-01 10:00:00'),
                                  (2, NULL, false, 1e20, NULL), (3, '', NULL, -0.25, TIMESTAMP '2026-01-01 10:00:01.5');
         CREATE MATERIALIZED VIEW note_count AS SELECT count(*) AS n FROM notes;",
    );
    let text = psql(&server, "COPY notes TO STDOUT");
    assert!(
        text.contains("1\ttab\\there, \"quoted\"\tt\t0.5\t2026-01-01 10:00:00\n"),
        "{text}"
    );
    assert!(text.contains("2\t\\N\tf\t1e+20\t\\N\n"), "{text}");
    let csv = psql(
        &server,
        "COPY (SELECT id, body FROM notes ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)",
    );
    assert_eq!(
        csv,
        "id,body\n1,\"tab\there, \"\"quoted\"\"\"\n2,\n3,\"\"\n"
    );
    let columns = psql(&server, "COPY notes (id) TO STDOUT");
    assert_eq!(columns.lines().count(), 3, "{columns}");
    assert_eq!(psql(&server, "COPY note_count TO STDOUT"), "3\n");
    // A round trip through a file on the client, with psql's \copy.
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("notes.csv");
    let script = format!(
        "\\copy notes TO '{path}' WITH (FORMAT csv)\n\
         CREATE TABLE notes_again (id BIGINT, body TEXT, ok BOOLEAN, score DOUBLE, at TIMESTAMP);\n\
         \\copy notes_again FROM '{path}' WITH (FORMAT csv)\n\
         SELECT count(*) FROM (SELECT * FROM notes EXCEPT SELECT * FROM notes_again) d;",
        path = file.display()
    );
    let output = psql(&server, &script);
    assert!(output.contains("COPY 3"), "{output}");
    assert!(output.contains("     0\n"), "{output}");
    let refused = psql(&server, "COPY notes TO '/tmp/x.csv'");
    assert!(
        refused.contains("COPY … TO a file is not supported"),
        "{refused}"
    );
}
