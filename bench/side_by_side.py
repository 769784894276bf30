#!/usr/bin/env python3
"""weir, Apache Flink and DuckDB side by side on the same three queries.

The queries are issue 12's: Nexmark-shaped bids (bench/copy_memory.py's
generator, nothing late under the 4 s watermark delay) keyed by auction with
COUNT(*), SUM(price), COUNT(DISTINCT bidder) over TUMBLE 10 s, HOP 2 s/10 s
and SESSION 10 s. One run of this script:

1. checks that the three engines agree, on a smaller file (`--check-rows`):
   weir's view after `\\copy` and one sentinel row an hour later (which
   moves the watermark past every window), Flink's job into a CSV sink
   (a bounded source fires every window at its end), DuckDB's batch query
   on the same file; rows are compared as multisets, timestamps in
   microseconds (Flink's TIMESTAMP(3) to the millisecond);
2. times each engine on the big file (`--rows`): weir end to end (a fresh
   server, psql `\\copy`, bench/copy_memory.py), weir in process (`weir
   bench --scenario keyed`, no SQL text per row and no CSV), Flink in
   process (PyFlink's local MiniCluster reading the CSV file, job time
   without JVM start, bench/flink_windows.py) and DuckDB (the file loaded
   into memory first, then the query timed, as a batch engine is used);
3. prints one table with events/s, peak RSS and weir's ratio to each peer;
4. then the same three views emitting on update (weir's default: partial
   windows shown as they change) end to end and in process, against
   Flink's final-only figures (their rows are checked against DuckDB in
   step 1 too, after the sentinel).

    python3 bench/side_by_side.py --weir target/release/weir \\
        --flink-python /var/tmp/pyflink-venv/bin/python \\
        --duckdb-python /var/tmp/duckdb-venv/bin/python

The Flink and DuckDB interpreters are virtual environments with
`pip install apache-flink` (Java 11/17 on PATH) and `pip install duckdb`;
either may be left out with `--skip flink` / `--skip duckdb`.
"""

import argparse
import csv
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SCENARIOS = ["tumble", "hop", "session"]
SECOND_US = 1_000_000
GAP_US = 10 * SECOND_US

# DuckDB over `b (auction, bidder, price, ts)` with ts in microseconds since
# the epoch: the same windows as weir's and Flink's (a session takes rows at
# most the gap apart, window_end = last row + gap).
DUCKDB_QUERIES = {
    "tumble": """
        SELECT auction, ts // 10000000 * 10000000 AS ws, ws + 10000000 AS we,
               count(*) AS bids, sum(price) AS volume, count(DISTINCT bidder) AS bidders
        FROM b GROUP BY ALL""",
    "hop": """
        SELECT auction, (ts // 2000000 - i) * 2000000 AS ws, ws + 10000000 AS we,
               count(*) AS bids, sum(price) AS volume, count(DISTINCT bidder) AS bidders
        FROM b CROSS JOIN range(5) AS hops(i) GROUP BY ALL""",
    "session": """
        WITH marked AS (
            SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY auction ORDER BY ts) <= 10000000
                           THEN 0 ELSE 1 END AS opens
            FROM b),
        numbered AS (
            SELECT *, sum(opens) OVER (PARTITION BY auction ORDER BY ts
                                       ROWS UNBOUNDED PRECEDING) AS session
            FROM marked)
        SELECT auction, min(ts) AS ws, max(ts) + 10000000 AS we,
               count(*) AS bids, sum(price) AS volume, count(DISTINCT bidder) AS bidders
        FROM numbered GROUP BY auction, session""",
}


def duckdb_child(args):
    """Runs inside the DuckDB interpreter: loads the file, times each query
    (or writes its rows with --out-dir); prints JSON."""
    import duckdb

    connection = duckdb.connect()
    connection.execute(f"SET threads = {args.threads}")
    connection.execute(
        "CREATE TABLE bid AS SELECT * FROM read_csv(?, header = false, columns = "
        "{'auction': 'BIGINT', 'bidder': 'BIGINT', 'price': 'BIGINT', 'date_time': 'TIMESTAMP'})",
        [args.csv],
    )
    connection.execute(
        "CREATE VIEW b AS SELECT auction, bidder, price, epoch_us(date_time) AS ts FROM bid")
    results = {"duckdb": duckdb.__version__}
    for scenario in args.scenarios.split(","):
        query = DUCKDB_QUERIES[scenario]
        if args.out_dir:
            path = os.path.join(args.out_dir, f"{scenario}.csv")
            connection.execute(f"COPY ({query}) TO '{path}' (HEADER false)")
            continue
        started = time.monotonic()
        connection.execute(f"CREATE OR REPLACE TEMP TABLE result AS {query}")
        elapsed = time.monotonic() - started
        rows = connection.execute("SELECT count(*) FROM result").fetchone()[0]
        results[scenario] = {"query_s": elapsed, "result_rows": rows}
    from flink_windows import status_kb

    results["peak_rss_mb"] = status_kb(os.getpid(), "VmHWM") / 1024
    print(json.dumps(results), flush=True)


