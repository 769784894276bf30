//! `connector = 'kafka'`: JSON or CSV records from every partition of a
//! topic. weir keeps the offsets itself (in the position stored with the
//! rows, never in a consumer group), so after a crash it reads on from the
//! first message not committed: each message becomes a row once. A
//! message that does not decode is kept in `<source>_errors` and skipped;
//! a message without a value (a tombstone) is skipped. Partitions added to
//! the topic later are found and read from their start. The watermark is
//! merged from the partitions' own (see `partitions`).

mod options;
mod partitions;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::{cast, concat_batches, max};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use options::Startup;
pub use options::{client_settings, topic_and_servers, KafkaOptions};
use partitions::Partitions;

use super::records::decode_records;
use super::{Read, Rejected, SourceReader};
use crate::catalog::WatermarkDefinition;
use crate::error::{sqlstate, Result, WeirError};

/// How long a question to the brokers may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait before asking again when no message is there.
const POLL_AGAIN: Duration = Duration::from_millis(20);
/// How often to look for partitions added to the topic.
const DISCOVERY_EVERY: Duration = Duration::from_secs(10);
/// How often to ask the brokers how far behind the reader is.
const LAG_EVERY: Duration = Duration::from_secs(2);

pub struct KafkaReader {
    options: KafkaOptions,
    schema: SchemaRef,
    /// The event-time column, when the source has a watermark.
    event_column: Option<usize>,
    consumer: BaseConsumer,
    partitions: Partitions,
    /// When partitions were last looked up (None: never assigned).
    discovered: Option<Instant>,
    rejected: Vec<Rejected>,
    trouble: Option<String>,
    /// Messages behind the partitions' high watermarks, and when measured.
    lag: Option<(u64, Instant)>,
    /// Messages delivered again and skipped.
    repeats: u64,
}

/// One partition's messages read in one go: their text, back to back.
#[derive(Default)]
struct Polled {
    text: String,
    records: Vec<(i64, std::ops::Range<usize>)>,
}

impl KafkaReader {
    pub fn new(
        options: KafkaOptions,
        schema: &SchemaRef,
        watermark: Option<&WatermarkDefinition>,
        position: Option<&str>,
    ) -> Result<Self> {
        let consumer = consumer(&options)?;
        let event_column = match watermark {
            Some(definition) if !definition.processing_time => {
                schema.index_of(&definition.column).ok()
            }
            _ => None,
        };
        let delay_ns = watermark.map_or(0, |w| w.delay_ms.saturating_mul(1_000_000));
        let idle_timeout = watermark
            .and_then(|w| w.idle_timeout_ms)
            .map(|ms| Duration::from_millis(ms.max(0) as u64));
        let partitions = Partitions::restore(position, delay_ns, idle_timeout, Instant::now())?;
        Ok(KafkaReader {
            options,
            schema: schema.clone(),
            event_column,
            consumer,
            partitions,
            discovered: None,
            rejected: Vec::new(),
            trouble: None,
            lag: None,
            repeats: 0,
        })
    }

    /// Asks the brokers for each partition's high watermark (every
    /// `LAG_EVERY`); the lag is what lies between them and the offsets.
    fn measure_lag(&mut self) {
        if self.lag.is_some_and(|(_, at)| at.elapsed() < LAG_EVERY) {
            return;
        }
        let mut behind = 0u64;
        for (partition, offset) in self.partitions.offsets() {
            let Ok((_, high)) =
                self.consumer
                    .fetch_watermarks(&self.options.topic, partition, BROKER_TIMEOUT)
            else {
                return;
            };
            behind += high.saturating_sub(offset).max(0) as u64;
        }
        self.lag = Some((behind, Instant::now()));
    }

    /// Looks the topic's partitions up and reads each from where it stands.
    fn assign(&mut self) -> std::result::Result<(), String> {
        let ids = self.partition_ids()?;
        let first = self.discovered.is_none();
        let now = Instant::now();
        let mut added = false;
        for id in ids {
            if !self.partitions.knows(id) {
                // A partition added later holds only new messages: all of it.
                let startup = if first {
                    self.options.startup
                } else {
                    Startup::Earliest
                };
                let offset = self.start_offset(id, startup)?;
                self.partitions.start(id, offset, now);
                added = true;
            }
        }
        if first || added {
            let mut list = TopicPartitionList::new();
            for (id, offset) in self.partitions.offsets() {
                list.add_partition_offset(&self.options.topic, id, Offset::Offset(offset))
                    .map_err(|error| error.to_string())?;
            }
            self.consumer
                .assign(&list)
                .map_err(|error| format!("cannot read the partitions: {error}"))?;
        }
        self.discovered = Some(now);
        Ok(())
    }

