//! What `weir bench` can measure: each scenario's table, its input and
//! its materialized views.

/// What a benchmark run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The table alone: append, fsync, in-memory copy; no view.
    Baseline,
    /// A TUMBLE view (10 s windows): each event lands in one window.
    Tumble,
    /// A HOP view (10 s windows every 2 s): each event lands in five.
    Hop,
    /// A CUMULATE view (10 s periods in 2 s steps): each event lands in 1-5.
    Cumulate,
    /// A SESSION view per auction bucket (500 ms gap): sessions merge and close.
    Session,
    /// A SESSION view per auction (10,000 keys, 5 s gap): ~1.6 events per
    /// session, so as many result rows as sessions.
    ManySessions,
    /// The side-by-side queries (bench/side_by_side.py) over Nexmark-shaped
    /// bids: keyed by auction, COUNT(*), SUM(price), COUNT(DISTINCT bidder).
    KeyedTumble,
    KeyedHop,
    KeyedSession,
    /// The Nexmark queries that read bids only (RisingWave's text; q3, q4
    /// and q8 also read person and auction), each a view emitting on
    /// update: tests/nexmark_views.rs checks their results.
    NexmarkQ0,
    NexmarkQ1,
    NexmarkQ2,
    NexmarkQ5,
    NexmarkQ7,
    NexmarkQ11,
    /// Both views, a bulk load, then the time `Engine::open` takes to be
    /// ready again, from a checkpoint and from the whole history.
    Recovery,
}

impl Scenario {
    /// What `--scenario all` runs: the events/s scenarios, whose figures are
    /// comparable with each other. Recovery prints another table.
    pub const THROUGHPUT: [Scenario; 5] = [
        Scenario::Baseline,
        Scenario::Tumble,
        Scenario::Hop,
        Scenario::Cumulate,
        Scenario::Session,
    ];

    /// What `--scenario keyed` runs: the peers' comparison queries.
    pub const KEYED: [Scenario; 3] = [
        Scenario::KeyedTumble,
        Scenario::KeyedHop,
        Scenario::KeyedSession,
    ];

    /// What `--scenario nexmark` runs.
    pub const NEXMARK: [Scenario; 6] = [
        Scenario::NexmarkQ0,
        Scenario::NexmarkQ1,
        Scenario::NexmarkQ2,
        Scenario::NexmarkQ5,
        Scenario::NexmarkQ7,
        Scenario::NexmarkQ11,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::Tumble => "tumble",
            Scenario::Hop => "hop",
            Scenario::Cumulate => "cumulate",
            Scenario::Session => "session",
            Scenario::ManySessions => "many-sessions",
            Scenario::KeyedTumble => "keyed-tumble",
            Scenario::KeyedHop => "keyed-hop",
            Scenario::KeyedSession => "keyed-session",
            Scenario::NexmarkQ0 => "nexmark-q0",
            Scenario::NexmarkQ1 => "nexmark-q1",
            Scenario::NexmarkQ2 => "nexmark-q2",
            Scenario::NexmarkQ5 => "nexmark-q5",
            Scenario::NexmarkQ7 => "nexmark-q7",
            Scenario::NexmarkQ11 => "nexmark-q11",
            Scenario::Recovery => "recovery",
        }
    }

    pub(super) fn input(self) -> Input {
        match self {
            Scenario::KeyedTumble | Scenario::KeyedHop | Scenario::KeyedSession => Input::Bids,
            scenario if Scenario::NEXMARK.contains(&scenario) => Input::Bids,
            _ => Input::Events,
        }
    }

    pub(super) fn windows(self) -> &'static [Window] {
        match self {
            Scenario::Baseline => &[],
            Scenario::Tumble => &[Window::Tumble],
            Scenario::Hop => &[Window::Hop],
            Scenario::Cumulate => &[Window::Cumulate],
            Scenario::Session => &[Window::Session],
            Scenario::ManySessions => &[Window::SessionPerAuction],
            Scenario::KeyedTumble => &[Window::KeyedTumble],
            Scenario::KeyedHop => &[Window::KeyedHop],
            Scenario::KeyedSession => &[Window::KeyedSession],
            Scenario::NexmarkQ0 => &[Window::NexmarkQ0],
            Scenario::NexmarkQ1 => &[Window::NexmarkQ1],
            Scenario::NexmarkQ2 => &[Window::NexmarkQ2],
            Scenario::NexmarkQ5 => &[Window::NexmarkQ5],
            Scenario::NexmarkQ7 => &[Window::NexmarkQ7],
            Scenario::NexmarkQ11 => &[Window::NexmarkQ11],
            Scenario::Recovery => &[Window::Tumble, Window::Hop],
        }
    }
}

/// The table a scenario appends to and the generator that fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Input {
    /// `events (auction, price, ts)`, from `EventGenerator`.
    Events,
    /// `bid (auction, bidder, price, date_time)`, from `BidGenerator`, as
    /// bench/copy_memory.py declares it.
    Bids,
}

impl Input {
    pub(super) fn table_name(self) -> &'static str {
        match self {
            Input::Events => "events",
            Input::Bids => "bid",
        }
    }

    pub(super) fn table_sql(self) -> &'static str {
        match self {
            Input::Events => {
                "CREATE TABLE events (auction BIGINT, price BIGINT, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY"
            }
            Input::Bids => {
                "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, \
                 date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
                 APPEND ONLY"
            }
        }
    }
}

/// The window function of one benchmark view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    Tumble,
    Hop,
    Cumulate,
    Session,
    SessionPerAuction,
    KeyedTumble,
    KeyedHop,
    KeyedSession,
    NexmarkQ0,
    NexmarkQ1,
    NexmarkQ2,
    NexmarkQ5,
    NexmarkQ7,
    NexmarkQ11,
}

