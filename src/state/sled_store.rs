//! `StateStore` on sled 0.34: one tree, atomic batches, fsync on commit.
//! Log records of `OUT_OF_LINE_BYTES` or more are kept in the value log
//! (`value_log.rs`) with a pointer in sled.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::acknowledged::AcknowledgedRecord;
use super::envelope;
use super::sled_integrity::{self, entry_hash, Tally, TALLY_KEY};
use super::value_log::{Location, ValueLog, OUT_OF_LINE_BYTES, SEGMENT_BYTES};
use super::{Entries, Keys, StateStore, StoredSize, WriteBatch, WriteOperation};
use crate::error::{sqlstate, Result, WeirError};

/// What an open of a store another handle still holds says
/// (`Engine::reopen` waits while it is the reason).
pub const LOCKED_MESSAGE: &str = "is in use by another process";

#[cfg(test)]
impl SledStore {
    /// Opens the store in `directory`, waiting (up to 10 s) while a handle
    /// just dropped still holds sled's lock: its flusher thread lets go a
    /// moment later, so a test that reopens at once can find it held.
    pub fn open_when_released(directory: &Path) -> Result<SledStore> {
        let started = std::time::Instant::now();
        loop {
            match SledStore::open(directory) {
                Err(error)
                    if error.message.contains(LOCKED_MESSAGE)
                        && started.elapsed() < std::time::Duration::from_secs(10) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                opened => return opened,
            }
        }
    }
}

/// How sled words that error: only in the text of an `Other` I/O error.
const SLED_LOCKED_MESSAGE: &str = "could not acquire lock";

pub struct SledStore {
    database: sled::Db,
    values: Arc<ValueLog>,
    /// Serialises the read-modify-write of segment counts and the tally.
    writer: Mutex<Writer>,
    acknowledged: AcknowledgedRecord,
}

struct Writer {
    /// Segments whose last value is gone, to delete once that is durable.
    dead: Vec<u64>,
    /// The tally as of the last batch applied (`sled_integrity.rs`).
    tally: Tally,
}

/// sled's page cache when nothing else is asked for (sled's own default is
/// 1 GiB, which would dominate a server whose live state is small). Large
/// values are outside sled (the value log, read through the operating
/// system's cache); what sled caches is view rows and small records, and
/// its memory is about twice the setting: 32 MiB kept a 10 M-row HOP load
/// at 370 MB instead of 540 MB, no slower (docs/benchmarks.md).
pub const DEFAULT_CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// Keys of the live-byte count per value-log segment (no weir key starts
/// with 0xff).
const LIVE_BYTES_PREFIX: &[u8] = b"\xffvalues/";

fn live_bytes_key(segment: u64) -> Vec<u8> {
    let mut key = LIVE_BYTES_PREFIX.to_vec();
    key.extend_from_slice(&segment.to_be_bytes());
    key
}

impl SledStore {
    pub fn open(directory: &Path) -> Result<Self> {
        SledStore::open_with_cache(directory, DEFAULT_CACHE_BYTES)
    }

    /// Opens the store with a page cache of about `cache_bytes`.
    pub fn open_with_cache(directory: &Path, cache_bytes: u64) -> Result<Self> {
        SledStore::open_with_segments(directory, cache_bytes, SEGMENT_BYTES)
    }

    fn open_with_segments(directory: &Path, cache_bytes: u64, segment_bytes: u64) -> Result<Self> {
        let config = sled::Config::new()
            .path(directory)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput);
        let (database, tally, acknowledged) = sled_integrity::open_checked(directory, config)?;
        let in_use = segments_in_use(&database)?;
        let (values, existing) = ValueLog::open(&directory.join("values"), segment_bytes, &in_use)?;
        check_segments(&values, &in_use, existing)?;
        Ok(SledStore {
            database,
            values: Arc::new(values),
            writer: Mutex::new(Writer {
                dead: Vec::new(),
                tally,
            }),
            acknowledged,
        })
    }
}

