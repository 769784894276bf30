//! Large records of append-only logs (`WriteBatch::put_log`: table entries)
//! live outside sled, in append-only segment files; sled keeps a short
//! pointer to each. sled 0.34 holds the values of every page it has
//! read or written in its own cache and, with few large pages, never evicts
//! them (docs/benchmarks.md, "Bounded memory"): a table's log would stay in
//! the process whatever the cache size. Segment files are read with `pread`,
//! so recent values sit in the operating system's page cache instead.
//!
//! A record is `[key length u32 BE][key][sealed value]`; the key makes a
//! segment readable on its own (for compaction or repair). Each segment's
//! live bytes are counted in sled, updated in the same atomic batch as the
//! pointers, and a segment whose count reaches zero is deleted once that is
//! durable. Appended bytes are fsynced before the batch that points at them
//! is applied, since sled may flush it on its own at any time after that.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::envelope::corrupt;
use crate::error::{Result, WeirError};

/// Log records at least this long are written to a segment, not sled.
pub const OUT_OF_LINE_BYTES: usize = 2048;
/// A segment is closed and a new one started past this size.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// First byte of a pointer stored in sled (a sealed envelope starts with
/// its format version, a small number).
const POINTER_TAG: u8 = 0xf0;
const POINTER_BYTES: usize = 1 + 8 + 8 + 4 + 4;

/// Where a value lies: `length` sealed bytes at `offset` of `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub segment: u64,
    pub offset: u64,
    pub length: u32,
}

impl Location {
    pub fn encode(&self) -> Vec<u8> {
        let mut pointer = Vec::with_capacity(POINTER_BYTES);
        pointer.push(POINTER_TAG);
        pointer.extend_from_slice(&self.segment.to_be_bytes());
        pointer.extend_from_slice(&self.offset.to_be_bytes());
        pointer.extend_from_slice(&self.length.to_be_bytes());
        let checksum = crc32fast::hash(&pointer);
        pointer.extend_from_slice(&checksum.to_be_bytes());
        pointer
    }

    /// The location a stored sled value points to, `None` for a value kept
    /// in sled itself.
    pub fn decode(key: &[u8], stored: &[u8]) -> Result<Option<Location>> {
        if stored.first() != Some(&POINTER_TAG) {
            return Ok(None);
        }
        let body = stored.len().checked_sub(4).map(|end| &stored[..end]);
        let valid = stored.len() == POINTER_BYTES
            && body.is_some_and(|body| {
                crc32fast::hash(body).to_be_bytes() == stored[POINTER_BYTES - 4..]
            });
        if !valid {
            return Err(corrupt(key, "the pointer to its segment is damaged"));
        }
        let number = |range: std::ops::Range<usize>| {
            let mut bytes = [0u8; 8];
            bytes[8 - range.len()..].copy_from_slice(&stored[range]);
            u64::from_be_bytes(bytes)
        };
        Ok(Some(Location {
            segment: number(1..9),
            offset: number(9..17),
            length: number(17..21) as u32,
        }))
    }
}

struct Active {
    segment: u64,
    file: File,
    length: u64,
    /// Bytes appended since the last fsync.
    unsynced: bool,
}

pub struct ValueLog {
    directory: PathBuf,
    segment_bytes: u64,
    active: Mutex<Active>,
    /// Open segments for reading; a deleted segment's handle stays valid
    /// for a reader that already holds it.
    readers: Mutex<HashMap<u64, Arc<File>>>,
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> WeirError {
    WeirError::io(format!("cannot {what} {}: {error}", path.display()))
}

impl ValueLog {
    /// Opens the segments under `directory` and starts a new one after the
    /// newest of them and of `in_use` (a crash may have left a torn tail on
    /// the newest); returns the log and the segment files found.
    pub fn open(
        directory: &Path,
        segment_bytes: u64,
        in_use: &[u64],
    ) -> Result<(ValueLog, Vec<u64>)> {
        std::fs::create_dir_all(directory).map_err(|error| io_error("create", directory, error))?;
        let mut existing = Vec::new();
        let listing =
            std::fs::read_dir(directory).map_err(|error| io_error("list", directory, error))?;
        for file in listing {
            let file = file.map_err(|error| io_error("list", directory, error))?;
            if let Some(segment) = segment_of(&file.file_name().to_string_lossy()) {
                existing.push(segment);
            }
        }
        existing.sort_unstable();
        let newest = existing.iter().chain(in_use).max();
        let next = newest.map_or(1, |newest| newest + 1);
        let active = create_segment(directory, next)?;
        let log = ValueLog {
            directory: directory.to_path_buf(),
            segment_bytes,
            active: Mutex::new(active),
            readers: Mutex::new(HashMap::new()),
        };
        Ok((log, existing))
    }

