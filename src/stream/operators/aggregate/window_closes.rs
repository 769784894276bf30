//! The output order of a window aggregate whose partitions close windows
//! on their own threads. Each watermark that closes windows becomes a
//! numbered close that waits for every partition's report; its rows, then
//! its output watermark, go out once every close before it has gone out.
//! A watermark that closes nothing waits behind them, so the output is
//! what closing in place would give: each window's rows before the
//! watermark that says it is complete.

use std::collections::VecDeque;

use super::window_partitions::ClosedWindow;
use crate::error::{Result, WeirError};

#[derive(Default)]
pub struct PendingCloses {
    next_close: u64,
    queue: VecDeque<Pending>,
}

struct Pending {
    close: Option<u64>,
    /// Partitions that have not reported yet.
    waiting: usize,
    /// (partition, window) as reported.
    windows: Vec<(usize, ClosedWindow)>,
    /// The earliest window end the partitions still hold.
    remaining: Option<i64>,
    watermark_out: i64,
}

/// A close whose every partition reported: its windows by end (each
/// end's partitions in order), the earliest end still held, and the
/// output watermark.
pub struct ReadyClose {
    pub windows: Vec<ClosedWindow>,
    pub close: Option<u64>,
    pub remaining: Option<i64>,
    pub watermark_out: i64,
}

impl PendingCloses {
    /// A close across `partitions` partitions; its number.
    pub fn open(&mut self, partitions: usize, watermark_out: i64) -> u64 {
        let close = self.next_close;
        self.next_close += 1;
        self.queue.push_back(Pending {
            close: Some(close),
            waiting: partitions,
            windows: Vec::new(),
            remaining: None,
            watermark_out,
        });
        close
    }

    /// An output watermark that closes nothing.
    pub fn watermark(&mut self, watermark_out: i64) {
        self.queue.push_back(Pending {
            close: None,
            waiting: 0,
            windows: Vec::new(),
            remaining: None,
            watermark_out,
        });
    }

    /// Forgets the closes and watermarks not gone out (a failed write
    /// group's); numbering goes on.
    pub fn discard(&mut self) {
        self.queue.clear();
    }

    /// The number the next close will get.
    pub fn next_close(&self) -> u64 {
        self.next_close
    }

    /// Partition `partition`'s report for close `close`.
    pub fn record(
        &mut self,
        close: u64,
        partition: usize,
        windows: Vec<ClosedWindow>,
        remaining: Option<i64>,
    ) -> Result<()> {
        let pending = self
            .queue
            .iter_mut()
            .find(|pending| pending.close == Some(close) && pending.waiting > 0)
            .ok_or_else(|| WeirError::internal("a partition reported an unknown close"))?;
        pending.waiting -= 1;
        pending
            .windows
            .extend(windows.into_iter().map(|window| (partition, window)));
        pending.remaining = pending.remaining.into_iter().chain(remaining).min();
        Ok(())
    }

    /// The leading closes and watermarks that may go out, in order.
    pub fn ready(&mut self) -> Vec<ReadyClose> {
        let mut ready = Vec::new();
        while self.queue.front().is_some_and(|front| front.waiting == 0) {
            let Some(mut pending) = self.queue.pop_front() else {
                break;
            };
            pending
                .windows
                .sort_by_key(|(partition, window)| (window.0, *partition));
            ready.push(ReadyClose {
                windows: pending.windows.into_iter().map(|(_, w)| w).collect(),
                close: pending.close,
                remaining: pending.remaining,
                watermark_out: pending.watermark_out,
            });
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(end: i64) -> ClosedWindow {
        (end, Vec::new(), Vec::new())
    }

    fn ends(ready: &ReadyClose) -> Vec<i64> {
        ready.windows.iter().map(|w| w.0).collect()
    }

    #[test]
    fn closes_go_out_in_order_once_every_partition_reported() {
        let mut closes = PendingCloses::default();
        let first = closes.open(2, 100);
        closes.watermark(150);
        let second = closes.open(2, 200);
        closes
            .record(second, 0, vec![window(20)], Some(30))
            .unwrap();
        closes.record(second, 1, vec![window(20)], None).unwrap();
        assert!(closes.ready().is_empty(), "the first close is not reported");
        closes.record(first, 1, vec![window(10)], Some(20)).unwrap();
        closes
            .record(first, 0, vec![window(5), window(10)], Some(20))
            .unwrap();
        let ready = closes.ready();
        let watermarks: Vec<i64> = ready.iter().map(|r| r.watermark_out).collect();
        assert_eq!(watermarks, vec![100, 150, 200]);
        assert_eq!(ends(&ready[0]), vec![5, 10, 10]);
        assert_eq!(ready[0].remaining, Some(20));
        assert_eq!(ready[2].remaining, Some(30));
        assert!(closes.record(first, 0, Vec::new(), None).is_err());
    }
}