/// Why the store would not open; a lock another process holds gets its own
/// hint (a second server started on the same data directory).
pub(super) fn open_error(directory: &Path, error: sled::Error) -> WeirError {
    let locked = matches!(&error, sled::Error::Io(io)
        if io.to_string().starts_with(SLED_LOCKED_MESSAGE));
    if locked {
        return WeirError::io(format!(
            "the data directory {} {LOCKED_MESSAGE}",
            directory.display()
        ))
        .with_hint("Is another weir server running on it? Stop it, or start this one with another --data-dir.");
    }
    WeirError::io(format!(
        "cannot open the data directory {}: {error}",
        directory.display()
    ))
    .with_hint(
        "If its files were damaged or altered outside weir (sled may then blame an old \
         version), restore the data directory from a backup.",
    )
}

/// The segments sled counts live bytes in, in order.
fn segments_in_use(database: &sled::Db) -> Result<Vec<u64>> {
    database
        .scan_prefix(LIVE_BYTES_PREFIX)
        .keys()
        .map(|key| segment_of_live_key(&key.map_err(io_error)?))
        .collect()
}

/// Every segment in use must be there; the others (left by a crash before
/// their batch, or dead before their deletion) are deleted.
fn check_segments(values: &ValueLog, in_use: &[u64], existing: Vec<u64>) -> Result<()> {
    if let Some(missing) = in_use.iter().find(|segment| !values.contains(**segment)) {
        return Err(WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!("value segment {missing:016x} of the data directory is missing"),
        )
        .with_hint("The data directory was damaged outside weir; restore it from a backup."));
    }
    for segment in existing {
        if in_use.binary_search(&segment).is_err() {
            values.remove(segment)?;
        }
    }
    Ok(())
}

fn segment_of_live_key(key: &[u8]) -> Result<u64> {
    key.strip_prefix(LIVE_BYTES_PREFIX)
        .and_then(|number| <[u8; 8]>::try_from(number).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| WeirError::internal("a value-log count key is malformed"))
}

fn io_error(error: sled::Error) -> WeirError {
    WeirError::io(format!("storage error: {error}"))
}

/// Operations per sled batch when staging (see `stage`).
const STAGE_PIECE_OPERATIONS: usize = 64;

/// What a batch does to the value log while it is turned into a sled batch.
#[derive(Default)]
struct Accounting {
    /// The newest pointer (or `None`: in sled, or deleted) of each key this
    /// batch wrote, which sled does not show until the batch is applied.
    latest: HashMap<Vec<u8>, Latest>,
    /// The change to the content hash (wrapping).
    hash_delta: u64,
    /// Live-byte change per segment.
    deltas: BTreeMap<u64, i64>,
    /// Segments the batch's appends closed.
    closed: Vec<u64>,
}

/// What a key holds as a batch goes: its pointer, if kept out of line, and
/// its share of the content hash, if it holds anything.
#[derive(Clone, Copy)]
struct Latest {
    location: Option<Location>,
    hash: Option<u64>,
}

const ABSENT: Latest = Latest {
    location: None,
    hash: None,
};

impl Accounting {
    fn stored(&mut self, key: Vec<u8>, stored: &[u8], location: Option<Location>) {
        let hash = entry_hash(&key, stored);
        self.hash_delta = self.hash_delta.wrapping_add(hash);
        let hash = Some(hash);
        self.latest.insert(key, Latest { location, hash });
    }
}

