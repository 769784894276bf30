//! `connector = 'kafka'`: a sink's records as messages of a topic, each
//! once. weir does not use Kafka transactions (a new producer after a
//! crash cannot finish the old one's); instead every message says which
//! change it is (header `weir.change` = `sequence:index`) and goes to a
//! partition fixed by its content: an UPSERT record by the hash of its key
//! (Kafka's own murmur2, so Java producers agree), a PLAIN one by its
//! number. A partition then receives its messages in change order
//! (librdkafka's idempotent producer keeps order and drops repeats within
//! one run), so after a restart the last message of each partition says
//! exactly which of the unmarked changes arrived, and only the others are
//! sent. The topic should be written by this sink alone.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};

use super::{Record, SinkMark, SinkWriter};
use crate::connectors::source::kafka::{client_settings, topic_and_servers};
use crate::connectors::source::options::Options;
use crate::error::{sqlstate, Result, WeirError};

/// How long a question to the brokers may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long delivering what was sent may take before the shipper retries.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// The header that names a message's change.
const CHANGE_HEADER: &str = "weir.change";

const KNOWN: &str = "topic, properties.bootstrap.server (properties.bootstrap.servers) and \
     properties.<librdkafka setting>";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSinkOptions {
    pub topic: String,
    pub servers: String,
    pub client: Vec<(String, String)>,
}

impl KafkaSinkOptions {
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self> {
        let mut given = Options::new("kafka", options);
        let (topic, servers) = topic_and_servers(&mut given)?;
        let client = client_settings(&mut given);
        given.finish(KNOWN)?;
        Ok(KafkaSinkOptions {
            topic,
            servers,
            client,
        })
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.servers);
        for (name, value) in &self.client {
            config.set(name, value);
        }
        config
    }
}

/// Remembers the first failed delivery of a run.
#[derive(Default)]
struct Deliveries {
    failed: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| error.to_string());
        }
    }
}

pub struct KafkaWriter {
    options: KafkaSinkOptions,
    producer: BaseProducer<Deliveries>,
    partitions: i32,
    /// Per partition, the last change it holds (from before this run).
    tails: Vec<Option<(u64, u64)>>,
}

fn client_error(error: KafkaError) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("the Kafka client refused its settings: {error}"),
    )
    .with_hint("properties.<name> options are librdkafka settings; check their names and values.")
}

fn cannot_reach(topic: &str, error: impl std::fmt::Display) -> WeirError {
    WeirError::new(
        sqlstate::CANNOT_CONNECT,
        format!("cannot reach topic {topic}: {error}"),
    )
    .with_hint("Check properties.bootstrap.server, and that the topic exists.")
}

impl KafkaWriter {
    pub fn new(options: KafkaSinkOptions) -> Result<Self> {
        let mut config = options.config();
        config
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        let producer = config
            .create_with_context(Deliveries::default())
            .map_err(client_error)?;
        Ok(KafkaWriter {
            options,
            producer,
            partitions: 0,
            tails: Vec::new(),
        })
    }

    fn partition_count(&self) -> Result<i32> {
        let topic = &self.options.topic;
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(topic), BROKER_TIMEOUT)
            .map_err(|error| cannot_reach(topic, error))?;
        let partitions = metadata
            .topics()
            .iter()
            .find(|found| found.name() == topic && found.error().is_none())
            .map_or(0, |found| found.partitions().len());
        if partitions == 0 {
            return Err(cannot_reach(topic, "the topic has no partitions"));
        }
        Ok(partitions as i32)
    }

    /// The change the last message of each partition carries.
    fn read_tails(&self) -> Result<Vec<Option<(u64, u64)>>> {
        let topic = &self.options.topic;
        let mut config = self.options.config();
        config
            .set("group.id", "weir-sink")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        let consumer: BaseConsumer = config.create().map_err(client_error)?;
        let mut tails = Vec::with_capacity(self.partitions as usize);
        for partition in 0..self.partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
                .map_err(|error| cannot_reach(topic, error))?;
            if high <= low {
                tails.push(None);
                continue;
            }
            let mut assignment = TopicPartitionList::new();
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(high - 1))
                .map_err(|error| cannot_reach(topic, error))?;
            consumer
                .assign(&assignment)
                .map_err(|error| cannot_reach(topic, error))?;
            tails.push(last_change(&consumer, topic, partition)?);
        }
        Ok(tails)
    }

    /// The partition a record goes to, always the same for the same change.
    fn partition_of(&self, record: &Record, sequence: u64, index: u64) -> i32 {
        match &record.key {
            Some(key) => (murmur2(key) & 0x7fff_ffff) % self.partitions,
            None => ((sequence.wrapping_add(index)) % self.partitions as u64) as i32,
        }
    }
}

