//! The Nexmark auction model: a numbered stream of events, one person,
//! three auctions and 46 bids in every 50, event time advancing a fixed
//! gap per event. Bids favour a few hot auctions and bidders, auctions a
//! few hot sellers, as in the benchmark's generator. Every event is a pure
//! function of the seed and its number, so a reader can start at any
//! event (a restart resumes where the stored position says) and the same
//! seed always gives the same rows.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Builder, StringBuilder, TimestampNanosecondBuilder};
use datafusion::arrow::datatypes::{DataType, TimeUnit};

/// Events per cycle, and how a cycle's slots are shared out.
const CYCLE: u64 = 50;
const PERSON_SLOTS: u64 = 1;
const AUCTION_SLOTS: u64 = 3;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const CATEGORIES: u64 = 5;
/// Hot ids are the multiples of this among the ids seen so far.
const HOT_GROUP: u64 = 100;
/// 2015-07-15 00:00:00 UTC: a fixed start keeps every run's rows equal.
pub const BASE_TIME_NS: i64 = 1_436_918_400_000_000_000;

const CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const URLS: [&str; 4] = [
    "https://www.nexmark.com/google/item.htm?query=1",
    "https://www.nexmark.com/facebook/item.htm?query=1",
    "https://www.nexmark.com/baidu/item.htm?query=1",
    "https://www.nexmark.com/apple/item.htm?query=1",
];
const FIRST_NAMES: [&str; 8] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie",
];
const LAST_NAMES: [&str; 8] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
];
const CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const ITEMS: [&str; 8] = [
    "vase", "lamp", "chair", "clock", "print", "radio", "stamp", "watch",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Person,
    Auction,
    Bid,
}

impl Table {
    pub fn columns(self) -> Vec<(&'static str, DataType)> {
        let (id, text) = (DataType::Int64, DataType::Utf8);
        let time = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let names: &[&str] = match self {
            Table::Person => &[
                "id",
                "name",
                "email_address",
                "credit_card",
                "city",
                "state",
                "date_time",
                "extra",
            ],
            Table::Auction => &[
                "id",
                "item_name",
                "description",
                "initial_bid",
                "reserve",
                "date_time",
                "expires",
                "seller",
                "category",
                "extra",
            ],
            Table::Bid => &[
                "auction",
                "bidder",
                "price",
                "channel",
                "url",
                "date_time",
                "extra",
            ],
        };
        names
            .iter()
            .map(|&name| {
                let data_type = match name {
                    "date_time" | "expires" => time.clone(),
                    "id" | "initial_bid" | "reserve" | "seller" | "category" | "auction"
                    | "bidder" | "price" => id.clone(),
                    _ => text.clone(),
                };
                (name, data_type)
            })
            .collect()
    }

    /// The table event `n` belongs to.
    pub fn of_event(n: u64) -> Table {
        match n % CYCLE {
            slot if slot < PERSON_SLOTS => Table::Person,
            slot if slot < PERSON_SLOTS + AUCTION_SLOTS => Table::Auction,
            _ => Table::Bid,
        }
    }
}

/// The knobs of the model (RisingWave's `nexmark.*` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    pub seed: u64,
    /// Event time between consecutive events.
    pub event_gap_ns: i64,
    pub active_people: u64,
    pub in_flight_auctions: u64,
    pub hot_seller_ratio: u64,
    pub hot_auction_ratio: u64,
    pub hot_bidder_ratio: u64,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            seed: 0,
            event_gap_ns: 100_000,
            active_people: 1000,
            in_flight_auctions: 100,
            hot_seller_ratio: 4,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
        }
    }
}

/// People among events `0..n`.
fn people_before(n: u64) -> u64 {
    n / CYCLE * PERSON_SLOTS + (n % CYCLE).min(PERSON_SLOTS)
}

/// Auctions among events `0..n`.
fn auctions_before(n: u64) -> u64 {
    n / CYCLE * AUCTION_SLOTS + (n % CYCLE).saturating_sub(PERSON_SLOTS).min(AUCTION_SLOTS)
}

/// SplitMix64, seeded per event.
struct Random(u64);

impl Random {
    fn for_event(seed: u64, n: u64) -> Self {
        Random(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (bound ≥ 1).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound.max(1))) >> 64) as u64
    }
}

impl Model {
    fn time_ns(&self, n: u64) -> i64 {
        let offset = i128::from(self.event_gap_ns) * i128::from(n);
        (i128::from(BASE_TIME_NS) + offset).min(i128::from(i64::MAX)) as i64
    }

    /// One of the `window` newest of `count` ids, or with odds `ratio - 1`
    /// in `ratio` a hot one; `offset` shifts hot ids.
    fn pick(random: &mut Random, count: u64, window: u64, ratio: u64, offset: u64) -> u64 {
        let newest = count.saturating_sub(1);
        if ratio > 0 && random.below(ratio) > 0 {
            return (newest / HOT_GROUP * HOT_GROUP + offset).min(newest);
        }
        newest - random.below(window.min(count).max(1))
    }

