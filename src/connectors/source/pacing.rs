//! A reader's rate limit: how many rows are due by now, and how long until
//! the next one is, measured from when the reader started (so a pause
//! never turns into a burst larger than one read).

use std::time::{Duration, Instant};

pub struct Pacing {
    /// Nanoseconds between rows; 0 is as fast as possible.
    gap_ns: u64,
    started: Instant,
    produced: u64,
}

impl Pacing {
    pub fn new(gap_ns: u64) -> Self {
        Pacing {
            gap_ns,
            started: Instant::now(),
            produced: 0,
        }
    }

    /// Paces `rows_per_second` rows a second (0: unlimited).
    pub fn per_second(rows_per_second: u64) -> Self {
        Pacing::new(match rows_per_second {
            0 => 0,
            rate => (1_000_000_000 / rate).max(1),
        })
    }

    /// Rows that may go now, at most `limit`; or how long to wait for one.
    pub fn due(&mut self, limit: u64, now: Instant) -> Result<u64, Duration> {
        if self.gap_ns == 0 {
            return Ok(limit);
        }
        let elapsed_ns = now.duration_since(self.started).as_nanos();
        let due = (elapsed_ns / u128::from(self.gap_ns)) as u64 + 1;
        match due.saturating_sub(self.produced).min(limit) {
            0 => {
                let next_ns = u128::from(self.produced) * u128::from(self.gap_ns);
                let wait = next_ns.saturating_sub(elapsed_ns);
                Err(Duration::from_nanos(wait.min(u128::from(u64::MAX)) as u64))
            }
            rows => Ok(rows),
        }
    }

    pub fn produced(&mut self, rows: u64) {
        self.produced += rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_at_the_rate() {
        let mut pacing = Pacing::per_second(1000);
        let start = pacing.started;
        assert_eq!(pacing.due(100, start), Ok(1));
        pacing.produced(1);
        assert_eq!(pacing.due(100, start), Err(Duration::from_millis(1)));
        let later = start + Duration::from_millis(10);
        assert_eq!(pacing.due(100, later), Ok(10));
        assert_eq!(pacing.due(4, later), Ok(4));
    }

    #[test]
    fn unlimited_pacing_gives_the_limit() {
        let mut pacing = Pacing::per_second(0);
        assert_eq!(pacing.due(7, Instant::now()), Ok(7));
    }
}
