#!/bin/bash
# The bid-only Nexmark queries, weir end to end: a fresh release server per query, the view created, then
# the bids CSV through psql \copy (timed), peak RSS from /proc.
CSV=${1:?usage: bench/nexmark_copy.sh BIDS.csv [WEIR_BINARY]}
WEIR=${2:-target/release/weir}
declare -A Q
Q[q0]="SELECT auction, bidder, price, date_time FROM bid"
Q[q1]="SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid"
Q[q2]="SELECT auction, price FROM bid WHERE auction % 123 = 0"
Q[q5]="SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT bid.auction, count(*) AS num, window_start AS starttime FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, bid.auction) AS AuctionBids JOIN (SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM (SELECT count(*) AS num, window_start AS starttime_c FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY bid.auction, window_start) AS CountBids GROUP BY CountBids.starttime_c) AS MaxBids ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn"
Q[q7]="SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) AS maxprice, window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"
Q[q11]="SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime FROM SESSION(bid, date_time, INTERVAL '10' SECOND) GROUP BY bidder, window_start, window_end"
Q[over]="SELECT auction, price, AVG(price) OVER (PARTITION BY auction ORDER BY date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS recent FROM bid"
# QUERIES="q0 over" runs some of them (default: the Nexmark ones).
echo "| query | rows | copy_s | rows_per_s | peak_rss_mb | view_rows |"
echo "|---|---:|---:|---:|---:|---:|"
for q in ${QUERIES:-q0 q1 q2 q5 q7 q11}; do
  dir=/var/tmp/nexmark-copy-$q; rm -rf $dir
  "$WEIR" --listen 127.0.0.1:5611 --data-dir $dir > $dir.log 2>&1 &
  pid=$!; sleep 2
  psql -X -q -h 127.0.0.1 -p 5611 -U weir -c "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY" -c "CREATE MATERIALIZED VIEW $q AS ${Q[$q]}" >/dev/null
  start=$(date +%s.%N)
  psql -X -q -h 127.0.0.1 -p 5611 -U weir -c "\\copy bid FROM '$CSV' WITH (FORMAT csv)" >/dev/null
  end=$(date +%s.%N)
  rows=$(psql -X -At -h 127.0.0.1 -p 5611 -U weir -c "SELECT count(*) FROM bid")
  vrows=$(psql -X -At -h 127.0.0.1 -p 5611 -U weir -c "SELECT count(*) FROM $q")
  rss=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
  kill -9 $pid; wait $pid 2>/dev/null; rm -rf $dir
  python3 -c "s=$end-$start; print(f'| {\"$q\"} | {$rows} | {s:.2f} | {$rows/s:,.0f} | {$rss/1024:.0f} | {$vrows} |')"
done
