#!/usr/bin/env python3
"""Window close to visible latency under concurrent writers (issue 12).

Starts a weir server on a fresh data directory with the table and keyed
TUMBLE 10 s view (EMIT ON WINDOW CLOSE) of bench/insert_clients.py. Writer
threads insert one-row statements into the current window; a closer thread
repeatedly inserts the row whose event time moves the watermark past the
current window's end, then queries the view for that window, and records
the time from sending the INSERT until the query returns the window's rows.
Event time is driven by the closer, so a window closes every step. Prints
the latency percentiles and checks every closed window was visible.

    python3 bench/window_close_latency.py --weir target/release/weir [--closes 300]
"""

import argparse
import os
import shutil
import tempfile
import threading
import time

import psycopg

from insert_clients import INSERT, SETUP, start

BASE_MS = 1_767_225_600_000
WINDOW_MS = 10_000


def connect(port):
    return psycopg.connect(f"host=127.0.0.1 port={port} user=weir dbname=weir", autocommit=True)


def writer(port, index, window, stop):
    """One-row INSERTs into whichever window is open."""
    with connect(port) as connection:
        cursor = connection.cursor()
        row = 0
        while not stop.is_set():
            at = BASE_MS + window[0] * WINDOW_MS + (row * 7) % 5_000
            cursor.execute(INSERT, (row % 1000, index, row, at))
            row += 1


def closer(port, window, closes, latencies):
    """Closes a window per step and waits until the view shows it."""
    with connect(port) as connection:
        cursor = connection.cursor()
        for _ in range(closes):
            current = window[0]
            # The watermark is 1 s behind the latest event: this row
            # moves it past the current window's end.
            at = BASE_MS + (current + 1) * WINDOW_MS + 1_001
            started = time.perf_counter()
            cursor.execute(INSERT, (1_000_000, -1, 0, at))
            inserted = time.perf_counter()
            window[0] = current + 1
            cursor.execute(
                "SELECT count(*) FROM per_auction WHERE window_start = to_timestamp_millis(%s::bigint)",
                (BASE_MS + current * WINDOW_MS,),
            )
            visible = cursor.fetchone()[0]
            latencies.append((time.perf_counter() - started, inserted - started))
            if visible == 0:
                raise RuntimeError(f"window {current} closed but not visible")
            time.sleep(0.01)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", required=True)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--closes", type=int, default=300)
    parser.add_argument("--port", type=int, default=5621)
    arguments = parser.parse_args()
    work = tempfile.mkdtemp(prefix="weir-close-")
    server = start(arguments.weir, arguments.port, os.path.join(work, "data"))
    latencies, window, stop = [], [0], threading.Event()
    try:
        with connect(arguments.port) as connection:
            for statement in SETUP:
                connection.execute(statement)
        writers = [
            threading.Thread(target=writer, args=(arguments.port, i, window, stop))
            for i in range(arguments.writers)
        ]
        for thread in writers:
            thread.start()
        time.sleep(0.5)
        closer(arguments.port, window, arguments.closes, latencies)
        stop.set()
        for thread in writers:
            thread.join()
    finally:
        stop.set()
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(latencies)} windows closed under {arguments.writers} writers, all visible")
    for name, column in [("close to visible (INSERT + SELECT)", 0), ("the closing INSERT", 1)]:
        values = sorted(latency[column] for latency in latencies)
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))] * 1000
        print(
            f"{name}: p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms, "
            f"max {values[-1] * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()
