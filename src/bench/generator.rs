//! Deterministic input for `weir bench`: the events of the window
//! scenarios and Nexmark-shaped bids for the keyed ones.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{sqlstate, Result, WeirError};

/// 2024-01-01T00:00:00Z: a fixed start keeps runs comparable.
const START_NS: i64 = 1_704_067_200_000_000_000;
const NANOS_PER_MILLI: i64 = 1_000_000;
/// 1000 events per simulated second: one event per simulated millisecond.
const EVENT_SPACING_NS: i64 = NANOS_PER_MILLI;
/// Every event arrives up to this much behind its slot, so neighbours are
/// out of order but within the 5 s watermark delay.
const JITTER_MS: u64 = 500;
/// One event in this many is a straggler, behind by more than the watermark
/// delay, so the late-row path is exercised too.
const STRAGGLER_EVERY: u64 = 1_000;
const STRAGGLER_DELAY_MS: i64 = 8_000;
const AUCTIONS: u64 = 10_000;
const MAX_PRICE: u64 = 1_000_000;

/// Auction events with mostly increasing timestamps, the same for the same
/// seed so every scenario and every run sees identical input.
pub struct EventGenerator {
    next_event: u64,
    random: SplitMix64,
}

impl EventGenerator {
    pub fn new(seed: u64) -> Self {
        EventGenerator {
            next_event: 0,
            random: SplitMix64(seed),
        }
    }

    /// The next `rows` events in batches of at most `batch_rows`, generated
    /// up front so that timing the appends times nothing else.
    pub fn batches(
        &mut self,
        schema: SchemaRef,
        rows: u64,
        batch_rows: usize,
    ) -> Result<Vec<RecordBatch>> {
        batches_of(rows, batch_rows, |size| self.batch(schema.clone(), size))
    }

    /// The next `rows` events as a batch of `schema` (auction, price, ts).
    pub fn batch(&mut self, schema: SchemaRef, rows: usize) -> Result<RecordBatch> {
        let mut auctions = Vec::with_capacity(rows);
        let mut prices = Vec::with_capacity(rows);
        let mut timestamps = Vec::with_capacity(rows);
        for _ in 0..rows {
            auctions.push(self.random.below(AUCTIONS) as i64);
            prices.push(1 + self.random.below(MAX_PRICE) as i64);
            timestamps.push(self.next_timestamp_ns());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(auctions)),
            Arc::new(Int64Array::from(prices)),
            Arc::new(TimestampNanosecondArray::from(timestamps)),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    fn next_timestamp_ns(&mut self) -> i64 {
        let slot_ns = START_NS + self.next_event as i64 * EVENT_SPACING_NS;
        let jitter_ms = self.random.below(JITTER_MS + 1) as i64;
        let straggler_ms = if self.next_event % STRAGGLER_EVERY == STRAGGLER_EVERY - 1 {
            STRAGGLER_DELAY_MS
        } else {
            0
        };
        self.next_event += 1;
        slot_ns - (jitter_ms + straggler_ms) * NANOS_PER_MILLI
    }
}

/// Bids shaped like bench/copy_memory.py's (Nexmark's proportions): 10,000
/// events per simulated second, 3 new auctions and 1 new person per 50
/// events, bids on recent auctions (half on the newest 100) by recent or
/// any earlier persons, timestamps up to 50 ms (1 in 100: 2 s) out of order
/// and to the microsecond, so a 4 s watermark delay leaves nothing late.
pub struct BidGenerator {
    next_event: u64,
    random: SplitMix64,
}

/// 2023-11-14T22:13:20Z, where bench/copy_memory.py starts.
const BID_START_NS: i64 = 1_700_000_000_000_000_000;
const BID_SPACING_NS: i64 = 100_000;
const NANOS_PER_MICRO: i64 = 1_000;

impl BidGenerator {
    pub fn new(seed: u64) -> Self {
        BidGenerator {
            next_event: 0,
            random: SplitMix64(seed),
        }
    }

    /// The next `rows` bids in batches of at most `batch_rows`.
    pub fn batches(
        &mut self,
        schema: SchemaRef,
        rows: u64,
        batch_rows: usize,
    ) -> Result<Vec<RecordBatch>> {
        batches_of(rows, batch_rows, |size| self.batch(schema.clone(), size))
    }