impl SledStore {
    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `batch` as one sled batch; returns the store's count of
    /// batches with it. A `durable` batch's values appended to the value
    /// log (and every value staged before it) are fsynced first; a staged
    /// one's wait for the next durable batch, since nothing durable points
    /// at them before it (a crash may leave sled pointing into a torn
    /// tail, but only from keys nothing lists, which are deleted unread).
    fn apply_atomically(&self, batch: WriteBatch, durable: bool) -> Result<u64> {
        let mut writer = self.lock_writer();
        let mut accounting = Accounting::default();
        let mut sled_batch = sled::Batch::default();
        for operation in batch.operations {
            match operation {
                WriteOperation::Put(key, value, log) => {
                    self.release(&key, &mut accounting)?;
                    let sealed = envelope::seal(&value);
                    if log && sealed.len() >= OUT_OF_LINE_BYTES {
                        let (location, closed) = self.values.append(&key, &sealed)?;
                        accounting.closed.extend(closed);
                        *accounting.deltas.entry(location.segment).or_default() +=
                            i64::from(location.length);
                        let pointer = location.encode();
                        sled_batch.insert(key.as_slice(), pointer.as_slice());
                        accounting.stored(key, &pointer, Some(location));
                    } else {
                        sled_batch.insert(key.as_slice(), sealed.as_slice());
                        accounting.stored(key, &sealed, None);
                    }
                }
                WriteOperation::Delete(key) => {
                    self.release(&key, &mut accounting)?;
                    sled_batch.remove(key.as_slice());
                    accounting.latest.insert(key, ABSENT);
                }
                WriteOperation::DeletePrefix(prefix) => {
                    for entry in self.database.scan_prefix(&prefix).keys() {
                        let key = entry.map_err(io_error)?.to_vec();
                        self.release(&key, &mut accounting)?;
                        sled_batch.remove(key.as_slice());
                        accounting.latest.insert(key, ABSENT);
                    }
                }
            }
        }
        self.count_live_bytes(&mut accounting, &mut sled_batch, &mut writer.dead)?;
        if durable {
            // Durable before anything durable can point at it.
            self.values.sync()?;
        }
        let tally = Tally {
            commits: writer.tally.commits + 1,
            content_hash: writer
                .tally
                .content_hash
                .wrapping_add(accounting.hash_delta),
        };
        sled_batch.insert(TALLY_KEY, tally.sealed());
        self.database.apply_batch(sled_batch).map_err(io_error)?;
        writer.tally = tally;
        Ok(tally.commits)
    }

    /// Counts the value `key` holds before this operation as gone.
    fn release(&self, key: &[u8], accounting: &mut Accounting) -> Result<()> {
        let old = match accounting.latest.get(key) {
            Some(latest) => *latest,
            None => match self.database.get(key).map_err(io_error)? {
                Some(stored) => Latest {
                    location: Location::decode(key, &stored)?,
                    hash: Some(entry_hash(key, &stored)),
                },
                None => ABSENT,
            },
        };
        if let Some(location) = old.location {
            *accounting.deltas.entry(location.segment).or_default() -= i64::from(location.length);
        }
        if let Some(hash) = old.hash {
            accounting.hash_delta = accounting.hash_delta.wrapping_sub(hash);
        }
        Ok(())
    }

    /// Adds the new live-byte counts to `sled_batch`; a closed segment left
    /// without live bytes joins `dead`.
    fn count_live_bytes(
        &self,
        accounting: &mut Accounting,
        sled_batch: &mut sled::Batch,
        dead: &mut Vec<u64>,
    ) -> Result<()> {
        for segment in &accounting.closed {
            accounting.deltas.entry(*segment).or_default();
        }
        let active = self.values.active_segment();
        for (&segment, &delta) in &accounting.deltas {
            let key = live_bytes_key(segment);
            let before = match self.database.get(&key).map_err(io_error)? {
                Some(stored) => {
                    accounting.hash_delta = accounting
                        .hash_delta
                        .wrapping_sub(entry_hash(&key, &stored));
                    decode_count(&key, &stored)?
                }
                None => 0,
            };
            let after = before + delta;
            if after < 0 {
                return Err(WeirError::internal(format!(
                    "value segment {segment:016x} would hold {after} live bytes"
                )));
            }
            if after > 0 {
                let sealed = envelope::seal(&after.to_be_bytes());
                accounting.hash_delta = accounting
                    .hash_delta
                    .wrapping_add(entry_hash(&key, &sealed));
                sled_batch.insert(key, sealed);
            } else {
                sled_batch.remove(key);
                if segment != active {
                    dead.push(segment);
                }
            }
        }
        Ok(())
    }

    fn open_value(&self, key: &[u8], stored: &[u8]) -> Result<Vec<u8>> {
        open_value(&self.values, key, stored)
    }
}

