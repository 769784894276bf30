//! Text output where pgwire's encoding differs from Postgres, rendered here
//! before encoding so psql shows what Postgres would:
//! - floats: pgwire prints 20.0 as "20.0"; Postgres prints "20", and switches
//!   to exponent form outside 1e-4 .. 1e15 (1e6 for real);
//! - timestamps and times: pgwire always prints six fraction digits;
//!   Postgres prints none for whole seconds and trims trailing zeros;
//! - unconstrained NUMERIC (stored as DECIMAL(38, 10), the type DataFusion
//!   gives `NUMERIC` without a precision): Postgres keeps each value's own
//!   scale, which weir does not store, so trailing fraction zeros are
//!   trimmed (`2`, `0.5`) rather than printed to ten places.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;

fn rendered_here(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float32
            | DataType::Float64
            | DataType::Timestamp(_, _)
            | DataType::Time64(_)
            | DataType::Time32(_)
    ) || data_type == &UNCONSTRAINED_NUMERIC
}

/// What `NUMERIC` without precision and scale is planned as.
const UNCONSTRAINED_NUMERIC: DataType = DataType::Decimal128(38, 10);

/// Replaces text-format float and time columns with their Postgres text.
pub fn render_text_columns(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let needs = batch.columns().iter().zip(fields).any(|(column, field)| {
        field.format() == FieldFormat::Text
            && (rendered_here(column.data_type()) || is_vector(field.datatype()))
    });
    if !needs {
        return batch;
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(fields)
        .map(|(column, field)| {
            if field.format() != FieldFormat::Text {
                return column.clone();
            }
            if is_vector(field.datatype()) {
                return vector_text(column).unwrap_or_else(|| column.clone());
            }
            match column.data_type() {
                DataType::Float64 => {
                    let values = column.as_primitive::<Float64Type>();
                    Arc::new(
                        values
                            .iter()
                            .map(|v| v.map(|v| float_text(v, 15)))
                            .collect::<StringArray>(),
                    ) as ArrayRef
                }
                DataType::Float32 => {
                    let values = column.as_primitive::<Float32Type>();
                    Arc::new(
                        values
                            .iter()
                            .map(|v| v.map(|v| float_text(v, 6)))
                            .collect::<StringArray>(),
                    ) as ArrayRef
                }
                DataType::Timestamp(_, _) | DataType::Time64(_) | DataType::Time32(_) => {
                    datetime_text(column).unwrap_or_else(|| column.clone())
                }
                data_type if data_type == &UNCONSTRAINED_NUMERIC => {
                    numeric_text(column).unwrap_or_else(|| column.clone())
                }
                _ => column.clone(),
            }
        })
        .collect();
    // Encoding goes by the field list (which keeps FLOAT4/FLOAT8), so the
    // batch only needs to carry the values.
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
        columns
            .iter()
            .zip(batch.schema().fields())
            .map(|(column, field)| {
                field
                    .as_ref()
                    .clone()
                    .with_data_type(column.data_type().clone())
            })
            .collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(schema, columns).unwrap_or(batch)
}

/// The fields rows are encoded with: a vector rendered as text here is
/// encoded as plain text (pgwire would quote it as an array element), while
/// the row description still announces the vector type.
pub fn encoding_fields(fields: &[FieldInfo]) -> Vec<FieldInfo> {
    let encoding = |field: &FieldInfo| {
        FieldInfo::new(
            field.name().to_string(),
            field.table_id(),
            field.column_id(),
            Type::TEXT,
            field.format(),
        )
        .with_format_options(field.format_options().clone())
    };
    fields
        .iter()
        .map(
            |field| match field.format() == FieldFormat::Text && is_vector(field.datatype()) {
                true => encoding(field),
                false => field.clone(),
            },
        )
        .collect()
}

fn is_vector(pg_type: &Type) -> bool {
    pg_type == &Type::INT2_VECTOR || pg_type == &Type::OID_VECTOR
}

/// int2vector and oidvector print their elements separated by spaces
/// (`1 3`), not as an array literal.
fn vector_text(column: &ArrayRef) -> Option<ArrayRef> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let lists = column.as_list_opt::<i32>()?;
    let options = FormatOptions::default();
    let rendered: StringArray = (0..lists.len())
        .map(|row| {
            lists.is_valid(row).then(|| {
                let elements = lists.value(row);
                let formatter = ArrayFormatter::try_new(elements.as_ref(), &options).ok();
                let texts = (0..elements.len()).map(|index| match &formatter {
                    Some(formatter) => formatter.value(index).to_string(),
                    None => String::new(),
                });
                texts.collect::<Vec<_>>().join(" ")
            })
        })
        .collect();
    Some(Arc::new(rendered))
}

/// Arrow's display gives ISO text with a 'T' and all fraction digits (and
/// an offset for zoned values); reshape it as Postgres prints.
fn datetime_text(column: &ArrayRef) -> Option<ArrayRef> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
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
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
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
    use super::{float_text, numeric_text, postgres_datetime};
    use datafusion::arrow::array::{Array, ArrayRef, Decimal128Array, StringArray};
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
    fn reals_switch_to_exponents_at_a_million() {
        assert_eq!(float_text(100000f32, 6), "100000");
        assert_eq!(float_text(1e6f32, 6), "1e+06");
        assert_eq!(float_text(1.5f32, 6), "1.5");
        assert_eq!(float_text(0.1f32, 6), "0.1");
    }
}
