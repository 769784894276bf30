//! Upper bounds on the bytes a call produces, computed from its arguments
//! alone. Each is cheap (at most one pass over the input strings) and never
//! below what the function really allocates, so a call under the limit
//! cannot grow past it.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::Result;

use super::arguments::Argument;

/// How a limited function's output grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Growth {
    /// `repeat(text, count)`
    Repeat,
    /// `lpad` / `rpad(text, length [, fill])`: `length` characters.
    Pad,
    /// `replace(text, from, to)`
    Replace,
    /// `concat(values...)`
    Concat,
    /// `concat_ws(separator, values...)`
    ConcatWithSeparator,
    /// `array_repeat(element, count)`
    ArrayRepeat,
    /// `array_resize(array, size [, fill])`
    ArrayResize,
    /// `range` / `generate_series(start, stop, step)` as a list value.
    Series,
}

/// Bytes of a UTF-8 character at most.
const MAX_CHARACTER_BYTES: u64 = 4;

impl Growth {
    /// An upper bound on the bytes of the call's results for all `rows`.
    pub fn output_bytes(self, arguments: &[Argument], rows: usize) -> Result<u64> {
        Ok(match self {
            Growth::Repeat => sum_rows(rows, |row| repeat(arguments, row)),
            Growth::Pad => sum_rows(rows, |row| pad(arguments, row)),
            Growth::Replace => sum_rows(rows, |row| replace(arguments, row)),
            Growth::Concat => concat(arguments, rows, 0),
            Growth::ConcatWithSeparator => concat_with_separator(arguments, rows),
            Growth::ArrayRepeat => sum_rows(rows, |row| array_repeat(arguments, row)),
            Growth::ArrayResize => sum_rows(rows, |row| array_resize(arguments, row)),
            Growth::Series => series(arguments, rows)?,
        })
    }

    /// The arguments this estimate reads as Int64 counts.
    pub fn count_argument(self) -> Option<usize> {
        match self {
            Growth::Repeat | Growth::Pad | Growth::ArrayRepeat | Growth::ArrayResize => Some(1),
            _ => None,
        }
    }
}

fn sum_rows(rows: usize, bytes: impl Fn(usize) -> u64) -> u64 {
    (0..rows).fold(0u64, |total, row| total.saturating_add(bytes(row)))
}

fn count(arguments: &[Argument], index: usize, row: usize) -> u64 {
    arguments
        .get(index)
        .and_then(|argument| argument.integer(row))
        .map_or(0, |count| count.max(0) as u64)
}

fn repeat(arguments: &[Argument], row: usize) -> u64 {
    arguments[0]
        .value_bytes(row)
        .saturating_mul(count(arguments, 1, row))
}

/// `length` characters, each one byte when the text and the fill are ASCII.
fn pad(arguments: &[Argument], row: usize) -> u64 {
    // A NULL text or fill gives NULL, whatever the length (Postgres:
    // `lpad(NULL, 2147483647)` is NULL, not an error).
    if arguments[0].is_null(row) || arguments.get(2).is_some_and(|fill| fill.is_null(row)) {
        return 0;
    }
    let ascii =
        arguments[0].is_ascii(row) && arguments.get(2).is_none_or(|fill| fill.is_ascii(row));
    let width = if ascii { 1 } else { MAX_CHARACTER_BYTES };
    count(arguments, 1, row).saturating_mul(width)
}

/// The text plus, for each occurrence of `from`, the growth to `to`.
fn replace(arguments: &[Argument], row: usize) -> u64 {
    let (Some(text), Some(from), Some(to)) = (
        arguments[0].text(row),
        arguments[1].text(row),
        arguments[2].text(row),
    ) else {
        return arguments[0].value_bytes(row);
    };
    if from.is_empty() || to.len() <= from.len() {
        return text.len() as u64;
    }
    let occurrences = text.matches(from).count() as u64;
    (text.len() as u64).saturating_add(occurrences.saturating_mul((to.len() - from.len()) as u64))
}

fn concat(arguments: &[Argument], rows: usize, separators: u64) -> u64 {
    arguments.iter().fold(separators, |total, argument| {
        total.saturating_add(argument.total_bytes(rows))
    })
}

fn concat_with_separator(arguments: &[Argument], rows: usize) -> u64 {
    let Some((separator, values)) = arguments.split_first() else {
        return 0;
    };
    let gaps = values.len().saturating_sub(1) as u64;
    concat(
        values,
        rows,
        separator.total_bytes(rows).saturating_mul(gaps),
    )
}

/// Each element at least one byte, so a count alone cannot exceed the limit
/// with elements of no size (NULLs).
fn array_repeat(arguments: &[Argument], row: usize) -> u64 {
    let element = arguments[0].value_bytes(row).max(1);
    element.saturating_mul(count(arguments, 1, row))
}

