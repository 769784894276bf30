//! Oracle test for incrementally maintained materialized views (issue 3):
//! for many seeds, out-of-order rows go into a stream table in random-size
//! INSERT statements, and every view must equal a batch GROUP BY, computed
//! here in Rust, over the rows that were on time for each window.
//!
//! The rules replicated here: the watermark after a row is the largest event
//! time so far minus the delay; a row is judged against the watermark before
//! it arrived, and is late for a window (and dropped from that window only)
//! when that watermark is at or past the window's end. EMIT ON WINDOW CLOSE
//! views show only windows ending at or before the final watermark.
//!
//! Per-view late data policies shift or record that rule: with
//! `late_data = 'update'` a row is late only when the watermark is at or
//! past the window's end plus the allowed lateness (EMIT ON WINDOW CLOSE
//! still shows every window ending at or before the final watermark, with
//! the corrections); with `late_data = 'side_output'` the view is as under
//! the default `drop`, and `<view>_late` holds one row per (late row, missed
//! window). CUMULATE windows start every `size` and end every `step` within
//! it, so a row falls in every window of its period ending after it.
//!
//! SESSION windows are built per key in arrival order: a row opens
//! `[ts, ts + gap)` and merges with every session it overlaps or touches. A
//! session is final once the watermark is at or past its end plus the
//! allowed lateness, and is never reopened: a row is late when it touches a
//! final session, or when it touches no session and its own `[ts, ts + gap)`
//! is final; a row touching only open sessions joins them even when its own
//! window is final (the design's SESSION rule, as Flink). On-update
//! views show every session; EMIT ON WINDOW CLOSE those ending at or before
//! the final watermark. `<view>_late` has the late row's `[ts, ts + gap)`.
//! Rows with a NULL time are in no window and never late; NULL keys group.
//!
//! `EMIT EVERY` views (TUMBLE on update and on window close with
//! `late_data = 'update'`, HOP, GROUP BY key) fire when the test moves the
//! clock on (`ALTER SYSTEM SET emit_clock_offset`), at random points and
//! before each check: right after a firing such a view equals the same view
//! emitting on update, over the rows seen up to the firing.
//!
//! A quarter of the statements are INSERT ... SELECT from a staging table,
//! with and without ORDER BY: a statement's rows reach the views in the
//! query's order.
//!
//! `ORACLE_SEEDS=7` (or `ORACLE_SEEDS=0..400`) picks the seeds to run.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDateTime};
use common::TestServer;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

const SEEDS: u64 = 50;
const DELAY_MS: i64 = 10_000;
/// 2024-01-01 00:00:00 UTC.
const BASE_MS: i64 = 1_704_067_200_000;
const TUMBLE: Shape = Shape {
    slide: 60_000,
    size: 60_000,
};
const HOP: Shape = Shape {
    slide: 20_000,
    size: 60_000,
};
/// CUMULATE: `slide` is the step.
const CUMULATE: Shape = Shape {
    slide: 20_000,
    size: 60_000,
};
/// For `late_data = 'update'`, picked by seed. Rows arrive at most about
/// 20 s behind the watermark, so below that some rows are corrections and
/// some still late; at 30 s every late row is a correction.
const ALLOWED_LATENESS_MS: [i64; 4] = [10_000, 30_000, 5_000, 15_000];
/// SESSION gaps (whole seconds), picked by seed. The clock moves 0-2.5 s a
/// row over 5 keys, so one key's rows are about 6 s apart: a 2 s gap mostly
/// closes sessions, a 10 s gap mostly merges them, 5 s does both. Half the
/// rows are whole seconds, so rows exactly a gap apart (which touch) and
/// watermarks exactly at a session's end are common.
const SESSION_GAPS_MS: [i64; 3] = [5_000, 2_000, 10_000];

/// splitmix64: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    fn chance(&mut self, percent: i64) -> bool {
        self.range(0, 100) < percent
    }
}

/// One inserted row; `ts` in milliseconds since the epoch.
#[derive(Debug, Clone, Copy)]
struct Event {
    k: Option<i64>,
    v: Option<i64>,
    ts: Option<i64>,
}