/// The window views group by window and auction bucket with the same
/// aggregates, so those scenarios differ only in the window function.
const VIEW_SELECT: &str = "SELECT window_start, auction % 100 AS bucket, \
     COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top";
const VIEW_GROUP_BY: &str = "GROUP BY window_start, auction % 100 EMIT ON WINDOW CLOSE";

/// The keyed views: bench/copy_memory.py's and bench/flink_windows.py's.
const KEYED_SELECT: &str = "SELECT auction, window_start, window_end, COUNT(*) AS bids, \
     SUM(price) AS volume, COUNT(DISTINCT bidder) AS bidders";
const KEYED_GROUP_BY: &str = "GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE";

impl Window {
    pub(super) fn view_name(self) -> &'static str {
        match self {
            Window::Tumble => "bench_tumble",
            Window::Hop => "bench_hop",
            Window::Cumulate => "bench_cumulate",
            Window::Session => "bench_session",
            Window::SessionPerAuction => "bench_sessions_per_auction",
            Window::KeyedTumble => "bench_keyed_tumble",
            Window::KeyedHop => "bench_keyed_hop",
            Window::KeyedSession => "bench_keyed_session",
            Window::NexmarkQ0 => "nexmark_q0",
            Window::NexmarkQ1 => "nexmark_q1",
            Window::NexmarkQ2 => "nexmark_q2",
            Window::NexmarkQ5 => "nexmark_q5",
            Window::NexmarkQ7 => "nexmark_q7",
            Window::NexmarkQ11 => "nexmark_q11",
        }
    }

    pub(super) fn view_sql(self) -> String {
        let name = self.view_name();
        if let Some(query) = self.nexmark_query() {
            return format!("CREATE MATERIALIZED VIEW {name} AS {query}");
        }
        let (select, from, group_by) = match self {
            Window::Tumble => (
                VIEW_SELECT,
                "TUMBLE(events, ts, INTERVAL '10' SECOND)",
                VIEW_GROUP_BY,
            ),
            Window::Hop => (
                VIEW_SELECT,
                "HOP(events, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                VIEW_GROUP_BY,
            ),
            // Windows of a period share their start: these group by end.
            Window::Cumulate => (
                "SELECT window_end, auction % 100 AS bucket, \
                 COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top",
                "CUMULATE(events, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                "GROUP BY window_end, auction % 100 EMIT ON WINDOW CLOSE",
            ),
            // Per auction bucket (an event every ~100 ms each) with a 500 ms
            // gap: sessions of ~150 events that merge and close all along.
            Window::Session => (
                "SELECT auction % 100 AS bucket, window_start, window_end, \
                 COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top",
                "SESSION(events, ts, INTERVAL '500' MILLISECOND)",
                "GROUP BY auction % 100, window_start, window_end EMIT ON WINDOW CLOSE",
            ),
            Window::SessionPerAuction => (
                "SELECT auction, window_start, window_end, \
                 COUNT(*) AS n, SUM(price) AS total, MAX(price) AS top",
                "SESSION(events, ts, INTERVAL '5' SECOND)",
                "GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE",
            ),
            Window::KeyedTumble => (
                KEYED_SELECT,
                "TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
                KEYED_GROUP_BY,
            ),
            Window::KeyedHop => (
                KEYED_SELECT,
                "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
                KEYED_GROUP_BY,
            ),
            Window::KeyedSession => (
                KEYED_SELECT,
                "SESSION(bid, date_time, INTERVAL '10' SECOND)",
                KEYED_GROUP_BY,
            ),
            _ => return String::new(),
        };
        format!("CREATE MATERIALIZED VIEW {name} AS {select} FROM {from} {group_by}")
    }
}

/// The Nexmark queries over the bench's `bid` table (RisingWave's text).
const NEXMARK_Q5: &str = "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT bid.auction, \
     count(*) AS num, window_start AS starttime FROM HOP(bid, date_time, INTERVAL '2' SECOND, \
     INTERVAL '10' SECOND) GROUP BY window_start, bid.auction) AS AuctionBids JOIN (SELECT \
     max(CountBids.num) AS maxn, CountBids.starttime_c FROM (SELECT count(*) AS num, \
     window_start AS starttime_c FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
     GROUP BY bid.auction, window_start) AS CountBids GROUP BY CountBids.starttime_c) AS MaxBids \
     ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn";
const NEXMARK_Q7: &str = "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN \
     (SELECT MAX(price) AS maxprice, window_end AS date_time FROM TUMBLE(bid, date_time, \
     INTERVAL '10' SECOND) GROUP BY window_end) B1 ON B.price = B1.maxprice \
     WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time";

impl Window {
    fn nexmark_query(self) -> Option<&'static str> {
        Some(match self {
            Window::NexmarkQ0 => "SELECT auction, bidder, price, date_time FROM bid",
            Window::NexmarkQ1 => {
                "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid"
            }
            Window::NexmarkQ2 => "SELECT auction, price FROM bid WHERE auction % 123 = 0",
            Window::NexmarkQ5 => NEXMARK_Q5,
            Window::NexmarkQ7 => NEXMARK_Q7,
            Window::NexmarkQ11 => {
                "SELECT bidder, count(*) AS bid_count, window_start AS starttime, \
                 window_end AS endtime FROM SESSION(bid, date_time, INTERVAL '10' SECOND) \
                 GROUP BY bidder, window_start, window_end"
            }
            _ => return None,
        })
    }
}