fn array_resize(arguments: &[Argument], row: usize) -> u64 {
    let element = match arguments.get(2) {
        Some(fill) => fill.value_bytes(row),
        None => element_width(arguments[0].data_type()),
    };
    element.max(1).saturating_mul(count(arguments, 1, row))
}

fn element_width(list_type: &DataType) -> u64 {
    match list_type {
        DataType::List(field) | DataType::LargeList(field) => {
            field.data_type().primitive_width().unwrap_or(8) as u64
        }
        _ => 8,
    }
}

/// Eight bytes an element (Int64, timestamps; dates take four).
fn series(arguments: &[Argument], rows: usize) -> Result<u64> {
    let elements = match arguments.first().map(Argument::data_type) {
        Some(DataType::Date32 | DataType::Date64) => date_series(arguments, rows)?,
        Some(DataType::Timestamp(_, _)) => timestamp_series(arguments, rows)?,
        _ => integer_series(arguments, rows)?,
    };
    Ok(elements.saturating_mul(8))
}

fn integer_series(arguments: &[Argument], rows: usize) -> Result<u64> {
    let integers = arguments
        .iter()
        .map(|argument| argument.cast(&DataType::Int64))
        .collect::<Result<Vec<_>>>()?;
    Ok(sum_rows(rows, |row| {
        let values: Vec<Option<i64>> = integers.iter().map(|a| a.integer(row)).collect();
        match values[..] {
            [Some(stop)] => elements(0, stop as i128, 1),
            [Some(start), Some(stop)] => elements(start as i128, stop as i128, 1),
            [Some(start), Some(stop), Some(step)] => {
                elements(start as i128, stop as i128, step as i128)
            }
            _ => 0,
        }
    }))
}

/// Days between the dates over the shortest day count the step can be (a
/// month is at least 28 days).
fn date_series(arguments: &[Argument], rows: usize) -> Result<u64> {
    let [start, stop, step] = arguments else {
        return Ok(0);
    };
    let start = start.cast(&DataType::Date32)?.cast(&DataType::Int64)?;
    let stop = stop.cast(&DataType::Date32)?.cast(&DataType::Int64)?;
    Ok(sum_rows(rows, |row| {
        match (start.integer(row), stop.integer(row), step.interval(row)) {
            (Some(start), Some(stop), Some(step)) => {
                let days = shortest_step(&[step.months as i128 * 28, step.days as i128]);
                elements(start as i128, stop as i128, days)
            }
            _ => 0,
        }
    }))
}

/// Nanoseconds between the timestamps over the shortest the step can be (a
/// month at least 28 days, a day at least 23 hours across a DST change).
fn timestamp_series(arguments: &[Argument], rows: usize) -> Result<u64> {
    let [start, stop, step] = arguments else {
        return Ok(0);
    };
    let nanoseconds = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let start = start.cast(&nanoseconds)?.cast(&DataType::Int64)?;
    let stop = stop.cast(&nanoseconds)?.cast(&DataType::Int64)?;
    const HOUR: i128 = 3_600_000_000_000;
    Ok(sum_rows(rows, |row| {
        match (start.integer(row), stop.integer(row), step.interval(row)) {
            (Some(start), Some(stop), Some(step)) => {
                let parts = [
                    step.months as i128 * 28 * 24 * HOUR,
                    step.days as i128 * 23 * HOUR,
                    step.nanoseconds as i128,
                ];
                elements(start as i128, stop as i128, shortest_step(&parts))
            }
            _ => 0,
        }
    }))
}

/// The step's smallest possible size, signed. Parts of mixed signs can
/// nearly cancel, so such a step counts as 1 (in its overall direction).
fn shortest_step(parts: &[i128]) -> i128 {
    let total: i128 = parts.iter().sum();
    let mixed = parts.iter().any(|part| *part > 0) && parts.iter().any(|part| *part < 0);
    match (mixed, total < 0) {
        (true, true) => -1,
        (true, false) => 1,
        (false, _) => total,
    }
}

/// Elements from `start` to `stop` (inclusive) by `step`; 0 for an empty or
/// invalid (zero step) series, which the function itself reports.
fn elements(start: i128, stop: i128, step: i128) -> u64 {
    if step == 0 || (stop - start).signum() * step.signum() < 0 {
        return 0;
    }
    u64::try_from((stop - start) / step + 1).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_elements_follow_the_step_direction() {
        assert_eq!(elements(1, 10, 1), 10);
        assert_eq!(elements(10, 1, -3), 4);
        assert_eq!(elements(10, 1, 1), 0);
        assert_eq!(elements(1, 10, 0), 0);
        assert_eq!(elements(0, i64::MAX as i128, 1), i64::MAX as u64 + 1);
    }

    #[test]
    fn steps_of_mixed_signs_count_as_the_smallest_step() {
        assert_eq!(shortest_step(&[28, 3]), 31);
        assert_eq!(shortest_step(&[-28, 0]), -28);
        assert_eq!(shortest_step(&[28, -27]), 1);
        assert_eq!(shortest_step(&[-28, 3]), -1);
    }
}
