//! `connector = 'nexmark'`: the Nexmark person / auction / bid streams
//! (`model.rs`), with RisingWave's option names. A source keeps one table
//! of the model (`nexmark.table.type`); its position is the number of the
//! next event, counted over all three tables, so `nexmark.event.num`
//! means the same as in RisingWave and three sources with the same seed
//! describe one auction site.

mod model;

use std::collections::BTreeMap;
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;

pub use model::{Model, Table, BASE_TIME_NS};

use super::columns::Fit;
use super::options::{invalid, missing, Options};
use super::pacing::Pacing;
use super::{Read, SourceReader};
use crate::error::Result;

const KNOWN: &str = "nexmark.table.type, nexmark.event.num, nexmark.min.event.gap.in.ns, \
    nexmark.max.chunk.size, nexmark.seed, nexmark.active.people, nexmark.in.flight.auctions, \
    nexmark.hot.seller.ratio, nexmark.hot.auction.ratio, nexmark.hot.bidder.ratio, \
    nexmark.split.num";

/// The options of a nexmark source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NexmarkOptions {
    pub table: Table,
    /// Events in all (of every table); None is without end.
    pub event_count: Option<u64>,
    /// Wall-clock time between events; 0 generates as fast as it can.
    pub min_event_gap_ns: u64,
    pub max_chunk_rows: usize,
    pub model: Model,
}

impl NexmarkOptions {
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self> {
        let mut given = Options::new("nexmark", options);
        let table = match given.text(&["nexmark.table.type"]) {
            Some((_, value)) => match value.to_ascii_lowercase().as_str() {
                "person" => Table::Person,
                "auction" => Table::Auction,
                "bid" => Table::Bid,
                _ => {
                    return Err(invalid(
                        "nexmark.table.type",
                        &value,
                        "Use 'Person', 'Auction' or 'Bid'.",
                    ))
                }
            },
            None => {
                return Err(missing(
                    "nexmark.table.type",
                    "Say which table the source holds: nexmark.table.type = 'Bid' (or 'Person', 'Auction').",
                ))
            }
        };
        let event_count = match given.parse::<i64>(&["nexmark.event.num"])? {
            None => None,
            Some(count) if count < 0 => None,
            Some(count) => Some(count as u64),
        };
        let min_event_gap_ns = given
            .parse::<u64>(&["nexmark.min.event.gap.in.ns"])?
            .unwrap_or(100_000);
        let max_chunk_rows = given
            .parse::<usize>(&["nexmark.max.chunk.size"])?
            .unwrap_or(1024);
        if max_chunk_rows == 0 || max_chunk_rows > 1 << 20 {
            return Err(invalid(
                "nexmark.max.chunk.size",
                &max_chunk_rows.to_string(),
                "Give 1 to 1048576 rows.",
            ));
        }
        let defaults = Model::default();
        let mut ratio = |name: &str, default: u64| -> Result<u64> {
            Ok(given.parse::<u64>(&[name])?.unwrap_or(default))
        };
        let model = Model {
            seed: ratio("nexmark.seed", defaults.seed)?,
            event_gap_ns: match min_event_gap_ns {
                0 => defaults.event_gap_ns,
                gap => i64::try_from(gap).unwrap_or(i64::MAX),
            },
            active_people: ratio("nexmark.active.people", defaults.active_people)?.max(1),
            in_flight_auctions: ratio("nexmark.in.flight.auctions", defaults.in_flight_auctions)?
                .max(1),
            hot_seller_ratio: ratio("nexmark.hot.seller.ratio", defaults.hot_seller_ratio)?,
            hot_auction_ratio: ratio("nexmark.hot.auction.ratio", defaults.hot_auction_ratio)?,
            hot_bidder_ratio: ratio("nexmark.hot.bidder.ratio", defaults.hot_bidder_ratio)?,
        };
        // Splits are RisingWave's parallelism; here one reader makes the
        // stream, so the number is taken and has no effect.
        given.parse::<u64>(&["nexmark.split.num"])?;
        given.finish(KNOWN)?;
        Ok(NexmarkOptions {
            table,
            event_count,
            min_event_gap_ns,
            max_chunk_rows,
            model,
        })
    }
}

pub struct NexmarkReader {
    options: NexmarkOptions,
    fit: Fit,
    rows: model::Rows,
    next_event: u64,
    pacing: Pacing,
}

