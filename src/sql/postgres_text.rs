//! Values as Postgres prints them, where Arrow's display differs: floats
//! (shortest digits, exponent form outside 1e-4 .. 1e15, 1e6 for real),
//! timestamps and times (no fraction for whole seconds, no trailing zeros),
//! unconstrained NUMERIC (stored as DECIMAL(38, 10); trailing fraction
//! zeros trimmed, as weir does not store each value's own scale), booleans
//! inside arrays (`t`/`f`), and arrays as Postgres array literals
//! (`{1,2}`, `{"a b",NULL}`, `{{1,2},{3,4}}`). Used by the wire protocol's
//! text format and by casts to text (`text_casts`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

/// What `NUMERIC` without precision and scale is planned as.
pub const UNCONSTRAINED_NUMERIC: DataType = DataType::Decimal128(38, 10);

/// The Postgres text of a column whose Arrow display differs (None when
/// Arrow's, or the wire encoder's, is already Postgres's).
pub fn column_text(column: &ArrayRef) -> Option<ArrayRef> {
    match column.data_type() {
        DataType::Float64 => {
            let values = column.as_primitive::<Float64Type>();
            let texts: StringArray = values
                .iter()
                .map(|v| v.map(|v| float_text(v, 15)))
                .collect();
            Some(Arc::new(texts))
        }
        DataType::Float32 => {
            let values = column.as_primitive::<Float32Type>();
            let texts: StringArray = values.iter().map(|v| v.map(|v| float_text(v, 6))).collect();
            Some(Arc::new(texts))
        }
        DataType::Timestamp(_, _) | DataType::Time64(_) | DataType::Time32(_) => {
            datetime_text(column)
        }
        data_type if data_type == &UNCONSTRAINED_NUMERIC => numeric_text(column),
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let values = column.as_primitive::<IntervalMonthDayNanoType>();
            let texts: StringArray = values
                .iter()
                .map(|v| {
                    v.map(|v| super::interval_style::interval_text(v.months, v.days, v.nanoseconds))
                })
                .collect();
            Some(Arc::new(texts))
        }
        _ => None,
    }
}

/// Whether `array_literal` renders lists of `data_type`: arrays (of arrays)
/// of the element types printed here. Others (intervals, bytea, records)
/// are left to the wire encoder, which quotes them itself.
pub fn renders_array(data_type: &DataType) -> bool {
    let DataType::List(element) = data_type else {
        return false;
    };
    match element.data_type() {
        nested @ DataType::List(_) => renders_array(nested),
        element => matches!(
            element,
            DataType::Boolean
                | DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::UInt64
                | DataType::Decimal128(_, _)
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Date32
                | DataType::Float32
                | DataType::Float64
                | DataType::Timestamp(_, _)
                | DataType::Time32(_)
                | DataType::Time64(_)
        ),
    }
}

/// Each list of `column` as a Postgres array literal; None unless
/// `renders_array` holds for its type.
pub fn array_literal(column: &ArrayRef) -> Option<ArrayRef> {
    if !renders_array(column.data_type()) {
        return None;
    }
    let literals = array_literals(column)?;
    Some(Arc::new(literals.into_iter().collect::<StringArray>()))
}

fn array_literals(column: &ArrayRef) -> Option<Vec<Option<String>>> {
    let lists = column.as_list_opt::<i32>()?;
    let values = lists.values();
    let nested = matches!(values.data_type(), DataType::List(_));
    let elements = match nested {
        true => array_literals(values)?,
        false => element_texts(values)?,
    };
    let offsets = lists.value_offsets();
    let literals = (0..lists.len()).map(|row| {
        lists.is_valid(row).then(|| {
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            let items: Vec<String> = elements[start..end]
                .iter()
                .map(|element| match element {
                    None => "NULL".to_string(),
                    Some(text) if nested => text.clone(),
                    Some(text) => quoted_element(text),
                })
                .collect();
            format!("{{{}}}", items.join(","))
        })
    });
    Some(literals.collect())
}

/// The text of each element of an array, as its type prints in Postgres.
fn element_texts(values: &ArrayRef) -> Option<Vec<Option<String>>> {
    let texts = |array: &dyn Array| -> Option<Vec<Option<String>>> {
        let formatter = ArrayFormatter::try_new(array, &FormatOptions::default()).ok()?;
        Some(
            (0..array.len())
                .map(|row| {
                    array
                        .is_valid(row)
                        .then(|| formatter.value(row).to_string())
                })
                .collect(),
        )
    };
    match values.data_type() {
        DataType::Boolean => Some(
            values
                .as_boolean()
                .iter()
                .map(|value| value.map(|value| if value { "t" } else { "f" }.to_string()))
                .collect(),
        ),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Decimal128(_, _)
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Date32 => match column_text(values) {
            Some(rendered) => texts(rendered.as_ref()),
            None => texts(values.as_ref()),
        },
        DataType::Float32
        | DataType::Float64
        | DataType::Timestamp(_, _)
        | DataType::Time32(_)
        | DataType::Time64(_) => texts(column_text(values)?.as_ref()),
        _ => None,
    }
}

