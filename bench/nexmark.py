#!/usr/bin/env python3
"""The Nexmark queries in weir and Apache Flink side by side, from the same files.

One run of this script:

1. generates Nexmark-shaped person, auction and bid CSV files (1 : 3 : 46
   events, 10,000 events/s of event time, hot sellers, auctions and
   bidders, timestamps up to 2 s out of order, nothing later than the 4 s
   watermark delay), once for the timed run (`--events`) and once for the
   agreement check (`--check-events`);
2. checks, on the small files, that each query's weir view equals the same
   query run as a batch in weir and Flink's final result (its changelog
   collected and applied: +I/+U add a row, -U/-D take one away); numbers
   are compared rounded down to integers (Flink's AVG of BIGINT is a
   BIGINT, Postgres's a numeric) and timestamps to the millisecond;
3. times each query on the big files: weir end to end (a fresh server per
   query, the three tables and the view created, then psql `\\copy` of the
   person, auction and bid files, the view maintained as rows come) and
   Flink (PyFlink's local MiniCluster, streaming mode, the query into a
   blackhole sink over filesystem CSV sources; job time without JVM
   start), with the peak RSS of each;
4. prints one table: events/s, ratio, peak RSS, and what each engine did
   not run.

The queries are RisingWave's Nexmark text (weir's spelling of the window
functions; Flink's window TVFs), without q10 (a file sink), q12
(processing-time windows), q13 (a side input file) and q14 (a UDF).

    python3 bench/nexmark.py --weir /var/tmp/weir-target/release/weir \\
        --events 10000000 --check-events 100000

Needs psql, and for Flink `pip install apache-flink` in `--flink-python`'s
environment (Java 11/17 on PATH); `--skip flink` leaves Flink out.
"""

import argparse
import datetime
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WEIR_TABLES = """
CREATE TABLE person (id BIGINT, name TEXT, email_address TEXT, credit_card TEXT,
    city TEXT, state TEXT, date_time TIMESTAMP, extra TEXT,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY;
CREATE TABLE auction (id BIGINT, item_name TEXT, description TEXT, initial_bid BIGINT,
    reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT,
    category BIGINT, extra TEXT,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY;
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT,
    date_time TIMESTAMP, extra TEXT,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY;
"""

FLINK_TABLES = {
    "person": "id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, "
              "state STRING, date_time TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
               "reserve BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, "
               "category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
           "date_time TIMESTAMP(3), extra STRING",
}


Q5 = """
SELECT AuctionBids.auction, AuctionBids.num FROM (
    SELECT auction, count(*) AS num, window_start AS starttime
    FROM {hop[bid, 2, 10]} GROUP BY window_start, auction) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM (
        SELECT count(*) AS num, window_start AS starttime_c
        FROM {hop[bid, 2, 10]} GROUP BY auction, window_start) AS CountBids
    GROUP BY CountBids.starttime_c) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn
"""


