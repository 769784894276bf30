#!/usr/bin/env python3
"""Peak memory, COPY ingest rate and restart time of a weir server (issue 11).

Generates Nexmark-shaped bids (deterministic), then for each scenario starts
a fresh server, creates the `bid` table (and a view keyed by auction with
COUNT(*), SUM(price), COUNT(DISTINCT bidder) over TUMBLE 10 s, HOP 2 s/10 s
or SESSION 10 s, EMIT ON WINDOW CLOSE), loads the bids with psql's
`\\copy bid FROM 'bids.csv' WITH (FORMAT csv)`, and reports the server's peak
RSS (VmHWM), rows/s, and the time from a kill -9 to a server that answers a
query on the view, killed once the first checkpoint after the load is
done (`checkpoint_wait_s`, from the end of the COPY; `rows_replayed` says
what recovery replayed). `--history N` also loads the file N times into a table
without views and times a restart with that much history.

    python3 bench/copy_memory.py --weir /var/tmp/weir-target/release/weir \\
        --rows 10000000 --history 5

Only the Python standard library and psql are needed.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

TABLE = (
    "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, "
    "date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) "
    "APPEND ONLY"
)
AGGREGATES = "COUNT(*) AS bids, SUM(price) AS volume, COUNT(DISTINCT bidder) AS bidders"
VIEWS = {
    "none": None,
    "tumble": (
        f"SELECT auction, window_start, window_end, {AGGREGATES} "
        "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) "
        "GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE"
    ),
    "hop": (
        f"SELECT auction, window_start, window_end, {AGGREGATES} "
        "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
        "GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE"
    ),
    # The tumble view publishing partial windows every second of
    # processing time (EMIT EVERY: the row-level aggregate, not the
    # vectorised one).
    "tumble_every": (
        f"SELECT auction, window_start, window_end, {AGGREGATES} "
        "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) "
        "GROUP BY auction, window_start, window_end "
        "EMIT ON WINDOW CLOSE AND EVERY INTERVAL '1' SECOND"
    ),
    "session": (
        f"SELECT auction, window_start, window_end, {AGGREGATES} "
        "FROM SESSION(bid, date_time, INTERVAL '10' SECOND) "
        "GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE"
    ),
}
# The same views emitting on update (the default): partial windows shown
# as they change.
for _name in ("tumble", "hop", "session"):
    VIEWS[f"{_name}_update"] = VIEWS[_name].replace(" EMIT ON WINDOW CLOSE", "")


def generate(path, rows, seed=2024):
    """Bids at 10,000 events/s of event time, 3 new auctions and 1 new
    person per 50 events (Nexmark's proportions), bids on recent auctions
    (hot ones more often), timestamps up to 2 s out of order."""
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path + ".rows") as marker:
            if int(marker.read()) == rows:
                return
    rng = random.Random(seed)
    start_ns = 1_700_000_000 * 10**9
    step_ns = 100_000
    with open(path, "w") as out:
        lines = []
        for i in range(rows):
            auctions = 1000 + i * 3 // 50
            persons = 1000 + i // 50
            if rng.random() < 0.5:
                auction = auctions - 1 - rng.randrange(100)
            else:
                auction = auctions - 1 - rng.randrange(1000)
            bidder = persons - 1 - rng.randrange(1000 if rng.random() < 0.7 else persons)
            price = rng.randrange(100, 100_000)
            event_ns = start_ns + i * step_ns - rng.randrange(2_000_000_000 if rng.random() < 0.01 else 50_000_000)
            seconds, nanos = divmod(event_ns, 10**9)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
            lines.append(f"{auction},{bidder},{price},{stamp}.{nanos // 1000:06d}\n")
            if len(lines) == 100_000:
                out.writelines(lines)
                lines.clear()
        out.writelines(lines)
    with open(path + ".rows", "w") as marker:
        marker.write(str(rows))


class Server:
    def __init__(self, weir, data_dir, port):
        self.weir, self.data_dir, self.port = weir, data_dir, port
        self.process = None
        self.peak_sampled_kb = 0

    def start(self):
        started = time.monotonic()
        log = open(os.path.join(os.path.dirname(self.data_dir), f"server-{self.port}.log"), "a")
        self.process = subprocess.Popen(
            [self.weir, "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir],
            stdout=log, stderr=log,
        )
        threading.Thread(target=self._sample, daemon=True).start()
        return started

    def _sample(self):
        process = self.process
        while process.poll() is None:
            self.peak_sampled_kb = max(self.peak_sampled_kb, self.status("VmRSS"))
            time.sleep(0.1)

    def status(self, field):
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def psql(self, *commands, check=True):
        arguments = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "weir",
                     "-d", "weir", "-v", "ON_ERROR_STOP=1", "-qAt"]
        for command in commands:
            arguments += ["-c", command]
        result = subprocess.run(arguments, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise RuntimeError(f"psql failed: {result.stderr.strip()}")
        return result

    def wait_ready(self, query="SELECT 1", timeout_s=600):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.psql(query, check=False).returncode == 0:
                return
            time.sleep(0.02)
        raise RuntimeError(f"server on port {self.port} not ready")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


EPOCH = "SELECT coalesce(max(epoch), 0) FROM weir_catalog.checkpoints"


def run_scenario(args, name, view, port):
    data_dir = os.path.join(args.work_dir, name, "data")
    shutil.rmtree(os.path.dirname(data_dir), ignore_errors=True)
    os.makedirs(os.path.dirname(data_dir))
    server = Server(args.weir, data_dir, port)
    try:
        return measure(args, server, view)
    finally:
        if server.process.poll() is None:
            server.kill()


def measure(args, server, view):
    server.start()
    server.wait_ready()
    setup = [TABLE] + ([f"CREATE MATERIALIZED VIEW v AS {view}"] if view else [])
    server.psql(*setup)
    last_epoch = server.psql(EPOCH).stdout.strip()
    started = time.monotonic()
    for _ in range(args.copies if view is None else 1):
        server.psql(f"\\copy bid FROM '{args.csv}' WITH (FORMAT csv)")
    elapsed = time.monotonic() - started
    rows = int(server.psql("SELECT count(*) FROM bid").stdout)
    view_rows = int(server.psql("SELECT count(*) FROM v").stdout) if view else None
    peak_kb = server.status("VmHWM")
    # The checkpoint coordinator waits for the COPY, so the first checkpoint
    # after it covers the load; a table without views checkpoints nothing.
    waited = time.monotonic()
    while view and server.psql(EPOCH).stdout.strip() == last_epoch:
        time.sleep(0.05)
    checkpoint_s = time.monotonic() - waited
    time.sleep(args.settle_s)
    server.kill()
    restarted = server.start()
    # weir listens only once recovery is done, so the first answer is ready.
    server.wait_ready()
    restart_s = time.monotonic() - restarted
    queried = time.monotonic()
    server.psql("SELECT count(*) FROM v" if view else "SELECT count(*) FROM bid")
    count_s = time.monotonic() - queried
    replayed = server.psql("SELECT rows_replayed FROM weir_catalog.recovery").stdout.strip()
    server.kill()
    return {
        "scenario": "",
        "rows": rows,
        "view_rows": view_rows,
        "copy_s": round(elapsed, 1),
        "rows_per_s": int(rows / elapsed),
        "peak_rss_mb": peak_kb // 1024,
        "checkpoint_wait_s": round(checkpoint_s, 2),
        "restart_s": round(restart_s, 2),
        "rows_replayed": int(replayed or 0),
        "count_after_restart_s": round(count_s, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", required=True, help="the weir binary (a release build)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--scenarios", default="none,tumble,hop,session")
    parser.add_argument("--history", type=int, default=0,
                        help="also load the file this many times into a table and time a restart")
    parser.add_argument("--work-dir", default="/var/tmp/weir-bench")
    parser.add_argument("--port", type=int, default=5491)
    parser.add_argument("--settle-s", type=float, default=0.5)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    args.csv = os.path.join(args.work_dir, f"bids-{args.rows}.csv")
    generated = time.monotonic()
    generate(args.csv, args.rows)
    print(f"# bids: {args.csv} ({time.monotonic() - generated:.0f} s to make)", file=sys.stderr)
    results = []
    for offset, name in enumerate(args.scenarios.split(",")):
        args.copies = 1
        results.append(run_scenario(args, name, VIEWS[name], args.port + offset))
        results[-1]["scenario"] = name
        print(results[-1], file=sys.stderr)
    if args.history:
        args.copies = args.history
        result = run_scenario(args, "none", None, args.port + 10)
        result["scenario"] = f"history x{args.history}"
        results.append(result)
    columns = ["scenario", "rows", "view_rows", "copy_s", "rows_per_s", "peak_rss_mb",
               "checkpoint_wait_s", "restart_s", "rows_replayed", "count_after_restart_s"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for result in results:
        print("| " + " | ".join(str(result[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()