/// Event times mostly increase but a quarter jump back up to 30 s, so with a
/// 10 s delay some rows are late. Half are whole seconds, so rows and
/// watermarks land exactly on window edges; a few of those are whole 10 s,
/// so that the watermark after them (10 s earlier) is often exactly a
/// window's end, as it must sometimes be when a check runs. v has a small
/// range so COUNT DISTINCT sees duplicates, and is sometimes NULL (COUNT(v)
/// vs COUNT(*)). A few keys are NULL (a group of their own) and a few times
/// NULL (in no window, never late, not moving the watermark).
fn generate(rng: &mut Rng) -> Vec<Event> {
    let count = rng.range(200, 401);
    let mut clock = BASE_MS + rng.range(0, 60_000);
    (0..count)
        .map(|_| {
            clock += rng.range(0, 2_500);
            let mut ts = clock;
            if rng.chance(25) {
                ts -= rng.range(0, 30_000);
            }
            if rng.chance(50) {
                let unit = if rng.chance(15) { 10_000 } else { 1_000 };
                ts -= ts.rem_euclid(unit);
            }
            let v = (!rng.chance(10)).then(|| rng.range(-20, 100));
            let k = (!rng.chance(3)).then(|| rng.range(0, 5));
            let ts = (!rng.chance(2)).then_some(ts);
            Event { k, v, ts }
        })
        .collect()
}

/// Splits the rows into INSERT statements of 1..=50 rows.
fn batches(rng: &mut Rng, events: &[Event]) -> Vec<Vec<Event>> {
    let mut rest = events;
    let mut batches = Vec::new();
    while !rest.is_empty() {
        let size = (rng.range(1, 51) as usize).min(rest.len());
        let (batch, tail) = rest.split_at(size);
        batches.push(batch.to_vec());
        rest = tail;
    }
    batches
}

fn timestamp(ms: i64) -> String {
    let time = DateTime::from_timestamp_millis(ms).expect("valid time");
    time.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

fn insert_sql(table: &str, batch: &[Event]) -> String {
    let null = || "NULL".to_string();
    let values: Vec<String> = batch
        .iter()
        .map(|event| {
            let k = event.k.map_or_else(null, |k| k.to_string());
            let v = event.v.map_or_else(null, |v| v.to_string());
            let ts = event
                .ts
                .map_or_else(null, |ts| format!("'{}'", timestamp(ts)));
            format!("({k}, {v}, {ts})")
        })
        .collect();
    format!("INSERT INTO {table} VALUES {}", values.join(", "))
}

/// The batch as an INSERT ... SELECT from a staging table (no watermark)
/// that first gets the rows, numbered, in a few INSERTs of its own: the
/// SELECT then reads several stored batches, which DataFusion could
/// reorder. Without ORDER BY the rows must arrive in the table's order.
fn insert_select_sql(table: &str, batch: &[Event], first: usize, ordered: bool) -> String {
    let stage = format!("{table}_stage");
    let mut statements = Vec::new();
    for (part, rows) in batch.chunks(batch.len().div_ceil(3).max(1)).enumerate() {
        let offset = first + part * batch.len().div_ceil(3).max(1);
        let values = insert_sql("", rows).replace("INSERT INTO  VALUES ", "");
        let numbered: Vec<String> = values
            .split("), (")
            .enumerate()
            .map(|(index, row)| {
                let row = row.trim_start_matches('(').trim_end_matches(')');
                format!("({}, {row})", offset + index)
            })
            .collect();
        statements.push(format!(
            "INSERT INTO {stage} VALUES {}",
            numbered.join(", ")
        ));
    }
    let order = if ordered { " ORDER BY seq" } else { "" };
    statements.push(format!(
        "INSERT INTO {table} SELECT k, v, ts FROM {stage} WHERE seq >= {first}{order}"
    ));
    statements.join(";\n")
}

/// A window shape in milliseconds; TUMBLE has `slide == size`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    slide: i64,
    size: i64,
}

impl Shape {
    /// Starts on the slide grid (aligned at the epoch) of the windows
    /// `[s, s + size)` that contain `ts`.
    fn starts(self, ts: i64) -> impl Iterator<Item = i64> {
        let last = ts - ts.rem_euclid(self.slide);
        (0..)
            .map(move |step| last - step * self.slide)
            .take_while(move |start| start + self.size > ts)
    }
}

/// How rows are assigned to windows.
#[derive(Debug, Clone, Copy)]
enum Windows {
    /// TUMBLE (`slide == size`) and HOP.
    Hop(Shape),
    /// `slide` is the step; `size` must be a whole number of steps.
    Cumulate(Shape),
}