    pub fn active_segment(&self) -> u64 {
        self.lock_active().segment
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, Active> {
        self.active
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends a record; returns where its sealed value lies and, when this
    /// closed the active segment, the closed segment's number.
    pub fn append(&self, key: &[u8], sealed: &[u8]) -> Result<(Location, Option<u64>)> {
        let mut active = self.lock_active();
        let mut closed = None;
        if active.length >= self.segment_bytes {
            sync(&mut active, &self.directory)?;
            let next = create_segment(&self.directory, active.segment + 1)?;
            closed = Some(std::mem::replace(&mut *active, next).segment);
        }
        let mut record = Vec::with_capacity(4 + key.len() + sealed.len());
        record.extend_from_slice(&(key.len() as u32).to_be_bytes());
        record.extend_from_slice(key);
        record.extend_from_slice(sealed);
        let path = segment_path(&self.directory, active.segment);
        active
            .file
            .write_all(&record)
            .map_err(|error| io_error("write", &path, error))?;
        let location = Location {
            segment: active.segment,
            offset: active.length + 4 + key.len() as u64,
            length: sealed.len() as u32,
        };
        active.length += record.len() as u64;
        active.unsynced = true;
        Ok((location, closed))
    }

    /// Makes every appended record durable.
    pub fn sync(&self) -> Result<()> {
        sync(&mut self.lock_active(), &self.directory)
    }

    /// The sealed value at `location`.
    pub fn read(&self, key: &[u8], location: Location) -> Result<Vec<u8>> {
        let file = self.reader(key, location.segment)?;
        let mut sealed = vec![0u8; location.length as usize];
        file.read_exact_at(&mut sealed, location.offset)
            .map_err(|error| {
                corrupt(
                    key,
                    &format!("segment {} cannot be read: {error}", location.segment),
                )
            })?;
        Ok(sealed)
    }

    fn reader(&self, key: &[u8], segment: u64) -> Result<Arc<File>> {
        let mut readers = self
            .readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(file) = readers.get(&segment) {
            return Ok(file.clone());
        }
        let path = segment_path(&self.directory, segment);
        let file = File::open(&path).map_err(|error| {
            corrupt(
                key,
                &format!("{} cannot be opened: {error}", path.display()),
            )
        })?;
        let file = Arc::new(file);
        readers.insert(segment, file.clone());
        Ok(file)
    }

    /// Whether a segment's file is there (checked at open for every segment
    /// sled still counts live bytes in).
    pub fn contains(&self, segment: u64) -> bool {
        segment_path(&self.directory, segment).exists()
    }

    /// Deletes a segment nothing durable points into any more.
    pub fn remove(&self, segment: u64) -> Result<()> {
        if segment == self.active_segment() {
            return Ok(());
        }
        self.readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&segment);
        let path = segment_path(&self.directory, segment);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io_error("delete", &path, error)),
        }
    }
}

fn sync(active: &mut Active, directory: &Path) -> Result<()> {
    if active.unsynced {
        let path = segment_path(directory, active.segment);
        active
            .file
            .sync_data()
            .map_err(|error| io_error("sync", &path, error))?;
        active.unsynced = false;
    }
    Ok(())
}

fn segment_path(directory: &Path, segment: u64) -> PathBuf {
    directory.join(format!("{segment:016x}.values"))
}

fn segment_of(file_name: &str) -> Option<u64> {
    let number = file_name.strip_suffix(".values")?;
    if number.len() != 16 {
        return None;
    }
    u64::from_str_radix(number, 16).ok()
}

fn create_segment(directory: &Path, segment: u64) -> Result<Active> {
    let path = segment_path(directory, segment);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|error| io_error("create", &path, error))?;
    // The new name must survive a crash as well as the bytes written to it.
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| io_error("sync", directory, error))?;
    Ok(Active {
        segment,
        file,
        length: 0,
        unsynced: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_round_trip_and_damage_is_detected() {
        let location = Location {
            segment: 3,
            offset: 1 << 40,
            length: 70_000,
        };
        let pointer = location.encode();
        assert_eq!(Location::decode(b"k", &pointer).unwrap(), Some(location));
        assert_eq!(Location::decode(b"k", &[1, 2, 3]).unwrap(), None);
        let mut damaged = pointer.clone();
        damaged[10] ^= 1;
        assert!(Location::decode(b"k", &damaged).is_err());
        assert!(Location::decode(b"k", &pointer[..POINTER_BYTES - 1]).is_err());
    }

    #[test]
    fn records_are_read_back_after_reopen_in_a_new_segment() {
        let directory = tempfile::tempdir().unwrap();
        let (log, existing) = ValueLog::open(directory.path(), SEGMENT_BYTES, &[]).unwrap();
        assert!(existing.is_empty());
        let (first, _) = log.append(b"a", b"first value").unwrap();
        let (second, _) = log.append(b"bb", b"second").unwrap();
        log.sync().unwrap();
        assert_eq!(log.read(b"a", first).unwrap(), b"first value");
        assert_eq!(log.read(b"bb", second).unwrap(), b"second");
        drop(log);
        let (log, existing) = ValueLog::open(directory.path(), SEGMENT_BYTES, &[]).unwrap();
        assert_eq!(existing, vec![first.segment]);
        assert_eq!(log.active_segment(), first.segment + 1);
        assert_eq!(log.read(b"bb", second).unwrap(), b"second");
        log.remove(first.segment).unwrap();
        assert!(!log.contains(first.segment));
        assert!(log.read(b"a", first).is_err());
    }
}