def run_duckdb(args, csv_path, out_dir=None):
    command = [args.duckdb_python, os.path.abspath(__file__), "--duckdb-child",
               "--csv", csv_path, "--scenarios", ",".join(args.scenario_list),
               "--threads", str(args.duckdb_threads)]
    if out_dir:
        command += ["--out-dir", out_dir]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"duckdb failed:\n{finished.stderr[-4000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def microseconds(text):
    """A timestamp as weir, Flink or DuckDB print it, or microseconds."""
    if isinstance(text, int):
        return text
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    stamp = datetime.datetime.fromisoformat(text.replace("T", " ").replace("Z", ""))
    stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return round(stamp.timestamp() * SECOND_US)


def normalized(rows, milliseconds=False):
    """Rows as (auction, start µs, end µs, bids, volume, bidders); with
    `milliseconds`, times truncated to the millisecond (Flink's precision)."""
    out = Counter()
    for row in rows:
        auction, start, end, bids, volume, bidders = row
        start, end = microseconds(start), microseconds(end)
        if milliseconds:
            start, end = start // 1000 * 1000, end // 1000 * 1000
        out[(int(auction), start, end, int(bids), int(float(volume)), int(bidders))] += 1
    return out


def read_csv_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            rows.extend(row for row in csv.reader(f) if row)
    return rows


def weir_rows(args, scenario, csv_path, port):
    import copy_memory

    work = tempfile.mkdtemp(prefix=f"weir-check-{scenario}-", dir=args.work_dir)
    server = copy_memory.Server(args.weir, os.path.join(work, "data"), port)
    try:
        server.start()
        server.wait_ready()
        server.psql(copy_memory.TABLE,
                    f"CREATE MATERIALIZED VIEW v AS {copy_memory.VIEWS[scenario]}")
        server.psql(f"\\copy bid FROM '{csv_path}' WITH (FORMAT csv)")
        # One bid an hour after the last moves the watermark past every window.
        server.psql("INSERT INTO bid SELECT -1 AS a, -1 AS b, 0 AS p, max(date_time) + INTERVAL '1' HOUR FROM bid")
        # weir has no COPY TO yet: psql's unaligned output, comma-separated.
        finished = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "weir", "-d", "weir", "-qAt",
             "-F", ",", "-v", "ON_ERROR_STOP=1", "-c",
             "SELECT auction, window_start, window_end, bids, volume, bidders FROM v "
             "WHERE auction >= 0"],
            capture_output=True, text=True, check=True)
        return [line.split(",") for line in finished.stdout.splitlines() if line]
    finally:
        if server.process and server.process.poll() is None:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


def flink_rows(args, scenario, csv_path):
    directory = tempfile.mkdtemp(prefix=f"flink-check-{scenario}-", dir=args.work_dir)
    try:
        command = [args.flink_python, os.path.join(HERE, "flink_windows.py"), "--child", scenario,
                   "--csv", csv_path, "--parallelism", str(args.flink_parallelism),
                   "--check-dir", directory]
        finished = subprocess.run(command, capture_output=True, text=True)
        if finished.returncode != 0:
            raise RuntimeError(f"flink {scenario} failed:\n{finished.stderr[-4000:]}")
        paths = [path for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True)
                 if os.path.isfile(path) and not os.path.basename(path).startswith(".")]
        return read_csv_rows(paths)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def difference(left, right):
    """How many rows are in one multiset and not the other, and an example."""
    only_left, only_right = left - right, right - left
    count = sum(only_left.values()) + sum(only_right.values())
    example = next(iter(only_left or only_right), None)
    return count, example