impl Windows {
    /// The windows `(start, end)` that contain `ts`.
    fn of(self, ts: i64) -> Vec<(i64, i64)> {
        match self {
            Windows::Hop(shape) => shape
                .starts(ts)
                .map(|start| (start, start + shape.size))
                .collect(),
            Windows::Cumulate(shape) => {
                // Every end on the step grid after ts, up to the period's end.
                let start = ts - ts.rem_euclid(shape.size);
                let first_end = ts - ts.rem_euclid(shape.slide) + shape.slide;
                (first_end..=start + shape.size)
                    .step_by(shape.slide as usize)
                    .map(|end| (start, end))
                    .collect()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum LateData {
    Drop,
    /// Allowed lateness in milliseconds (whole seconds).
    Update(i64),
    SideOutput,
}

impl LateData {
    /// How long past its end a window still takes rows.
    fn allowed_lateness(self) -> i64 {
        match self {
            LateData::Update(lateness) => lateness,
            LateData::Drop | LateData::SideOutput => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Emit {
    OnUpdate,
    OnWindowClose,
}

/// The watermark each row is judged against: none before the first row
/// with a time.
fn watermarks_before(events: &[Event]) -> Vec<Option<i64>> {
    let mut max_ts: Option<i64> = None;
    events
        .iter()
        .map(|event| {
            let before = max_ts.map(|max| max - DELAY_MS);
            max_ts = max_ts.max(event.ts);
            before
        })
        .collect()
}

fn final_watermark(events: &[Event]) -> Option<i64> {
    events
        .iter()
        .filter_map(|event| event.ts)
        .max()
        .map(|max| max - DELAY_MS)
}

/// The aggregates of one group, computed the batch way.
#[derive(Debug, Default)]
struct Agg {
    rows: i64,
    sum: Option<i64>,
    min: Option<i64>,
    max: Option<i64>,
    distinct: BTreeSet<i64>,
    non_null: i64,
}

impl Agg {
    fn add(&mut self, v: Option<i64>) {
        self.rows += 1;
        let Some(v) = v else { return };
        self.sum = Some(self.sum.unwrap_or(0) + v);
        self.min = Some(self.min.map_or(v, |min| min.min(v)));
        self.max = Some(self.max.map_or(v, |max| max.max(v)));
        self.distinct.insert(v);
        self.non_null += 1;
    }
}

/// A result row with every value as an optional i64 (timestamps in ms).
type Cells = Vec<Option<i64>>;

/// A late row and the window it missed, as `<view>_late` records it.
struct Missed {
    event: Event,
    start: i64,
    end: i64,
    watermark: i64,
}

/// A window's group: (window start, window end, k).
type WindowKey = (i64, i64, Option<i64>);

/// Per window and k, the aggregates over the rows on time for that window;
/// and every (row, window) pair dropped as late.
struct Windowed {
    groups: BTreeMap<WindowKey, Agg>,
    missed: Vec<Missed>,
}

fn windowed_groups(events: &[Event], windows: Windows, emit: Emit, lateness: i64) -> Windowed {
    let mut groups: BTreeMap<WindowKey, Agg> = BTreeMap::new();
    let mut missed = Vec::new();
    for (event, watermark) in events.iter().zip(watermarks_before(events)) {
        let Some(ts) = event.ts else { continue };
        for (start, end) in windows.of(ts) {
            match watermark {
                Some(watermark) if watermark >= end + lateness => missed.push(Missed {
                    event: *event,
                    start,
                    end,
                    watermark,
                }),
                _ => groups
                    .entry((start, end, event.k))
                    .or_default()
                    .add(event.v),
            }
        }
    }
    if emit == Emit::OnWindowClose {
        // Closed windows show whatever the allowed lateness let in since.
        let closed_until = final_watermark(events);
        groups.retain(|(_, end, _), _| closed_until.is_some_and(|w| *end <= w));
    }
    Windowed { groups, missed }
}

/// One key's SESSION window: `[start, end)`, `end` being its last row's
/// time plus the gap, and the values of its rows.
struct Session {
    start: i64,
    end: i64,
    values: Vec<Option<i64>>,
}

impl Session {
    /// Whether a row at `ts`, opening `[ts, ts + gap)`, overlaps or touches
    /// this session (a row exactly a gap after the last one joins).
    fn touches(&self, ts: i64, gap: i64) -> bool {
        self.start <= ts + gap && self.end >= ts
    }

    /// Whether the session is complete for good: it takes no more rows.
    fn is_final(&self, watermark: i64, lateness: i64) -> bool {
        watermark >= self.end + lateness
    }
}

/// Every key's sessions, and every row dropped as late.
#[derive(Default)]
struct Sessionized {
    by_key: BTreeMap<Option<i64>, Vec<Session>>,
    missed: Vec<Missed>,
    /// Rows that joined an open session though their own window was final.
    joined_after_own_window: usize,
}

/// Builds SESSION windows row by row in arrival order. Final sessions are
/// kept, never reopened: a row touching one is late. (The server forgets
/// them once no row can touch them and an open session too.)
fn sessionize(events: &[Event], gap: i64, lateness: i64) -> Sessionized {
    let mut result = Sessionized::default();
    for (event, watermark) in events.iter().zip(watermarks_before(events)) {
        let Some(ts) = event.ts else { continue };
        let sessions = result.by_key.entry(event.k).or_default();
        match watermark {
            Some(watermark) if session_row_late(sessions, ts, gap, watermark, lateness) => {
                result.missed.push(Missed {
                    event: *event,
                    start: ts,
                    end: ts + gap,
                    watermark,
                })
            }
            _ => {
                let own_final = watermark.is_some_and(|w| w >= ts + gap + lateness);
                result.joined_after_own_window += usize::from(own_final);
                merge_row(sessions, ts, gap, event.v)
            }
        }
    }
    result
}

/// A row is late when it touches a final session of its key, or when it
/// touches none and its own window `[ts, ts + gap)` is final.
fn session_row_late(
    sessions: &[Session],
    ts: i64,
    gap: i64,
    watermark: i64,
    lateness: i64,
) -> bool {
    let mut touching = sessions.iter().filter(|s| s.touches(ts, gap)).peekable();
    let touches_any = touching.peek().is_some();
    touching.any(|s| s.is_final(watermark, lateness))
        || (!touches_any && watermark >= ts + gap + lateness)
}

/// Replaces the sessions a row touches by one session over their rows and
/// the row's own.
fn merge_row(sessions: &mut Vec<Session>, ts: i64, gap: i64, v: Option<i64>) {
    let (touching, rest): (Vec<Session>, Vec<Session>) = std::mem::take(sessions)
        .into_iter()
        .partition(|s| s.touches(ts, gap));
    let mut merged = Session {
        start: ts,
        end: ts + gap,
        values: vec![v],
    };
    for session in touching {
        merged.start = merged.start.min(session.start);
        merged.end = merged.end.max(session.end);
        merged.values.extend(session.values);
    }
    *sessions = rest;
    sessions.push(merged);
}

/// SESSION views: k, window_start, window_end, n, s.
fn session_row(k: Option<i64>, session: &Session) -> Cells {
    let mut agg = Agg::default();
    session.values.iter().for_each(|v| agg.add(*v));
    vec![
        k,
        Some(session.start),
        Some(session.end),
        Some(agg.rows),
        agg.sum,
    ]
}

/// What one view must contain: its rows (sorted), its late row count and,
/// for `late_data = 'side_output'`, the rows of `<view>_late` (sorted).
struct Expected {
    rows: Vec<Cells>,
    late: u64,
    side_output: Option<Vec<Cells>>,
}

/// TUMBLE and CUMULATE views: window_start, window_end, k, n, s, lo, hi, d, c.
fn full_row(&(start, end, k): &WindowKey, agg: &Agg) -> Cells {
    let d = agg.distinct.len() as i64;
    let head = [Some(start), Some(end), k, Some(agg.rows)];
    let tail = [agg.sum, agg.min, agg.max, Some(d), Some(agg.non_null)];
    head.into_iter().chain(tail).collect()
}

/// HOP views: window_start, k, n, s.
fn hop_row(&(start, _, k): &WindowKey, agg: &Agg) -> Cells {
    vec![Some(start), k, Some(agg.rows), agg.sum]
}

/// `<view>_late`: the table's columns k, v, ts, then window_start,
/// window_end and the watermark the row arrived under.
fn side_output_rows(missed: &[Missed]) -> Vec<Cells> {
    let mut rows: Vec<Cells> = missed
        .iter()
        .map(|m| {
            let e = m.event;
            vec![
                e.k,
                e.v,
                e.ts,
                Some(m.start),
                Some(m.end),
                Some(m.watermark),
            ]
        })
        .collect();
    rows.sort();
    rows
}

fn expect_windowed(
    events: &[Event],
    windows: Windows,
    emit: Emit,
    late_data: LateData,
    row: fn(&WindowKey, &Agg) -> Cells,
) -> Expected {
    let windowed = windowed_groups(events, windows, emit, late_data.allowed_lateness());
    let side_output =
        (late_data == LateData::SideOutput).then(|| side_output_rows(&windowed.missed));
    Expected {
        rows: windowed
            .groups
            .iter()
            .map(|(key, agg)| row(key, agg))
            .collect(),
        late: windowed.missed.len() as u64,
        side_output,
    }
}

/// SESSION views show every session, complete or not; under EMIT ON WINDOW
/// CLOSE only those ending at or before the final watermark (with every row
/// the allowed lateness let in; a correction that moves a session's end
/// past the watermark hides it again).
fn expect_session(events: &[Event], emit: Emit, late_data: LateData, gap: i64) -> Expected {
    let sessionized = sessionize(events, gap, late_data.allowed_lateness());
    let closed_until = final_watermark(events);
    let shown = |session: &&Session| {
        emit == Emit::OnUpdate || closed_until.is_some_and(|w| session.end <= w)
    };
    let mut rows: Vec<Cells> = sessionized
        .by_key
        .iter()
        .flat_map(|(k, sessions)| sessions.iter().filter(shown).map(|s| session_row(*k, s)))
        .collect();
    rows.sort();
    let side_output =
        (late_data == LateData::SideOutput).then(|| side_output_rows(&sessionized.missed));
    Expected {
        rows,
        late: sessionized.missed.len() as u64,
        side_output,
    }
}

/// The unwindowed view: k, n, s, c over every row (nothing is late).
fn expect_by_key(events: &[Event]) -> Expected {
    let mut groups: BTreeMap<Option<i64>, Agg> = BTreeMap::new();
    for event in events {
        groups.entry(event.k).or_default().add(event.v);
    }
    let rows = groups
        .iter()
        .map(|(k, agg)| vec![*k, Some(agg.rows), agg.sum, Some(agg.non_null)])
        .collect();
    Expected {
        rows,
        late: 0,
        side_output: None,
    }
}

/// The views made over each seed's table.
#[derive(Debug, Clone, Copy)]
enum ViewKind {
    Tumble(Emit, LateData),
    Hop(Emit),
    Cumulate(Emit),
    ByKey,
    /// `gap` in milliseconds (whole seconds).
    Session {
        emit: Emit,
        late_data: LateData,
        gap: i64,
    },
    /// The view of this kind with `EMIT EVERY INTERVAL '1' HOUR` added.
    Fired(FiredKind),
}

/// The kinds a view with `EMIT EVERY` is made of.
#[derive(Debug, Clone, Copy)]
enum FiredKind {
    Tumble(Emit, LateData),
    Hop(Emit),
    ByKey,
}

impl FiredKind {
    /// The view without EMIT EVERY, emitting as `emit`.
    fn base(self, emit_of: fn(Emit) -> Emit) -> ViewKind {
        match self {
            FiredKind::Tumble(emit, late_data) => ViewKind::Tumble(emit_of(emit), late_data),
            FiredKind::Hop(emit) => ViewKind::Hop(emit_of(emit)),
            FiredKind::ByKey => ViewKind::ByKey,
        }
    }
}

/// One view of every kind; the seed picks the allowed lateness and the
/// SESSION gap.
fn view_kinds(seed: u64) -> [ViewKind; 19] {
    let lateness = ALLOWED_LATENESS_MS[seed as usize % ALLOWED_LATENESS_MS.len()];
    let update = LateData::Update(lateness);
    let gap = SESSION_GAPS_MS[seed as usize % SESSION_GAPS_MS.len()];
    let session = |emit, late_data| ViewKind::Session {
        emit,
        late_data,
        gap,
    };
    [
        ViewKind::Tumble(Emit::OnUpdate, LateData::Drop),
        ViewKind::Tumble(Emit::OnWindowClose, LateData::Drop),
        ViewKind::Hop(Emit::OnUpdate),
        ViewKind::Hop(Emit::OnWindowClose),
        ViewKind::ByKey,
        ViewKind::Cumulate(Emit::OnUpdate),
        ViewKind::Cumulate(Emit::OnWindowClose),
        ViewKind::Tumble(Emit::OnUpdate, update),
        ViewKind::Tumble(Emit::OnWindowClose, update),
        ViewKind::Tumble(Emit::OnUpdate, LateData::SideOutput),
        session(Emit::OnUpdate, LateData::Drop),
        session(Emit::OnWindowClose, LateData::Drop),
        session(Emit::OnWindowClose, update),
        session(Emit::OnUpdate, update),
        session(Emit::OnUpdate, LateData::SideOutput),
        ViewKind::Fired(FiredKind::Tumble(Emit::OnUpdate, LateData::Drop)),
        ViewKind::Fired(FiredKind::Tumble(Emit::OnWindowClose, update)),
        ViewKind::Fired(FiredKind::Hop(Emit::OnWindowClose)),
        ViewKind::Fired(FiredKind::ByKey),
    ]
}

fn emit_clause(emit: Emit) -> &'static str {
    match emit {
        Emit::OnUpdate => "",
        Emit::OnWindowClose => " EMIT ON WINDOW CLOSE",
    }
}

/// The `WITH (...)` clause; `explicit` spells out the default `drop`.
fn with_clause(late_data: LateData, explicit: bool) -> String {
    match late_data {
        LateData::Drop if !explicit => String::new(),
        LateData::Drop => " WITH (late_data = 'drop')".to_string(),
        LateData::Update(lateness) => format!(
            " WITH (late_data = 'update', allowed_lateness = '{} seconds')",
            lateness / 1_000
        ),
        LateData::SideOutput => " WITH (late_data = 'side_output')".to_string(),
    }
}

/// A HOP or CUMULATE source of 20 s slides/steps and 1 minute size, in the
/// `TABLE(F(TABLE t, DESCRIPTOR(ts), ...))` spelling when `flink`.
fn sliding_source(function: &str, table: &str, flink: bool) -> String {
    let lengths = "INTERVAL '20' SECOND, INTERVAL '1' MINUTE";
    if flink {
        format!("TABLE({function}(TABLE {table}, DESCRIPTOR(ts), {lengths}))")
    } else {
        format!("{function}({table}, ts, {lengths})")
    }
}

/// A SESSION source keyed by k (through GROUP BY; Flink's PARTITION BY is
/// accepted and ignored), in the Flink spelling when `flink`.
fn session_source(table: &str, gap: i64, flink: bool) -> String {
    let gap = format!("INTERVAL '{}' SECOND", gap / 1_000);
    if flink {
        format!("TABLE(SESSION(TABLE {table} PARTITION BY k, DESCRIPTOR(ts), {gap}))")
    } else {
        format!("SESSION({table}, ts, {gap})")
    }
}

/// The aggregates of TUMBLE and CUMULATE views, grouped by both window
/// columns (CUMULATE windows share starts, so it needs window_end).
fn full_select(source: &str, emit: Emit) -> String {
    format!(
        "SELECT window_start, window_end, k, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, \
         MAX(v) AS hi, COUNT(DISTINCT v) AS d, COUNT(v) AS c \
         FROM {source} GROUP BY window_start, window_end, k{}",
        emit_clause(emit)
    )
}

/// The CREATE statement for a view; `flink` picks the Flink spelling for
/// HOP, CUMULATE and SESSION, and an explicit `late_data = 'drop'` for
/// TUMBLE and SESSION.
fn create_sql(name: &str, table: &str, kind: ViewKind, flink: bool) -> String {
    if let ViewKind::Fired(fired) = kind {
        let base = create_sql(name, table, fired.base(|emit| emit), flink);
        return match base.strip_suffix(" EMIT ON WINDOW CLOSE") {
            Some(body) if flink => format!("{body} EMIT EVERY INTERVAL '1' HOUR ON WINDOW CLOSE"),
            Some(body) => format!("{body} EMIT ON WINDOW CLOSE AND EVERY '1 hour'"),
            None => format!("{base} EMIT EVERY INTERVAL '60' MINUTE"),
        };
    }
    let (with, body) = match kind {
        ViewKind::Tumble(emit, late_data) => {
            let source = format!("TUMBLE({table}, ts, INTERVAL '1' MINUTE)");
            (with_clause(late_data, flink), full_select(&source, emit))
        }
        ViewKind::Hop(emit) => {
            let source = sliding_source("HOP", table, flink);
            let body = format!(
                "SELECT window_start, k, COUNT(*) AS n, SUM(v) AS s FROM {source} \
                 GROUP BY window_start, k{}",
                emit_clause(emit)
            );
            (String::new(), body)
        }
        ViewKind::Cumulate(emit) => {
            let source = sliding_source("CUMULATE", table, flink);
            (String::new(), full_select(&source, emit))
        }
        ViewKind::ByKey => {
            let body = format!(
                "SELECT k, COUNT(*) AS n, SUM(v) AS s, COUNT(v) AS c FROM {table} GROUP BY k"
            );
            (String::new(), body)
        }
        ViewKind::Session {
            emit,
            late_data,
            gap,
        } => {
            let body = format!(
                "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS s FROM {} \
                 GROUP BY k, window_start, window_end{}",
                session_source(table, gap, flink),
                emit_clause(emit)
            );
            (with_clause(late_data, flink), body)
        }
        ViewKind::Fired(_) => {
            unreachable!("an EMIT EVERY view is its base view's SQL plus the clause")
        }
    };
    format!("CREATE MATERIALIZED VIEW {name}{with} AS {body}")
}

fn expected(kind: ViewKind, events: &[Event]) -> Expected {
    match kind {
        ViewKind::Tumble(emit, late_data) => {
            expect_windowed(events, Windows::Hop(TUMBLE), emit, late_data, full_row)
        }
        ViewKind::Hop(emit) => {
            expect_windowed(events, Windows::Hop(HOP), emit, LateData::Drop, hop_row)
        }
        ViewKind::Cumulate(emit) => expect_windowed(
            events,
            Windows::Cumulate(CUMULATE),
            emit,
            LateData::Drop,
            full_row,
        ),
        ViewKind::ByKey => expect_by_key(events),
        ViewKind::Session {
            emit,
            late_data,
            gap,
        } => expect_session(events, emit, late_data, gap),
        // Just after a firing: as on update.
        ViewKind::Fired(fired) => expected(fired.base(|_| Emit::OnUpdate), events),
    }
}

/// Moves the server's clock on by an hour: every `EMIT EVERY` view with
/// rows since its last firing fires before the statement completes.
async fn fire(client: &Client) {
    static HOURS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let hours = HOURS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    client
        .batch_execute(&format!("ALTER SYSTEM SET emit_clock_offset = '{hours}h'"))
        .await
        .unwrap();
}

/// A view's rows, each value as an optional i64 (timestamps in ms), sorted.
async fn view_rows(client: &Client, name: &str) -> Vec<Cells> {
    let rows = client
        .query(&format!("SELECT * FROM {name}"), &[])
        .await
        .unwrap_or_else(|error| panic!("reading {name}: {error}"));
    let mut cells: Vec<Cells> = rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|index| match *row.columns()[index].type_() {
                    Type::INT8 => row.get::<_, Option<i64>>(index),
                    // sum(bigint) is numeric, as in Postgres.
                    Type::NUMERIC => row
                        .get::<_, Option<rust_decimal::Decimal>>(index)
                        .map(|sum| i64::try_from(sum).expect("a sum beyond bigint")),
                    Type::TIMESTAMP => row
                        .get::<_, Option<NaiveDateTime>>(index)
                        .map(|time| time.and_utc().timestamp_millis()),
                    ref other => panic!("{name}: unexpected column type {other}"),
                })
                .collect()
        })
        .collect();
    cells.sort();
    cells
}

async fn late_rows(client: &Client, name: &str) -> u64 {
    let row = client
        .query_one(
            "SELECT late_rows FROM weir_catalog.materialized_views WHERE view_name = $1",
            &[&name],
        )
        .await
        .unwrap_or_else(|error| panic!("late_rows of {name}: {error}"));
    row.get::<_, i64>(0) as u64
}

/// Compares a relation's rows with the oracle's; the panic names the seed
/// and the rows missing from and extra in the relation.
async fn check_rows(client: &Client, seed: u64, name: &str, expected: &[Cells]) {
    let actual = view_rows(client, name).await;
    if actual != expected {
        let missing: Vec<_> = expected.iter().filter(|r| !actual.contains(r)).collect();
        let extra: Vec<_> = actual.iter().filter(|r| !expected.contains(r)).collect();
        panic!(
            "seed {seed}, view {name}: {} rows expected, {} found\n\
             missing: {missing:?}\nextra: {extra:?}",
            expected.len(),
            actual.len()
        );
    }
}

/// Compares a view, its late row count and its side output (if any) with
/// the oracle.
async fn check_view(client: &Client, seed: u64, name: &str, expected: Expected) {
    check_rows(client, seed, name, &expected.rows).await;
    let late = late_rows(client, name).await;
    assert_eq!(late, expected.late, "seed {seed}, view {name}: late_rows");
    if let Some(side_output) = expected.side_output {
        // One side output row per late_rows count, then the exact rows.
        let late_name = format!("{name}_late");
        let count = client
            .query_one(&format!("SELECT COUNT(*) FROM {late_name}"), &[])
            .await
            .unwrap_or_else(|error| panic!("counting {late_name}: {error}"))
            .get::<_, i64>(0);
        assert_eq!(
            count as u64, late,
            "seed {seed}: {late_name} rows vs late_rows"
        );
        check_rows(client, seed, &late_name, &side_output).await;
    }
}

/// One seed's table and the views over it.
struct Scenario {
    seed: u64,
    table: String,
    /// (view name, kind), in creation order.
    views: Vec<(String, ViewKind)>,
}

impl Scenario {
    async fn create_table(client: &Client, seed: u64) -> Scenario {
        let table = format!("ev{seed}");
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (k BIGINT, v BIGINT, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts - INTERVAL '10' SECOND) APPEND ONLY"
            ))
            .await
            .unwrap();
        client
            .batch_execute(&format!(
                "CREATE TABLE {table}_stage (seq BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP)"
            ))
            .await
            .unwrap();
        Scenario {
            seed,
            table,
            views: Vec::new(),
        }
    }

    /// Creates one view of every kind, named `<table>_<tag><index>`. The
    /// spellings alternate across seeds and between neighbouring views.
    async fn create_views(&mut self, client: &Client, tag: &str) {
        for (index, kind) in view_kinds(self.seed).into_iter().enumerate() {
            let name = format!("{}_{tag}{index}", self.table);
            let flink = (self.seed + index as u64) % 2 == 0;
            let sql = create_sql(&name, &self.table, kind, flink);
            client
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|error| panic!("seed {}: {sql}: {error}", self.seed));
            self.views.push((name, kind));
        }
    }

