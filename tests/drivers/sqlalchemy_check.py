"""SQLAlchemy 2 against weir: the psycopg2 and psycopg (3) dialects connect
(they parse version(), read settings and, for psycopg, fetch type info in a
savepoint at the first connect), then Core statements create, fill and read
a table, and a failed nested transaction rolls back to its savepoint;
inspect() describes tables, views and materialized views, and pandas reads
a table by name.
Usage: sqlalchemy_check.py <url>"""
import sys

import pandas
import sqlalchemy
from sqlalchemy import Column, Integer, MetaData, Table, Text, insert, inspect, select, text


def main(url):
    for driver in ("psycopg2", "psycopg"):
        check(url.replace("postgresql://", f"postgresql+{driver}://", 1))


def check(url):
    engine = sqlalchemy.create_engine(url)
    check_inspection(engine)
    with engine.connect() as conn:
        assert engine.dialect.server_version_info[:2] == (16, 6), engine.dialect.server_version_info
        version = conn.execute(text("select pg_catalog.version()")).scalar()
        assert version.startswith("PostgreSQL 16.6 (weir "), version
        conn.execute(text("DROP TABLE IF EXISTS sqlalchemy_t"))
        conn.execute(text("CREATE TABLE sqlalchemy_t (i INT, t TEXT)"))
        conn.commit()
    table = Table("sqlalchemy_t", MetaData(), Column("i", Integer), Column("t", Text))
    with engine.connect() as conn:
        conn.execute(insert(table), [{"i": 1, "t": "one"}, {"i": 2, "t": "two"}])
        conn.commit()
        rows = conn.execute(select(table.c.i, table.c.t).order_by(table.c.i)).all()
        assert [tuple(row) for row in rows] == [(1, "one"), (2, "two")], rows
        two = conn.execute(select(table.c.t).where(table.c.i == 2)).scalar_one()
        assert two == "two", two
        with conn.begin_nested():
            conn.execute(insert(table), [{"i": 3, "t": "three"}])
        try:
            with conn.begin_nested():
                conn.execute(insert(table), [{"i": 4, "t": "four"}])
                conn.execute(text("SELECT * FROM sqlalchemy_missing"))
        except sqlalchemy.exc.ProgrammingError:
            pass
        conn.commit()
        rows = conn.execute(select(table.c.i).order_by(table.c.i)).scalars().all()
        assert rows == [1, 2, 3], rows
        conn.execute(text("DROP TABLE sqlalchemy_t"))
        conn.commit()
    engine.dispose()


def check_inspection(engine):
    """What inspect() reads from the catalog: schemas, tables, views,
    materialized views, keys and view definitions."""
    with engine.connect() as conn:
        conn.execute(text(
            "CREATE TABLE sa_riders (id BIGINT, region TEXT, email TEXT, "
            "score DOUBLE PRECISION, seen_at TIMESTAMP, PRIMARY KEY (id, region), UNIQUE (email))"
        ))
        conn.execute(text("CREATE VIEW sa_emails AS SELECT email FROM sa_riders"))
        conn.execute(text(
            "CREATE MATERIALIZED VIEW sa_per_region AS "
            "SELECT region, count(*) AS n FROM sa_riders GROUP BY region"
        ))
        conn.execute(text(
            "INSERT INTO sa_riders VALUES (1, 'north', 'a@example.com', 1.5, '2026-01-02 03:04:05')"
        ))
        conn.commit()
    try:
        insp = inspect(engine)
        check_columns(insp)
        schemas = insp.get_schema_names()
        assert "public" in schemas and "weir_catalog" in schemas, schemas
        assert "sa_riders" in insp.get_table_names(), insp.get_table_names()
        assert "sa_per_region" not in insp.get_table_names()
        # Only the search path's views: not information_schema's or weir_catalog's.
        assert insp.get_view_names() == ["sa_emails"], insp.get_view_names()
        assert insp.get_materialized_view_names() == ["sa_per_region"]
        primary = insp.get_pk_constraint("sa_riders")
        assert primary["name"] == "sa_riders_pkey", primary
        assert primary["constrained_columns"] == ["id", "region"], primary
        unique = insp.get_unique_constraints("sa_riders")
        assert [(u["name"], u["column_names"]) for u in unique] == [
            ("sa_riders_email_key", ["email"])
        ], unique
        definition = insp.get_view_definition("sa_emails")
        assert "SELECT email FROM sa_riders" in definition, definition
        assert insp.has_table("sa_riders") and not insp.has_table("sa_missing")
        indexes = insp.get_indexes("sa_riders")
        assert [(i["name"], i["unique"], i["column_names"]) for i in indexes] == [
            ("sa_riders_email_key", True, ["email"])
        ], indexes
        assert insp.get_foreign_keys("sa_riders") == []
        assert insp.get_table_comment("sa_riders") == {"text": None}
        check_pandas(engine)
    finally:
        with engine.connect() as conn:
            conn.execute(text("DROP MATERIALIZED VIEW sa_per_region"))
            conn.execute(text("DROP VIEW sa_emails"))
            conn.execute(text("DROP TABLE sa_riders"))
            conn.commit()


def check_columns(insp):
    """Columns with their Postgres types, nullability (a primary key's
    columns are NOT NULL) and defaults, for a table and both view kinds."""
    def described(name):
        return [(c["name"], str(c["type"]), c["nullable"], c["default"]) for c in insp.get_columns(name)]

    assert described("sa_riders") == [
        ("id", "BIGINT", False, None),
        ("region", "TEXT", False, None),
        ("email", "TEXT", True, None),
        ("score", "DOUBLE PRECISION", True, None),
        ("seen_at", "TIMESTAMP", True, None),
    ], described("sa_riders")
    assert described("sa_emails") == [("email", "TEXT", True, None)], described("sa_emails")
    assert [c[:2] for c in described("sa_per_region")] == [("region", "TEXT"), ("n", "BIGINT")]


def check_pandas(engine):
    """pandas reflects the table through SQLAlchemy, then reads it."""
    frame = pandas.read_sql_table("sa_riders", engine)
    assert list(frame.columns) == ["id", "region", "email", "score", "seen_at"], frame.columns
    assert frame.to_dict("records") == [{
        "id": 1, "region": "north", "email": "a@example.com", "score": 1.5,
        "seen_at": pandas.Timestamp("2026-01-02 03:04:05"),
    }], frame.to_dict("records")
    counts = pandas.read_sql_table("sa_per_region", engine)
    assert counts.to_dict("records") == [{"region": "north", "n": 1}], counts


if __name__ == "__main__":
    main(sys.argv[1])
