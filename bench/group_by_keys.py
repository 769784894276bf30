#!/usr/bin/env python3
"""A GROUP BY view over many keys (issue 50): INSERT time and memory as keys grow.

Starts a fresh weir server, creates `t (k BIGINT, v BIGINT)` and the view
`SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k` (emit on
update, the default), then runs `--inserts` INSERTs of `--keys-per-insert`
new keys each (`INSERT INTO t SELECT g, g FROM generate_series(..)`),
printing each one's time, the server's RSS after it, and the view's
operator state as `weir_catalog.materialized_views` reports it
(`state_memory_bytes`). At the end: the peak RSS (VmHWM), the first and
last INSERT times, and RSS per key.

    python3 bench/group_by_keys.py --weir /var/tmp/weir-target/release/weir \\
        --inserts 30 --keys-per-insert 100000

Only the Python standard library and psql are needed.
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from copy_memory import Server  # noqa: E402

VIEW = ("CREATE MATERIALIZED VIEW by_key AS "
        "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k")
STATE = ("SELECT state_memory_bytes, row_storage FROM weir_catalog.materialized_views "
         "WHERE view_name = 'by_key'")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", required=True, help="the weir binary (a release build)")
    parser.add_argument("--inserts", type=int, default=30)
    parser.add_argument("--keys-per-insert", type=int, default=100_000)
    parser.add_argument("--work-dir", default="/var/tmp/weir-bench-keys")
    parser.add_argument("--port", type=int, default=5493)
    args = parser.parse_args()

    shutil.rmtree(args.work_dir, ignore_errors=True)
    data_dir = os.path.join(args.work_dir, "data")
    os.makedirs(args.work_dir)
    server = Server(args.weir, data_dir, args.port)
    server.start()
    try:
        server.wait_ready()
        server.psql("CREATE TABLE t (k BIGINT, v BIGINT)", VIEW)
        print("insert  keys_total  seconds  rss_mb  state_mb  storage")
        times = []
        size = args.keys_per_insert
        for index in range(args.inserts):
            started = time.monotonic()
            server.psql(f"INSERT INTO t SELECT g, g FROM generate_series({index * size}, "
                        f"{(index + 1) * size - 1}) AS s(g)")
            elapsed = time.monotonic() - started
            times.append(elapsed)
            state, storage = server.psql(STATE).stdout.strip().split("|")
            rss_mb = server.status("VmRSS") / 1024
            print(f"{index + 1:6}  {(index + 1) * size:10}  {elapsed:7.2f}  {rss_mb:6.0f}  "
                  f"{int(state) / 2**20:8.1f}  {storage}", flush=True)
        keys = args.inserts * size
        peak_mb = server.status("VmHWM") / 1024
        rss_mb = server.status("VmRSS") / 1024
        print(f"keys {keys}: first INSERT {times[0]:.2f} s, last {times[-1]:.2f} s, "
              f"peak RSS {peak_mb:.0f} MB, RSS now {rss_mb:.0f} MB "
              f"({rss_mb * 2**20 / keys:.0f} bytes per key)")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
