#!/usr/bin/env python3
"""Single-row INSERTs from concurrent clients over pgwire (issue 12).

Starts a weir server on a fresh data directory, creates a watermarked table
with a keyed TUMBLE view over it, and has 1, 8 and 32 clients (threads, one
psycopg connection each, autocommit) insert one row per statement for a fixed
time. Prints statements and rows per second and latency percentiles per
client count. `--rows-per-insert N` makes each statement a VALUES list of N
rows.

    python3 bench/insert_clients.py --weir target/release/weir [--seconds 10]
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg

SETUP = [
    "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP, "
    "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) APPEND ONLY",
    "CREATE MATERIALIZED VIEW per_auction AS SELECT auction, window_start, count(*) AS bids, "
    "sum(price) AS total FROM TUMBLE(bid, ts, INTERVAL '10' SECOND) "
    "GROUP BY auction, window_start EMIT ON WINDOW CLOSE",
]
INSERT = "INSERT INTO bid VALUES (%s, %s, %s, to_timestamp_millis(%s::bigint))"
TUPLE = "(%s, %s, %s, to_timestamp_millis(%s::bigint))"


def insert_sql(rows_per_insert):
    """One statement of `rows_per_insert` rows (a multi-row VALUES list)."""
    return "INSERT INTO bid VALUES " + ", ".join([TUPLE] * rows_per_insert)


def start(weir, port, data_dir):
    log = open(os.path.join(os.path.dirname(data_dir), "server.log"), "w")
    process = subprocess.Popen(
        [weir, "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir],
        stdout=log, stderr=log,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            psycopg.connect(f"host=127.0.0.1 port={port} user=weir dbname=weir").close()
            return process
        except psycopg.OperationalError:
            time.sleep(0.05)
    raise RuntimeError("weir did not start")


def client(port, index, stop_at, latencies, counter, rows_per_insert=1):
    connection = psycopg.connect(
        f"host=127.0.0.1 port={port} user=weir dbname=weir", autocommit=True
    )
    cursor = connection.cursor()
    sql = insert_sql(rows_per_insert)
    row = 0
    base_ms = 1_767_225_600_000
    own = []
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        # Event time follows the wall clock, so windows close as it runs.
        at = base_ms + int(time.time() * 1000) % 86_400_000
        values = []
        for offset in range(rows_per_insert):
            values += [(row + offset) % 1000, index, row + offset, at]
        cursor.execute(sql, values)
        own.append(time.perf_counter() - started)
        row += rows_per_insert
    latencies.extend(own)
    counter.append(row)
    connection.close()


def run(port, clients, seconds, rows_per_insert=1):
    latencies, counts = [], []
    stop_at = time.monotonic() + seconds
    threads = [
        threading.Thread(
            target=client, args=(port, i, stop_at, latencies, counts, rows_per_insert)
        )
        for i in range(clients)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    return {
        "clients": clients,
        "statements_per_s": round(len(latencies) / elapsed),
        "rows_per_s": round(sum(counts) / elapsed),
        "p50_ms": round(pick(0.50), 2),
        "p99_ms": round(pick(0.99), 2),
        "max_ms": round(latencies[-1] * 1000, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", required=True)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--port", type=int, default=5620)
    parser.add_argument("--no-view", action="store_true")
    parser.add_argument(
        "--rows-per-insert", type=int, default=1, help="rows in each INSERT's VALUES list"
    )
    arguments = parser.parse_args()
    work = tempfile.mkdtemp(prefix="weir-inserts-")
    data_dir = os.path.join(work, "data")
    server = start(arguments.weir, arguments.port, data_dir)
    try:
        with psycopg.connect(
            f"host=127.0.0.1 port={arguments.port} user=weir dbname=weir", autocommit=True
        ) as connection:
            for statement in SETUP[: 1 if arguments.no_view else 2]:
                connection.execute(statement)
        results = [
            run(arguments.port, int(clients), arguments.seconds, arguments.rows_per_insert)
            for clients in arguments.clients.split(",")
        ]
        with psycopg.connect(
            f"host=127.0.0.1 port={arguments.port} user=weir dbname=weir", autocommit=True
        ) as connection:
            # The last 100 checkpoints: how long writers waited for each
            # (the snapshot) and how long each took until durable.
            checkpoints = connection.execute(
                "SELECT count(*), max(writers_blocked_us), "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY writers_blocked_us), "
                "max(duration_us) FROM weir_catalog.checkpoints"
            ).fetchone()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    keys = list(results[0].keys())
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for result in results:
        print("| " + " | ".join(str(result[key]) for key in keys) + " |")
    count, blocked_max, blocked_p99, duration_max = checkpoints
    print(
        f"checkpoints (last {count}): writers blocked max {blocked_max} us, "
        f"p99 {blocked_p99:.0f} us; longest until durable {duration_max} us"
    )


if __name__ == "__main__":
    main()
