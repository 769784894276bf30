//! Connectors that feed sources. A reader produces a source's rows in
//! order and says where it stands after them (its *position*, text the
//! reader alone understands); the engine's runner appends the rows to the
//! source's log and stores the position in the same commit, so a restart
//! resumes exactly after the last rows committed: none lost, none twice.

mod columns;
pub mod datagen;
pub mod file;
pub mod kafka;
pub mod nexmark;
pub(crate) mod options;
mod pacing;
mod records;

use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::{SourceDefinition, WatermarkDefinition};
use crate::error::{sqlstate, Result, WeirError};

/// What a read gives.
pub enum Read {
    /// Rows (possibly none, when the reader moved past input it skips).
    Rows(RecordBatch),
    /// Nothing yet: ask again after this long.
    Wait(Duration),
    /// The input has ended (a bounded generator).
    Finished,
}

pub trait SourceReader: Send {
    /// The next rows, at most `max_rows` of them.
    fn read(&mut self, max_rows: usize) -> Result<Read>;
    /// Where the reader stands after the rows it has returned.
    fn position(&self) -> String;
    /// Records read since the last call that did not decode.
    fn take_rejected(&mut self) -> Vec<Rejected> {
        Vec::new()
    }
    /// The source's watermark, from a connector that merges its
    /// partitions' watermarks (`SourceDefinition::watermark_from_connector`).
    fn watermark(&self) -> Option<i64> {
        None
    }
    /// Why no records come now (a broker that does not answer), if so.
    fn trouble(&self) -> Option<String> {
        None
    }
    /// Records the outside holds that the reader has not read yet, as last
    /// measured (a Kafka topic's messages behind its high watermarks).
    fn lag(&self) -> Option<u64> {
        None
    }
    /// Checks at CREATE SOURCE what only the outside can tell (the brokers
    /// answer, the topic exists). It may block for seconds.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A record a reader skipped: its text and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub record: String,
    pub reason: String,
}

/// The connectors there are.
pub const CONNECTORS: &str = "kafka, nexmark, datagen, file";

/// A reader for `definition`'s connector over the source's columns,
/// resuming at `position` (None: from the start). Checks the options, so
/// CREATE SOURCE calls it to refuse bad ones.
pub fn open_reader(
    definition: &SourceDefinition,
    schema: &SchemaRef,
    watermark: Option<&WatermarkDefinition>,
    position: Option<&str>,
) -> Result<Box<dyn SourceReader>> {
    check_format(definition)?;
    let at = || match position {
        None => Ok(0),
        Some(text) => text.parse::<u64>().map_err(|_| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!("the stored position of a source, {text:?}, is not a row number"),
            )
        }),
    };
    match definition.connector.to_ascii_lowercase().as_str() {
        "file" => {
            let options =
                file::FileOptions::parse(&definition.options, definition.encode.as_deref())?;
            Ok(Box::new(file::FileReader::new(options, schema, position)?))
        }
        "kafka" => {
            let options =
                kafka::KafkaOptions::parse(&definition.options, definition.encode.as_deref())?;
            Ok(Box::new(kafka::KafkaReader::new(
                options, schema, watermark, position,
            )?))
        }
        "nexmark" => {
            let options = nexmark::NexmarkOptions::parse(&definition.options)?;
            Ok(Box::new(nexmark::NexmarkReader::new(
                options,
                schema,
                at()?,
            )?))
        }
        "datagen" => {
            let options = datagen::DatagenOptions::parse(&definition.options, schema)?;
            Ok(Box::new(datagen::DatagenReader::new(
                options,
                schema,
                at()?,
            )))
        }
        other => Err(WeirError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("connector \"{other}\" is not supported"),
        )
        .with_hint(format!("The connectors are {CONNECTORS}."))),
    }
}

/// Every connector reads plain records; ENCODE matters to the file
/// connector alone (generators make rows, as in RisingWave).
fn check_format(definition: &SourceDefinition) -> Result<()> {
    match definition.format.as_deref() {
        None | Some("PLAIN") => Ok(()),
        Some(other) => Err(WeirError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("FORMAT {other} is not supported"),
        )
        .with_hint("Use FORMAT PLAIN (or leave the clause out).")),
    }
}
