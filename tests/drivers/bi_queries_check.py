"""Grafana's and Metabase's connect and sync queries (the catalogue in
bi_queries.py, each cited from the tool's source or captured from pgjdbc)
against weir, over the simple protocol (parameters written in) and the
extended one (bound as the tool binds them). Every query must run, except
the few listed in KNOWN_FAILURES with the reason; key answers are checked
against what Postgres 15 gives for the same objects.
Usage: bi_queries_check.py <url>"""
import sys

import psycopg
from psycopg import pq

import bi_queries

SETUP = [
    "CREATE TABLE bi_orders (id BIGINT PRIMARY KEY, customer TEXT, amount DOUBLE PRECISION, placed_at TIMESTAMP)",
    "CREATE VIEW bi_big AS SELECT * FROM bi_orders WHERE amount > 100",
    "CREATE MATERIALIZED VIEW bi_per_customer AS SELECT customer, count(*) AS n FROM bi_orders GROUP BY customer",
    "INSERT INTO bi_orders VALUES (1, 'ann', 50.5, '2026-01-01 10:00:00'), (2, 'bob', 150.25, '2026-01-02 11:30:00')",
]
CLEANUP = ["DROP MATERIALIZED VIEW bi_per_customer", "DROP VIEW bi_big", "DROP TABLE bi_orders"]

# Queries expected to fail on weir, with the reason (none since session 21).
KNOWN_FAILURES = {}


def literal(value):
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


def literal_sql(sql, params):
    for index in range(len(params), 0, -1):
        sql = sql.replace(f"${index}", literal(params[index - 1]))
    return sql


def outcome(result):
    status = pq.ExecStatus(result.status)
    if status == pq.ExecStatus.FATAL_ERROR:
        message = (result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
        return status.name, message
    rows = [
        [None if result.get_value(r, c) is None else result.get_value(r, c).decode() for c in range(result.nfields)]
        for r in range(result.ntuples)
    ]
    return status.name, rows


def run(pgconn, query, oid):
    sql = query["sql"].replace("{OID}", oid)
    params = query["params"]
    outcomes = {"simple": outcome(pgconn.exec_(literal_sql(sql, params).encode()))}
    if query["proto"] != "simple":
        values = [str(value).encode() for value in params]
        if query["tool"].startswith("grafana"):
            # pgx: Parse without parameter types, then Bind text values.
            prepared = pgconn.prepare(b"", sql.encode(), None)
            result = prepared if prepared.status == pq.ExecStatus.FATAL_ERROR else pgconn.exec_prepared(b"", values, None)
        else:
            # pgjdbc: varchar (1043) for strings, int8 (20) for longs.
            types = [20 if isinstance(value, int) else 1043 for value in params]
            result = pgconn.exec_params(sql.encode(), values, types or None)
        outcomes["extended"] = outcome(result)
    return outcomes


def main(url):
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in SETUP:
            conn.execute(statement)
        try:
            check(conn)
        finally:
            conn.rollback()
            for statement in CLEANUP:
                conn.execute(statement)
    print("bi queries ok")


def check(conn):
    pgconn = conn.pgconn
    oid = str(conn.execute("SELECT oid FROM pg_catalog.pg_class WHERE relname = 'bi_orders'").fetchone()[0])
    answers, failures = {}, []
    for query in bi_queries.Q:
        key = f'{query["tool"]}_{query["name"]}'
        if query["name"] == "jdbc_commit":
            pgconn.exec_(b"BEGIN")
        outcomes = run(pgconn, query, oid)
        if query["name"] == "jdbc_begin_read_only":
            pgconn.exec_(b"ROLLBACK")
        answers[key] = outcomes["simple"][1]
        for protocol, (status, result) in outcomes.items():
            failed = status == "FATAL_ERROR"
            if failed != (key in KNOWN_FAILURES):
                failures.append(f"{key} [{protocol}]: {status} {result}")
    assert not failures, "\n".join(failures)
    # Answers as Postgres 15 gives them for the same objects.
    expect(answers, "grafana_ping_pgx", [])
    tables = [row[0] for row in answers["grafana_show_tables"]]
    assert tables[:2] == ["bi_big", "bi_orders"], tables
    columns = answers["metabase_describe_fields"]
    id_column = [row for row in columns if row[0] == "id" and row[4] == "bi_orders"]
    assert id_column and id_column[0][5] == "t" and id_column[0][7] == "t", columns
    expect(answers, "metabase_jdbc_max_index_keys", [["32"]])
    keys = answers["metabase_jdbc_get_primary_keys"]
    assert [(row[3], row[4], row[5]) for row in keys] == [("id", "1", "bi_orders_pkey")], keys
    index = answers["metabase_jdbc_get_index_info"]
    assert [(row[5], row[8]) for row in index] == [("bi_orders_pkey", "id")], index
    # LIMIT 1 without ORDER BY: either relation with both columns.
    guess = answers["grafana-legacy_find_metric_table"]
    assert guess in ([["bi_big", "placed_at", "amount"]], [["bi_orders", "placed_at", "amount"]]), guess
    aggregates = [row[0] for row in answers["grafana-legacy_aggregate_query"]]
    assert {"avg", "max", "min", "sum", "stddev"} <= set(aggregates), aggregates


def expect(answers, key, rows):
    assert answers[key] == rows, f"{key}: {answers[key]} != {rows}"


if __name__ == "__main__":
    main(sys.argv[1])
