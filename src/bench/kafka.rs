//! `weir bench --scenario sources --kafka HOST:PORT`: how fast a Kafka
//! source gets bids from a broker into a view. The bids (Nexmark's, as JSON
//! objects) are written to a fresh topic of 3 partitions first; the clock
//! runs from CREATE SOURCE until the source holds every bid, and the view
//! must then have counted them all.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::{first_row, query};
use crate::connectors::source::nexmark::{NexmarkOptions, NexmarkReader};
use crate::connectors::source::{Read, SourceReader};
use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::session::Session;

const PARTITIONS: i32 = 3;

fn failed(what: &str) -> impl Fn(KafkaError) -> WeirError + '_ {
    move |error| WeirError::io(format!("{what}: {error}"))
}

/// Writes `bids` bids to a new topic and returns its name.
pub async fn fill_topic(broker: &str, bids: u64, options: NexmarkOptions) -> Result<String> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    let topic = format!("weir-bench-{stamp}");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()
        .map_err(failed("Kafka admin client"))?;
    let new = NewTopic::new(&topic, PARTITIONS, TopicReplication::Fixed(1));
    let created = admin
        .create_topics([&new], &AdminOptions::new())
        .await
        .map_err(failed("create the topic"))?;
    for outcome in created {
        outcome.map_err(|(name, code)| WeirError::io(format!("create topic {name}: {code}")))?;
    }
    let writing = topic.clone();
    let broker = broker.to_string();
    tokio::task::spawn_blocking(move || produce(&broker, &writing, bids, options))
        .await
        .map_err(|error| WeirError::internal(error.to_string()))??;
    Ok(topic)
}

fn produce(broker: &str, topic: &str, bids: u64, options: NexmarkOptions) -> Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(failed("Kafka producer"))?;
    let time = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("date_time", time, true),
    ]));
    let mut reader = NexmarkReader::new(options, &schema, 0)?;
    let (mut sent, mut text) = (0u64, String::new());
    while let Read::Rows(batch) = reader.read(65536)? {
        let columns = (0..4)
            .map(|i| {
                let numbers = cast(batch.column(i), &DataType::Int64)?;
                Ok(numbers.as_primitive::<Int64Type>().clone())
            })
            .collect::<Result<Vec<_>>>()?;
        for row in 0..batch.num_rows() {
            text.clear();
            let at = chrono::DateTime::from_timestamp_nanos(columns[3].value(row));
            text.push_str(&format!(
                "{{\"auction\":{},\"bidder\":{},\"price\":{},\"date_time\":\"{}\"}}",
                columns[0].value(row),
                columns[1].value(row),
                columns[2].value(row),
                at.naive_utc()
            ));
            send(&producer, topic, (sent % PARTITIONS as u64) as i32, &text)?;
            sent += 1;
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(failed("flush"))?;
    match sent == bids {
        true => Ok(()),
        false => Err(WeirError::internal(format!("wrote {sent} bids of {bids}"))),
    }
}

fn send(producer: &BaseProducer, topic: &str, partition: i32, text: &str) -> Result<()> {
    loop {
        let record = BaseRecord::<(), str>::to(topic)
            .partition(partition)
            .payload(text);
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(10));
            }
            Err((error, _)) => return Err(failed("produce")(error)),
        }
    }
}

/// From CREATE SOURCE until the source holds every bid of `topic`.
pub async fn through_a_view(
    broker: &str,
    topic: &str,
    bids: u64,
    directory: &Path,
) -> Result<Duration> {
    let engine = Engine::open(directory).await?;
    engine.start_sources();
    let session = Session::new(engine.clone());
    let started = Instant::now();
    query(
        &session,
        &format!(
            "CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, \
             WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
             WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{broker}') \
             FORMAT PLAIN ENCODE JSON; \
             CREATE MATERIALIZED VIEW per_auction AS \
             SELECT auction, count(*) AS bids, max(price) AS top FROM bid GROUP BY auction"
        ),
    )
    .await?;
    let read = "SELECT count(*) FROM bid";
    while first_row(&session, read).await?.first() != Some(&Some(bids as i64)) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let viewed = first_row(
        &session,
        "SELECT CAST(sum(bids) AS BIGINT) FROM per_auction",
    )
    .await?;
    match viewed.first() == Some(&Some(bids as i64)) {
        true => Ok(elapsed),
        false => Err(WeirError::internal(format!(
            "the view counted {viewed:?} bids of {bids}"
        ))),
    }
}