    /// Checks every view against the oracle over the rows inserted so far
    /// (the `EMIT EVERY` views just after a firing).
    async fn check(&self, client: &Client, inserted: &[Event]) {
        fire(client).await;
        for (name, kind) in &self.views {
            check_view(client, self.seed, name, expected(*kind, inserted)).await;
        }
    }

    async fn drop_all(&self, client: &Client) {
        for (name, _) in &self.views {
            client
                .batch_execute(&format!("DROP MATERIALIZED VIEW {name}"))
                .await
                .unwrap();
        }
        let table = &self.table;
        client
            .batch_execute(&format!("DROP TABLE {table}; DROP TABLE {table}_stage"))
            .await
            .unwrap();
    }
}

/// Views made before any row and, every third seed, a second set made after
/// a random number of INSERTs (possibly all), backfilled from the table's
/// history. All views are checked at that point and at the end.
async fn run_seed(client: &Client, seed: u64) {
    let mut rng = Rng(seed);
    let events = generate(&mut rng);
    let batches = batches(&mut rng, &events);
    let checkpoint = rng.range(1, batches.len() as i64 + 1) as usize;
    let mut scenario = Scenario::create_table(client, seed).await;
    scenario.create_views(client, "early").await;
    let mut inserted = Vec::new();
    // Its own generator: the rows and statements stay those of the seed.
    let mut firings = Rng(seed ^ 0xf1e5);
    for (index, batch) in batches.iter().enumerate() {
        if firings.range(0, 4) == 0 {
            fire(client).await;
        }
        // A quarter of the statements are INSERT ... SELECT.
        let sql = match rng.range(0, 8) {
            0 => insert_select_sql(&scenario.table, batch, inserted.len(), true),
            1 => insert_select_sql(&scenario.table, batch, inserted.len(), false),
            _ => insert_sql(&scenario.table, batch),
        };
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|error| panic!("seed {seed}: insert: {error}"));
        inserted.extend_from_slice(batch);
        if index + 1 == checkpoint {
            if seed % 3 == 0 {
                scenario.create_views(client, "backfilled").await;
            }
            scenario.check(client, &inserted).await;
        }
    }
    scenario.check(client, &inserted).await;
    scenario.drop_all(client).await;
}