def queries():
    """name -> (weir SQL, Flink SQL)."""
    same = lambda sql: (sql, sql)  # noqa: E731
    found = {
        "q0": same("SELECT auction, bidder, price, date_time FROM bid"),
        "q1": same("SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid"),
        "q2": same("SELECT auction, price FROM bid WHERE auction = 1007 OR auction = 1020 "
                   "OR auction = 2001 OR auction = 2019 OR auction = 2087"),
        "q3": same("SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P "
                   "ON A.seller = P.id WHERE A.category = 10 "
                   "AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"),
        "q4": (
            "SELECT Q.category, AVG(Q.final) AS avg FROM (SELECT MAX(B.price) AS final, "
            "A.category FROM auction A, bid B WHERE A.id = B.auction AND B.date_time "
            "BETWEEN A.date_time AND A.expires GROUP BY A.id, A.category) Q "
            "GROUP BY Q.category",
            # FINAL and AVG are reserved words in Flink's parser.
            "SELECT Q.category, AVG(Q.`final`) AS `avg` FROM (SELECT MAX(B.price) AS `final`, "
            "A.category FROM auction A, bid B WHERE A.id = B.auction AND B.date_time "
            "BETWEEN A.date_time AND A.expires GROUP BY A.id, A.category) Q "
            "GROUP BY Q.category"),
        "q7": (
            "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) "
            "AS maxprice, window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) "
            "GROUP BY window_end) B1 ON B.price = B1.maxprice "
            "WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
            "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) "
            "AS maxprice, window_end AS date_time FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), "
            "INTERVAL '10' SECOND)) GROUP BY window_start, window_end) B1 ON B.price = B1.maxprice "
            "WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"),
        "q9": same("SELECT id, item_name, description, initial_bid, reserve, date_time, expires, "
                   "seller, category, auction, bidder, price, bid_date_time FROM (SELECT A.*, "
                   "B.auction, B.bidder, B.price, B.date_time AS bid_date_time, ROW_NUMBER() OVER "
                   "(PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum "
                   "FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN "
                   "A.date_time AND A.expires) tmp WHERE rownum <= 1"),
        "q15": (
            "SELECT to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
            "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
            "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
            "count(DISTINCT bidder) AS total_bidders, "
            "count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, "
            "count(DISTINCT auction) AS total_auctions "
            "FROM bid GROUP BY to_char(date_time, 'YYYY-MM-DD')",
            "SELECT DATE_FORMAT(date_time, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
            "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
            "count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, "
            "count(DISTINCT bidder) AS total_bidders, "
            "count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, "
            "count(DISTINCT auction) AS total_auctions "
            "FROM bid GROUP BY DATE_FORMAT(date_time, 'yyyy-MM-dd')"),
        "q17": (
            "SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, min(price) AS min_price, "
            "max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price "
            "FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
            "SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids, "
            "count(*) FILTER (WHERE price < 10000) AS rank1_bids, min(price) AS min_price, "
            "max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price "
            "FROM bid GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd')"),
        "q18": same("SELECT auction, bidder, price, channel, url, date_time FROM (SELECT *, "
                    "ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) "
                    "AS rank_number FROM bid) t WHERE rank_number <= 1"),
        "q19": same("SELECT auction, bidder, price, channel, url, date_time FROM (SELECT *, "
                    "ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number "
                    "FROM bid) t WHERE rank_number <= 10"),
        "q20": same("SELECT auction, bidder, price, channel, url, B.date_time, B.extra, item_name, "
                    "description, initial_bid, reserve, A.date_time AS auction_date_time, expires, "
                    "seller, category FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id "
                    "WHERE A.category = 10"),
        "q22": (
            "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
            "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
            "SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1, "
            "SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid"),
    }
    found["q5"] = (
        Q5.replace("{hop[bid, 2, 10]}", "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)"),
        Q5.replace("{hop[bid, 2, 10]}", "TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), "
                   "INTERVAL '2' SECOND, INTERVAL '10' SECOND))"))
    found["q8"] = (
        "SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, "
        "window_end AS endtime FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) "
        "GROUP BY id, name, window_start, window_end) P JOIN (SELECT seller, window_start AS starttime, "
        "window_end AS endtime FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) "
        "GROUP BY seller, window_start, window_end) A "
        "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
        "SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, "
        "window_end AS endtime FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), "
        "INTERVAL '10' SECOND)) GROUP BY id, name, window_start, window_end) P JOIN (SELECT seller, "
        "window_start AS starttime, window_end AS endtime FROM TABLE(TUMBLE(TABLE auction, "
        "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY seller, window_start, window_end) A "
        "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime")
    found["q11"] = (
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime "
        "FROM SESSION(bid, date_time, INTERVAL '10' SECOND) GROUP BY bidder, window_start, window_end",
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime "
        "FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), "
        "INTERVAL '10' SECOND)) GROUP BY bidder, window_start, window_end")
    order = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11", "q15", "q17", "q18",
             "q19", "q20", "q22"]
    return {name: found[name] for name in order}


