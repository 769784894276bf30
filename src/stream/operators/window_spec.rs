//! The shape of TUMBLE, HOP, CUMULATE and SESSION windows and the windows a
//! row falls in. Timestamps are i64 nanoseconds, so window bounds near
//! 1677 and 2262 may not exist: bounds are computed in i128 and a window
//! that does not fit is an error (22008), never a wrapped value.

use crate::error::{sqlstate, Result, WeirError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumble,
    Hop,
    /// Windows that all start at the start of a `size`-long period and end
    /// every `slide` (the step) within it.
    Cumulate,
    /// Each row opens `[ts, ts + size)` (size = the gap); the session
    /// aggregate merges those that overlap or touch.
    Session,
}

/// Most windows one row may fall in (HOP size / slide, CUMULATE size /
/// step): more is work per row no one wants, refused when a view is made.
pub const MAX_WINDOWS_PER_ROW: i64 = 10_000;

const EARLIEST_NS: i128 = i64::MIN as i128;
const LATEST_NS: i128 = i64::MAX as i128;

/// The shape of a window: `size` long, a new one every `slide` (equal to
/// `size` for TUMBLE; the step for CUMULATE), starting at `offset` past
/// the epoch grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    pub kind: WindowKind,
    pub size_ns: i64,
    pub slide_ns: i64,
    pub offset_ns: i64,
}

/// The windows of one row, by ascending end: no allocation, no overflow
/// (`WindowSpec::windows` checked that the last one fits).
#[derive(Debug, Clone)]
pub struct Windows {
    next: i64,
    remaining: u64,
    slide: i64,
    size: i64,
    /// The shared start of CUMULATE windows (`next` is then an end).
    cumulative_start: Option<i64>,
}

impl Iterator for Windows {
    type Item = (i64, i64);

    fn next(&mut self) -> Option<(i64, i64)> {
        if self.remaining == 0 {
            return None;
        }
        let value = self.next;
        self.remaining -= 1;
        if self.remaining > 0 {
            self.next = value + self.slide;
        }
        Some(match self.cumulative_start {
            Some(start) => (start, value),
            None => (value, value + self.size),
        })
    }
}

