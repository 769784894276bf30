//! Client connections counted for `/metrics`: the front end reports each
//! connection's start and end.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Default)]
pub struct ConnectionCounts {
    open: AtomicI64,
    opened: AtomicU64,
    /// The most connections served at once (0: no limit).
    limit: AtomicI64,
}

/// A connection counted as open until this is dropped (also when its
/// task ends by a panic).
pub struct OpenConnection<'a>(&'a ConnectionCounts);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionCounts {
    pub fn opened(&self) -> OpenConnection<'_> {
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self)
    }

    /// Connections open now.
    pub fn open(&self) -> i64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections beyond `limit` are refused (`--max-connections`).
    pub fn set_limit(&self, limit: u64) {
        self.limit
            .store(i64::try_from(limit).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// More connections are open than the limit allows.
    pub fn over_limit(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit > 0 && self.open() > limit
    }

    /// Connections accepted since the server started.
    pub fn total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}