STATES = ["OR", "ID", "CA", "WA", "NY", "TX", "AZ", "NV"]
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne"]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def generate(directory, events, seed=2024):
    """Writes person.csv, auction.csv and bid.csv for `events` events."""
    marker = os.path.join(directory, "events")
    if os.path.exists(marker) and open(marker).read() == str(events):
        return
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    start_ns = 1_700_000_000 * 10**9
    files = {name: open(os.path.join(directory, f"{name}.csv"), "w")
             for name in ("person", "auction", "bid")}
    buffers = {name: [] for name in files}
    people = auctions = 0

    def stamp(ns):
        seconds, nanos = divmod(ns, 10**9)
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}"

    for i in range(events):
        jitter = rng.randrange(2_000_000_000 if rng.random() < 0.01 else 50_000_000)
        event_ns = start_ns + i * 100_000 - jitter
        kind = i % 50
        if kind == 0:
            person = 1000 + people
            people += 1
            state = rng.choice(STATES)
            buffers["person"].append(
                f"{person},person {person},p{person}@example.com,{4000 + person} 1234,"
                f"{rng.choice(CITIES)},{state},{stamp(event_ns)},\n")
        elif kind <= 3:
            auction = 1000 + auctions
            auctions += 1
            seller = 1000 + max(0, people - 1 - (rng.randrange(10) if rng.random() < 0.5
                                                 else rng.randrange(max(people, 1))))
            expires = event_ns + rng.randrange(2, 20) * 10**9
            buffers["auction"].append(
                f"{auction},item {auction},description {auction},{rng.randrange(100, 10_000)},"
                f"{rng.randrange(10_000, 100_000)},{stamp(event_ns)},{stamp(expires)},{seller},"
                f"{10 + rng.randrange(6)},\n")
        else:
            hot = rng.random() < 0.5
            auction = 1000 + max(0, auctions - 1 - rng.randrange(100 if hot else 1000))
            bidder = 1000 + max(0, people - 1 - (rng.randrange(1000) if rng.random() < 0.7
                                                 else rng.randrange(max(people, 1))))
            price = rng.randrange(100, 10_000) if rng.random() < 0.8 else rng.randrange(10_000, 2_000_000)
            channel = rng.choice(CHANNELS)
            url = f"https://www.nexmark.com/{channel.lower()}/item{auction % 7}/bid?id={i % 1000}"
            buffers["bid"].append(
                f"{auction},{bidder},{price},{channel},{url},{stamp(event_ns)},\n")
        if i % 100_000 == 99_999:
            for name, lines in buffers.items():
                files[name].writelines(lines)
                lines.clear()
    for name, lines in buffers.items():
        files[name].writelines(lines)
        files[name].close()
    with open(marker, "w") as f:
        f.write(str(events))


# ---------------------------------------------------------------- weir


def weir_server(args, port, name):
    import copy_memory

    data_dir = os.path.join(args.work_dir, f"nexmark-{name}", "data")
    shutil.rmtree(os.path.dirname(data_dir), ignore_errors=True)
    os.makedirs(os.path.dirname(data_dir))
    server = copy_memory.Server(args.weir, data_dir, port)
    server.start()
    server.wait_ready()
    return server


def weir_copy(server, directory):
    server.psql(*[f"\\copy {table} FROM '{os.path.join(directory, table + '.csv')}' "
                  f"WITH (FORMAT csv)" for table in ("person", "auction", "bid")])


def weir_rows(server, sql):
    finished = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(server.port), "-U", "weir", "-d", "weir", "-qAt",
         "-F", "\t", "-v", "ON_ERROR_STOP=1", "-P", "null=NULL", "-c", sql],
        capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(finished.stderr.strip())
    return [line.split("\t") for line in finished.stdout.splitlines() if line]


def weir_timed(args, name, sql, port):
    """(events/s, peak RSS MB, view rows) or an error message."""
    server = weir_server(args, port, name)
    try:
        server.psql(WEIR_TABLES)
        created = server.psql(f"CREATE MATERIALIZED VIEW {name} AS {sql}", check=False)
        if created.returncode != 0:
            return {"error": created.stderr.strip().splitlines()[0]}
        started = time.monotonic()
        weir_copy(server, args.big_dir)
        elapsed = time.monotonic() - started
        view_rows = int(server.psql(f"SELECT count(*) FROM {name}").stdout)
        return {"events_per_s": args.events / elapsed, "peak_rss_mb": server.status("VmHWM") / 1024,
                "view_rows": view_rows, "seconds": elapsed}
    finally:
        if server.process.poll() is None:
            server.kill()
        shutil.rmtree(os.path.join(args.work_dir, f"nexmark-{name}"), ignore_errors=True)