/// `ORACLE_SEEDS=7` runs seed 7 only, `ORACLE_SEEDS=0..400` a range.
fn seeds() -> std::ops::Range<u64> {
    let Ok(text) = std::env::var("ORACLE_SEEDS") else {
        return 0..SEEDS;
    };
    let number = |part: &str| part.trim().parse::<u64>().expect("ORACLE_SEEDS: n or a..b");
    match text.split_once("..") {
        Some((first, end)) => number(first)..number(end),
        None => number(&text)..number(&text) + 1,
    }
}

/// The generated rows do exercise the SESSION rule: some join an open
/// session after their own window completed.
#[test]
fn some_rows_join_open_sessions_after_their_own_window_completed() {
    let mut joined = 0;
    for seed in 0..SEEDS {
        let events = generate(&mut Rng(seed));
        for gap in SESSION_GAPS_MS {
            joined += sessionize(&events, gap, 0).joined_after_own_window;
        }
    }
    assert!(joined > 0, "no generated row joins an open session late");
}

/// Seeds spread over servers at parallelism 1, 2 and 4 (the default, two
/// partitions per core, and more partitions than cores): the oracle knows
/// nothing of partitions, so results must not depend on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_batch_group_by_over_on_time_rows() {
    let temp = tempfile::tempdir().unwrap();
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for parallelism in ["1", "2", "4"] {
        let data_dir = temp.path().join(format!("data-{parallelism}"));
        let server = TestServer::start_with(&data_dir, &["--parallelism", parallelism]);
        clients.push(server.connect().await);
        servers.push(server);
    }
    for seed in seeds() {
        // Runs of three seeds per server, so each server also gets seeds
        // that backfill (`seed % 3 == 0`).
        let server = (seed / 3) as usize % clients.len();
        run_seed(&clients[server], seed).await;
    }
}
