//! `WITH (retention = '7 days')`: a stream's rows whose event time is that
//! far behind its watermark are deleted from the log, oldest entries first.
//! Views are unaffected (their state and rows are their own); a query, or a
//! view created later, sees only the rows still kept.

use std::sync::atomic::Ordering;

use super::entries::EntryReader;
use super::TableLog;
use crate::error::Result;
use crate::state::WriteBatch;

impl TableLog {
    /// Rows this far behind the watermark are deleted (None: all kept).
    pub fn set_retention_ms(&self, retention_ms: Option<i64>) {
        self.retention_ns
            .store(super::retention_ns(retention_ms), Ordering::Relaxed);
    }

    fn retention(&self) -> Option<i64> {
        Some(self.retention_ns.load(Ordering::Relaxed)).filter(|ns| *ns != super::NO_RETENTION)
    }

    /// Deletes the entries whose rows are all older than the retention
    /// (behind the watermark) and among the first `covered_rows` (rows a
    /// checkpoint has covered, so recovery never needs them); returns the
    /// rows deleted. Reads only the expired entries and one more: an
    /// entry's `max_event_before` only grows along the log.
    pub fn expire(&self, covered_rows: u64) -> Result<u64> {
        let (Some(retention_ns), Some(watermark_ns)) = (self.retention(), self.watermark_ns())
        else {
            return Ok(0);
        };
        let cutoff_ns = watermark_ns.saturating_sub(retention_ns);
        let entries = EntryReader::new(
            &*self.store,
            self.id,
            std::sync::Arc::new(self.schema.project(&[])?),
            Some(Vec::new()),
            0,
            covered_rows,
        )?;
        let mut deletes = WriteBatch::new();
        let mut expired_rows = 0;
        let mut previous: Option<(u64, u64)> = None;
        for entry in entries {
            let entry = entry?;
            match entry.max_event_before {
                Some(before) if before >= cutoff_ns => break,
                // Every row before this entry is older than the cutoff.
                Some(_) => {
                    if let Some((first_row, rows)) = previous {
                        deletes.delete(super::entries::entry_key(self.id, first_row));
                        expired_rows += rows;
                    }
                }
                // No event time before it (NULLs only): nothing to judge.
                None => {}
            }
            previous = Some((entry.first_row, entry.rows.num_rows() as u64));
        }
        // The last entry read ends inside `covered_rows` only if another
        // entry follows it there; the loop deleted those before it.
        if !deletes.is_empty() {
            // Durable, so rows reported gone stay gone after a crash.
            self.store.commit(deletes)?;
        }
        Ok(expired_rows)
    }
}