# ---------------------------------------------------------------- Flink


def flink_child(args):
    """Inside the PyFlink interpreter: runs one query, prints JSON."""
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.version import __version__

    table_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = table_env.get_config()
    config.set("parallelism.default", str(args.parallelism))
    config.set("pipeline.name", f"weir-nexmark-{args.child}")
    for table, columns in FLINK_TABLES.items():
        path = os.path.join(args.data_dir, f"{table}.csv")
        table_env.execute_sql(
            f"CREATE TABLE {table} ({columns}, WATERMARK FOR date_time AS date_time - "
            f"INTERVAL '4' SECOND) WITH ('connector' = 'filesystem', 'path' = '{path}', "
            f"'format' = 'csv', 'csv.null-literal' = '')")
    sql = queries()[args.child][1]
    if args.collect:
        rows = Counter()
        with table_env.sql_query(sql).execute().collect() as results:
            for row in results:
                kind = row.get_row_kind().name
                values = tuple(normalized(value) for value in row)
                rows[values] += -1 if kind in ("UPDATE_BEFORE", "DELETE") else 1
        print(json.dumps({"rows": [[list(k), v] for k, v in rows.items() if v]}), flush=True)
        return
    query = table_env.sql_query(sql)
    fields = ", ".join(f"`{name}` {kind}" for name, kind in
                       zip(query.get_schema().get_field_names(),
                           [str(t) for t in query.get_schema().get_field_data_types()]))
    table_env.execute_sql(f"CREATE TABLE out_sink ({fields}) WITH ('connector' = 'blackhole')")
    started = time.monotonic()
    table_env.execute_sql(f"INSERT INTO out_sink {sql}").wait()
    print(json.dumps({"job_s": time.monotonic() - started, "flink": __version__}), flush=True)


def run_flink(args, name, data_dir, collect=False):
    from flink_windows import communicate_sampling_java

    command = [args.flink_python, os.path.abspath(__file__), "--child", name,
               "--data-dir", data_dir, "--parallelism", str(args.flink_parallelism)]
    if collect:
        command.append("--collect")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err, peaks = communicate_sampling_java(process)
    if process.returncode != 0:
        lines = [line for line in err.splitlines() if "Exception" in line or "Error" in line]
        return {"error": (lines[-1] if lines else err[-300:]).strip()[:300]}
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = max(peaks.values(), default=0) / 1024
    return result


# ---------------------------------------------------------------- agreement


def normalized(value):
    """A value as both engines' rows are compared: integers for numbers
    (rounded down), timestamps to the millisecond, text as it is."""
    if value is None or value == "NULL":
        return None
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)) or type(value).__name__ == "Decimal":
        return math.floor(float(value))
    text = str(value)
    try:
        return math.floor(float(text))
    except ValueError:
        pass
    try:
        stamp = datetime.datetime.fromisoformat(text)
        return normalized(stamp)
    except ValueError:
        return text


# Columns compared where the query's result is not determined: q19's top 10
# bids per auction by price pick any of the bids tied at the tenth price.
COMPARED = {"q19": [0, 2]}


def multiset(rows, name):
    columns = COMPARED.get(name)
    return Counter(tuple(normalized(value) for index, value in enumerate(row)
                         if columns is None or index in columns) for row in rows)


def difference(left, right):
    only_left, only_right = left - right, right - left
    count = sum(only_left.values()) + sum(only_right.values())
    return count, next(iter(only_left or only_right), None)


