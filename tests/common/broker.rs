//! A real Kafka-protocol broker for tests: tansu (Apache-2.0, from
//! crates.io), started on a free port with in-memory storage, and a
//! producer that writes to chosen partitions. `.ci/run` installs tansu;
//! elsewhere run `cargo install tansu --version 0.6.0 --locked
//! --no-default-features --features dynostore --root /var/tmp/tools`.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

pub struct Broker {
    child: Child,
    pub address: String,
    binary: PathBuf,
}

/// Where tansu is: `$WEIR_TANSU`, `tansu` on the PATH, or where `.ci/run`
/// installs it.
fn tansu() -> PathBuf {
    if let Some(path) = std::env::var_os("WEIR_TANSU") {
        return PathBuf::from(path);
    }
    let installed = PathBuf::from("/var/tmp/tools/bin/tansu");
    if installed.exists() {
        return installed;
    }
    let on_path = Command::new("tansu")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match on_path {
        Ok(_) => PathBuf::from("tansu"),
        Err(_) => panic!(
            "the Kafka tests need the tansu broker: cargo install tansu --version 0.6.0 --locked \
             --no-default-features --features dynostore --root /var/tmp/tools (.ci/run does this)"
        ),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Broker {
    pub fn start() -> Broker {
        let binary = tansu();
        // tansu cannot say which port it took: pick one, retry if taken.
        for _ in 0..5 {
            let address = format!("127.0.0.1:{}", free_port());
            let url = format!("tcp://{address}");
            let child = Command::new(&binary)
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &url,
                ])
                .args(["--storage-engine", "memory://tansu/"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start tansu");
            let mut broker = Broker {
                child,
                address,
                binary: binary.clone(),
            };
            if broker.answers() {
                return broker;
            }
        }
        panic!("tansu did not start");
    }

    fn answers(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if TcpStream::connect(&self.address).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let status = Command::new(&self.binary)
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
            ])
            .args(["--broker", &format!("tcp://{}", self.address)])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "tansu topic create {name}");
    }

    pub fn producer(&self) -> TopicWriter {
        TopicWriter::connect(&self.address)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes messages to chosen partitions of a topic.
pub struct TopicWriter {
    producer: BaseProducer,
}

impl TopicWriter {
    pub fn connect(address: &str) -> TopicWriter {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", address)
            .set("linger.ms", "5")
            .create()
            .unwrap();
        TopicWriter { producer }
    }

    /// Sends `payload` (None: a tombstone) to `partition` of `topic`.
    pub fn send(&self, topic: &str, partition: i32, payload: Option<&[u8]>) {
        loop {
            let mut record = BaseRecord::<(), [u8]>::to(topic).partition(partition);
            if let Some(payload) = payload {
                record = record.payload(payload);
            }
            match self.producer.send(record) {
                Ok(()) => return,
                // The queue is full: let deliveries drain, then again.
                Err((_, _)) => {
                    self.producer.poll(Duration::from_millis(50));
                }
            }
        }
    }

    pub fn flush(&self) {
        self.producer.flush(Duration::from_secs(30)).unwrap();
    }
}

/// A message read back from a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMessage {
    pub partition: i32,
    pub key: Option<String>,
    pub value: Option<String>,
    /// The `weir.change` header, if any.
    pub change: Option<String>,
}

/// Every message of `topic`'s partitions, up to their ends now, in
/// partition and offset order.
pub fn read_topic(address: &str, topic: &str) -> Vec<ReadMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("group.id", "weir-test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len() as i32;
    let mut messages = Vec::new();
    for partition in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .unwrap();
        if high <= low {
            continue;
        }
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, partition, Offset::Offset(low))
            .unwrap();
        consumer.assign(&assignment).unwrap();
        // tansu 0.6 reports the high watermark as the last batch's first
        // offset + 1: read past it until the partition is quiet.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = low;
        loop {
            assert!(
                Instant::now() < deadline,
                "{topic}/{partition}: stuck at {next} of {high}"
            );
            let Some(message) = consumer.poll(Duration::from_millis(500)) else {
                if next >= high {
                    break;
                }
                continue;
            };
            let message = message.unwrap();
            if message.partition() != partition || message.offset() < next {
                continue;
            }
            next = message.offset() + 1;
            let text =
                |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
            let change = message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|header| header.key == "weir.change")
                    .and_then(|header| text(header.value))
            });
            messages.push(ReadMessage {
                partition,
                key: text(message.key()),
                value: text(message.payload()),
                change,
            });
        }
    }
    messages
}