    fn partition_ids(&self) -> std::result::Result<Vec<i32>, String> {
        let topic = &self.options.topic;
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), BROKER_TIMEOUT)
            .map_err(|error| {
                format!(
                    "cannot reach the Kafka brokers at {}: {error}",
                    self.options.servers
                )
            })?;
        let found = metadata.topics().iter().find(|t| t.name() == topic);
        let ids: Vec<i32> = found
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        match ids.is_empty() {
            true => Err(format!(
                "topic \"{topic}\" does not exist on the brokers at {}",
                self.options.servers
            )),
            false => Ok(ids),
        }
    }

    fn start_offset(&self, partition: i32, startup: Startup) -> std::result::Result<i64, String> {
        let topic = &self.options.topic;
        let failed = |error: rdkafka::error::KafkaError| {
            format!("cannot find where partition {partition} of {topic} starts: {error}")
        };
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(failed)?;
        let millis = match startup {
            Startup::Earliest => return Ok(low),
            Startup::Latest => return Ok(high),
            Startup::Timestamp(millis) => millis,
        };
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, Offset::Offset(millis))
            .map_err(failed)?;
        let found = self
            .consumer
            .offsets_for_times(list, BROKER_TIMEOUT)
            .map_err(failed)?;
        let offset = found
            .find_partition(topic, partition)
            .map(|element| element.offset());
        Ok(match offset {
            Some(Offset::Offset(offset)) => offset,
            // No message that late: start after the last.
            _ => high,
        })
    }

    /// Takes the messages already fetched, up to `max_rows`, by partition.
    fn poll(&mut self, max_rows: usize) -> (BTreeMap<i32, Polled>, usize) {
        let mut polled: BTreeMap<i32, Polled> = BTreeMap::new();
        let mut count = 0;
        let now = Instant::now();
        while count < max_rows {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(error)) => {
                    self.trouble = Some(format!("Kafka: {error}"));
                    break;
                }
                Some(Ok(message)) => message,
            };
            self.trouble = None;
            let (partition, offset) = (message.partition(), message.offset());
            if self.partitions.already_read(partition, offset) {
                // Delivered again (a fetch that overlapped an earlier one):
                // each message becomes a row once.
                self.repeats += 1;
                if self.repeats.is_power_of_two() {
                    tracing::warn!(topic = %self.options.topic, partition, offset, repeats = self.repeats, "a Kafka message came again; skipped");
                }
                continue;
            }
            count += 1;
            self.partitions.consumed(partition, offset, now);
            let Some(payload) = message.payload() else {
                continue;
            };
            match std::str::from_utf8(payload) {
                Ok(text) => {
                    let records = polled.entry(partition).or_default();
                    let start = records.text.len();
                    records.text.push_str(text);
                    records.records.push((offset, start..records.text.len()));
                }
                Err(_) => self.rejected.push(Rejected {
                    record: hex(payload),
                    reason: format!("partition {partition} offset {offset}: not UTF-8 text"),
                }),
            }
        }
        (polled, count)
    }

    /// One partition's records as rows; notes its largest event time.
    fn decode(&mut self, partition: i32, polled: &Polled) -> Result<RecordBatch> {
        let records: Vec<&str> = polled
            .records
            .iter()
            .map(|(_, range)| &polled.text[range.clone()])
            .collect();
        let (batch, undecoded) = decode_records(self.options.encoding, &self.schema, &records)?;
        for (index, reason) in undecoded {
            let offset = polled.records[index].0;
            self.rejected.push(Rejected {
                record: records[index].to_string(),
                reason: format!("partition {partition} offset {offset}: {reason}"),
            });
        }
        if let Some(column) = self.event_column {
            let latest = max_event_ns(batch.column(column))?;
            self.partitions.saw_events(partition, latest);
        }
        Ok(batch)
    }
}

