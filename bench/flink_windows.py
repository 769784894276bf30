#!/usr/bin/env python3
"""Apache Flink SQL (local, PyFlink) on the windowed workload of copy_memory.py.

For each scenario (tumble, hop, session) a fresh Python subprocess starts a
local Flink (PyFlink's gateway JVM running a MiniCluster) in *streaming*
mode, declares a filesystem CSV source table over the bids file written by
bench/copy_memory.py (auction, bidder, price, date_time with
`WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND`), and inserts
the same view as weir's, keyed by auction with COUNT(*), SUM(price),
COUNT(DISTINCT bidder) over a window TVF (TUMBLE 10 s, HOP 2 s/10 s,
SESSION 10 s gap partitioned by auction), into a 'blackhole' sink. The job
is bounded (the file ends, the source emits the final watermark, all windows
fire) and the child waits for it to finish.

Reported per scenario: job seconds (from submitting the INSERT to its
completion, JVM start-up excluded), rows/s (input rows / job seconds) and the
peak RSS (max VmHWM of the java processes descending from the subprocess,
sampled every 100 ms). `--check` runs each query once more into a CSV
filesystem sink and reports window rows and SUM(bids) (which must equal the
input rows for tumble and session, and 5x it for hop when nothing is late).

    /var/tmp/pyflink-venv/bin/python bench/flink_windows.py \\
        --csv /var/tmp/weir-bench/bids-10000000.csv --parallelism 2

`--scenarios nexmark-q0,nexmark-q1,nexmark-q2,nexmark-q5,nexmark-q7,nexmark-q11`
runs the Nexmark queries that read bids only, as `weir bench --scenario
nexmark` does (the q5 and q7 joins of aggregates as Flink's regular joins).

Needs only the Python standard library and `pip install apache-flink`
(Java 11/17 on PATH). JVM options can be given with --jvm-args (passed to
PyFlink as JVM_ARGS, e.g. "-Xmx4g"); by default the JVM picks its heap.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SOURCE = """
CREATE TABLE bid (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    date_time TIMESTAMP(3),
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    'connector' = 'filesystem',
    'path' = '{path}',
    'format' = 'csv'
)
"""
AGGREGATES = "COUNT(*) AS bids, SUM(price) AS volume, COUNT(DISTINCT bidder) AS bidders"
WINDOWS = {
    "tumble": "TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)",
    "hop": "HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
    "session": "SESSION(TABLE bid PARTITION BY auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)",
}
SINK_COLUMNS = (
    "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
    "bids BIGINT, volume BIGINT, bidders BIGINT"
)


# The Nexmark queries that read bids only, as weir's `bench --scenario
# nexmark` runs them (RisingWave's text in Flink's window TVF spelling),
# each with its sink's columns.
NEXMARK = {
    "nexmark-q0": ("SELECT auction, bidder, price, date_time FROM bid",
                   "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)"),
    "nexmark-q1": ("SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
                   "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), date_time TIMESTAMP(3)"),
    "nexmark-q2": ("SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
                   "auction BIGINT, price BIGINT"),
    "nexmark-q5": (
        "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT auction, count(*) AS num, "
        "window_start AS starttime FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), "
        "INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, auction) AS AuctionBids "
        "JOIN (SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM (SELECT count(*) AS num, "
        "window_start AS starttime_c FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), "
        "INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY auction, window_start) AS CountBids "
        "GROUP BY CountBids.starttime_c) AS MaxBids "
        "ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn",
        "auction BIGINT, num BIGINT"),
    "nexmark-q7": (
        "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) "
        "AS maxprice, window_end AS date_time FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), "
        "INTERVAL '10' SECOND)) GROUP BY window_end) B1 ON B.price = B1.maxprice "
        "WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
        "auction BIGINT, price BIGINT, bidder BIGINT, date_time TIMESTAMP(3)"),
    "nexmark-q11": (
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime "
        "FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), "
        "INTERVAL '10' SECOND)) GROUP BY bidder, window_start, window_end",
        "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)"),
    # Not Nexmark: an OVER window over a ROWS frame (each bid with the
    # average of its auction's last 11 bids by time), which Flink runs on
    # append-only input in event-time order.
    "over-rows10": (
        "SELECT auction, price, AVG(price) OVER (PARTITION BY auction ORDER BY date_time "
        "ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS recent FROM bid",
        "auction BIGINT, price BIGINT, recent BIGINT"),
}


def query(scenario):
    if scenario in NEXMARK:
        return NEXMARK[scenario][0]
    return (
        f"SELECT auction, window_start, window_end, {AGGREGATES} "
        f"FROM {WINDOWS[scenario]} GROUP BY auction, window_start, window_end"
    )


def sink_columns(scenario):
    return NEXMARK[scenario][1] if scenario in NEXMARK else SINK_COLUMNS


def child(args):
    """Runs one job inside this process (and its gateway JVM); prints JSON."""
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.version import __version__

    settings = EnvironmentSettings.in_streaming_mode()
    table_env = TableEnvironment.create(settings)
    config = table_env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("pipeline.name", f"weir-bench-{args.child}")
    table_env.execute_sql(SOURCE.format(path=os.path.abspath(args.csv)))
    if args.check_dir:
        sink = (
            f"CREATE TABLE out_sink ({sink_columns(args.child)}) WITH ('connector' = 'filesystem', "
            f"'path' = '{args.check_dir}', 'format' = 'csv')"
        )
    else:
        sink = f"CREATE TABLE out_sink ({sink_columns(args.child)}) WITH ('connector' = 'blackhole')"
    table_env.execute_sql(sink)
    started = time.monotonic()
    result = table_env.execute_sql(f"INSERT INTO out_sink {query(args.child)}")
    result.wait()
    job_s = time.monotonic() - started
    print(json.dumps({"job_s": job_s, "flink": __version__}), flush=True)


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    found, stack = [], [pid]
    while stack:
        for kid in children.get(stack.pop(), []):
            found.append(kid)
            stack.append(kid)
    return found


def status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def communicate_sampling_java(process):
    """(stdout, stderr, each java descendant's peak RSS in kB by pid) of
    `process`, sampled every 100 ms while it runs."""
    peaks = {}

    def sample():
        while process.poll() is None:
            for pid in descendants(process.pid):
                if comm(pid) == "java":
                    peaks[pid] = max(peaks.get(pid, 0), status_kb(pid, "VmHWM"))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    sampler.join()
    return out, err, peaks


def run_child(args, scenario, check_dir=None):
    command = [sys.executable, os.path.abspath(__file__), "--child", scenario,
               "--csv", args.csv, "--parallelism", str(args.parallelism)]
    if check_dir:
        command += ["--check-dir", check_dir]
    env = dict(os.environ)
    if args.jvm_args:
        env["JVM_ARGS"] = args.jvm_args
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    out, err, peaks = communicate_sampling_java(process)
    total_s = time.monotonic() - started
    if process.returncode != 0:
        raise RuntimeError(f"{scenario} failed ({process.returncode}):\n{err[-4000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["total_s"] = total_s
    result["peak_rss_mb"] = max(peaks.values(), default=0) / 1024
    result["java_processes"] = len(peaks)
    return result


def check(args, scenario):
    directory = tempfile.mkdtemp(prefix=f"flink-check-{scenario}-")
    try:
        run_child(args, scenario, check_dir=directory)
        windows = bids = 0
        for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
            if os.path.isfile(path) and not os.path.basename(path).startswith("."):
                with open(path) as f:
                    for line in f:
                        windows += 1
                        bids += int(line.split(",")[3])
        return windows, bids
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def count_rows(path):
    marker = path + ".rows"
    if os.path.exists(marker):
        with open(marker) as f:
            return int(f.read())
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default="/var/tmp/weir-bench/bids-10000000.csv")
    parser.add_argument("--scenarios", default="tumble,hop,session")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--jvm-args", default="")
    parser.add_argument("--check", action="store_true",
                        help="also count window rows and SUM(bids) via a CSV sink")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--check-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    rows = count_rows(args.csv)
    table = ["| scenario | rows | job_s | rows_per_s | peak_rss_mb |",
             "|---|---:|---:|---:|---:|"]
    notes, version = [], "?"
    for scenario in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
        result = run_child(args, scenario)
        version = result["flink"]
        table.append(f"| {scenario} | {rows} | {result['job_s']:.1f} | "
                     f"{rows / result['job_s']:,.0f} | {result['peak_rss_mb']:.0f} |")
        notes.append(f"{scenario}: subprocess total {result['total_s']:.1f} s, "
                     f"{result['java_processes']} java process(es)")
        print(table[-1], file=sys.stderr, flush=True)
        if args.check:
            windows, bids = check(args, scenario)
            notes.append(f"{scenario} check: {windows} window rows, SUM(bids) = {bids}")
            print(notes[-1], file=sys.stderr, flush=True)
    print(f"Flink {version}, streaming mode, parallelism {args.parallelism}, "
          f"JVM_ARGS={args.jvm_args or '(default)'}\n")
    print("\n".join(table))
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
