"""Apache Superset against a live weir, through Superset's own REST API.

Run by scripts/superset-check.sh, which installs Superset from PyPI into a
virtual environment, prepares its metadata database and starts weir; the
argument is weir's port. What a Superset user does first, in order: add
the database (Superset tests the connection), list schemas, tables and a
table's columns, add a table as a dataset (Superset reads its columns and
types through SQLAlchemy's inspector), run a chart query (a bar chart's
SUM per group) and a SQL Lab query. Each step's answer is compared with
what the rows in weir say; any difference exits non-zero.
"""

import json
import sys

import psycopg2

PORT = int(sys.argv[1])
URI = f"postgresql+psycopg2://weir@127.0.0.1:{PORT}/weir"


def prepare_weir():
    connection = psycopg2.connect(host="127.0.0.1", port=PORT, user="weir", dbname="weir")
    connection.autocommit = True
    cursor = connection.cursor()
    cursor.execute("DROP MATERIALIZED VIEW IF EXISTS rides_per_city")
    cursor.execute("DROP TABLE IF EXISTS rides")
    cursor.execute("DROP TABLE IF EXISTS riders")
    cursor.execute("CREATE TABLE riders (id BIGINT PRIMARY KEY, email TEXT NOT NULL UNIQUE)")
    cursor.execute(
        "CREATE TABLE rides (id BIGINT PRIMARY KEY, city VARCHAR(40) NOT NULL, "
        "fare NUMERIC(8, 2), started_at TIMESTAMP)"
    )
    cursor.execute(
        "INSERT INTO rides VALUES (1, 'Lyon', 12.50, '2026-01-01 10:00:00'), "
        "(2, 'Lyon', 7.25, '2026-01-01 11:00:00'), (3, 'Oslo', 30.00, '2026-01-02 09:30:00')"
    )
    cursor.execute(
        "CREATE MATERIALIZED VIEW rides_per_city AS "
        "SELECT city, count(*) AS rides, sum(fare) AS fares FROM rides GROUP BY city"
    )
    connection.close()


def check(condition, what, detail):
    status = "ok  " if condition else "FAIL"
    print(f"{status} {what}: {detail}")
    if not condition:
        check.failures += 1


check.failures = 0


def api(client, method, path, token, body=None):
    response = client.open(
        path,
        method=method,
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        payload = response.get_json()
    except Exception:  # noqa: BLE001 - a non-JSON answer is a failure to report
        payload = None
    return response.status_code, payload


def run_superset():
    from superset.app import create_app

    app = create_app()
    client = app.test_client()
    login = client.post(
        "/api/v1/security/login",
        json={"username": "admin", "password": "admin", "provider": "db", "refresh": False},
    )
    token = login.get_json()["access_token"]

    status, body = api(client, "POST", "/api/v1/database/test_connection/", token,
                       {"sqlalchemy_uri": URI, "database_name": "weir"})
    check(status == 200, "test connection", f"{status} {body}")

    status, body = api(client, "POST", "/api/v1/database/", token,
                       {"database_name": "weir", "sqlalchemy_uri": URI, "expose_in_sqllab": True})
    check(status == 201, "add database", status)
    database = body["id"]

    status, body = api(client, "GET", f"/api/v1/database/{database}/schemas/", token)
    schemas = body.get("result", []) if body else []
    check(status == 200 and "public" in schemas, "schemas", schemas)

    status, body = api(client, "GET",
                       f"/api/v1/database/{database}/tables/?q=(schema_name:public)", token)
    tables = sorted(entry["value"] for entry in (body or {}).get("result", []))
    check(status == 200 and "rides" in tables and "rides_per_city" in tables, "tables", tables)

    status, body = api(client, "GET",
                       f"/api/v1/database/{database}/table_metadata/?name=rides&schema=public",
                       token)
    columns = [(c["name"], c["longType"]) for c in (body or {}).get("columns", [])]
    expected = [("id", "BIGINT"), ("city", "VARCHAR(40)"), ("fare", "NUMERIC(8, 2)"),
                ("started_at", "TIMESTAMP")]
    check(status == 200 and columns == expected, "table metadata", columns)
    # What Superset 6.1 reports for Postgres 15 itself: no secondary
    # indexes, no foreign keys, and (its own quirk) no primary key.
    rest = {key: (body or {}).get(key) for key in ("indexes", "foreignKeys", "primaryKey")}
    check(rest == {"indexes": [], "foreignKeys": [],
                   "primaryKey": {"constrained_columns": None, "name": None}},
          "indexes and keys", rest)

    status, body = api(client, "GET",
                       f"/api/v1/database/{database}/table_metadata/?name=riders&schema=public",
                       token)
    indexes = [(i.get("name"), i.get("column_names"), i.get("unique"))
               for i in (body or {}).get("indexes", [])]
    check(indexes == [("riders_email_key", ["email"], True)], "unique index", indexes)

    status, body = api(client, "POST", "/api/v1/dataset/", token,
                       {"database": database, "schema": "public", "table_name": "rides"})
    check(status == 201, "add dataset", f"{status} {body if status != 201 else ''}")
    dataset = body["id"]
    status, body = api(client, "GET", f"/api/v1/dataset/{dataset}", token)
    synced = sorted((c["column_name"], c["type"], c["is_dttm"])
                    for c in (body or {}).get("result", {}).get("columns", []))
    check(("started_at", "TIMESTAMP WITHOUT TIME ZONE", True) in synced
          and len(synced) == 4, "dataset columns", synced)

    chart_query = {
        "datasource": {"id": dataset, "type": "table"},
        "queries": [{
            "columns": ["city"],
            "metrics": [{"expressionType": "SIMPLE", "aggregate": "SUM",
                         "column": {"column_name": "fare"}, "label": "fares"}],
            "orderby": [["fares", False]],
            "row_limit": 100,
        }],
        "result_format": "json",
        "result_type": "full",
    }
    status, body = api(client, "POST", "/api/v1/chart/data", token, chart_query)
    result = (body or {}).get("result", [{}])[0]
    data = [(row["city"], float(row["fares"])) for row in result.get("data", [])]
    check(status == 200 and data == [("Oslo", 30.0), ("Lyon", 19.75)], "chart query",
          data or f"{status} {json.dumps(body)[:400]}")
    print("     chart SQL:", " ".join(result.get("query", "").split()))

    status, body = api(client, "POST", "/api/v1/sqllab/execute/", token, {
        "database_id": database, "sql": "SELECT city, rides FROM rides_per_city ORDER BY city",
        "runAsync": False, "schema": "public",
    })
    rows = [(row["city"], row["rides"]) for row in (body or {}).get("data", [])]
    check(status == 200 and rows == [("Lyon", 2), ("Oslo", 1)], "SQL Lab",
          rows or f"{status} {json.dumps(body)[:400]}")


def main():
    prepare_weir()
    run_superset()
    if check.failures:
        print(f"{check.failures} check(s) failed")
        sys.exit(1)
    print("Superset: all checks passed")


if __name__ == "__main__":
    main()
