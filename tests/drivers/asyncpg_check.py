"""asyncpg against weir: prepared statements with typed parameters and
binary results. Usage: asyncpg_check.py <url>"""
import asyncio
import datetime
import sys

import asyncpg


async def main(url):
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS asyncpg_t")
        await conn.execute(
            "CREATE TABLE asyncpg_t (i INT, b BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP)"
        )
        ts = datetime.datetime(2026, 1, 2, 3, 4, 5, 250000)
        insert = await conn.prepare("INSERT INTO asyncpg_t VALUES ($1, $2, $3, $4, $5)")
        await insert.fetch(1, 2**40, 1.5, "one", ts)
        await insert.fetch(2, -5, -0.25, "two", ts)
        await insert.fetch(None, None, None, None, None)

        select = await conn.prepare("SELECT i, b, f, t, ts FROM asyncpg_t WHERE i = $1")
        row = await select.fetchrow(1)
        assert tuple(row) == (1, 2**40, 1.5, "one", ts), row
        assert await conn.fetchval(
            "SELECT count(*) FROM asyncpg_t WHERE ts >= $1 AND f > $2", ts, -1.0
        ) == 2
        rows = await conn.fetch("SELECT i, t FROM asyncpg_t WHERE i IS NULL")
        assert [tuple(r) for r in rows] == [(None, None)]

        await check_parameter_types(conn)

        try:
            await conn.fetch("SELECT * FROM asyncpg_missing")
            raise AssertionError("expected an error")
        except asyncpg.exceptions.UndefinedTableError as error:
            assert error.sqlstate == "42P01"
        assert await conn.fetchval("SELECT 1") == 1
        await conn.execute("DROP TABLE asyncpg_t")
    finally:
        await conn.close()
    print("asyncpg ok")


async def described(conn, sql):
    statement = await conn.prepare(sql)
    return [parameter.name for parameter in statement.get_parameters()]


async def check_parameter_types(conn):
    """asyncpg encodes each value by the type ParameterDescription reports,
    so the types must be inferred as Postgres infers them."""
    # casts
    assert await described(conn, "SELECT $1::bigint + 1") == ["int8"]
    assert await conn.fetchval("SELECT $1::bigint + 1", 41) == 42
    assert await conn.fetchval("SELECT $1::double precision", 1.5) == 1.5
    day = datetime.date(2026, 3, 4)
    assert await conn.fetchval("SELECT $1::date", day) == day
    assert await conn.fetchval("SELECT $1::date", None) is None
    # operators and functions
    assert await described(conn, "SELECT $1 + 1") == ["int8"]
    assert await conn.fetchval("SELECT $1 + 1", 41) == 42
    assert await described(conn, "SELECT lpad($1, $2)") == ["text", "int8"]
    assert await conn.fetchval("SELECT lpad($1, $2)", "x", 3) == "  x"
    # comparisons with typed columns, INSERT targets
    assert await described(conn, "SELECT t FROM asyncpg_t WHERE b = $1 AND f > $2") == [
        "int8",
        "float8",
    ]
    assert await conn.fetchval("SELECT t FROM asyncpg_t WHERE b = $1", 2**40) == "one"
    assert await described(conn, "INSERT INTO asyncpg_t (t, i, ts) VALUES ($1, $2, $3)") == [
        "text",
        "int4",
        "timestamp",
    ]
    # nothing to infer from: text, as the value's own type would be unknown
    assert await described(conn, "SELECT $1") == ["text"]
    assert await conn.fetchval("SELECT $1", "plain") == "plain"
    # NULLs of every inferred type
    row = await conn.fetchrow(
        "SELECT $1::int, $2::bigint, $3::double precision, $4::text, $5::timestamp, $6::bool",
        None, None, None, None, None, None,
    )
    assert tuple(row) == (None,) * 6, row


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