def check(args, csv_path):
    """Compares the engines' result rows on `csv_path`; returns lines."""
    lines = []
    duckdb_dir = None
    if "duckdb" not in args.skip:
        duckdb_dir = tempfile.mkdtemp(prefix="duckdb-check-", dir=args.work_dir)
        run_duckdb(args, csv_path, out_dir=duckdb_dir)
    final_rows = {}
    try:
        for offset, scenario in enumerate(args.checked_views):
            weir = normalized(weir_rows(args, scenario, csv_path, args.port + offset))
            line = f"{scenario}: weir {sum(weir.values())} rows"
            window = scenario.removesuffix("_update")
            if scenario.endswith("_update") and window in final_rows:
                # The view on update, every window past, against the same
                # view emitting on close (itself checked against Flink).
                count, example = difference(weir, final_rows[window])
                line += f"; same view on close {count} differ"
                line += f" (e.g. {example})" if count else ""
                args.disagreements += count
            else:
                final_rows[scenario] = weir
            if duckdb_dir:
                window = scenario.removesuffix("_update")
                duckdb = normalized(read_csv_rows([os.path.join(duckdb_dir, f"{window}.csv")]))
                count, example = difference(weir, duckdb)
                line += f"; DuckDB {sum(duckdb.values())} rows, {count} differ"
                line += f" (e.g. {example})" if count else ""
                args.disagreements += count
            if "flink" not in args.skip and not scenario.endswith("_update"):
                flink = normalized(flink_rows(args, scenario, csv_path), milliseconds=True)
                weir_ms = normalized(
                    [(a, s, e, b, v, d) for (a, s, e, b, v, d) in weir.elements()],
                    milliseconds=True)
                count, example = difference(weir_ms, flink)
                line += f"; Flink {sum(flink.values())} rows, {count} differ"
                line += f" (e.g. {example})" if count else ""
                args.disagreements += count
            print(line, file=sys.stderr, flush=True)
            lines.append(line)
    finally:
        if duckdb_dir:
            shutil.rmtree(duckdb_dir, ignore_errors=True)
    return lines


def weir_end_to_end(args, csv_path, suffix=""):
    import copy_memory

    results = {}
    options = argparse.Namespace(work_dir=args.work_dir, weir=args.weir, csv=csv_path,
                                 copies=1, settle_s=0.5)
    for offset, scenario in enumerate(args.scenario_list):
        view = scenario + suffix
        result = copy_memory.run_scenario(options, view, copy_memory.VIEWS[view],
                                          args.port + 10 + offset)
        results[scenario] = {"rows_per_s": result["rows_per_s"],
                             "peak_rss_mb": result["peak_rss_mb"]}
        print(f"weir end to end {view}: {results[scenario]}", file=sys.stderr, flush=True)
    return results


def weir_in_process(args, emit="close"):
    results = {}
    for scenario in args.scenario_list:
        command = [args.weir, "bench", "--scenario", f"keyed-{scenario}", "--rows", str(args.rows),
                   "--emit", emit]
        finished = subprocess.run(command, capture_output=True, text=True)
        if finished.returncode != 0:
            raise RuntimeError(f"weir bench failed:\n{finished.stderr[-4000:]}")
        for line in finished.stdout.splitlines():
            cells = line.split()
            if cells and cells[0] == f"keyed-{scenario}":
                results[scenario] = {"rows_per_s": float(cells[4])}
        print(f"weir in process {scenario} ({emit}): {results[scenario]}", file=sys.stderr,
              flush=True)
    return results


def flink_in_process(args, csv_path):
    results = {}
    command = [args.flink_python, os.path.join(HERE, "flink_windows.py"), "--csv", csv_path,
               "--parallelism", str(args.flink_parallelism),
               "--scenarios", ",".join(args.scenario_list)]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"flink failed:\n{finished.stderr[-4000:]}")
    for line in finished.stdout.splitlines():
        if line.startswith("Flink "):
            args.flink_version = line
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] in SCENARIOS:
            results[cells[0]] = {"rows_per_s": float(cells[3].replace(",", "")),
                                 "peak_rss_mb": float(cells[4])}
    print(f"flink: {results}", file=sys.stderr, flush=True)
    return results


def duckdb_batch(args, csv_path):
    measured = run_duckdb(args, csv_path)
    args.duckdb_version = measured["duckdb"]
    return {scenario: {"rows_per_s": args.rows / measured[scenario]["query_s"],
                       "peak_rss_mb": measured["peak_rss_mb"]}
            for scenario in args.scenario_list}


