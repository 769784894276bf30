//! An interval as Postgres prints it (IntervalStyle `postgres`, the
//! default): `1 year 2 mons -3 days +04:05:06.5`. Years and months come
//! from the months, the time part from the microseconds; a field is
//! plural unless it is exactly 1, a positive field after a negative one
//! gets a `+`, and the time part appears when it is non-zero or nothing
//! else does.

use std::fmt::Write;

const MICROSECONDS_PER_SECOND: i64 = 1_000_000;

pub fn interval_text(months: i32, days: i32, nanoseconds: i64) -> String {
    let mut text = String::new();
    let mut before_negative = false;
    let parts = [(months / 12, "year"), (months % 12, "mon"), (days, "day")];
    for (value, unit) in parts {
        if value == 0 {
            continue;
        }
        let separator = if text.is_empty() { "" } else { " " };
        let plus = if before_negative && value > 0 {
            "+"
        } else {
            ""
        };
        let plural = if value != 1 { "s" } else { "" };
        let _ = write!(text, "{separator}{plus}{value} {unit}{plural}");
        before_negative = value < 0;
    }
    let microseconds = nanoseconds / 1_000;
    if text.is_empty() || microseconds != 0 {
        let sign = if microseconds < 0 {
            "-"
        } else if before_negative {
            "+"
        } else {
            ""
        };
        let separator = if text.is_empty() { "" } else { " " };
        let magnitude = microseconds.unsigned_abs();
        let seconds = magnitude / MICROSECONDS_PER_SECOND as u64;
        let fraction = magnitude % MICROSECONDS_PER_SECOND as u64;
        let _ = write!(
            text,
            "{separator}{sign}{:02}:{:02}:{:02}",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        );
        if fraction != 0 {
            let digits = format!("{fraction:06}");
            let _ = write!(text, ".{}", digits.trim_end_matches('0'));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::interval_text;

    const HOUR: i64 = 3_600_000_000_000;

    #[test]
    fn as_postgres_prints_them() {
        assert_eq!(interval_text(0, 0, 0), "00:00:00");
        assert_eq!(interval_text(0, 1, 0), "1 day");
        assert_eq!(interval_text(0, 0, 24 * HOUR), "24:00:00");
        assert_eq!(
            interval_text(14, 2, 3 * HOUR + 4_500_000_000),
            "1 year 2 mons 2 days 03:00:04.5"
        );
        assert_eq!(interval_text(-12, 0, 0), "-1 years");
        assert_eq!(interval_text(0, -1, 2 * HOUR), "-1 days +02:00:00");
        assert_eq!(interval_text(1, -1, 0), "1 mon -1 days");
        assert_eq!(interval_text(-1, 1, -HOUR), "-1 mons +1 day -01:00:00");
        assert_eq!(interval_text(0, 0, -1_000), "-00:00:00.000001");
    }
}
