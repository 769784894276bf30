//! A Kafka source's options, by RisingWave's and Flink's names. Any other
//! `properties.<name>` is handed to librdkafka as `<name>`, which refuses
//! what it does not know when the client is made (at CREATE SOURCE).

use std::collections::BTreeMap;

use super::super::options::{invalid, missing, Options};
use super::super::records::{take_encoding, Encoding};
use crate::error::Result;

pub const KNOWN: &str = "topic, properties.bootstrap.server (properties.bootstrap.servers), \
     scan.startup.mode (earliest | latest), scan.startup.timestamp.millis, format, \
     csv.delimiter, and properties.<librdkafka setting>";

/// Where a partition read for the first time starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    Earliest,
    Latest,
    /// The first message at or after this time (ms since the epoch).
    Timestamp(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOptions {
    pub topic: String,
    pub servers: String,
    pub startup: Startup,
    pub encoding: Encoding,
    /// librdkafka settings, by librdkafka's names.
    pub client: Vec<(String, String)>,
}

impl KafkaOptions {
    pub fn parse(options: &BTreeMap<String, String>, encode: Option<&str>) -> Result<Self> {
        let mut given = Options::new("kafka", options);
        let (topic, servers) = topic_and_servers(&mut given)?;
        let startup = startup(&mut given)?;
        let encoding = take_encoding(&mut given, encode, "kafka", false)?;
        let client = client_settings(&mut given);
        given.finish(KNOWN)?;
        Ok(KafkaOptions {
            topic,
            servers,
            startup,
            encoding,
            client,
        })
    }
}

/// The topic and the brokers (sources and sinks), by RisingWave's and
/// Flink's names.
pub fn topic_and_servers(given: &mut Options) -> Result<(String, String)> {
    let Some((_, topic)) = given.text(&["topic", "kafka.topic"]) else {
        return Err(missing(
            "topic",
            "Name the topic: WITH (connector = 'kafka', topic = 'events', …).",
        ));
    };
    let servers = given.text(&[
        "properties.bootstrap.server",
        "properties.bootstrap.servers",
        "kafka.brokers",
    ]);
    let Some((_, servers)) = servers else {
        return Err(missing(
            "properties.bootstrap.server",
            "Say where the brokers are: properties.bootstrap.server = 'host:9092'.",
        ));
    };
    Ok((topic, servers))
}

/// Every remaining `properties.<name>` option, as librdkafka setting `<name>`.
pub fn client_settings(given: &mut Options) -> Vec<(String, String)> {
    given
        .take_prefixed("properties.")
        .into_iter()
        .map(|(name, value)| (name["properties.".len()..].to_string(), value))
        .collect()
}

fn startup(given: &mut Options) -> Result<Startup> {
    let timestamp: Option<i64> = given.parse(&[
        "scan.startup.timestamp.millis",
        "scan.startup.timestamp_millis",
        "scan.startup.timestamp-millis",
    ])?;
    let mode = given.text(&["scan.startup.mode"]);
    let mode = mode.map(|(_, value)| value.to_ascii_lowercase());
    match (mode.as_deref(), timestamp) {
        (None | Some("timestamp"), Some(millis)) => Ok(Startup::Timestamp(millis)),
        (None | Some("earliest") | Some("earliest-offset"), None) => Ok(Startup::Earliest),
        (Some("latest") | Some("latest-offset"), None) => Ok(Startup::Latest),
        (Some("timestamp"), None) => Err(missing(
            "scan.startup.timestamp.millis",
            "Give the time to start from in milliseconds since 1970.",
        )),
        (Some(other), _) => Err(invalid(
            "scan.startup.mode",
            other,
            "Use 'earliest', 'latest' or 'timestamp' (with scan.startup.timestamp.millis); \
             weir keeps its own offsets, so group offsets do not apply.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::sqlstate;

    fn parse(pairs: &[(&str, &str)], encode: Option<&str>) -> Result<KafkaOptions> {
        let map = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        KafkaOptions::parse(&map, encode)
    }

    #[test]
    fn risingwave_and_flink_spellings() {
        let risingwave = parse(
            &[
                ("topic", "t"),
                ("properties.bootstrap.server", "h:9092"),
                ("scan.startup.mode", "latest"),
                ("properties.fetch.max.bytes", "1000000"),
            ],
            Some("JSON"),
        )
        .unwrap();
        assert_eq!(risingwave.startup, Startup::Latest);
        assert_eq!(risingwave.encoding, Encoding::Json);
        assert_eq!(
            risingwave.client,
            vec![("fetch.max.bytes".to_string(), "1000000".to_string())]
        );
        let flink = parse(
            &[
                ("topic", "t"),
                ("properties.bootstrap.servers", "h:9092"),
                ("scan.startup.mode", "earliest-offset"),
                ("format", "csv"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(flink.servers, "h:9092");
        assert_eq!(flink.startup, Startup::Earliest);
        assert!(matches!(flink.encoding, Encoding::Csv { .. }));
        let timestamp = parse(
            &[
                ("topic", "t"),
                ("properties.bootstrap.server", "h"),
                ("scan.startup.timestamp.millis", "1700000000000"),
            ],
            Some("JSON"),
        )
        .unwrap();
        assert_eq!(timestamp.startup, Startup::Timestamp(1_700_000_000_000));
    }

    #[test]
    fn mistakes_are_refused_with_what_to_write() {
        let no_topic = parse(&[("properties.bootstrap.server", "h")], Some("JSON"));
        assert!(no_topic.unwrap_err().message.contains("topic"));
        let no_servers = parse(&[("topic", "t")], Some("JSON")).unwrap_err();
        assert!(no_servers.message.contains("bootstrap"));
        let base = [("topic", "t"), ("properties.bootstrap.server", "h")];
        let group = [&base[..], &[("scan.startup.mode", "group-offsets")]].concat();
        let error = parse(&group, Some("JSON")).unwrap_err();
        assert_eq!(error.code, sqlstate::INVALID_PARAMETER_VALUE);
        let unknown = [&base[..], &[("partition", "1")]].concat();
        let error = parse(&unknown, Some("JSON")).unwrap_err();
        assert!(error.message.contains("unknown option partition"));
        let header = [&base[..], &[("csv.header", "true")]].concat();
        assert!(
            parse(&header, Some("CSV")).is_err(),
            "records have no header"
        );
        let error = parse(&base, Some("AVRO")).unwrap_err();
        assert_eq!(error.code, sqlstate::FEATURE_NOT_SUPPORTED);
        assert!(parse(&base, None).is_err(), "the encoding is required");
    }
}
