//! Late rows: what a view does with rows that arrive after their window
//! is complete (its policy), and where operators report them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

/// A view's late data policy (`WITH (late_data = ...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum LatePolicy {
    /// Late rows are dropped for their complete windows and counted.
    #[default]
    Drop,
    /// Late rows are kept, one per missed window, in `<view>_late`.
    SideOutput,
    /// Windows stay open `allowed_lateness_ns` past their end; later rows
    /// are dropped as with `Drop`. `UNBOUNDED_LATENESS_NS` keeps every
    /// window open for good.
    Update { allowed_lateness_ns: i64 },
}

/// `allowed_lateness = 'unbounded'`: no watermark ever reaches a window's
/// end plus this (every use adds it saturating), so windows never close
/// and their state is never dropped.
pub const UNBOUNDED_LATENESS_NS: i64 = i64::MAX;

impl LatePolicy {
    /// Whether windows stay correctable forever, their state kept.
    pub fn is_unbounded(self) -> bool {
        self.allowed_lateness_ns() == UNBOUNDED_LATENESS_NS
    }

    /// How long past its end a window still takes rows.
    pub fn allowed_lateness_ns(self) -> i64 {
        match self {
            LatePolicy::Update {
                allowed_lateness_ns,
            } => allowed_lateness_ns,
            _ => 0,
        }
    }

    pub fn describe(self) -> String {
        match self {
            LatePolicy::Drop => "drop".to_string(),
            LatePolicy::SideOutput => "side_output".to_string(),
            LatePolicy::Update {
                allowed_lateness_ns: UNBOUNDED_LATENESS_NS,
            } => "update(allowed_lateness=unbounded)".to_string(),
            LatePolicy::Update {
                allowed_lateness_ns,
            } => format!(
                "update(allowed_lateness={})",
                super::operators::window::describe_duration(allowed_lateness_ns)
            ),
        }
    }
}

/// Where a view's operators report late rows: always counted; kept for the
/// side output when the view has one.
#[derive(Clone, Default)]
pub struct LateRows {
    count: Arc<AtomicU64>,
    kept: Option<Arc<Mutex<Vec<RecordBatch>>>>,
}

impl LateRows {
    pub fn new(count: Arc<AtomicU64>, keep_rows: bool) -> Self {
        LateRows {
            count,
            kept: keep_rows.then(Default::default),
        }
    }

    /// Whether operators should build the late rows (side output) or only
    /// count them.
    pub fn keeps_rows(&self) -> bool {
        self.kept.is_some()
    }

    pub fn count(&self, rows: u64) {
        if rows > 0 {
            self.count.fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// Counts and keeps `rows` (already in the side output's shape).
    pub fn keep(&self, rows: RecordBatch) {
        self.count(rows.num_rows() as u64);
        if let Some(kept) = &self.kept {
            kept.lock().unwrap_or_else(|p| p.into_inner()).push(rows);
        }
    }

    /// The rows kept since the last call.
    pub fn take_kept(&self) -> Vec<RecordBatch> {
        match &self.kept {
            Some(kept) => std::mem::take(&mut *kept.lock().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }
}