def check(args, names, port):
    """Per query: rows, and how many differ from the batch query and Flink."""
    outcome = {}
    server = weir_server(args, port, "check")
    try:
        server.psql(WEIR_TABLES)
        created = {}
        for name in names:
            result = server.psql(f"CREATE MATERIALIZED VIEW {name} AS {queries()[name][0]}",
                                 check=False)
            created[name] = result.returncode == 0
        weir_copy(server, args.small_dir)
        for name in names:
            if not created[name]:
                outcome[name] = "weir refuses it"
                continue
            view = multiset(weir_rows(server, f"SELECT * FROM {name}"), name)
            batch = multiset(weir_rows(server, queries()[name][0]), name)
            count, example = difference(view, batch)
            line = f"{sum(view.values())} rows; batch query: {count} differ"
            line += f" (e.g. {example})" if count else ""
            args.disagreements += count
            if "flink" not in args.skip:
                flink = run_flink(args, name, args.small_dir, collect=True)
                if "error" in flink:
                    line += f"; Flink failed: {flink['error']}"
                else:
                    flink_rows = multiset(
                        [values for values, times in flink["rows"] for _ in range(times)], name)
                    count, example = difference(view, flink_rows)
                    line += f"; Flink {sum(flink_rows.values())} rows, {count} differ"
                    line += f" (e.g. {example})" if count else ""
                    args.disagreements += count
            outcome[name] = line
            print(f"check {name}: {line}", file=sys.stderr, flush=True)
    finally:
        if server.process.poll() is None:
            server.kill()
        shutil.rmtree(os.path.join(args.work_dir, "nexmark-check"), ignore_errors=True)
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", help="the weir binary (a release build)")
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--check-events", type=int, default=100_000)
    parser.add_argument("--queries", default=",".join(queries()))
    parser.add_argument("--flink-python", default="/var/tmp/pyflink-venv/bin/python")
    parser.add_argument("--flink-parallelism", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: flink, check, timed")
    parser.add_argument("--work-dir", default="/var/tmp/weir-bench")
    parser.add_argument("--port", type=int, default=5571)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--parallelism", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return flink_child(args)
    if not args.weir:
        parser.error("--weir is required")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    names = [name.strip() for name in args.queries.split(",") if name.strip()]
    args.disagreements = 0
    args.big_dir = os.path.join(args.work_dir, f"nexmark-{args.events}")
    args.small_dir = os.path.join(args.work_dir, f"nexmark-{args.check_events}")
    generated = time.monotonic()
    generate(args.big_dir, args.events)
    generate(args.small_dir, args.check_events)
    print(f"# data: {time.monotonic() - generated:.0f} s to make", file=sys.stderr, flush=True)
    checks = {} if "check" in args.skip else check(args, names, args.port)
    results = []
    for offset, name in enumerate([] if "timed" in args.skip else names):
        weir = weir_timed(args, name, queries()[name][0], args.port + 1 + offset)
        print(f"weir {name}: {weir}", file=sys.stderr, flush=True)
        flink = {} if "flink" in args.skip else run_flink(args, name, args.big_dir)
        if "job_s" in flink:
            flink["events_per_s"] = args.events / flink["job_s"]
            args.flink_version = flink["flink"]
        print(f"flink {name}: {flink}", file=sys.stderr, flush=True)
        results.append((name, weir, flink))
    print(f"{args.events:,} Nexmark events (person : auction : bid = 1 : 3 : 46), "
          f"{os.cpu_count()} cores; Flink {getattr(args, 'flink_version', 'skipped')} "
          f"(parallelism {args.flink_parallelism})\n")
    print("| query | weir events/s (COPY e2e) | Flink events/s | weir / Flink "
          "| peak RSS MB weir / Flink | view rows |")
    print("|---|---:|---:|---:|---|---:|")
    for name, weir, flink in results:
        weir_rate = weir.get("events_per_s")
        flink_rate = flink.get("events_per_s")
        cells = [
            f"{weir_rate:,.0f}" if weir_rate else f"not run: {weir.get('error', '')}",
            f"{flink_rate:,.0f}" if flink_rate else f"not run: {flink.get('error', 'skipped')}",
            f"{weir_rate / flink_rate:.2f}x" if weir_rate and flink_rate else "-",
            f"{weir.get('peak_rss_mb', 0):,.0f} / {flink.get('peak_rss_mb', 0):,.0f}",
            str(weir.get("view_rows", "-")),
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if checks:
        print(f"\nAgreement on {args.check_events:,} events (weir's view against the same "
              f"query as a batch in weir, and Flink's final changelog):")
        for name in names:
            print(f"- {name}: {checks.get(name, '-')}")
        print(f"\nRows that differ, in all: {args.disagreements}")


if __name__ == "__main__":
    main()
