//! The processing-time clock: raises the watermark of PROCTIME() streams to
//! the wall clock, and of idle streams (`watermark_idle_timeout`) by the
//! time that has passed, so windows close without new rows; and fires the
//! `EMIT EVERY` views that are due.

use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use crate::connectors::table::CLOCK_WAIT;

/// How often the clock looks at the tables: windows on processing time
/// close at most this late.
pub const CLOCK_TICK_MS: u64 = 250;

impl Engine {
    pub fn start_clock(self: &Arc<Self>) {
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(CLOCK_TICK_MS)).await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.tick().await;
            }
        });
    }

    /// Raises every clocked table whose watermark is due, then fires the
    /// views that are due.
    pub async fn tick(&self) {
        self.raise_due_watermarks().await;
        self.fire_due_views(CLOCK_WAIT).await;
    }

    async fn raise_due_watermarks(&self) {
        for log in self.catalog.table_logs() {
            let Some(watermark) = log.due_watermark() else {
                continue;
            };
            if let Err(error) = log.raise_watermark(watermark).await {
                tracing::error!(table = log.name(), %error.message, "raising the watermark failed");
                self.repair_views().await;
            }
        }
    }
}
