//! Aggregates over rows that can be taken back (a view over an outer join
//! or over another updating view). Each call's accumulator must then undo
//! a row exactly: DataFusion's sliding accumulators do for COUNT, SUM and
//! AVG (`retract_batch`, as window frames use them). MIN, MAX,
//! COUNT(DISTINCT), array_agg, string_agg, first_value and last_value need
//! every row's value with its multiplicity, sorted as the call's ORDER BY
//! (or the value) sorts; DataFusion keeps that only for window frames that
//! retract oldest-first, so weir keeps it here (`MultisetAccumulator`).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::utils::SingleRowListArrayBuilder;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

/// How a call's accumulator takes rows back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retraction {
    /// Its input never retracts: DataFusion's accumulator.
    None,
    /// DataFusion's sliding accumulator (`retract_batch`).
    Sliding,
    /// Every row's value with its multiplicity (`MultisetAccumulator`).
    Multiset(Box<MultisetShape>),
}

/// What a multiset accumulator computes from its sorted values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultisetKind {
    /// The value of the first row in order (MIN, first_value).
    First,
    /// The value of the last row in order (MAX, last_value).
    Last,
    /// How many distinct values there are (COUNT(DISTINCT)).
    DistinctCount,
    /// Every value in order, as a list (array_agg).
    Array,
    /// Every non-NULL value in order, joined by `delimiter` (string_agg).
    Text { delimiter: String },
}

/// One call's multiset: what it computes, its value's type, its ORDER BY
/// (columns passed after the call's `arguments` argument columns; empty
/// means by value), whether NULL values are left out and whether each
/// distinct row counts once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultisetShape {
    pub kind: MultisetKind,
    pub value_type: DataType,
    pub order: Vec<SortField>,
    pub arguments: usize,
    pub skip_nulls: bool,
    pub distinct: bool,
}

impl MultisetShape {
    /// A multiset of one argument's values ordered by value (MIN, MAX,
    /// COUNT(DISTINCT)), NULLs left out.
    pub fn by_value(kind: MultisetKind, value_type: DataType) -> Self {
        MultisetShape {
            kind,
            value_type,
            order: Vec::new(),
            arguments: 1,
            skip_nulls: true,
            distinct: false,
        }
    }

    /// Its checkpoint state columns: each ORDER BY column, the values,
    /// their counts (each a list).
    pub fn state_width(&self) -> usize {
        self.order.len() + 2
    }
}

/// A group's rows as (ORDER BY keys, value) in Arrow's row format, which
/// sorts as the ORDER BY does, each with how many rows hold it.
#[derive(Debug)]
pub struct MultisetAccumulator {
    shape: MultisetShape,
    converter: RowConverter,
    rows: BTreeMap<Box<[u8]>, i64>,
    bytes: usize,
}

impl MultisetAccumulator {
    pub fn new(shape: MultisetShape) -> datafusion::error::Result<Self> {
        let mut fields = shape.order.clone();
        fields.push(SortField::new(shape.value_type.clone()));
        Ok(MultisetAccumulator {
            converter: RowConverter::new(fields)?,
            shape,
            rows: BTreeMap::new(),
            bytes: 0,
        })
    }

    /// The key columns (ORDER BY columns, then the value) of a call's
    /// argument columns.
    fn key_columns(&self, arguments: &[ArrayRef]) -> datafusion::error::Result<Vec<ArrayRef>> {
        let order = arguments.get(self.shape.arguments..).unwrap_or_default();
        if order.len() != self.shape.order.len() || arguments.is_empty() {
            return datafusion::common::internal_err!(
                "an ordered aggregate got {} argument columns",
                arguments.len()
            );
        }
        let mut columns = order.to_vec();
        columns.push(Arc::clone(&arguments[0]));
        Ok(columns)
    }

    /// Adds `sign` times one (or the row's `counts`) to the multiplicity
    /// of each row of `columns` (key columns).
    fn add(
        &mut self,
        columns: &[ArrayRef],
        counts: Option<&Int64Array>,
        sign: i64,
    ) -> datafusion::error::Result<()> {
        let rows = self.converter.convert_columns(columns)?;
        let values = &columns[self.shape.order.len()];
        for index in 0..rows.num_rows() {
            if self.shape.skip_nulls && values.is_null(index) {
                continue;
            }
            let diff = sign * counts.map_or(1, |counts| counts.value(index));
            let row = rows.row(index);
            let row = row.as_ref();
            let count = match self.rows.get_mut(row) {
                Some(count) => {
                    *count += diff;
                    *count
                }
                None => {
                    self.bytes += row.len() + VALUE_OVERHEAD_BYTES;
                    self.rows.insert(row.into(), diff);
                    diff
                }
            };
            if count == 0 {
                self.rows.remove(row);
                self.bytes -= row.len() + VALUE_OVERHEAD_BYTES;
            }
        }
        Ok(())
    }