/// The value stored for `key`, read from its segment if it is there.
fn open_value(values: &ValueLog, key: &[u8], stored: &[u8]) -> Result<Vec<u8>> {
    match Location::decode(key, stored)? {
        Some(location) => envelope::open(key, &values.read(key, location)?),
        None => envelope::open(key, stored),
    }
}

fn decode_count(key: &[u8], stored: &[u8]) -> Result<i64> {
    let payload = envelope::open(key, stored)?;
    <[u8; 8]>::try_from(payload.as_slice())
        .map(i64::from_be_bytes)
        .map_err(|_| envelope::corrupt(key, "a segment count is malformed"))
}
impl StateStore for SledStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.database.get(key).map_err(io_error)? {
            Some(sealed) => Ok(Some(self.open_value(key, &sealed)?)),
            None => Ok(None),
        }
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.database
            .scan_prefix(prefix)
            .map(|entry| {
                let (key, sealed) = entry.map_err(io_error)?;
                let payload = self.open_value(&key, &sealed)?;
                Ok((key.to_vec(), payload))
            })
            .collect()
    }

    fn commit(&self, batch: WriteBatch) -> Result<()> {
        let commits = self.apply_atomically(batch, true)?;
        let dead = std::mem::take(&mut self.lock_writer().dead);
        // The acknowledgement promise: nothing is reported done before fsync,
        self.database.flush().map_err(io_error)?;
        // nor before the record a damaged store is told by.
        self.acknowledged.record(commits)?;
        // Only now is it durable that nothing points into these.
        for segment in dead {
            self.values.remove(segment)?;
        }
        Ok(())
    }

    fn stage(&self, batch: WriteBatch) -> Result<()> {
        // sled frees the node versions a batch replaces only when the batch
        // ends (one epoch guard spans it), so a big batch holds a copy of
        // every node it touched: apply it in small pieces instead.
        let mut piece = WriteBatch::new();
        for operation in batch.operations {
            piece.operations.push(operation);
            if piece.operations.len() >= STAGE_PIECE_OPERATIONS {
                self.apply_atomically(std::mem::take(&mut piece), false)?;
            }
        }
        self.apply_atomically(piece, false).map(|_| ())
    }

    fn scan_range(&self, start: &[u8], end: &[u8]) -> Entries {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let values = self.values.clone();
        Box::new(
            self.database
                .range(start.to_vec()..end.to_vec())
                .map(move |entry| {
                    let (key, sealed) = entry.map_err(io_error)?;
                    let payload = open_value(&values, &key, &sealed)?;
                    Ok((key.to_vec(), payload))
                }),
        )
    }

    fn scan_keys(&self, start: &[u8], end: &[u8]) -> Keys {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        Box::new(
            self.database
                .range(start.to_vec()..end.to_vec())
                .keys()
                .map(|key| Ok(key.map_err(io_error)?.to_vec())),
        )
    }

    fn stored_size(&self, start: &[u8], end: &[u8]) -> Result<StoredSize> {
        let mut size = StoredSize::default();
        if start >= end {
            return Ok(size);
        }
        for entry in self.database.range(start.to_vec()..end.to_vec()) {
            let (key, stored) = entry.map_err(io_error)?;
            let value_bytes = match Location::decode(&key, &stored)? {
                Some(location) => location.length as usize,
                None => stored.len(),
            };
            size.entries += 1;
            size.bytes += (key.len() + value_bytes) as u64;
            if size.first_key.is_none() {
                size.first_key = Some(key.to_vec());
            }
        }
        Ok(size)
    }

    fn last_at_or_before(&self, start: &[u8], at: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if start > at {
            return Ok(None);
        }
        match self
            .database
            .range(start.to_vec()..=at.to_vec())
            .next_back()
        {
            Some(entry) => {
                let (key, sealed) = entry.map_err(io_error)?;
                let payload = self.open_value(&key, &sealed)?;
                Ok(Some((key.to_vec(), payload)))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
#[path = "sled_store_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sled_store_value_tests.rs"]
mod value_tests;
