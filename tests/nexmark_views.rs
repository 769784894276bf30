//! The Nexmark queries (RisingWave's text, q12 aside) as materialized
//! views over Nexmark-shaped person / auction / bid streams, fed by a small
//! deterministic generator (1 : 3 : 46 events, hot sellers and auctions,
//! event time advancing 10 ms per event). After every few batches each
//! view must equal its query run as a batch by DataFusion over the same
//! tables.
//!
//! q6 is RisingWave's `q6-group-top1` (each auction's winning bid, then
//! the average of each seller's last 11 by `ROWS BETWEEN 10 PRECEDING`)
//! with `B.date_time` breaking ties between equal prices, which a batch
//! query would otherwise resolve at random. Not here: q12
//! (processing-time windows: a batch query cannot reproduce arrival
//! times).

mod common;

use common::{sorted_rows, Lcg, TestServer};
use tokio_postgres::Client;

const TABLES: &str = "
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
";

const QUERIES: &[(&str, &str)] = &[
    ("q0", "SELECT auction, bidder, price, date_time FROM bid"),
    (
        "q1",
        "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
    ),
    (
        "q2",
        "SELECT auction, price FROM bid WHERE auction = 1007 OR auction = 1020 OR auction % 123 = 0",
    ),
    (
        "q3",
        "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P \
         ON A.seller = P.id WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')",
    ),
    (
        "q4",
        "SELECT Q.category, AVG(Q.final) AS avg FROM (SELECT MAX(B.price) AS final, A.category \
         FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
         GROUP BY A.id, A.category) Q GROUP BY Q.category",
    ),
    (
        "q5",
        "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT bid.auction, count(*) AS num, \
         window_start AS starttime FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
         GROUP BY window_start, bid.auction) AS AuctionBids JOIN (SELECT max(CountBids.num) AS maxn, \
         CountBids.starttime_c FROM (SELECT count(*) AS num, window_start AS starttime_c \
         FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
         GROUP BY bid.auction, window_start) AS CountBids GROUP BY CountBids.starttime_c) AS MaxBids \
         ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn",
    ),
    (
        "q6",
        "SELECT Q.seller, AVG(Q.final) OVER \
         (PARTITION BY Q.seller ORDER BY Q.date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg \
         FROM (SELECT ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price, B.date_time) AS rank, \
         A.seller, B.price AS final, B.date_time FROM auction AS A, bid AS B \
         WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) AS Q WHERE Q.rank <= 1",
    ),
    (
        "q7",
        "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) AS maxprice, \
         window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 \
         ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
    ),
    (
        "q8",
        "SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, \
         window_end AS endtime FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) \
         GROUP BY id, name, window_start, window_end) P JOIN (SELECT seller, window_start AS starttime, \
         window_end AS endtime FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) \
         GROUP BY seller, window_start, window_end) A \
         ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    ),
    (
        "q11",
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime \
         FROM SESSION(bid, date_time, INTERVAL '1' SECOND) GROUP BY bidder, window_start, window_end",
    ),
];

/// Nexmark-shaped events in event-time order.
struct Generator {
    random: Lcg,
    event: u64,
    people: u64,
    auctions: u64,
}

const FIRST_ID: u64 = 1000;

impl Generator {
    fn timestamp(&self, offset_ms: u64) -> String {
        let ms = self.event * 10 + offset_ms;
        format!(
            "TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{}.{:03}' SECOND",
            ms / 1000,
            ms % 1000
        )
    }

    /// One of the newest `window` ids below `next`, often the newest few
    /// (the "hot" ones).
    fn recent(&mut self, next: u64, window: u64) -> u64 {
        let span = match self.random.below(4) {
            0 => window,
            _ => 3,
        };
        FIRST_ID + next.saturating_sub(1 + self.random.below(span.min(next.max(1))))
    }

    /// The statements adding the next `events` events.
    fn batch(&mut self, events: u64) -> Vec<String> {
        let (mut people, mut auctions, mut bids) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..events {
            let slot = self.event % 50;
            let now = self.timestamp(0);
            if slot == 0 || self.people == 0 {
                let id = FIRST_ID + self.people;
                self.people += 1;
                let state = ["'OR'", "'ID'", "'CA'", "'WA'"][self.random.below(4) as usize];
                let city = ["'Portland'", "'Boise'", "'Seattle'"][self.random.below(3) as usize];
                people.push(format!(
                    "({id}, 'p{id}', 'p{id}@x', '4111', {city}, {state}, {now}, '')"
                ));
            } else if slot <= 3 || self.auctions == 0 {
                let id = FIRST_ID + self.auctions;
                self.auctions += 1;
                let seller = self.recent(self.people, 20);
                let lifetime_ms = 2_000 + self.random.below(8_000);
                let expires = self.timestamp(lifetime_ms);
                auctions.push(format!(
                    "({id}, 'item{id}', '', 10, 100, {now}, {expires}, {seller}, {}, '')",
                    10 + self.random.below(4)
                ));
            } else {
                let auction = self.recent(self.auctions, 30);
                let bidder = self.recent(self.people, 40);
                let price = 100 + self.random.below(300) * 10;
                bids.push(format!(
                    "({auction}, {bidder}, {price}, 'web', '', {now}, '')"
                ));
            }
            self.event += 1;
        }
        let mut statements = Vec::new();
        for (table, rows) in [("person", people), ("auction", auctions), ("bid", bids)] {
            if !rows.is_empty() {
                statements.push(format!("INSERT INTO {table} VALUES {}", rows.join(", ")));
            }
        }
        statements
    }
}

async fn check(client: &Client, context: &str) {
    for (view, query) in QUERIES {
        let actual = sorted_rows(client, &format!("SELECT * FROM {view}")).await;
        let expected = sorted_rows(client, query).await;
        assert_eq!(actual, expected, "{view} after {context}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_equal_their_batch_queries() {
    let server = TestServer::start();
    let client = server.connect().await;
    client.batch_execute(TABLES).await.unwrap();
    for (view, query) in QUERIES {
        let sql = format!("CREATE MATERIALIZED VIEW {view} AS {query}");
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let mut generator = Generator {
        random: Lcg(42),
        event: 0,
        people: 0,
        auctions: 0,
    };
    for batch in 0..16 {
        // The three tables in turn: their watermarks move together.
        for sql in generator.batch(250) {
            client.batch_execute(&sql).await.unwrap();
        }
        if batch % 3 == 2 {
            check(&client, &format!("batch {batch}")).await;
        }
    }
    check(&client, "the last batch").await;
    // Every query has results to compare (the generator is meant to give
    // each of them some).
    let mut counts = Vec::new();
    for (view, _) in QUERIES {
        let rows = sorted_rows(&client, &format!("SELECT COUNT(*) FROM {view}")).await;
        counts.push(format!("{view}={}", rows[0][0]));
    }
    assert!(
        !counts.iter().any(|count| count.ends_with("=0")),
        "{counts:?}"
    );
    eprintln!("rows per view: {counts:?}");
}
