"""psycopg 3 against weir: server-side parameter binding, prepared
statements, text and binary results. Usage: psycopg_check.py <url>"""
import datetime
import sys

import psycopg


def main(url):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS psycopg_t")
        conn.execute(
            "CREATE TABLE psycopg_t (i INT, b BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP)"
        )
        ts = datetime.datetime(2026, 1, 2, 3, 4, 5, 600000)
        insert = "INSERT INTO psycopg_t VALUES (%s, %s, %s, %s, %s)"
        # prepare=True forces a named server-side prepared statement.
        conn.execute(insert, (1, 2**40, 1.5, "one", ts), prepare=True)
        conn.execute(insert, (2, -5, -0.25, "two", ts), prepare=True)
        conn.execute(insert, (None, None, None, None, None))

        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                cur.execute(
                    "SELECT i, b, f, t, ts FROM psycopg_t WHERE i = %s", (1,), prepare=True
                )
                assert cur.fetchall() == [(1, 2**40, 1.5, "one", ts)], binary
                cur.execute(
                    "SELECT count(*) FROM psycopg_t WHERE ts >= %s AND t <> %s", (ts, "two")
                )
                assert cur.fetchone() == (1,), binary
                cur.execute("SELECT i, t FROM psycopg_t WHERE i IS NULL")
                assert cur.fetchall() == [(None, None)], binary

        check_null_and_typed_parameters(conn)
        check_postgres_spellings(conn)

        # A query of only comments gets EmptyQueryResponse, as in Postgres.
        for empty in ("-- only a comment", "/* a comment */", ";"):
            with conn.cursor() as cur:
                cur.execute(empty)
                assert cur.pgresult.status == psycopg.pq.ExecStatus.EMPTY_QUERY, empty

        # A failed statement raises with its SQLSTATE and the connection survives.
        try:
            conn.execute("SELECT * FROM psycopg_missing")
            raise AssertionError("expected an error")
        except psycopg.errors.UndefinedTable as error:
            assert error.sqlstate == "42P01"
        assert conn.execute("SELECT 1").fetchone() == (1,)

    # Non-autocommit: psycopg wraps statements in BEGIN ... COMMIT.
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO psycopg_t VALUES (%s, 0, 0, 'tx', NULL)", (3,))
        conn.commit()
        assert conn.execute("SELECT count(*) FROM psycopg_t").fetchone() == (4,)
        conn.execute("DROP TABLE psycopg_t")
        conn.commit()
    check_transactions(url)
    print("psycopg ok")


def check_transactions(url):
    """Nested conn.transaction() blocks use savepoints: an inner failure is
    rolled back to its savepoint, the outer block commits the rest, and the
    reported transaction status follows (psycopg decides BEGIN or SAVEPOINT
    by it)."""
    status = psycopg.pq.TransactionStatus
    notices = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        conn.execute("CREATE TABLE psycopg_tx (i INT)")
        with conn.transaction():
            conn.execute("INSERT INTO psycopg_tx VALUES (1)")
            try:
                with conn.transaction():
                    conn.execute("INSERT INTO psycopg_tx VALUES (2)")
                    conn.execute("SELECT * FROM psycopg_missing")
            except psycopg.errors.UndefinedTable:
                pass
            assert conn.info.transaction_status == status.INTRANS, conn.info.transaction_status
            with conn.transaction():
                conn.execute("INSERT INTO psycopg_tx VALUES (3)")
        assert conn.info.transaction_status == status.IDLE
        rows = [row[0] for row in conn.execute("SELECT i FROM psycopg_tx ORDER BY i")]
        assert rows == [1, 3], rows

        with conn.transaction() as outer:
            conn.execute("INSERT INTO psycopg_tx VALUES (4)")
            raise psycopg.Rollback(outer)
        assert conn.execute("SELECT count(*) FROM psycopg_tx").fetchone() == (2,)

        # An error in a block aborts it: the status says so until ROLLBACK.
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT * FROM psycopg_missing")
        except psycopg.errors.UndefinedTable:
            pass
        assert conn.info.transaction_status == status.INERROR
        try:
            conn.execute("SELECT 1")
            raise AssertionError("expected 25P02")
        except psycopg.errors.InFailedSqlTransaction:
            pass
        conn.execute("ROLLBACK")
        assert conn.info.transaction_status == status.IDLE

        # DDL takes effect when it runs; ROLLBACK says it stays.
        with conn.transaction() as outer:
            conn.execute("CREATE TABLE psycopg_tx_ddl (a INT)")
            raise psycopg.Rollback(outer)
        assert any("did not undo CREATE TABLE" in notice for notice in notices), notices
        conn.execute("DROP TABLE psycopg_tx_ddl")
        conn.execute("DROP TABLE psycopg_tx")