/// An element as Postgres's array output writes it: quoted when empty,
/// `NULL` in any case, or holding a delimiter, brace, quote, backslash or
/// white space; quotes and backslashes escaped.
fn quoted_element(text: &str) -> String {
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text.chars().any(|c| {
            matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_ascii_whitespace() || c == '\u{b}'
        });
    if !needs_quotes {
        return text.to_string();
    }
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// Arrow's display gives ISO text with a 'T' and all fraction digits (and
/// an offset for zoned values); reshape it as Postgres prints.
fn datetime_text(column: &ArrayRef) -> Option<ArrayRef> {
    let options = FormatOptions::default();
    let formatter = ArrayFormatter::try_new(column.as_ref(), &options).ok()?;
    let rendered: StringArray = (0..column.len())
        .map(|row| {
            column
                .is_valid(row)
                .then(|| postgres_datetime(&formatter.value(row).to_string()))
        })
        .collect();
    Some(Arc::new(rendered))
}

/// Decimal text without trailing fraction zeros: "2.5000000000" -> "2.5".
fn numeric_text(column: &ArrayRef) -> Option<ArrayRef> {
    let options = FormatOptions::default();
    let formatter = ArrayFormatter::try_new(column.as_ref(), &options).ok()?;
    let rendered: StringArray = (0..column.len())
        .map(|row| {
            column.is_valid(row).then(|| {
                let text = formatter.value(row).to_string();
                match text.contains('.') {
                    true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
                    false => text,
                }
            })
        })
        .collect();
    Some(Arc::new(rendered))
}

/// "2026-01-02T03:04:05.250000000+00:00" -> "2026-01-02 03:04:05.25+00".
fn postgres_datetime(iso: &str) -> String {
    let text = iso.replacen('T', " ", 1);
    let time_start = text.find(' ').map_or(0, |space| space + 1);
    let zone_start = text[time_start..]
        .find(['+', '-', 'Z'])
        .map_or(text.len(), |offset| time_start + offset);
    let (moment, zone) = text.split_at(zone_start);
    let moment = match moment.split_once('.') {
        Some((whole, fraction)) => {
            let fraction: String = fraction.chars().take(6).collect();
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                whole.to_string()
            } else {
                format!("{whole}.{fraction}")
            }
        }
        None => moment.to_string(),
    };
    let zone = match zone {
        "Z" => "+00",
        other => other.strip_suffix(":00").unwrap_or(other),
    };
    format!("{moment}{zone}")
}

