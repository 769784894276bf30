//! `connector = 'datagen'`: rows of typed random or sequence values at a
//! set rate, with the option names of RisingWave (`datagen.rows.per.second`,
//! `fields.<column>.kind/min/max/start/end/length/seed/max_past`) and Flink
//! (`rows-per-second`, `number-of-rows`, `fields.<column>.max-past`,
//! `null-rate`). A value is a function of its column's seed and its row
//! number, so a restart resumes the same sequence; only timestamps, which
//! follow the wall clock as in both peers, differ between runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder, TimestampMillisecondBuilder,
    TimestampNanosecondBuilder, TimestampSecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::options::{invalid, Options};
use super::pacing::Pacing;
use super::{Read, SourceReader};
use crate::error::{sqlstate, Result, WeirError};

const KNOWN: &str = "datagen.rows.per.second (rows-per-second), number-of-rows, \
    datagen.split.num and fields.<column>.kind / min / max / start / end / length / seed / \
    max_past / null_rate";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Random { min: f64, max: f64 },
    Sequence { start: i64, end: Option<i64> },
}

#[derive(Debug, Clone, PartialEq)]
struct Column {
    kind: Kind,
    seed: u64,
    length: usize,
    max_past_ms: i64,
    null_rate: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DatagenOptions {
    rows_per_second: u64,
    row_count: Option<u64>,
    columns: Vec<Column>,
}

impl DatagenOptions {
    pub fn parse(options: &BTreeMap<String, String>, schema: &SchemaRef) -> Result<Self> {
        let mut given = Options::new("datagen", options);
        let rows_per_second = given
            .parse::<u64>(&["datagen.rows.per.second", "rows-per-second"])?
            .unwrap_or(10);
        let mut row_count = given.parse::<u64>(&["number-of-rows"])?;
        given.parse::<u64>(&["datagen.split.num"])?;
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (index, field) in schema.fields().iter().enumerate() {
            let prefix = format!("fields.{}.", field.name().to_ascii_lowercase());
            let settings: BTreeMap<String, String> = given
                .take_prefixed(&prefix)
                .into_iter()
                .map(|(name, value)| (name[prefix.len()..].replace('-', "_"), value))
                .collect();
            let mut column = column(field.name(), field.data_type(), index, settings)?;
            fit_integer_range(&mut column, field.name(), field.data_type())?;
            if let Kind::Sequence {
                start,
                end: Some(end),
            } = column.kind
            {
                // A bounded sequence bounds the source, as in Flink.
                let rows = (i128::from(end) - i128::from(start) + 1).max(0) as u64;
                row_count = Some(row_count.map_or(rows, |count| count.min(rows)));
            }
            columns.push(column);
        }
        given.finish(KNOWN)?;
        Ok(DatagenOptions {
            rows_per_second,
            row_count,
            columns,
        })
    }
}

fn column(
    name: &str,
    data_type: &DataType,
    index: usize,
    settings: BTreeMap<String, String>,
) -> Result<Column> {
    let mut given = Options::new("datagen", &settings);
    let number = |given: &mut Options, key: &str| -> Result<Option<f64>> {
        given
            .parse::<f64>(&[key])
            .map_err(|error| invalid(&format!("fields.{name}.{key}"), "", &error.message))
    };
    let kind_name = given
        .text(&["kind"])
        .map(|(_, value)| value.to_ascii_lowercase());
    let kind = match kind_name.as_deref() {
        None | Some("random") => {
            let min = number(&mut given, "min")?.unwrap_or(0.0);
            let max = number(&mut given, "max")?.unwrap_or(1000.0);
            if min.is_nan() || max.is_nan() || min > max {
                return Err(invalid(
                    &format!("fields.{name}.min"),
                    &min.to_string(),
                    "min must not be above max.",
                ));
            }
            Kind::Random { min, max }
        }
        Some("sequence") => Kind::Sequence {
            start: given.parse::<i64>(&["start"])?.unwrap_or(0),
            end: given.parse::<i64>(&["end"])?,
        },
        Some(other) => {
            return Err(invalid(
                &format!("fields.{name}.kind"),
                other,
                "Use 'random' or 'sequence'.",
            ))
        }
    };
    let column = Column {
        kind,
        seed: given.parse::<u64>(&["seed"])?.unwrap_or(index as u64 + 1),
        length: given
            .parse::<usize>(&["length"])?
            .unwrap_or(10)
            .min(1 << 20),
        max_past_ms: given.parse::<i64>(&["max_past"])?.unwrap_or(0).max(0),
        null_rate: number(&mut given, "null_rate")?
            .unwrap_or(0.0)
            .clamp(0.0, 1.0),
    };
    given.finish(KNOWN)?;
    let supported = matches!(
        data_type,
        DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Boolean
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::LargeUtf8
            | DataType::Timestamp(_, _)
    );
    if !supported {
        return Err(WeirError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("datagen cannot generate column \"{name}\" of type {data_type}"),
        )
        .with_hint("Datagen makes SMALLINT, INT, BIGINT, REAL, DOUBLE, BOOLEAN, TEXT and TIMESTAMP columns."));
    }
    if matches!(kind, Kind::Sequence { .. }) && matches!(data_type, DataType::Timestamp(_, _)) {
        return Err(invalid(
            &format!("fields.{name}.kind"),
            "sequence",
            "A timestamp column is random: now minus up to max_past milliseconds.",
        ));
    }
    Ok(column)
}

