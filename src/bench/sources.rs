//! `weir bench --scenario sources`: how fast the Nexmark generator makes
//! bids on one core, with nothing stored (so it is never what limits a
//! source), and how fast a nexmark source gets them into a view end to end
//! (generate, append to the source's log, run the view, fsync per commit).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use super::{first_row, query};
use crate::connectors::source::nexmark::{NexmarkOptions, NexmarkReader};
use crate::connectors::source::{Read, SourceReader};
use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::session::Session;

const BID_COLUMNS: &str = "auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, \
    url TEXT, date_time TIMESTAMP, extra TEXT";

/// Events that hold `bids` bids (46 in every 50).
fn events_for(bids: u64) -> u64 {
    bids.div_ceil(46) * 50
}

/// The generator and the nexmark source; with `kafka` (a broker's
/// address) also a Kafka source over the same bids.
pub async fn run(bids: u64, root: &Path, kafka: Option<&str>) -> Result<()> {
    println!("| scenario | bids | seconds | bids/s |");
    println!("|---|---:|---:|---:|");
    let (rows, elapsed) = generate(bids)?;
    print_row("nexmark-generator", rows, elapsed);
    let (rows, elapsed) = through_a_view(bids, &root.join("nexmark-source")).await?;
    print_row("nexmark-source-to-view", rows, elapsed);
    if let Some(broker) = kafka {
        let topic = super::kafka::fill_topic(broker, rows, options(bids)?).await?;
        let directory = root.join("kafka-source");
        let elapsed = super::kafka::through_a_view(broker, &topic, rows, &directory).await?;
        print_row("kafka-source-to-view", rows, elapsed);
    }
    Ok(())
}

fn print_row(scenario: &str, rows: u64, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    let rate = rows as f64 / seconds.max(f64::EPSILON);
    println!("| {scenario} | {rows} | {seconds:.3} | {rate:.0} |");
}

fn options(bids: u64) -> Result<NexmarkOptions> {
    let pairs = [
        ("nexmark.table.type", "Bid".to_string()),
        ("nexmark.event.num", events_for(bids).to_string()),
        ("nexmark.min.event.gap.in.ns", "0".to_string()),
        ("nexmark.max.chunk.size", "65536".to_string()),
    ];
    let map = pairs
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    NexmarkOptions::parse(&map)
}

/// Every column of every bid, built and dropped.
fn generate(bids: u64) -> Result<(u64, Duration)> {
    let time = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("url", DataType::Utf8, true),
        Field::new("date_time", time, true),
        Field::new("extra", DataType::Utf8, true),
    ]));
    let mut reader = NexmarkReader::new(options(bids)?, &schema, 0)?;
    let started = Instant::now();
    let mut rows = 0;
    loop {
        match reader.read(65536)? {
            Read::Rows(batch) => rows += batch.num_rows() as u64,
            Read::Finished => break,
            Read::Wait(_) => return Err(WeirError::internal("an unpaced generator waited")),
        }
    }
    Ok((rows, started.elapsed()))
}

/// From CREATE SOURCE until the source is finished and its view current.
async fn through_a_view(bids: u64, directory: &Path) -> Result<(u64, Duration)> {
    if directory.exists() {
        return Err(WeirError::io(format!(
            "{} already exists; give --data-dir a fresh directory",
            directory.display()
        )));
    }
    let engine = Engine::open(directory).await?;
    engine.start_sources();
    let session = Session::new(engine.clone());
    let started = Instant::now();
    query(
        &session,
        &format!(
            "CREATE SOURCE bid ({BID_COLUMNS}, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
             WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.event.num = {}, \
             nexmark.min.event.gap.in.ns = 0); \
             CREATE MATERIALIZED VIEW per_auction AS \
             SELECT auction, count(*) AS bids, max(price) AS top FROM bid GROUP BY auction",
            events_for(bids)
        ),
    )
    .await?;
    let finished = "SELECT count(*) FROM weir_catalog.sources WHERE state = 'finished'";
    while first_row(&session, finished).await?.first() != Some(&Some(1)) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let rows = first_row(&session, "SELECT count(*) FROM bid").await?;
    let viewed = first_row(
        &session,
        "SELECT CAST(sum(bids) AS BIGINT) FROM per_auction",
    )
    .await?;
    if rows != viewed {
        return Err(WeirError::internal(format!(
            "the view counted {viewed:?} bids of {rows:?}"
        )));
    }
    Ok((rows[0].unwrap_or(0) as u64, elapsed))
}
