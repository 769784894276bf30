//! Where a Kafka source stands in each partition, and its watermark.
//! Each partition has its own watermark (its largest event time less the
//! delay); the source's is the least of them, so a partition that lags
//! holds the others back instead of seeing its rows judged late. A
//! partition without messages for `watermark_idle_timeout` stops counting
//! until it has messages again (Flink's idleness); when every partition is
//! idle the source has delivered all it has, and the largest counts.
//! The offsets and each partition's largest event time are the position
//! stored with the rows, so a restart resumes both.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{sqlstate, Result, WeirError};

/// One partition's stored state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// The offset of the next message to read.
    pub offset: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_ns: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    partitions: BTreeMap<i32, Partition>,
}

#[derive(Debug)]
pub struct Partitions {
    stored: Stored,
    /// When each partition last had a message (or was first read).
    last_message: BTreeMap<i32, Instant>,
    delay_ns: i64,
    idle_timeout: Option<Duration>,
}

impl Partitions {
    /// The partitions of a stored position (None: none read yet).
    pub fn restore(
        position: Option<&str>,
        delay_ns: i64,
        idle_timeout: Option<Duration>,
        now: Instant,
    ) -> Result<Self> {
        let stored: Stored = match position {
            None => Stored::default(),
            Some(text) => serde_json::from_str(text).map_err(|error| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!("a Kafka source's stored position {text:?}: {error}"),
                )
            })?,
        };
        let last_message = stored.partitions.keys().map(|&id| (id, now)).collect();
        Ok(Partitions {
            stored,
            last_message,
            delay_ns,
            idle_timeout,
        })
    }

    /// The partitions known, with where each is read from next.
    pub fn offsets(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.stored
            .partitions
            .iter()
            .map(|(&id, partition)| (id, partition.offset))
    }

    pub fn knows(&self, partition: i32) -> bool {
        self.stored.partitions.contains_key(&partition)
    }

    /// A partition read for the first time, from `offset`.
    pub fn start(&mut self, partition: i32, offset: i64, now: Instant) {
        self.stored.partitions.insert(
            partition,
            Partition {
                offset,
                max_event_ns: None,
            },
        );
        self.last_message.insert(partition, now);
    }

    /// Whether the message at `offset` of `partition` is behind where the
    /// partition stands: read (and committed, or about to be) already.
    pub fn already_read(&self, partition: i32, offset: i64) -> bool {
        self.stored
            .partitions
            .get(&partition)
            .is_some_and(|stored| offset < stored.offset)
    }

    /// The message at `offset` of `partition` was read.
    pub fn consumed(&mut self, partition: i32, offset: i64, now: Instant) {
        let entry = self
            .stored
            .partitions
            .entry(partition)
            .or_insert(Partition {
                offset,
                max_event_ns: None,
            });
        entry.offset = entry.offset.max(offset.saturating_add(1));
        self.last_message.insert(partition, now);
    }

    /// Rows of `partition` carried event times up to `max_event_ns`.
    pub fn saw_events(&mut self, partition: i32, max_event_ns: Option<i64>) {
        if let Some(entry) = self.stored.partitions.get_mut(&partition) {
            entry.max_event_ns = entry.max_event_ns.max(max_event_ns);
        }
    }

    /// The source's watermark now: the least partition watermark among the
    /// partitions not idle (None while one of them has had no event).
    pub fn watermark(&self, now: Instant) -> Option<i64> {
        let idle = |id: &i32| match (self.idle_timeout, self.last_message.get(id)) {
            (Some(timeout), Some(&last)) => now.saturating_duration_since(last) >= timeout,
            _ => false,
        };
        let partitions = &self.stored.partitions;
        let active: Vec<Option<i64>> = partitions
            .iter()
            .filter(|(id, _)| !idle(id))
            .map(|(_, partition)| partition.max_event_ns)
            .collect();
        let max_event = match active.is_empty() {
            true => partitions.values().filter_map(|p| p.max_event_ns).max(),
            false => active
                .into_iter()
                .collect::<Option<Vec<i64>>>()?
                .into_iter()
                .min(),
        };
        max_event.map(|max| max.saturating_sub(self.delay_ns))
    }

    /// The position to store with the rows read so far.
    pub fn position(&self) -> String {
        serde_json::to_string(&self.stored).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    fn partitions(idle_timeout_seconds: Option<u64>, now: Instant) -> Partitions {
        let idle = idle_timeout_seconds.map(Duration::from_secs);
        let mut partitions = Partitions::restore(None, SECOND, idle, now).unwrap();
        for id in 0..3 {
            partitions.start(id, 0, now);
        }
        partitions
    }

    #[test]
    fn the_least_partition_watermark_counts() {
        let now = Instant::now();
        let mut parts = partitions(None, now);
        parts.consumed(0, 0, now);
        parts.saw_events(0, Some(50 * SECOND));
        parts.consumed(1, 0, now);
        parts.saw_events(1, Some(20 * SECOND));
        // Partition 2 has had nothing: no watermark without idleness.
        assert_eq!(parts.watermark(now), None);
        parts.consumed(2, 0, now);
        parts.saw_events(2, Some(30 * SECOND));
        assert_eq!(parts.watermark(now), Some(19 * SECOND));
        parts.saw_events(1, Some(10 * SECOND));
        assert_eq!(parts.watermark(now), Some(19 * SECOND));
    }

    #[test]
    fn idle_partitions_stop_holding_the_watermark() {
        let start = Instant::now();
        let mut parts = partitions(Some(5), start);
        let later = start + Duration::from_secs(4);
        parts.consumed(0, 0, later);
        parts.saw_events(0, Some(50 * SECOND));
        parts.consumed(1, 0, later);
        parts.saw_events(1, Some(40 * SECOND));
        assert_eq!(parts.watermark(later), None, "partition 2 not idle yet");
        let idle = start + Duration::from_secs(6);
        assert_eq!(parts.watermark(idle), Some(39 * SECOND));
        // Every partition idle: all is delivered, the largest counts.
        let all_idle = start + Duration::from_secs(20);
        assert_eq!(parts.watermark(all_idle), Some(49 * SECOND));
    }

    #[test]
    fn the_position_round_trips_with_offsets_and_event_times() {
        let now = Instant::now();
        let mut parts = partitions(Some(5), now);
        parts.consumed(1, 41, now);
        parts.saw_events(1, Some(7 * SECOND));
        let position = parts.position();
        assert_eq!(
            position,
            r#"{"partitions":{"0":{"offset":0},"1":{"offset":42,"max_event_ns":7000000000},"2":{"offset":0}}}"#
        );
        assert!(parts.already_read(1, 41) && !parts.already_read(1, 42));
        assert!(!parts.already_read(7, 0), "an unknown partition");
        let back = Partitions::restore(Some(&position), SECOND, None, now).unwrap();
        assert_eq!(
            back.offsets().collect::<Vec<_>>(),
            vec![(0, 0), (1, 42), (2, 0)]
        );
        assert_eq!(back.position(), position);
        let damaged = Partitions::restore(Some("{\"partitions\": 3}"), 0, None, now);
        assert_eq!(damaged.unwrap_err().code, sqlstate::DATA_CORRUPTED);
    }
}