    /// The key columns of `rows`, each row repeated by its count (once
    /// when distinct).
    fn decode<'a>(
        &self,
        rows: impl Iterator<Item = (&'a [u8], i64)>,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let parser = self.converter.parser();
        let mut repeats = Vec::new();
        let mut keys = Vec::new();
        for (position, (row, count)) in rows.enumerate() {
            let times = if self.shape.distinct { 1 } else { count };
            repeats.extend(std::iter::repeat_n(position as u32, times.max(0) as usize));
            keys.push(parser.parse(row));
        }
        let columns = self.converter.convert_rows(keys)?;
        let repeats = UInt32Array::from(repeats);
        columns
            .iter()
            .map(|column| Ok(take(column.as_ref(), &repeats, None)?))
            .collect()
    }

    /// The value of one row (or NULL of the value's type when there is none).
    fn value(&self, row: Option<(&[u8], i64)>) -> datafusion::error::Result<ScalarValue> {
        let Some(row) = row else {
            return ScalarValue::try_from(&self.shape.value_type);
        };
        let columns = self.decode(std::iter::once(row))?;
        ScalarValue::try_from_array(&columns[self.shape.order.len()], 0)
    }

    /// Each row with its count, in order.
    fn entries(&self) -> impl DoubleEndedIterator<Item = (&[u8], i64)> {
        self.rows.iter().map(|(row, count)| (&**row, *count))
    }

    /// Every value in order.
    fn values(&self) -> datafusion::error::Result<ArrayRef> {
        Ok(self
            .decode(self.entries())?
            .swap_remove(self.shape.order.len()))
    }

    fn text(&self, delimiter: &str) -> datafusion::error::Result<ScalarValue> {
        if self.rows.is_empty() {
            return Ok(ScalarValue::LargeUtf8(None));
        }
        let values = cast(&self.values()?, &DataType::LargeUtf8)?;
        let values = values.as_string::<i64>();
        let joined = values.iter().flatten().collect::<Vec<_>>().join(delimiter);
        Ok(ScalarValue::LargeUtf8(Some(joined)))
    }
}

/// A BTreeMap entry's share of memory beyond its key.
const VALUE_OVERHEAD_BYTES: usize = 40;

