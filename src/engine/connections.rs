//! Client connections, counted for `/metrics` and for the limits that keep
//! the server reachable: every accepted socket is *open*; one whose role
//! has logged in is also *logged in*. Postgres's rules: at most
//! `max_connections` logged in, the last `superuser_reserved_connections`
//! of them for superusers. Sockets that have not logged in never take
//! those slots (server::waiting_room has theirs), so clients that connect
//! and never log in cannot lock out the ones that do.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
pub struct ConnectionCounts {
    counters: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    open: AtomicI64,
    opened: AtomicU64,
    logged_in: AtomicI64,
    /// The most connections logged in at once (0: no limit).
    limit: AtomicI64,
    /// How many of them only superusers may take.
    reserved: AtomicI64,
}

/// What a connection holds while it is counted; the count goes down when
/// this is dropped (also when its task ends by a panic).
pub struct Counted {
    counters: Arc<Counters>,
    count: fn(&Counters) -> &AtomicI64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        (self.count)(&self.counters).fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection may not log in.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is taken.
    TooMany,
    /// The slots left are the superusers'.
    ReservedForSuperusers,
}

impl ConnectionCounts {
    /// A socket accepted: counted as open until dropped.
    pub fn opened(&self) -> Counted {
        self.counters.opened.fetch_add(1, Ordering::Relaxed);
        self.count(|counters| &counters.open).0
    }

    /// A role logging in, counted until the returned value is dropped.
    pub fn log_in(&self, superuser: bool) -> Result<Counted, Refusal> {
        let limit = self.counters.limit.load(Ordering::Relaxed);
        let reserved = self.counters.reserved.load(Ordering::Relaxed);
        let (counted, now) = self.count(|counters| &counters.logged_in);
        match () {
            _ if limit == 0 => Ok(counted),
            _ if now > limit => Err(Refusal::TooMany),
            _ if now > limit - reserved && !superuser => Err(Refusal::ReservedForSuperusers),
            _ => Ok(counted),
        }
    }

    /// Counts one more; returns the count with it.
    fn count(&self, count: fn(&Counters) -> &AtomicI64) -> (Counted, i64) {
        let now = count(&self.counters).fetch_add(1, Ordering::Relaxed) + 1;
        let counted = Counted {
            counters: self.counters.clone(),
            count,
        };
        (counted, now)
    }

    /// Connections open now, logged in or not.
    pub fn open(&self) -> i64 {
        self.counters.open.load(Ordering::Relaxed)
    }

    /// Connections logged in now.
    pub fn logged_in(&self) -> i64 {
        self.counters.logged_in.load(Ordering::Relaxed)
    }

    /// At most `limit` connections logged in (`--max-connections`; 0: no
    /// limit), `reserved` of them for superusers
    /// (`--superuser-reserved-connections`, at most `limit`).
    pub fn set_limits(&self, limit: u64, reserved: u64) {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let reserved = i64::try_from(reserved).unwrap_or(i64::MAX).min(limit);
        self.counters.limit.store(limit, Ordering::Relaxed);
        self.counters.reserved.store(reserved, Ordering::Relaxed);
    }

    /// The most connections logged in at once (0: no limit).
    pub fn limit(&self) -> u64 {
        self.counters
            .limit
            .load(Ordering::Relaxed)
            .try_into()
            .unwrap_or(0)
    }

    /// Connections accepted since the server started.
    pub fn total(&self) -> u64 {
        self.counters.opened.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_slots_are_the_superusers() {
        let counts = ConnectionCounts::default();
        counts.set_limits(3, 1);
        let first = counts.log_in(false).unwrap();
        let _second = counts.log_in(false).unwrap();
        assert_eq!(
            counts.log_in(false).err(),
            Some(Refusal::ReservedForSuperusers)
        );
        let superuser = counts.log_in(true).unwrap();
        assert_eq!(counts.log_in(true).err(), Some(Refusal::TooMany));
        assert_eq!(counts.logged_in(), 3, "refusals are not counted");
        drop(superuser);
        drop(first);
        assert!(counts.log_in(false).is_ok());
    }

    #[test]
    fn no_limit_admits_everyone() {
        let counts = ConnectionCounts::default();
        let held: Vec<_> = (0..1000).map(|_| counts.log_in(false).unwrap()).collect();
        assert_eq!(counts.logged_in(), 1000);
        drop(held);
        assert_eq!(counts.logged_in(), 0);
    }
}