/// The last change among the messages from the assigned offset on. Reads
/// on until the partition has been quiet for `QUIET`: some brokers (tansu
/// 0.6) report the high watermark as the last batch's first offset + 1, so
/// the message before it need not be the last one.
fn last_change(consumer: &BaseConsumer, topic: &str, partition: i32) -> Result<Option<(u64, u64)>> {
    const QUIET: Duration = Duration::from_millis(300);
    let deadline = Instant::now() + BROKER_TIMEOUT;
    let mut read_any = false;
    let mut last = None;
    loop {
        let wait = if read_any {
            QUIET
        } else {
            Duration::from_millis(100)
        };
        let Some(polled) = consumer.poll(wait) else {
            if read_any {
                return Ok(last);
            }
            if Instant::now() >= deadline {
                return Err(cannot_reach(
                    topic,
                    format!("the last message of partition {partition} could not be read"),
                ));
            }
            continue;
        };
        let message = polled.map_err(|error| cannot_reach(topic, error))?;
        if message.partition() != partition {
            continue;
        }
        read_any = true;
        let change = message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|header| header.key == CHANGE_HEADER)
                .and_then(|header| header.value)
                .and_then(|value| std::str::from_utf8(value).ok())
                .and_then(parse_change)
        });
        last = last.max(change);
    }
}

fn parse_change(text: &str) -> Option<(u64, u64)> {
    let (sequence, index) = text.split_once(':')?;
    Some((sequence.parse().ok()?, index.parse().ok()?))
}

impl SinkWriter for KafkaWriter {
    fn start(&mut self) -> Result<serde_json::Value> {
        self.partition_count()?;
        Ok(serde_json::Value::Null)
    }

    fn resume(&mut self, _mark: &SinkMark) -> Result<()> {
        self.partitions = self.partition_count()?;
        self.tails = self.read_tails()?;
        Ok(())
    }

    fn write(&mut self, sequence: u64, records: &[Record]) -> Result<()> {
        for (index, record) in records.iter().enumerate() {
            let index = index as u64;
            let partition = self.partition_of(record, sequence, index);
            if self.tails[partition as usize].is_some_and(|tail| tail >= (sequence, index)) {
                continue;
            }
            let change = format!("{sequence}:{index}");
            let headers = OwnedHeaders::new().insert(Header {
                key: CHANGE_HEADER,
                value: Some(change.as_bytes()),
            });
            let mut message = BaseRecord::to(&self.options.topic)
                .partition(partition)
                .headers(headers);
            if let Some(key) = &record.key {
                message = message.key(key);
            }
            if let Some(value) = &record.value {
                message = message.payload(value);
            }
            self.send(message)?;
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    fn sync(&mut self) -> Result<serde_json::Value> {
        let topic = &self.options.topic;
        self.producer
            .flush(DELIVERY_TIMEOUT)
            .map_err(|error| cannot_reach(topic, error))?;
        let failed = self
            .producer
            .context()
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(failed) = failed {
            return Err(cannot_reach(
                topic,
                format!("a message was not delivered: {failed}"),
            ));
        }
        Ok(serde_json::Value::Null)
    }
}

impl KafkaWriter {
    /// Sends one message, waiting while librdkafka's queue is full.
    fn send(&self, mut message: BaseRecord<'_, Vec<u8>, Vec<u8>>) -> Result<()> {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            match self.producer.send(message) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if Instant::now() < deadline =>
                {
                    message = back;
                    self.producer.poll(Duration::from_millis(50));
                }
                Err((error, _)) => return Err(cannot_reach(&self.options.topic, error)),
            }
        }
    }
}

/// Kafka's murmur2 (the Java client's default partitioner hashes keys so).
fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        for (shift, byte) in rest.iter().enumerate().rev() {
            h ^= (*byte as u32) << (8 * shift);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_agrees_with_the_java_client() {
        // Kafka's own test cases for Utils.murmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"abc"), 479470107);
        assert_eq!(murmur2(b""), 275646681);
    }

    #[test]
    fn a_change_header_is_read_back() {
        assert_eq!(parse_change("12:3"), Some((12, 3)));
        assert_eq!(parse_change("12"), None);
        assert_eq!(parse_change("x:1"), None);
    }

    #[test]
    fn options_take_risingwave_names() {
        let options: BTreeMap<String, String> = [
            ("connector", "kafka"),
            ("topic", "out"),
            ("properties.bootstrap.server", "h:1"),
            ("properties.acks", "all"),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
        let parsed = KafkaSinkOptions::parse(&options).unwrap();
        assert_eq!(parsed.client, vec![("acks".to_string(), "all".to_string())]);
        let mut wrong = options.clone();
        wrong.insert("scan.startup.mode".into(), "earliest".into());
        assert!(KafkaSinkOptions::parse(&wrong).is_err());
    }
}