impl NexmarkReader {
    /// A reader from event `position` (0 for a new source).
    pub fn new(options: NexmarkOptions, schema: &SchemaRef, position: u64) -> Result<Self> {
        let columns = options.table.columns();
        let what = format!("nexmark table {:?}", options.table);
        let fit = Fit::new(schema, &columns, &what)?;
        let rows = model::Rows::new(options.table, options.model, fit.wanted(columns.len()));
        Ok(NexmarkReader {
            options,
            fit,
            rows,
            next_event: position,
            pacing: Pacing::new(options.min_event_gap_ns),
        })
    }

    fn end(&self) -> u64 {
        self.options.event_count.unwrap_or(u64::MAX)
    }
}

impl SourceReader for NexmarkReader {
    fn read(&mut self, max_rows: usize) -> Result<Read> {
        let end = self.end();
        if self.next_event >= end {
            return Ok(Read::Finished);
        }
        let limit = max_rows.min(self.options.max_chunk_rows) as u64;
        // Paced by events (of every table), as RisingWave's gap is.
        let limit_events = limit.saturating_mul(50).min(end - self.next_event);
        let events = match self.pacing.due(limit_events, Instant::now()) {
            Ok(events) => events,
            Err(wait) => return Ok(Read::Wait(wait)),
        };
        let mut taken = 0;
        while taken < events && self.rows.len() < limit as usize {
            let n = self.next_event + taken;
            if Table::of_event(n) == self.options.table {
                self.rows.add(n);
            }
            taken += 1;
        }
        self.next_event += taken;
        self.pacing.produced(taken);
        let rows = self.rows.len();
        let columns = self.rows.finish();
        Ok(Read::Rows(self.fit.apply(&columns, rows)?))
    }

    fn position(&self) -> String {
        self.next_event.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    fn bid_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("price", DataType::Int32, true),
            Field::new("auction", DataType::Int64, true),
            Field::new(
                "date_time",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                true,
            ),
        ]))
    }

    fn read_all(reader: &mut NexmarkReader) -> usize {
        let mut rows = 0;
        loop {
            match reader.read(4096).unwrap() {
                Read::Rows(batch) => rows += batch.num_rows(),
                Read::Finished => return rows,
                Read::Wait(_) => panic!("an unpaced reader waited"),
            }
        }
    }

    #[test]
    fn a_bounded_bid_source_reads_its_share_of_the_events() {
        let given = options(&[
            ("nexmark.table.type", "Bid"),
            ("nexmark.event.num", "1000"),
            ("nexmark.min.event.gap.in.ns", "0"),
        ]);
        let options = NexmarkOptions::parse(&given).unwrap();
        let mut reader = NexmarkReader::new(options, &bid_schema(), 0).unwrap();
        assert_eq!(read_all(&mut reader), 920);
        assert_eq!(reader.position(), "1000");
        // Resumed half way, the rest of the same events.
        let mut resumed = NexmarkReader::new(options, &bid_schema(), 500).unwrap();
        assert_eq!(read_all(&mut resumed), 460);
    }

    #[test]
    fn options_are_checked() {
        let bad = [
            vec![("nexmark.table.type", "Bids")],
            vec![("nexmark.event.num", "10")],
            vec![("nexmark.table.type", "Bid"), ("nexmark.rate", "10")],
            vec![
                ("nexmark.table.type", "Bid"),
                ("nexmark.max.chunk.size", "0"),
            ],
        ];
        for pairs in bad {
            assert!(
                NexmarkOptions::parse(&options(&pairs)).is_err(),
                "{pairs:?}"
            );
        }
        let unknown_column = Arc::new(Schema::new(vec![Field::new("nope", DataType::Int64, true)]));
        let options = NexmarkOptions::parse(&options(&[("nexmark.table.type", "Person")])).unwrap();
        let error = NexmarkReader::new(options, &unknown_column, 0)
            .err()
            .unwrap();
        assert_eq!(error.code, crate::error::sqlstate::UNDEFINED_COLUMN);
    }

    #[test]
    fn a_paced_reader_waits() {
        let given = options(&[
            ("nexmark.table.type", "Person"),
            ("nexmark.min.event.gap.in.ns", "1000000000"),
        ]);
        let options = NexmarkOptions::parse(&given).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let mut reader = NexmarkReader::new(options, &schema, 0).unwrap();
        // Event 0 is due at once (a person), then one a second.
        assert!(matches!(reader.read(10).unwrap(), Read::Rows(b) if b.num_rows() == 1));
        assert!(matches!(reader.read(10).unwrap(), Read::Wait(_)));
    }
}