    fn price(random: &mut Random) -> i64 {
        let digits = random.below(5) as u32;
        (100 + random.below(900) as i64) * 10_i64.pow(digits)
    }
}

/// Builds the rows of one table from consecutive events, only for the
/// columns wanted.
pub struct Rows {
    table: Table,
    model: Model,
    wanted: Vec<bool>,
    longs: Vec<Option<Int64Builder>>,
    texts: Vec<Option<StringBuilder>>,
    times: Vec<Option<TimestampNanosecondBuilder>>,
    rows: usize,
    /// Rows of the last chunk: the next one's builders are made this big.
    capacity: usize,
}

impl Rows {
    pub fn new(table: Table, model: Model, wanted: Vec<bool>) -> Self {
        let mut rows = Rows {
            longs: Vec::new(),
            texts: Vec::new(),
            times: Vec::new(),
            table,
            model,
            wanted,
            rows: 0,
            capacity: 1024,
        };
        rows.reset_builders();
        rows
    }

    /// Builders for the wanted columns, sized for the last chunk so a
    /// chunk's values are written without growing buffers.
    fn reset_builders(&mut self) {
        let columns = self.table.columns();
        let capacity = self.capacity;
        let time = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let wanted =
            |index: usize, kind: &DataType| self.wanted[index] && &columns[index].1 == kind;
        self.longs = (0..columns.len())
            .map(|i| wanted(i, &DataType::Int64).then(|| Int64Builder::with_capacity(capacity)))
            .collect();
        self.texts = (0..columns.len())
            .map(|i| {
                wanted(i, &DataType::Utf8)
                    .then(|| StringBuilder::with_capacity(capacity, capacity * 48))
            })
            .collect();
        self.times = (0..columns.len())
            .map(|i| wanted(i, &time).then(|| TimestampNanosecondBuilder::with_capacity(capacity)))
            .collect();
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    fn long(&mut self, column: usize, value: i64) {
        if let Some(builder) = self.longs[column].as_mut() {
            builder.append_value(value);
        }
    }

    fn text(&mut self, column: usize, value: &str) {
        if let Some(builder) = self.texts[column].as_mut() {
            builder.append_value(value);
        }
    }

    fn time(&mut self, column: usize, value: i64) {
        if let Some(builder) = self.times[column].as_mut() {
            builder.append_value(value);
        }
    }

    /// Adds event `n` (which must be of this table).
    pub fn add(&mut self, n: u64) {
        let mut random = Random::for_event(self.model.seed, n);
        let now = self.model.time_ns(n);
        match self.table {
            Table::Person => self.person(n, now, &mut random),
            Table::Auction => self.auction(n, now, &mut random),
            Table::Bid => self.bid(n, now, &mut random),
        }
        self.rows += 1;
    }

    fn person(&mut self, n: u64, now: i64, random: &mut Random) {
        let first = FIRST_NAMES[random.below(8) as usize];
        let last = LAST_NAMES[random.below(8) as usize];
        self.long(0, FIRST_PERSON_ID + people_before(n) as i64);
        if self.wanted[1] || self.wanted[2] {
            self.text(1, &format!("{first} {last}"));
            self.text(
                2,
                &format!("{first}.{last}@example.com").to_ascii_lowercase(),
            );
        }
        if self.wanted[3] {
            let card = random.next();
            let group = |shift: u32| (card >> shift) % 10_000;
            let text = format!(
                "{:04} {:04} {:04} {:04}",
                group(0),
                group(16),
                group(32),
                group(48)
            );
            self.text(3, &text);
        }
        self.text(4, CITIES[random.below(10) as usize]);
        self.text(5, STATES[random.below(6) as usize]);
        self.time(6, now);
        self.text(7, "");
    }

    fn auction(&mut self, n: u64, now: i64, random: &mut Random) {
        let model = self.model;
        let people = people_before(n);
        let initial_bid = Model::price(random);
        let seller = Model::pick(
            random,
            people,
            model.active_people,
            model.hot_seller_ratio,
            0,
        );
        let item = ITEMS[random.below(8) as usize];
        self.long(0, FIRST_AUCTION_ID + auctions_before(n) as i64);
        self.text(1, item);
        self.text(2, item);
        self.long(3, initial_bid);
        self.long(4, initial_bid + Model::price(random));
        self.time(5, now);
        let length_ns = (1 + random.below(20) as i64) * 1_000_000_000;
        self.time(6, now.saturating_add(length_ns));
        self.long(7, FIRST_PERSON_ID + seller as i64);
        self.long(8, FIRST_CATEGORY_ID + random.below(CATEGORIES) as i64);
        self.text(9, "");
    }

    fn bid(&mut self, n: u64, now: i64, random: &mut Random) {
        let model = self.model;
        let auctions = auctions_before(n);
        let people = people_before(n);
        let auction = Model::pick(
            random,
            auctions,
            model.in_flight_auctions,
            model.hot_auction_ratio,
            0,
        );
        let bidder = Model::pick(
            random,
            people,
            model.active_people,
            model.hot_bidder_ratio,
            1,
        );
        let channel = random.below(4) as usize;
        self.long(0, FIRST_AUCTION_ID + auction as i64);
        self.long(1, FIRST_PERSON_ID + bidder as i64);
        self.long(2, Model::price(random));
        self.text(3, CHANNELS[channel]);
        self.text(4, URLS[channel]);
        self.time(5, now);
        self.text(6, "");
    }

    /// The columns built so far (None where unwanted); starts anew.
    pub fn finish(&mut self) -> Vec<Option<ArrayRef>> {
        let rows = std::mem::take(&mut self.rows);
        let columns = self.table.columns();
        let mut finished = Vec::with_capacity(columns.len());
        for index in 0..columns.len() {
            let array: Option<ArrayRef> = if let Some(b) = self.longs[index].as_mut() {
                Some(Arc::new(b.finish()))
            } else if let Some(b) = self.texts[index].as_mut() {
                Some(Arc::new(b.finish()))
            } else {
                self.times[index]
                    .as_mut()
                    .map(|b| Arc::new(b.finish()) as ArrayRef)
            };
            finished.push(array);
        }
        self.capacity = rows.max(1);
        self.reset_builders();
        finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};

    fn bids(from: u64, to: u64) -> Vec<Option<ArrayRef>> {
        let mut rows = Rows::new(Table::Bid, Model::default(), vec![true; 7]);
        (from..to)
            .filter(|&n| Table::of_event(n) == Table::Bid)
            .for_each(|n| rows.add(n));
        rows.finish()
    }

    #[test]
    fn events_are_shared_one_to_three_to_forty_six() {
        let mut counts = [0; 3];
        for n in 0..5000 {
            counts[Table::of_event(n) as usize] += 1;
        }
        assert_eq!(counts, [100, 300, 4600]);
        assert_eq!(people_before(0), 0);
        assert_eq!(people_before(1), 1);
        assert_eq!(auctions_before(4), 3);
        assert_eq!(auctions_before(51), 3);
        assert_eq!(auctions_before(52), 4);
    }

    #[test]
    fn the_same_events_come_out_whatever_the_reads() {
        let whole = bids(0, 2000);
        let first = bids(0, 777);
        let second = bids(777, 2000);
        for column in [0, 1, 2] {
            let whole = whole[column].as_ref().unwrap();
            let a = first[column].as_ref().unwrap();
            let b = second[column].as_ref().unwrap();
            let joined = datafusion::arrow::compute::concat(&[a.as_ref(), b.as_ref()]).unwrap();
            assert_eq!(whole.as_ref(), joined.as_ref());
        }
    }

    #[test]
    fn bids_name_auctions_and_people_that_exist() {
        let columns = bids(0, 20_000);
        let auctions = columns[0].as_ref().unwrap();
        let auctions = auctions.as_any().downcast_ref::<Int64Array>().unwrap();
        let bidders = columns[1].as_ref().unwrap();
        let bidders = bidders.as_any().downcast_ref::<Int64Array>().unwrap();
        let bid_events: Vec<u64> = (0..20_000)
            .filter(|&n| Table::of_event(n) == Table::Bid)
            .collect();
        let mut hot = 0;
        for (row, &n) in bid_events.iter().enumerate() {
            let auction = auctions.value(row);
            assert!(auction >= FIRST_AUCTION_ID);
            assert!(auction < FIRST_AUCTION_ID + auctions_before(n) as i64);
            let bidder = bidders.value(row);
            assert!(bidder >= FIRST_PERSON_ID);
            assert!(bidder < FIRST_PERSON_ID + people_before(n) as i64);
            hot += usize::from((auction - FIRST_AUCTION_ID) % HOT_GROUP as i64 == 0);
        }
        // Half the bids go to hot auctions, and some others by chance.
        assert!(hot * 2 > bid_events.len(), "{hot} of {}", bid_events.len());
        assert_eq!(auctions.null_count(), 0);
    }

    #[test]
    fn unwanted_columns_are_not_built() {
        let mut wanted = vec![false; 7];
        wanted[2] = true;
        let mut rows = Rows::new(Table::Bid, Model::default(), wanted);
        rows.add(10);
        let columns = rows.finish();
        assert!(columns[0].is_none());
        assert_eq!(columns[2].as_ref().unwrap().len(), 1);
    }
}
