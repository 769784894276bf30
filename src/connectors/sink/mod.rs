//! Sinks (`CREATE SINK k FROM view`): a view's changes written out to a
//! file or a Kafka topic, each change once even across crashes. A view
//! commit's changes go to each of its sinks' outbox in the same atomic
//! write as the view's rows (`outbox`); a shipper takes them in commit
//! order, writes them as records (`format`) through the connector's
//! `SinkWriter`, and records durably how far it got together with the
//! writer's position. After a crash the writer first puts the destination
//! back to that mark (a file is cut back to the length recorded; a topic's
//! partitions are read to see which records arrived), so what is resent
//! is exactly what is missing.

pub mod file;
pub mod format;
pub mod kafka;
pub mod outbox;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::{SinkDefinition, SinkFormat};
use crate::error::{sqlstate, Result, WeirError};
pub use format::{Record, RecordFormat};
pub use outbox::Outbox;

/// How far a sink got: the last outbox sequence its destination has, and
/// the writer's position there (a file's length).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkMark {
    pub shipped: u64,
    #[serde(default)]
    pub position: serde_json::Value,
}

/// Writes records to one destination.
pub trait SinkWriter: Send {
    /// At CREATE SINK: checks the destination can be written and returns
    /// the position a new sink starts from (the first mark's).
    fn start(&mut self) -> Result<serde_json::Value>;
    /// Puts the destination back to `mark` before anything is written.
    fn resume(&mut self, mark: &SinkMark) -> Result<()>;
    /// Writes outbox sequence `sequence`'s records.
    fn write(&mut self, sequence: u64, records: &[Record]) -> Result<()>;
    /// Makes what was written durable there; returns the position to mark.
    fn sync(&mut self) -> Result<serde_json::Value>;
}

/// The connectors a sink may use.
pub const CONNECTORS: &str = "'file' and 'kafka'";

/// Checks a sink's options (at CREATE SINK, without connecting).
pub fn check_options(definition: &SinkDefinition) -> Result<()> {
    match definition.connector.as_str() {
        "file" => file::FileOptions::parse(&definition.options).map(|_| ()),
        "kafka" => kafka::KafkaSinkOptions::parse(&definition.options).map(|_| ()),
        other => Err(unknown_connector(other)),
    }
}

/// Opens the writer of a sink's destination.
pub fn open_writer(definition: &SinkDefinition) -> Result<Box<dyn SinkWriter>> {
    match definition.connector.as_str() {
        "file" => {
            let options = file::FileOptions::parse(&definition.options)?;
            Ok(Box::new(file::FileWriter::new(options, definition.format)))
        }
        "kafka" => {
            let options = kafka::KafkaSinkOptions::parse(&definition.options)?;
            Ok(Box::new(kafka::KafkaWriter::new(options)?))
        }
        other => Err(unknown_connector(other)),
    }
}

fn unknown_connector(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("unknown sink connector '{name}'"),
    )
    .with_hint(format!("The sink connectors are {CONNECTORS}."))
}

/// The options of CREATE SINK that are not the connector's: format, key.
pub struct SinkShape {
    pub format: SinkFormat,
    pub key_columns: Vec<String>,
    pub force_append_only: bool,
}

/// Takes the format options out of `options`; `format`/`encode` are the
/// FORMAT … ENCODE … words.
pub fn take_shape(
    options: &mut BTreeMap<String, String>,
    format: Option<&str>,
    encode: Option<&str>,
) -> Result<SinkShape> {
    // RisingWave's older spelling: type = 'append-only' | 'upsert'.
    let given_type = options.remove("type").map(|value| match value.as_str() {
        "append-only" => "PLAIN".to_string(),
        other => other.to_ascii_uppercase(),
    });
    let format = format.map(str::to_ascii_uppercase).or(given_type);
    let format = match format.as_deref() {
        None | Some("PLAIN") => SinkFormat::Plain,
        Some("UPSERT") => SinkFormat::Upsert,
        Some(other) => {
            return Err(WeirError::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("FORMAT {other} is not supported for sinks"),
            )
            .with_hint("Use FORMAT PLAIN or FORMAT UPSERT."))
        }
    };
    if let Some(encode) = encode.filter(|e| !e.eq_ignore_ascii_case("JSON")) {
        return Err(WeirError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("ENCODE {encode} is not supported for sinks"),
        )
        .with_hint("Use ENCODE JSON."));
    }
    let key_columns = options
        .remove("primary_key")
        .map(|keys| {
            keys.split(',')
                .map(|name| name.trim().to_ascii_lowercase())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let force_append_only = match options.remove("force_append_only").as_deref() {
        None => false,
        Some(value) if value.eq_ignore_ascii_case("true") => true,
        Some(value) if value.eq_ignore_ascii_case("false") => false,
        Some(value) => {
            return Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("force_append_only = '{value}' is not valid"),
            )
            .with_hint("Use 'true' or 'false'."))
        }
    };
    Ok(SinkShape {
        format,
        key_columns,
        force_append_only,
    })
}