impl Accumulator for MultisetAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        let columns = self.key_columns(values)?;
        self.add(&columns, None, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        let columns = self.key_columns(values)?;
        self.add(&columns, None, -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        match &self.shape.kind {
            MultisetKind::First => self.value(self.entries().next()),
            MultisetKind::Last => self.value(self.entries().next_back()),
            MultisetKind::DistinctCount => Ok(ScalarValue::Int64(Some(self.rows.len() as i64))),
            MultisetKind::Array if self.rows.is_empty() => Ok(ScalarValue::new_null_list(
                self.shape.value_type.clone(),
                true,
                1,
            )),
            MultisetKind::Array => {
                Ok(SingleRowListArrayBuilder::new(self.values()?).build_list_scalar())
            }
            MultisetKind::Text { delimiter } => self.text(delimiter),
        }
    }

    /// The key columns and the counts, as one list each. Does not consume.
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let parser = self.converter.parser();
        let rows = self.rows.keys().map(|row| parser.parse(row));
        let mut state: Vec<ScalarValue> = self
            .converter
            .convert_rows(rows)?
            .into_iter()
            .map(|column| SingleRowListArrayBuilder::new(column).build_list_scalar())
            .collect();
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values(self.rows.values().copied()));
        state.push(SingleRowListArrayBuilder::new(counts).build_list_scalar());
        Ok(state)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let Some((counts, keys)) = states.split_last() else {
            return Ok(());
        };
        let counts = counts.as_list::<i32>();
        for row in 0..counts.len() {
            if counts.is_null(row) {
                continue;
            }
            let columns: Vec<ArrayRef> = keys
                .iter()
                .map(|key| key.as_list::<i32>().value(row))
                .collect();
            let row_counts = counts.value(row);
            self.add(&columns, Some(row_counts.as_primitive::<Int64Type>()), 1)?;
        }
        Ok(())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;

    fn text(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn by_value(kind: MultisetKind, value_type: DataType) -> MultisetAccumulator {
        MultisetAccumulator::new(MultisetShape::by_value(kind, value_type)).unwrap()
    }

    fn numbers(values: &[i64]) -> ArrayRef {
        Arc::new(Int64Array::from(values.to_vec()))
    }

    /// string_agg(value, ',' ORDER BY rank DESC): arguments value,
    /// delimiter, then the ORDER BY column.
    fn ordered_text() -> MultisetAccumulator {
        let descending = datafusion::arrow::compute::SortOptions {
            descending: true,
            nulls_first: true,
        };
        MultisetAccumulator::new(MultisetShape {
            kind: MultisetKind::Text {
                delimiter: ",".into(),
            },
            value_type: DataType::Utf8,
            order: vec![SortField::new_with_options(DataType::Int64, descending)],
            arguments: 2,
            skip_nulls: true,
            distinct: false,
        })
        .unwrap()
    }

    fn restored(
        accumulator: &mut MultisetAccumulator,
        fresh: MultisetAccumulator,
    ) -> MultisetAccumulator {
        let state: Vec<ArrayRef> = accumulator
            .state()
            .unwrap()
            .iter()
            .map(|value| value.to_array().unwrap())
            .collect();
        let mut fresh = fresh;
        fresh.merge_batch(&state).unwrap();
        fresh
    }

    #[test]
    fn an_ordered_string_agg_follows_its_order_through_retractions_and_a_restore() {
        let mut accumulator = ordered_text();
        let delimiter = text(&[Some(","); 4]);
        let values = text(&[Some("a"), Some("b"), None, Some("b")]);
        accumulator
            .update_batch(&[values, delimiter, numbers(&[1, 3, 2, 0])])
            .unwrap();
        assert_eq!(
            accumulator.evaluate().unwrap(),
            ScalarValue::LargeUtf8(Some("b,a,b".into()))
        );
        let mut restored = restored(&mut accumulator, ordered_text());
        assert_eq!(
            accumulator.evaluate().unwrap(),
            ScalarValue::LargeUtf8(Some("b,a,b".into())),
            "state() does not consume"
        );
        restored
            .retract_batch(&[text(&[Some("b")]), text(&[Some(",")]), numbers(&[3])])
            .unwrap();
        assert_eq!(
            restored.evaluate().unwrap(),
            ScalarValue::LargeUtf8(Some("a,b".into()))
        );
        restored
            .retract_batch(&[
                text(&[Some("a"), Some("b")]),
                text(&[Some(","); 2]),
                numbers(&[1, 0]),
            ])
            .unwrap();
        assert_eq!(
            restored.evaluate().unwrap(),
            ScalarValue::LargeUtf8(None),
            "empty is NULL"
        );
    }

    #[test]
    fn array_agg_keeps_nulls_and_repeats_and_distinct_counts_each_once() {
        let shape = |distinct| MultisetShape {
            kind: MultisetKind::Array,
            value_type: DataType::Int64,
            order: Vec::new(),
            arguments: 1,
            skip_nulls: false,
            distinct,
        };
        let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(2), None, Some(2), Some(1)]));
        for (distinct, expected) in [(false, "[, 1, 2, 2]"), (true, "[, 1, 2]")] {
            let mut accumulator = MultisetAccumulator::new(shape(distinct)).unwrap();
            accumulator
                .update_batch(std::slice::from_ref(&values))
                .unwrap();
            let mut restored = restored(
                &mut accumulator,
                MultisetAccumulator::new(shape(distinct)).unwrap(),
            );
            assert_eq!(restored.evaluate().unwrap().to_string(), expected);
        }
    }

    #[test]
    fn min_max_and_distinct_count_follow_inserts_and_retractions() {
        let mut min = by_value(MultisetKind::First, DataType::Utf8);
        let mut max = by_value(MultisetKind::Last, DataType::Utf8);
        let mut distinct = by_value(MultisetKind::DistinctCount, DataType::Utf8);
        let rows = text(&[Some("b"), Some("a"), Some("c"), Some("a"), None]);
        for accumulator in [&mut min, &mut max, &mut distinct] {
            accumulator
                .update_batch(std::slice::from_ref(&rows))
                .unwrap();
            accumulator
                .retract_batch(&[text(&[Some("a"), Some("c")])])
                .unwrap();
        }
        assert_eq!(
            min.evaluate().unwrap(),
            ScalarValue::from("a"),
            "one a is left"
        );
        assert_eq!(max.evaluate().unwrap(), ScalarValue::from("b"));
        assert_eq!(distinct.evaluate().unwrap(), ScalarValue::Int64(Some(2)));
        min.retract_batch(&[text(&[Some("a"), Some("b")])]).unwrap();
        assert_eq!(
            min.evaluate().unwrap(),
            ScalarValue::Utf8(None),
            "empty is NULL"
        );
    }

    #[test]
    fn the_state_restores_every_value_with_its_count() {
        let mut accumulator = by_value(MultisetKind::Last, DataType::Int64);
        let values: ArrayRef = Arc::new(Int64Array::from(vec![5, 9, 9, 1]));
        accumulator.update_batch(&[values]).unwrap();
        let state = accumulator.state().unwrap();
        let arrays: Vec<ArrayRef> = state
            .iter()
            .map(|value| value.to_array().unwrap())
            .collect();
        let mut restored = by_value(MultisetKind::Last, DataType::Int64);
        restored.merge_batch(&arrays).unwrap();
        assert_eq!(accumulator.evaluate().unwrap(), ScalarValue::Int64(Some(9)));
        let nine: ArrayRef = Arc::new(Int64Array::from(vec![9]));
        restored.retract_batch(std::slice::from_ref(&nine)).unwrap();
        assert_eq!(
            restored.evaluate().unwrap(),
            ScalarValue::Int64(Some(9)),
            "twice"
        );
        restored.retract_batch(&[nine]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(5)));
    }
}