/// The client: weir stores offsets itself, so none are committed to Kafka.
fn consumer(options: &KafkaOptions) -> Result<BaseConsumer> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &options.servers)
        .set("group.id", "weir")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    for (name, value) in &options.client {
        config.set(name, value);
    }
    config.create().map_err(|error| {
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("the Kafka client refused its settings: {error}"),
        )
        .with_hint(
            "properties.<name> options are librdkafka settings; check their names and values.",
        )
    })
}

/// Bytes that are not text, as Postgres writes bytea: `\x` and hex.
fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(2 + bytes.len() * 2);
    text.push_str("\\x");
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// The largest time in a timestamp column, in nanoseconds.
fn max_event_ns(column: &ArrayRef) -> Result<Option<i64>> {
    let DataType::Timestamp(_, zone) = column.data_type() else {
        return Ok(None);
    };
    let nanoseconds = cast(
        column,
        &DataType::Timestamp(TimeUnit::Nanosecond, zone.clone()),
    )?;
    let numbers = cast(&nanoseconds, &DataType::Int64)?;
    Ok(max(numbers.as_primitive::<Int64Type>()))
}

impl SourceReader for KafkaReader {
    fn read(&mut self, max_rows: usize) -> Result<Read> {
        let due = self
            .discovered
            .is_none_or(|at| at.elapsed() >= DISCOVERY_EVERY);
        if due {
            if let Err(trouble) = self.assign() {
                tracing::warn!(topic = %self.options.topic, %trouble, "a Kafka source waits");
                self.trouble = Some(trouble);
                if self.discovered.is_none() {
                    return Ok(Read::Wait(Duration::from_secs(1)));
                }
            }
        }
        let (polled, count) = self.poll(max_rows);
        if count == 0 {
            self.measure_lag();
            return Ok(Read::Wait(POLL_AGAIN));
        }
        let mut batches = Vec::with_capacity(polled.len());
        for (partition, records) in &polled {
            batches.push(self.decode(*partition, records)?);
        }
        Ok(Read::Rows(concat_batches(&self.schema, &batches)?))
    }

    fn position(&self) -> String {
        self.partitions.position()
    }

    fn take_rejected(&mut self) -> Vec<Rejected> {
        std::mem::take(&mut self.rejected)
    }

    fn watermark(&self) -> Option<i64> {
        self.event_column?;
        self.partitions.watermark(Instant::now())
    }

    fn trouble(&self) -> Option<String> {
        self.trouble.clone()
    }

    fn lag(&self) -> Option<u64> {
        self.lag.map(|(behind, _)| behind)
    }

    fn check(&mut self) -> Result<()> {
        self.partition_ids().map(|_| ()).map_err(|trouble| {
            WeirError::new(sqlstate::CANNOT_CONNECT, trouble).with_hint(
                "CREATE SOURCE checks that the brokers answer and the topic exists; \
                 check properties.bootstrap.server and topic.",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampMillisecondArray;
    use std::sync::Arc;

    #[test]
    fn bytes_that_are_not_text_are_kept_as_hex() {
        assert_eq!(hex(&[0xff, 0x00, 0x41]), "\\xff0041");
    }

    #[test]
    fn the_largest_event_time_in_nanoseconds() {
        let column: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(5),
            None,
            Some(9),
        ]));
        assert_eq!(max_event_ns(&column).unwrap(), Some(9_000_000));
        let empty: ArrayRef = Arc::new(TimestampMillisecondArray::from(Vec::<i64>::new()));
        assert_eq!(max_event_ns(&empty).unwrap(), None);
    }

    #[test]
    fn bad_settings_are_refused_when_the_client_is_made() {
        let map = [
            ("topic", "t"),
            ("properties.bootstrap.server", "127.0.0.1:1"),
            ("properties.no.such.setting", "1"),
        ]
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
        let options = KafkaOptions::parse(&map, Some("JSON")).unwrap();
        let error = consumer(&options).err().unwrap();
        assert_eq!(error.code, sqlstate::INVALID_PARAMETER_VALUE);
        assert!(
            error.message.contains("no.such.setting"),
            "{}",
            error.message
        );
    }
}