def rate(results, scenario):
    figure = results.get(scenario, {}).get("rows_per_s")
    return f"{figure:,.0f}" if figure else "-"


def memory(results, scenario):
    figure = results.get(scenario, {}).get("peak_rss_mb")
    return f"{figure:,.0f}" if figure else "-"


def ratio(numerator, denominator, scenario):
    top = numerator.get(scenario, {}).get("rows_per_s")
    bottom = denominator.get(scenario, {}).get("rows_per_s")
    return f"{top / bottom:.2f}x" if top and bottom else "-"


def report_updates(args, e2e, inproc, flink):
    """The views that emit on update (the default) against Flink's final-only job."""
    print("\nEmit on update (weir's default; Flink's job emits final windows only):\n")
    print("| query | weir COPY end to end | weir in process | weir e2e / Flink "
          "| weir in-process / Flink | RSS MB weir / Flink |")
    print("|---|---:|---:|---:|---:|---|")
    for scenario in args.scenario_list:
        print(f"| {scenario} | {rate(e2e, scenario)} | {rate(inproc, scenario)} "
              f"| {ratio(e2e, flink, scenario)} | {ratio(inproc, flink, scenario)} "
              f"| {memory(e2e, scenario)} / {memory(flink, scenario)} |")


def report(args, e2e, inproc, flink, duckdb, check_lines):
    print(f"{args.rows:,} bids, {os.cpu_count()} cores; "
          f"{getattr(args, 'flink_version', 'Flink skipped')}; "
          f"DuckDB {getattr(args, 'duckdb_version', 'skipped')} ({args.duckdb_threads} threads)\n")
    print("| query | weir COPY end to end | weir in process | Flink in process | DuckDB batch "
          "| weir e2e / Flink | weir in-process / Flink | weir in-process / DuckDB "
          "| RSS MB weir / Flink / DuckDB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for scenario in args.scenario_list:
        print(f"| {scenario} | {rate(e2e, scenario)} | {rate(inproc, scenario)} "
              f"| {rate(flink, scenario)} | {rate(duckdb, scenario)} "
              f"| {ratio(e2e, flink, scenario)} | {ratio(inproc, flink, scenario)} "
              f"| {ratio(inproc, duckdb, scenario)} "
              f"| {memory(e2e, scenario)} / {memory(flink, scenario)} / {memory(duckdb, scenario)} |")
    print(f"\nAgreement on {args.check_rows:,} bids:")
    for line in check_lines:
        print(f"- {line}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", help="the weir binary (a release build)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--check-rows", type=int, default=1_000_000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--flink-python", default="/var/tmp/pyflink-venv/bin/python")
    parser.add_argument("--flink-parallelism", type=int, default=2)
    parser.add_argument("--duckdb-python", default="/var/tmp/duckdb-venv/bin/python")
    parser.add_argument("--duckdb-threads", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: flink, duckdb, check, updates (the views that emit on "
                             "update, run after the rest)")
    parser.add_argument("--work-dir", default="/var/tmp/weir-bench")
    parser.add_argument("--port", type=int, default=5531)
    parser.add_argument("--duckdb-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.duckdb_child:
        return duckdb_child(args)
    if not args.weir:
        parser.error("--weir is required")
    import copy_memory

    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    args.disagreements = 0
    updates = "updates" not in args.skip
    args.checked_views = args.scenario_list + (
        [scenario + "_update" for scenario in args.scenario_list] if updates else [])
    os.makedirs(args.work_dir, exist_ok=True)
    big = os.path.join(args.work_dir, f"bids-{args.rows}.csv")
    small = os.path.join(args.work_dir, f"bids-{args.check_rows}.csv")
    copy_memory.generate(big, args.rows)
    copy_memory.generate(small, args.check_rows)
    check_lines = [] if "check" in args.skip else check(args, small)
    e2e = weir_end_to_end(args, big)
    inproc = weir_in_process(args)
    flink = {} if "flink" in args.skip else flink_in_process(args, big)
    duckdb = {} if "duckdb" in args.skip else duckdb_batch(args, big)
    report(args, e2e, inproc, flink, duckdb, check_lines)
    if updates:
        e2e_updates = weir_end_to_end(args, big, suffix="_update")
        inproc_updates = weir_in_process(args, emit="update")
        report_updates(args, e2e_updates, inproc_updates, flink)
    if args.disagreements:
        print(f"\nDISAGREEMENT: {args.disagreements} rows differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