/// An integer column's random range must lie within its type, and its
/// sequence ends at the type's largest value rather than wrap.
fn fit_integer_range(column: &mut Column, name: &str, data_type: &DataType) -> Result<()> {
    let (lowest, highest) = match data_type {
        DataType::Int16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        DataType::Int32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        DataType::Int64 => (i64::MIN, i64::MAX),
        _ => return Ok(()),
    };
    let out_of_range = |value: f64| value < lowest as f64 || value > highest as f64;
    match &mut column.kind {
        Kind::Random { min, max } if out_of_range(*min) || out_of_range(*max) => {
            Err(WeirError::new(
                sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                format!(
                    "fields.{name}.min and max must lie within {data_type} ({lowest} to {highest})"
                ),
            ))
        }
        Kind::Sequence { start, end } => {
            if out_of_range(*start as f64) || end.is_some_and(|end| out_of_range(end as f64)) {
                return Err(WeirError::new(
                    sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!("fields.{name}.start and end must lie within {data_type} ({lowest} to {highest})"),
                ));
            }
            *end = Some(end.unwrap_or(highest));
            Ok(())
        }
        Kind::Random { .. } => Ok(()),
    }
}

/// SplitMix64 of a column's seed and a row number.
fn mix(seed: u64, row: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0xD1B5_4A32_D192_ED03)
        .wrapping_add(row.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// In `[0, 1)`.
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

impl Column {
    fn is_null(&self, row: u64) -> bool {
        self.null_rate > 0.0 && unit(mix(self.seed ^ 0x5555, row)) < self.null_rate
    }

    fn number(&self, row: u64) -> f64 {
        match self.kind {
            Kind::Random { min, max } => min + unit(mix(self.seed, row)) * (max - min),
            Kind::Sequence { start, .. } => start as f64 + row as f64,
        }
    }

    fn integer(&self, row: u64) -> i64 {
        match self.kind {
            Kind::Random { min, max } => {
                // In floating point: min and max were checked against the
                // column's type, and a span past 2^53 needs no exactness.
                let span = max.floor() - min.ceil() + 1.0;
                let value = min.ceil() + (unit(mix(self.seed, row)) * span).floor();
                value.clamp(min.ceil(), max.floor()) as i64
            }
            Kind::Sequence { start, .. } => start.saturating_add(row as i64),
        }
    }

    fn text(&self, row: u64, into: &mut String) {
        into.clear();
        if let Kind::Sequence { .. } = self.kind {
            into.push_str(&self.integer(row).to_string());
            return;
        }
        let mut bits = mix(self.seed, row);
        for position in 0..self.length {
            if position % 12 == 11 {
                bits = mix(bits, position as u64);
            }
            into.push((b'a' + (bits % 26) as u8) as char);
            bits /= 26;
        }
    }
}

pub struct DatagenReader {
    options: DatagenOptions,
    schema: SchemaRef,
    next_row: u64,
    pacing: Pacing,
}

impl DatagenReader {
    pub fn new(options: DatagenOptions, schema: &SchemaRef, position: u64) -> Self {
        DatagenReader {
            pacing: Pacing::per_second(options.rows_per_second),
            options,
            schema: schema.clone(),
            next_row: position,
        }
    }

    fn build(&self, column: &Column, data_type: &DataType, rows: std::ops::Range<u64>) -> ArrayRef {
        macro_rules! numbers {
            ($builder:ty, $value:expr) => {{
                let mut builder =
                    <$builder>::with_capacity(rows.end.saturating_sub(rows.start) as usize);
                for row in rows.clone() {
                    match column.is_null(row) {
                        true => builder.append_null(),
                        false => builder.append_value($value(row)),
                    }
                }
                Arc::new(builder.finish()) as ArrayRef
            }};
        }
        let now_ms = crate::connectors::table::unix_now_ns() / 1_000_000;
        let past = |row: u64| {
            let back = match column.max_past_ms {
                0 => 0,
                max => (mix(column.seed, row) % (max as u64 + 1)) as i64,
            };
            now_ms - back
        };
        match data_type {
            DataType::Int16 => numbers!(Int16Builder, |r| column.integer(r) as i16),
            DataType::Int32 => numbers!(Int32Builder, |r| column.integer(r) as i32),
            DataType::Int64 => numbers!(Int64Builder, |r| column.integer(r)),
            DataType::Float32 => numbers!(Float32Builder, |r| column.number(r) as f32),
            DataType::Float64 => numbers!(Float64Builder, |r| column.number(r)),
            DataType::Boolean => numbers!(BooleanBuilder, |r| mix(column.seed, r) & 1 == 1),
            DataType::Timestamp(unit, zone) => {
                let array = match unit {
                    TimeUnit::Second => numbers!(TimestampSecondBuilder, |r| past(r) / 1000),
                    TimeUnit::Millisecond => numbers!(TimestampMillisecondBuilder, past),
                    TimeUnit::Microsecond => {
                        numbers!(TimestampMicrosecondBuilder, |r| past(r) * 1000)
                    }
                    TimeUnit::Nanosecond => {
                        numbers!(TimestampNanosecondBuilder, |r| past(r) * 1_000_000)
                    }
                };
                match zone {
                    None => array,
                    Some(_) => datafusion::arrow::compute::cast(&array, data_type).unwrap_or(array),
                }
            }
            _ => {
                let mut builder = StringBuilder::new();
                let mut text = String::new();
                for row in rows {
                    if column.is_null(row) {
                        builder.append_null();
                    } else {
                        column.text(row, &mut text);
                        builder.append_value(&text);
                    }
                }
                let array: ArrayRef = Arc::new(builder.finish());
                // TEXT is a string view; a plain string array casts to it.
                datafusion::arrow::compute::cast(&array, data_type).unwrap_or(array)
            }
        }
    }
}

impl SourceReader for DatagenReader {
    fn read(&mut self, max_rows: usize) -> Result<Read> {
        let end = self.options.row_count.unwrap_or(u64::MAX);
        if self.next_row >= end {
            return Ok(Read::Finished);
        }
        let limit = (max_rows as u64).min(end - self.next_row);
        let rows = match self.pacing.due(limit, Instant::now()) {
            Ok(rows) => rows,
            Err(wait) => return Ok(Read::Wait(wait)),
        };
        let range = self.next_row..self.next_row + rows;
        let columns = self
            .options
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|(column, field)| self.build(column, field.data_type(), range.clone()))
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows as usize));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map_err(|error| WeirError::internal(format!("a datagen batch: {error}")))?;
        self.next_row += rows;
        self.pacing.produced(rows);
        Ok(Read::Rows(batch))
    }

    fn position(&self) -> String {
        self.next_row.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]))
    }

    fn options(pairs: &[(&str, &str)]) -> Result<DatagenOptions> {
        let map = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        DatagenOptions::parse(&map, &schema())
    }

    fn read(reader: &mut DatagenReader) -> Vec<RecordBatch> {
        let mut batches = Vec::new();
        while let Read::Rows(batch) = reader.read(7).unwrap() {
            batches.push(batch);
        }
        batches
    }

    #[test]
    fn a_bounded_sequence_ends_the_source() {
        let options = options(&[
            ("rows-per-second", "0"),
            ("fields.id.kind", "sequence"),
            ("fields.id.start", "5"),
            ("fields.id.end", "24"),
            ("fields.name.length", "3"),
            ("fields.score.min", "1"),
            ("fields.score.max", "2"),
        ])
        .unwrap();
        let mut reader = DatagenReader::new(options.clone(), &schema(), 0);
        let batches = read(&mut reader);
        let ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.values().to_vec()
            })
            .collect();
        assert_eq!(ids, (5..=24).collect::<Vec<_>>());
        let names = batches[0]
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(0).len(), 3);
        // Resumed from row 10, the same values as the first run's.
        let mut resumed = DatagenReader::new(options, &schema(), 10);
        let again = read(&mut resumed);
        let first_names = batches[1]
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let resumed_names = again[0]
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(first_names.value(3), resumed_names.value(0));
    }

    #[test]
    fn random_integers_stay_in_range_and_nulls_come_at_their_rate() {
        let options = options(&[
            ("rows-per-second", "0"),
            ("number-of-rows", "2000"),
            ("fields.id.min", "-3"),
            ("fields.id.max", "3"),
            ("fields.name.null-rate", "0.5"),
        ])
        .unwrap();
        let mut reader = DatagenReader::new(options, &schema(), 0);
        let batches = read(&mut reader);
        let mut seen = std::collections::BTreeSet::new();
        let mut nulls = 0;
        for batch in &batches {
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            seen.extend(ids.values().iter().copied());
            nulls += batch.column(1).null_count();
        }
        assert_eq!(seen, (-3..=3).collect());
        assert!((800..1200).contains(&nulls), "{nulls}");
    }

    #[test]
    fn integer_ranges_stay_within_their_type() {
        let small = Arc::new(Schema::new(vec![Field::new("v", DataType::Int16, true)]));
        let parse = |pairs: &[(&str, &str)]| {
            let map = pairs
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect();
            DatagenOptions::parse(&map, &small)
        };
        assert!(parse(&[("fields.v.max", "40000")]).is_err());
        assert!(parse(&[("fields.v.kind", "sequence"), ("fields.v.start", "-40000")]).is_err());
        // A sequence without an end stops at the type's largest value.
        let sequence =
            parse(&[("fields.v.kind", "sequence"), ("fields.v.start", "32760")]).unwrap();
        assert_eq!(sequence.row_count, Some(8));
        let wide = options(&[("fields.id.min", "-1e300"), ("fields.id.max", "1e300")]);
        assert!(wide.is_err());
        let extreme = options(&[
            ("rows-per-second", "0"),
            ("number-of-rows", "100"),
            ("fields.id.min", "-9223372036854775808"),
            ("fields.id.max", "9223372036854775807"),
        ])
        .unwrap();
        let mut reader = DatagenReader::new(extreme, &schema(), 0);
        assert_eq!(
            read(&mut reader)
                .iter()
                .map(RecordBatch::num_rows)
                .sum::<usize>(),
            100
        );
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(options(&[("fields.id.kind", "walk")]).is_err());
        assert!(options(&[("fields.nope.kind", "random")]).is_err());
        assert!(options(&[("fields.id.min", "5"), ("fields.id.max", "1")]).is_err());
        assert!(options(&[("rows.per.second", "5")]).is_err());
    }
}
