//! The record of acknowledged commits: a small file beside sled, fsynced
//! after each commit, holding how many commits the store had made durable.
//! sled recovers the longest undamaged prefix of its log in silence, so a
//! damaged or truncated store would otherwise start with its newest
//! acknowledged writes gone. The store counts its commits itself (a key in
//! every batch); on open, a store holding fewer commits than this record
//! says were acknowledged is refused.
//!
//! The file has two slots in different sectors, written in turn, each with
//! a checksum: a crash part way through a write leaves the other slot whole.
//! An empty file means "no record yet": a new store, or an operator's
//! explicit choice to accept a store as it is (docs/operations.md).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{sqlstate, Result, WeirError};

pub const FILE_NAME: &str = "acknowledged";
const MAGIC: &[u8; 8] = b"weirack1";
const SLOT_BYTES: usize = 20;
/// Slot offsets a sector apart, so one torn write cannot damage both.
const SLOT_OFFSETS: [u64; 2] = [0, 512];

pub struct AcknowledgedRecord {
    path: PathBuf,
    state: Mutex<Written>,
}

struct Written {
    file: File,
    /// The commit count last made durable in the file.
    commits: u64,
    /// Writes so far; the next goes to slot `writes % 2`.
    writes: u64,
}

impl AcknowledgedRecord {
    /// Opens (or creates) the record in `directory`; `None` as the count
    /// when it holds no record yet.
    pub fn open(directory: &Path) -> Result<(AcknowledgedRecord, Option<u64>)> {
        let path = directory.join(FILE_NAME);
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|error| file_error(&path, "open", error))?;
        if !existed {
            file.sync_all()
                .and_then(|()| File::open(directory)?.sync_all())
                .map_err(|error| file_error(&path, "create", error))?;
        }
        let recorded = read_record(&file, &path)?;
        let (commits, writes) = recorded.unwrap_or((0, 0));
        let record = AcknowledgedRecord {
            path,
            state: Mutex::new(Written {
                file,
                commits,
                writes,
            }),
        };
        Ok((record, recorded.map(|(commits, _)| commits)))
    }

    /// Records that the store's first `commits` commits are durable; waits
    /// for the disk. A count at or below the one recorded is already true.
    pub fn record(&self, commits: u64) -> Result<()> {
        let mut written = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if commits <= written.commits {
            return Ok(());
        }
        let offset = SLOT_OFFSETS[(written.writes % 2) as usize];
        written
            .file
            .write_all_at(&encode_slot(commits), offset)
            .and_then(|()| written.file.sync_data())
            .map_err(|error| file_error(&self.path, "write", error))?;
        written.commits = commits;
        written.writes += 1;
        Ok(())
    }
}

fn encode_slot(commits: u64) -> [u8; SLOT_BYTES] {
    let mut slot = [0u8; SLOT_BYTES];
    slot[..8].copy_from_slice(MAGIC);
    slot[8..16].copy_from_slice(&commits.to_be_bytes());
    let checksum = crc32fast::hash(&slot[..16]);
    slot[16..].copy_from_slice(&checksum.to_be_bytes());
    slot
}

fn decode_slot(slot: &[u8]) -> Option<u64> {
    let checksum = u32::from_be_bytes(slot.get(16..20)?.try_into().ok()?);
    if &slot[..8] != MAGIC || crc32fast::hash(&slot[..16]) != checksum {
        return None;
    }
    Some(u64::from_be_bytes(slot[8..16].try_into().ok()?))
}

/// The newest whole slot's count, and how many writes that implies; None
/// for an empty file. A file with content but no whole slot is damaged.
fn read_record(file: &File, path: &Path) -> Result<Option<(u64, u64)>> {
    let length = file
        .metadata()
        .map_err(|error| file_error(path, "read", error))?
        .len();
    if length == 0 {
        return Ok(None);
    }
    let slots = SLOT_OFFSETS.map(|offset| {
        let mut slot = [0u8; SLOT_BYTES];
        // A slot the file is too short for was never written whole.
        file.read_exact_at(&mut slot, offset)
            .ok()
            .and_then(|()| decode_slot(&slot))
    });
    // The next write must not overwrite the newest slot.
    match slots {
        [Some(first), Some(second)] if first >= second => Ok(Some((first, 1))),
        [_, Some(second)] => Ok(Some((second, 0))),
        [Some(first), None] => Ok(Some((first, 1))),
        [None, None] => Err(WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!(
                "the record of acknowledged commits {} is damaged",
                path.display()
            ),
        )
        .with_hint(
            "The data directory was damaged outside weir; restore it from a backup. \
             To start anyway with whatever the store holds, empty that file (docs/operations.md).",
        )),
    }
}

fn file_error(path: &Path, action: &str, error: std::io::Error) -> WeirError {
    WeirError::io(format!("cannot {action} {}: {error}", path.display()))
}

/// The refusal when the store holds fewer commits than were acknowledged.
pub fn missing_commits(directory: &Path, stored: u64, acknowledged: u64) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!(
            "the data directory {} has lost acknowledged writes: its store holds {stored} \
             commits, but {acknowledged} were acknowledged",
            directory.display()
        ),
    )
    .with_hint(format!(
        "The store was damaged or replaced by an older copy (a disk fault, a truncated or \
         altered file). weir does not start on it, so nothing is lost in silence: restore the \
         whole data directory from a backup. To start anyway with what the store holds, \
         empty the file {} (docs/operations.md).",
        directory.join(FILE_NAME).display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_record_is_empty_and_counts_survive_reopen() {
        let directory = tempfile::tempdir().unwrap();
        let (record, recorded) = AcknowledgedRecord::open(directory.path()).unwrap();
        assert_eq!(recorded, None);
        for commits in [1, 2, 3, 2] {
            record.record(commits).unwrap();
        }
        drop(record);
        let (_, recorded) = AcknowledgedRecord::open(directory.path()).unwrap();
        assert_eq!(recorded, Some(3));
    }

    #[test]
    fn a_torn_slot_leaves_the_other_one() {
        let directory = tempfile::tempdir().unwrap();
        let (record, _) = AcknowledgedRecord::open(directory.path()).unwrap();
        record.record(7).unwrap();
        record.record(8).unwrap();
        drop(record);
        // Slot 1 holds 8: damage it as a torn write would.
        let file = OpenOptions::new()
            .write(true)
            .open(directory.path().join(FILE_NAME))
            .unwrap();
        file.write_all_at(&[0xaa; 4], 512 + 10).unwrap();
        let (record, recorded) = AcknowledgedRecord::open(directory.path()).unwrap();
        assert_eq!(recorded, Some(7));
        // The next write goes to the damaged slot, keeping 7's whole.
        record.record(9).unwrap();
        drop(record);
        let (_, recorded) = AcknowledgedRecord::open(directory.path()).unwrap();
        assert_eq!(recorded, Some(9));
    }

    #[test]
    fn a_record_with_no_whole_slot_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        std::fs::write(directory.path().join(FILE_NAME), b"garbage").unwrap();
        let Err(error) = AcknowledgedRecord::open(directory.path()) else {
            panic!("a damaged record was accepted");
        };
        assert_eq!(error.code, sqlstate::DATA_CORRUPTED);
        assert!(error.hint.unwrap().contains("restore"));
    }
}