    /// The next `rows` bids as a batch of `schema` (auction, bidder, price,
    /// date_time).
    pub fn batch(&mut self, schema: SchemaRef, rows: usize) -> Result<RecordBatch> {
        let mut auctions = Vec::with_capacity(rows);
        let mut bidders = Vec::with_capacity(rows);
        let mut prices = Vec::with_capacity(rows);
        let mut timestamps = Vec::with_capacity(rows);
        for _ in 0..rows {
            let event = self.next_event;
            self.next_event += 1;
            let newest_auction = 1_000 + event * 3 / 50 - 1;
            let newest_person = 1_000 + event / 50 - 1;
            let auction_spread = if self.random.chance(50) { 100 } else { 1_000 };
            auctions.push((newest_auction - self.random.below(auction_spread)) as i64);
            let bidder_spread = if self.random.chance(70) {
                1_000
            } else {
                newest_person + 1
            };
            bidders.push((newest_person - self.random.below(bidder_spread)) as i64);
            prices.push(100 + self.random.below(99_900) as i64);
            let delay_ns = if self.random.chance(1) {
                2_000_000_000
            } else {
                50_000_000
            };
            let event_ns =
                BID_START_NS + event as i64 * BID_SPACING_NS - self.random.below(delay_ns) as i64;
            timestamps.push(event_ns - event_ns.rem_euclid(NANOS_PER_MICRO));
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(auctions)),
            Arc::new(Int64Array::from(bidders)),
            Arc::new(Int64Array::from(prices)),
            Arc::new(TimestampNanosecondArray::from(timestamps)),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// `rows` split into batches of at most `batch_rows`, each made by `batch`.
fn batches_of(
    rows: u64,
    batch_rows: usize,
    mut batch: impl FnMut(usize) -> Result<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
    if batch_rows == 0 {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "batches need at least one row each",
        ));
    }
    let mut batches = Vec::new();
    let mut remaining = rows;
    while remaining > 0 {
        let size = remaining.min(batch_rows as u64) as usize;
        batches.push(batch(size)?);
        remaining -= size as u64;
    }
    Ok(batches)
}

/// SplitMix64: a tiny, well-mixed deterministic generator; benchmarks need
/// repeatable input, not cryptographic randomness.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    /// A value in `0..bound`; the modulo bias is negligible for small bounds.
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn timestamps(batch: &RecordBatch) -> Vec<i64> {
        let column = batch.column(2).as_any();
        let array = column.downcast_ref::<TimestampNanosecondArray>().unwrap();
        array.values().to_vec()
    }

    fn events_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]))
    }

    #[test]
    fn generator_is_deterministic_and_sized() {
        let first = EventGenerator::new(7)
            .batch(events_schema(), 2_500)
            .unwrap();
        let second = EventGenerator::new(7)
            .batch(events_schema(), 2_500)
            .unwrap();
        assert_eq!(first.num_rows(), 2_500);
        assert_eq!(first, second);
        let other_seed = EventGenerator::new(8)
            .batch(events_schema(), 2_500)
            .unwrap();
        assert_ne!(first, other_seed);
    }

    #[test]
    fn timestamps_advance_with_a_few_stragglers() {
        let batch = EventGenerator::new(7)
            .batch(events_schema(), 3_000)
            .unwrap();
        let timestamps = timestamps(&batch);
        let out_of_order = timestamps
            .windows(2)
            .filter(|pair| pair[1] < pair[0])
            .count();
        assert!(out_of_order > 0, "jitter puts some neighbours out of order");
        // Events 500 and 2500 are two simulated seconds apart, more than
        // the jitter, and neither is a straggler.
        assert!(
            timestamps[2_500] > timestamps[500],
            "time moves forward overall"
        );
        let stragglers = timestamps
            .iter()
            .enumerate()
            .filter(|(event, &ts)| {
                let slot_ns = START_NS + *event as i64 * EVENT_SPACING_NS;
                slot_ns - ts > JITTER_MS as i64 * NANOS_PER_MILLI
            })
            .count();
        assert_eq!(stragglers, 3);
    }

    #[test]
    fn batches_continue_the_same_sequence() {
        let batches = EventGenerator::new(7)
            .batches(events_schema(), 2_500, 1_000)
            .unwrap();
        let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [1_000, 1_000, 500]);
        let whole = EventGenerator::new(7)
            .batch(events_schema(), 2_500)
            .unwrap();
        let joined =
            datafusion::arrow::compute::concat_batches(&events_schema(), &batches).unwrap();
        assert_eq!(joined, whole);
    }

    fn bids_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("bidder", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new(
                "date_time",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                true,
            ),
        ]))
    }

    fn column(batch: &RecordBatch, index: usize) -> Vec<i64> {
        let column = batch.column(index).as_any();
        match column.downcast_ref::<Int64Array>() {
            Some(integers) => integers.values().to_vec(),
            None => timestamps_at(batch, index),
        }
    }

    fn timestamps_at(batch: &RecordBatch, index: usize) -> Vec<i64> {
        let column = batch.column(index).as_any();
        let array = column.downcast_ref::<TimestampNanosecondArray>().unwrap();
        array.values().to_vec()
    }

    #[test]
    fn bids_follow_nexmark_proportions_and_are_never_late() {
        let batches = BidGenerator::new(7)
            .batches(bids_schema(), 50_000, 20_000)
            .unwrap();
        let whole = datafusion::arrow::compute::concat_batches(&bids_schema(), &batches).unwrap();
        assert_eq!(
            whole,
            BidGenerator::new(7).batch(bids_schema(), 50_000).unwrap()
        );
        let (auctions, bidders, prices) = (column(&whole, 0), column(&whole, 1), column(&whole, 2));
        let timestamps = column(&whole, 3);
        // Auctions and persons grow at 3 and 1 per 50 events from 1,000.
        assert!(auctions
            .iter()
            .all(|&auction| (0..4_000).contains(&auction)));
        assert!(*auctions.iter().max().unwrap() > 3_900);
        assert!(bidders.iter().all(|&bidder| (0..2_000).contains(&bidder)));
        assert!(prices.iter().all(|&price| (100..100_000).contains(&price)));
        assert!(timestamps.iter().all(|ts| ts % 1_000 == 0), "microseconds");
        let mut latest = timestamps[0];
        for &ts in &timestamps {
            assert!(
                ts > latest - 4_000_000_000,
                "a 4 s watermark delay keeps every bid"
            );
            latest = latest.max(ts);
        }
        let span_s = (latest - timestamps[0]) / 1_000_000_000;
        assert!(
            (4..=6).contains(&span_s),
            "10,000 bids per second: {span_s} s"
        );
    }
}
