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


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