def check_null_and_typed_parameters(conn):
    """psycopg sends None with type oid 0: each NULL must stay in its place
    and take the type its context gives it."""
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute(
                "SELECT %s::bigint + 1, %s::double precision, %s::text IS NULL",
                (41, 1.5, None),
            )
            assert cur.fetchone() == (42, 1.5, True), binary
            cur.execute("SELECT %s::text IS NULL", (None,))
            assert cur.fetchone() == (True,), binary
            cur.execute(
                "SELECT %s::int, %s::bigint, %s::double precision, %s::date,"
                " %s::timestamp, %s::numeric, %s::boolean, %s::text, %s",
                (None,) * 9,
            )
            assert cur.fetchone() == (None,) * 9, binary
            cur.execute("SELECT %s::int IS NULL, %s, %s::int + 1", (None, "after", 2))
            assert cur.fetchone() == (True, "after", 3), binary
            cur.execute("SELECT %s::date", (datetime.date(2026, 3, 4),))
            assert cur.fetchone() == (datetime.date(2026, 3, 4),), binary
            cur.execute("SELECT i FROM psycopg_t WHERE b = %s", (2**40,))
            assert cur.fetchall() == [(1,)], binary
    conn.execute("CREATE TABLE psycopg_nulls (i INT, b BIGINT, d DATE, t TEXT)")
    insert = "INSERT INTO psycopg_nulls VALUES (%s, %s, %s, %s)"
    conn.execute(insert, (1, None, None, "one"))
    conn.execute(insert, (None, 2, datetime.date(2026, 1, 2), None), prepare=True)
    conn.execute(insert, (None, None, None, None), prepare=True)
    rows = conn.execute("SELECT i, b, d, t FROM psycopg_nulls ORDER BY b, i").fetchall()
    assert rows == [
        (None, 2, datetime.date(2026, 1, 2), None),
        (1, None, None, "one"),
        (None, None, None, None),
    ], rows
    conn.execute("DROP TABLE psycopg_nulls")


def check_postgres_spellings(conn):
    """Values Postgres accepts from a client that Arrow's parsers do not."""
    conn.execute("CREATE TABLE psycopg_minutes (i INT, ts TIMESTAMP)")
    insert = "INSERT INTO psycopg_minutes VALUES (%s, %s)"
    conn.execute(insert, (1, "2026-01-02 03:04"))
    conn.execute(insert, (2, "2026-01-02T03:05"), prepare=True)
    rows = conn.execute(
        "SELECT i, ts FROM psycopg_minutes WHERE ts >= %s ORDER BY i", ("2026-01-02 03:04",)
    ).fetchall()
    assert rows == [
        (1, datetime.datetime(2026, 1, 2, 3, 4)),
        (2, datetime.datetime(2026, 1, 2, 3, 5)),
    ], rows
    conn.execute("DROP TABLE psycopg_minutes")
    hour = datetime.timedelta(hours=1)
    row = conn.execute("SELECT %s * interval '1 hour', interval '1 hour' / %s", (3, 4)).fetchone()
    assert row == (3 * hour, hour / 4), row
    row = conn.execute("SELECT current_user, session_user, user").fetchone()
    assert row == ("weir",) * 3, row
    # `x = ANY(%s)` with a list: the parameter is an array of x's type
    # (pgcli lists relations this way).
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute("SELECT 1 = ANY(%s), 5 = ANY(%s)", ([1, 2], [1, 2]))
            assert cur.fetchone() == (True, False), binary
            cur.execute(
                "SELECT count(*) FROM pg_catalog.pg_class WHERE relkind = ANY(%s) AND relname = %s",
                (["r", "m"], "psycopg_t"),
            )
            assert cur.fetchone() == (1,), binary


if __name__ == "__main__":
    main(sys.argv[1])