impl WindowSpec {
    /// Refuses shapes that cannot be computed or that put a row into too
    /// many windows. `__weir_window` can be called by hand, so the planner
    /// checks here, not only where TUMBLE(...) is parsed.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, message);
        if self.size_ns <= 0 || self.slide_ns <= 0 {
            return Err(invalid(format!(
                "{}: window lengths must be positive",
                self.describe()
            )));
        }
        if self.kind == WindowKind::Cumulate && self.size_ns % self.slide_ns != 0 {
            return Err(invalid(format!(
                "{}: the size must be a whole number of steps",
                self.describe()
            )));
        }
        let windows_per_row = match self.kind {
            WindowKind::Hop | WindowKind::Cumulate => self.size_ns / self.slide_ns,
            WindowKind::Tumble | WindowKind::Session => 1,
        };
        if windows_per_row > MAX_WINDOWS_PER_ROW {
            return Err(too_many_windows(self.kind, windows_per_row));
        }
        Ok(())
    }

    fn floor(&self, time_ns: i128, step_ns: i64) -> i128 {
        let step = i128::from(step_ns);
        time_ns - (time_ns - i128::from(self.offset_ns)).rem_euclid(step)
    }

    /// The windows `(start, end)` containing `time_ns`, by ascending end;
    /// 22008 if one of them starts or ends outside the timestamp range.
    pub fn windows(&self, time_ns: i64) -> Result<Windows> {
        let time = i128::from(time_ns);
        let (slide, size) = (i128::from(self.slide_ns), i128::from(self.size_ns));
        // first / last: the first and last window start (the end for CUMULATE).
        let (first, last, cumulative_start) = match self.kind {
            WindowKind::Session => (time, time, None),
            WindowKind::Cumulate => {
                let start = self.floor(time, self.size_ns);
                (
                    self.floor(time, self.slide_ns) + slide,
                    start + size,
                    Some(start),
                )
            }
            WindowKind::Tumble | WindowKind::Hop => (
                self.floor(time - size, self.slide_ns) + slide,
                self.floor(time, self.slide_ns),
                None,
            ),
        };
        if first > last {
            // A HOP with gaps between windows: the row is in none.
            return Ok(Windows {
                next: 0,
                remaining: 0,
                slide: self.slide_ns,
                size: self.size_ns,
                cumulative_start: None,
            });
        }
        let (earliest_start, latest_end) = match cumulative_start {
            Some(start) => (start, last),
            None => (first, last + size),
        };
        if earliest_start < EARLIEST_NS || latest_end > LATEST_NS {
            return Err(self.out_of_range(time_ns, earliest_start < EARLIEST_NS));
        }
        Ok(Windows {
            // Both fit: earliest_start <= first <= last < latest_end.
            next: first as i64,
            remaining: ((last - first) / slide + 1) as u64,
            slide: self.slide_ns,
            size: self.size_ns,
            cumulative_start: cumulative_start.map(|start| start as i64),
        })
    }

    fn out_of_range(&self, time_ns: i64, starts_too_early: bool) -> WeirError {
        let (verb, bound) = if starts_too_early {
            ("starts before", i64::MIN)
        } else {
            ("ends after", i64::MAX)
        };
        WeirError::new(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp out of range: a {} window of {} {verb} {}",
                self.describe(),
                show_timestamp(time_ns),
                show_timestamp(bound)
            ),
        )
        .with_hint(format!(
            "Timestamps run from {} to {}; check the row's time column, or use a smaller window.",
            show_timestamp(i64::MIN),
            show_timestamp(i64::MAX)
        ))
    }

    /// The start of the window ending at `end_ns` (a window made by
    /// `windows`, so it exists).
    pub fn start_of(&self, end_ns: i64) -> i64 {
        let start = match self.kind {
            WindowKind::Cumulate => self.floor(i128::from(end_ns) - 1, self.size_ns),
            _ => i128::from(end_ns) - i128::from(self.size_ns),
        };
        clamp(start)
    }

    /// The start of the earliest window still open at `watermark_ns` (its
    /// end is past the watermark): every later result row starts here or
    /// later. Clamped to the timestamp range: it is a lower bound.
    pub fn earliest_open_start(&self, watermark_ns: i64) -> i64 {
        clamp(self.earliest_open_start_wide(i128::from(watermark_ns)))
    }

    fn earliest_open_start_wide(&self, watermark: i128) -> i128 {
        match self.kind {
            WindowKind::Cumulate => self.floor(watermark, self.size_ns),
            _ => {
                self.floor(watermark - i128::from(self.size_ns), self.slide_ns)
                    + i128::from(self.slide_ns)
            }
        }
    }

    /// The end of the earliest window still open at `watermark_ns`.
    pub fn earliest_open_end(&self, watermark_ns: i64) -> i64 {
        let watermark = i128::from(watermark_ns);
        clamp(match self.kind {
            WindowKind::Cumulate => {
                self.floor(watermark, self.slide_ns) + i128::from(self.slide_ns)
            }
            _ => self.earliest_open_start_wide(watermark) + i128::from(self.size_ns),
        })
    }

    pub fn describe(&self) -> String {
        let size = describe_duration(self.size_ns);
        let slide = describe_duration(self.slide_ns);
        match self.kind {
            WindowKind::Tumble => format!("TUMBLE(size={size})"),
            WindowKind::Hop => format!("HOP(slide={slide}, size={size})"),
            WindowKind::Cumulate => format!("CUMULATE(step={slide}, size={size})"),
            WindowKind::Session => format!("SESSION(gap={size})"),
        }
    }
}

/// The end of a row's own SESSION window, `ts + gap`; 22008 past the last
/// timestamp.
pub fn session_end(ts_ns: i64, gap_ns: i64) -> Result<i64> {
    ts_ns.checked_add(gap_ns).ok_or_else(|| {
        let spec = WindowSpec {
            kind: WindowKind::Session,
            size_ns: gap_ns,
            slide_ns: gap_ns,
            offset_ns: 0,
        };
        spec.out_of_range(ts_ns, false)
    })
}

/// 22023: a window shape that puts one row into `windows` windows.
pub fn too_many_windows(kind: WindowKind, windows: i64) -> WeirError {
    let (name, ratio) = match kind {
        WindowKind::Cumulate => ("CUMULATE", "size / step"),
        _ => ("HOP", "size / slide"),
    };
    WeirError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("{name}: {ratio} is {windows}, more than {MAX_WINDOWS_PER_ROW} windows per row"),
    )
    .with_hint(format!(
        "Each row is repeated once per window it falls in; use a larger {} or a smaller size.",
        if kind == WindowKind::Cumulate {
            "step"
        } else {
            "slide"
        }
    ))
}

fn clamp(value: i128) -> i64 {
    value.clamp(EARLIEST_NS, LATEST_NS) as i64
}

/// Nanoseconds since the epoch as Postgres prints a timestamp (no
/// trailing zeros in the fraction).
pub fn show_timestamp(nanoseconds: i64) -> String {
    let text = chrono::DateTime::from_timestamp_nanos(nanoseconds)
        .naive_utc()
        .format("%Y-%m-%d %H:%M:%S%.9f")
        .to_string();
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `300000000000` ns reads as `5m`.
pub fn describe_duration(nanoseconds: i64) -> String {
    const UNITS: &[(i64, &str)] = &[
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    for (unit, suffix) in UNITS {
        if nanoseconds != 0 && nanoseconds % unit == 0 {
            return format!("{}{suffix}", nanoseconds / unit);
        }
    }
    format!("{nanoseconds}ns")
}

#[cfg(test)]
#[path = "window_spec_tests.rs"]
mod tests;
