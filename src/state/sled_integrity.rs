//! Telling a damaged sled store from a whole one when it opens.
//!
//! sled recovers what it can read of a damaged log without a word: the
//! newest commits (a truncated or damaged tail), or single tree nodes rolled
//! back to an older version (a damaged node in the middle). So the store
//! keeps, in every batch, a tally under `TALLY_KEY`: how many batches it has
//! applied, and a hash of everything it holds (a wrapping sum of one hash
//! per entry, kept up to date as batches put and delete). On open the tally
//! must match a fresh hash of the contents, and its count must reach the
//! count the acknowledged record (`acknowledged.rs`, outside sled) holds.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use super::acknowledged::{self, AcknowledgedRecord};
use super::envelope;
use crate::error::{sqlstate, Result, WeirError};

/// No weir key starts with 0xff; the tally sorts after everything.
pub const TALLY_KEY: &[u8] = b"\xfftally";

/// What the store says of itself: batches applied, and the hash of its
/// contents (every entry but this one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub commits: u64,
    pub content_hash: u64,
}

impl Tally {
    pub fn sealed(&self) -> Vec<u8> {
        let mut payload = self.commits.to_be_bytes().to_vec();
        payload.extend_from_slice(&self.content_hash.to_be_bytes());
        envelope::seal(&payload)
    }

    fn open(stored: &[u8]) -> Result<Tally> {
        let payload = envelope::open(TALLY_KEY, stored)?;
        let malformed = || envelope::corrupt(TALLY_KEY, "the store's tally is malformed");
        let commits = payload.get(..8).ok_or_else(malformed)?;
        let content_hash = payload.get(8..16).ok_or_else(malformed)?;
        Ok(Tally {
            commits: u64::from_be_bytes(commits.try_into().map_err(|_| malformed())?),
            content_hash: u64::from_be_bytes(content_hash.try_into().map_err(|_| malformed())?),
        })
    }
}

/// One entry's share of the content hash: its key, its stored length and
/// the stored value's first bytes. Those hold the envelope's checksum of
/// the payload (or the whole pointer of a value kept out of line), so the
/// payload itself need not be hashed again. FNV-1a: stable across Rust
/// versions and platforms, unlike std's hasher, and fast on short input.
pub fn entry_hash(key: &[u8], stored: &[u8]) -> u64 {
    const PREFIX_BYTES: usize = 32;
    let head = &stored[..stored.len().min(PREFIX_BYTES)];
    let length = (stored.len() as u64).to_be_bytes();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.iter().chain([0xff].iter()).chain(&length).chain(head) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Opens sled in `directory` and checks it against its tally and the
/// acknowledged record; returns the tally to continue from.
pub fn open_checked(
    directory: &Path,
    config: sled::Config,
) -> Result<(sled::Db, Tally, AcknowledgedRecord)> {
    let database = match quietly(|| config.open()) {
        Ok(opened) => opened.map_err(|error| super::sled_store::open_error(directory, error))?,
        Err(panic) => return Err(unreadable(directory, &panic_message(&panic))),
    };
    let stored = database
        .get(TALLY_KEY)
        .map_err(|error| storage(directory, error))?;
    let started = std::time::Instant::now();
    let (computed, entries) = content_hash(&database, directory)?;
    tracing::info!(
        entries,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "checked the store against its tally"
    );
    let (record, recorded) = AcknowledgedRecord::open(directory)?;
    let tally = match (stored, recorded) {
        (Some(stored), Some(recorded)) => {
            let tally = Tally::open(&stored)?;
            if tally.content_hash != computed {
                return Err(damaged_contents(directory));
            }
            if recorded > tally.commits {
                return Err(acknowledged::missing_commits(
                    directory,
                    tally.commits,
                    recorded,
                ));
            }
            tally
        }
        (None, Some(recorded)) if recorded > 0 => {
            return Err(acknowledged::missing_commits(directory, 0, recorded))
        }
        // A store from before tallies, or one an operator chose to accept
        // as it is (an emptied record): what it holds is all there is.
        (stored, _) => {
            let commits = match stored {
                Some(stored) => Tally::open(&stored).map_or(0, |tally| tally.commits),
                None => 0,
            };
            let tally = Tally {
                commits,
                content_hash: computed,
            };
            database
                .insert(TALLY_KEY, tally.sealed())
                .and_then(|_| database.flush())
                .map_err(|error| storage(directory, error))?;
            record.record(commits)?;
            tally
        }
    };
    Ok((database, tally, record))
}

/// The hash of everything but the tally, read afresh; a read sled
/// cannot do (or panics on) is damage too.
/// Returns the hash and the number of entries read.
fn content_hash(database: &sled::Db, directory: &Path) -> Result<(u64, u64)> {
    let (mut sum, mut entries) = (0u64, 0u64);
    let scanned = quietly(|| {
        for entry in database.iter() {
            let (key, stored) = entry.map_err(|error| storage(directory, error))?;
            if &*key != TALLY_KEY {
                sum = sum.wrapping_add(entry_hash(&key, &stored));
                entries += 1;
            }
        }
        Ok::<_, WeirError>(())
    });
    match scanned {
        Ok(result) => result.map(|()| (sum, entries)),
        Err(panic) => Err(unreadable(directory, &panic_message(&panic))),
    }
}

fn damaged_contents(directory: &Path) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!(
            "the store in {} is damaged: what it holds does not match its own record of it",
            directory.display()
        ),
    )
    .with_hint(
        "Part of the store was lost or altered outside weir (a disk fault, an edited or \
         partly copied file). weir does not start on it, so nothing is lost in silence: \
         restore the whole data directory from a backup.",
    )
}

fn unreadable(directory: &Path, why: &str) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!("the store in {} cannot be read: {why}", directory.display()),
    )
    .with_hint("The data directory was damaged outside weir; restore it from a backup.")
}

fn storage(directory: &Path, error: sled::Error) -> WeirError {
    unreadable(directory, &error.to_string())
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `work`, catching a panic without the panic hook's report: some
/// damaged logs make sled panic instead of failing, and a backtrace of its
/// internals would bury the error weir reports.
fn quietly<T>(work: impl FnOnce() -> T) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |panic| {
            if !QUIET.with(|quiet| quiet.get()) {
                report(panic);
            }
        }));
    });
    QUIET.with(|quiet| quiet.set(true));
    let outcome = catch_unwind(AssertUnwindSafe(work));
    QUIET.with(|quiet| quiet.set(false));
    outcome
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message.to_string(),
        (_, Some(message)) => message.clone(),
        _ => "its storage engine failed".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_hashes_differ_by_key_length_and_head() {
        let base = entry_hash(b"k", b"\x01abcd-payload");
        assert_ne!(base, entry_hash(b"j", b"\x01abcd-payload"));
        assert_ne!(base, entry_hash(b"k", b"\x01abcd-payloa"));
        assert_ne!(base, entry_hash(b"k", b"\x01abce-payload"));
        // Known values (computed apart from this code): stored hashes must
        // not change between builds.
        assert_eq!(entry_hash(b"", b""), 0x2032_dd64_3620_252e);
        assert_eq!(entry_hash(b"k", b"ab"), 0xaf98_ee2d_fa82_fe1a);
    }

    #[test]
    fn a_tally_round_trips() {
        let tally = Tally {
            commits: 7,
            content_hash: 0xdead_beef,
        };
        assert_eq!(Tally::open(&tally.sealed()).unwrap(), tally);
    }
}