/// Shortest round-trip digits, laid out as Postgres's float8out does.
fn float_text<F: std::fmt::LowerExp + Into<f64> + Copy>(value: F, exponent_limit: i32) -> String {
    let as_f64: f64 = value.into();
    if as_f64.is_nan() {
        return "NaN".to_string();
    }
    if as_f64.is_infinite() {
        return if as_f64 > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        }
        .to_string();
    }
    if as_f64 == 0.0 {
        return if as_f64.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // `{:e}` gives the shortest digits that round-trip, e.g. "-1.5e-7".
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if exponent < -4 || exponent >= exponent_limit {
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.abs());
    }
    let point = exponent + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::{array_literal, float_text, numeric_text, postgres_datetime};
    use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn unconstrained_numerics_print_without_trailing_zeros() {
        let values = Decimal128Array::from(vec![
            Some(20_000_000_000),
            Some(5_000_000_000),
            Some(-12_345_000_000),
            Some(0),
            None,
        ])
        .with_precision_and_scale(38, 10)
        .unwrap();
        let column: ArrayRef = Arc::new(values);
        let text = numeric_text(&column).unwrap();
        let text = text.as_any().downcast_ref::<StringArray>().unwrap();
        let shown: Vec<_> = text.iter().collect();
        assert_eq!(
            shown,
            [Some("2"), Some("0.5"), Some("-1.2345"), Some("0"), None]
        );
        assert!(text.is_null(4));
    }

    #[test]
    fn timestamps_print_like_postgres() {
        assert_eq!(
            postgres_datetime("2026-03-04T05:06:07"),
            "2026-03-04 05:06:07"
        );
        assert_eq!(
            postgres_datetime("2026-03-04T05:06:07.000000000"),
            "2026-03-04 05:06:07"
        );
        assert_eq!(
            postgres_datetime("1999-12-31T23:59:59.500"),
            "1999-12-31 23:59:59.5"
        );
        assert_eq!(
            postgres_datetime("2026-03-04T05:06:07.123456789+00:00"),
            "2026-03-04 05:06:07.123456+00"
        );
        assert_eq!(
            postgres_datetime("2026-03-04T05:06:07+05:30"),
            "2026-03-04 05:06:07+05:30"
        );
        assert_eq!(
            postgres_datetime("2026-03-04T05:06:07Z"),
            "2026-03-04 05:06:07+00"
        );
        assert_eq!(postgres_datetime("05:06:07.250"), "05:06:07.25");
    }

    #[test]
    fn doubles_print_like_postgres() {
        let cases = [
            (20.0, "20"),
            (0.1, "0.1"),
            (-2.25, "-2.25"),
            (1e10, "10000000000"),
            (1e14, "100000000000000"),
            (1e15, "1e+15"),
            (1e20, "1e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.5e-7, "-1.5e-07"),
            (123.456, "123.456"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (0.0, "0"),
        ];
        for (value, expected) in cases {
            assert_eq!(float_text(value, 15), expected, "{value}");
        }
    }

    #[test]
    fn arrays_print_as_postgres_literals() {
        use datafusion::arrow::array::{BooleanArray, ListArray};
        use datafusion::arrow::datatypes::{Field, Int32Type};
        let words = StringArray::from(vec![
            Some("a b"),
            Some("c"),
            None,
            Some(""),
            Some("NULL"),
            Some("q\"\\"),
        ]);
        let offsets = datafusion::arrow::buffer::OffsetBuffer::new(vec![0, 3, 6].into());
        let field = Arc::new(Field::new_list_field(
            datafusion::arrow::datatypes::DataType::Utf8,
            true,
        ));
        let lists: ArrayRef = Arc::new(ListArray::new(field, offsets, Arc::new(words), None));
        let text = array_literal(&lists).unwrap();
        let text = text.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(text.value(0), "{\"a b\",c,NULL}");
        assert_eq!(text.value(1), "{\"\",\"NULL\",\"q\\\"\\\\\"}");
        let numbers = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
            None,
        ]);
        let numbers: ArrayRef = Arc::new(numbers);
        let text = array_literal(&numbers).unwrap();
        let text = text.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(text.value(0), "{1,2}");
        assert_eq!(text.value(1), "{}");
        assert!(text.is_null(2));
        let flags = BooleanArray::from(vec![true, false]);
        let offsets = datafusion::arrow::buffer::OffsetBuffer::new(vec![0, 2].into());
        let field = Arc::new(Field::new_list_field(
            datafusion::arrow::datatypes::DataType::Boolean,
            true,
        ));
        let flags: ArrayRef = Arc::new(ListArray::new(field, offsets, Arc::new(flags), None));
        let text = array_literal(&flags).unwrap();
        assert_eq!(text.as_string::<i32>().value(0), "{t,f}");
        let nested_field = Arc::new(Field::new_list_field(numbers.data_type().clone(), true));
        let offsets = datafusion::arrow::buffer::OffsetBuffer::new(vec![0, 2].into());
        let nested: ArrayRef = Arc::new(ListArray::new(
            nested_field,
            offsets,
            numbers.slice(0, 2),
            None,
        ));
        let text = array_literal(&nested).unwrap();
        assert_eq!(text.as_string::<i32>().value(0), "{{1,2},{}}");
    }

    #[test]
    fn arrays_without_element_text_here_are_left_alone() {
        use super::renders_array;
        use datafusion::arrow::datatypes::{DataType, Field, IntervalUnit};
        let interval = DataType::Interval(IntervalUnit::MonthDayNano);
        let list = DataType::List(Arc::new(Field::new_list_field(interval, true)));
        assert!(!renders_array(&list));
        let nested = DataType::List(Arc::new(Field::new_list_field(list, true)));
        assert!(!renders_array(&nested));
        let bytes = DataType::List(Arc::new(Field::new_list_field(DataType::Binary, true)));
        let empty = datafusion::arrow::array::new_empty_array(&bytes);
        assert!(array_literal(&empty).is_none());
    }

    #[test]
    fn reals_switch_to_exponents_at_a_million() {
        assert_eq!(float_text(100000f32, 6), "100000");
        assert_eq!(float_text(1e6f32, 6), "1e+06");
        assert_eq!(float_text(1.5f32, 6), "1.5");
        assert_eq!(float_text(0.1f32, 6), "0.1");
    }
}
