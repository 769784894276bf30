//! Aggregates over rows that can be taken back (a view over an outer join
//! or over another updating view). Each call's accumulator must then undo
//! a row exactly: DataFusion's sliding accumulators do for COUNT, SUM and
//! AVG (`retract_batch`, as window frames use them); MIN, MAX and
//! COUNT(DISTINCT) need every value with its multiplicity, which
//! DataFusion's keep only for window frames that retract oldest-first, so
//! weir keeps them here (`MultisetAccumulator`).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
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
    /// Every value (of `value_type`) with its multiplicity
    /// (`MultisetAccumulator`).
    Multiset {
        kind: MultisetKind,
        value_type: DataType,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultisetKind {
    Min,
    Max,
    DistinctCount,
}

/// The state columns of a multiset accumulator: its values, their counts.
pub const MULTISET_STATE_WIDTH: usize = 2;

/// A group's non-NULL values, each with how many rows hold it, ordered by
/// value (Arrow's row format sorts as the values do).
#[derive(Debug)]
pub struct MultisetAccumulator {
    kind: MultisetKind,
    data_type: DataType,
    converter: RowConverter,
    values: BTreeMap<Box<[u8]>, i64>,
    bytes: usize,
}

impl MultisetAccumulator {
    pub fn new(kind: MultisetKind, data_type: DataType) -> datafusion::error::Result<Self> {
        Ok(MultisetAccumulator {
            kind,
            converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
            data_type,
            values: BTreeMap::new(),
            bytes: 0,
        })
    }

    /// Adds `sign` times one (or the row's `counts`) to the multiplicity
    /// of each non-NULL value.
    fn add(
        &mut self,
        values: &ArrayRef,
        counts: Option<&Int64Array>,
        sign: i64,
    ) -> datafusion::error::Result<()> {
        let rows = self
            .converter
            .convert_columns(std::slice::from_ref(values))?;
        for index in 0..values.len() {
            if values.is_null(index) {
                continue;
            }
            let diff = sign * counts.map_or(1, |counts| counts.value(index));
            let row = rows.row(index);
            let row = row.as_ref();
            let count = match self.values.get_mut(row) {
                Some(count) => {
                    *count += diff;
                    *count
                }
                None => {
                    self.bytes += row.len() + VALUE_OVERHEAD_BYTES;
                    self.values.insert(row.into(), diff);
                    diff
                }
            };
            if count == 0 {
                self.values.remove(row);
                self.bytes -= row.len() + VALUE_OVERHEAD_BYTES;
            }
        }
        Ok(())
    }

    fn value(&self, row: Option<&[u8]>) -> datafusion::error::Result<ScalarValue> {
        let Some(row) = row else {
            return ScalarValue::try_from(&self.data_type);
        };
        let parser = self.converter.parser();
        let columns = self.converter.convert_rows([parser.parse(row)])?;
        ScalarValue::try_from_array(&columns[0], 0)
    }
}

/// A BTreeMap entry's share of memory beyond its key.
const VALUE_OVERHEAD_BYTES: usize = 40;

impl Accumulator for MultisetAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add(&values[0], None, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add(&values[0], None, -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        match self.kind {
            MultisetKind::Min => self.value(self.values.keys().next().map(|row| &**row)),
            MultisetKind::Max => self.value(self.values.keys().next_back().map(|row| &**row)),
            MultisetKind::DistinctCount => Ok(ScalarValue::Int64(Some(self.values.len() as i64))),
        }
    }

    /// The values and their counts, as one list each. Does not consume.
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let parser = self.converter.parser();
        let rows = self.values.keys().map(|row| parser.parse(row));
        let values = self.converter.convert_rows(rows)?.remove(0);
        let counts: ArrayRef =
            Arc::new(Int64Array::from_iter_values(self.values.values().copied()));
        Ok(vec![
            SingleRowListArrayBuilder::new(values).build_list_scalar(),
            SingleRowListArrayBuilder::new(counts).build_list_scalar(),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let (values, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for row in 0..values.len() {
            if values.is_null(row) {
                continue;
            }
            let row_counts = counts.value(row);
            let row_counts = row_counts.as_primitive::<Int64Type>();
            self.add(&values.value(row), Some(row_counts), 1)?;
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

    #[test]
    fn min_max_and_distinct_count_follow_inserts_and_retractions() {
        let mut min = MultisetAccumulator::new(MultisetKind::Min, DataType::Utf8).unwrap();
        let mut max = MultisetAccumulator::new(MultisetKind::Max, DataType::Utf8).unwrap();
        let mut distinct =
            MultisetAccumulator::new(MultisetKind::DistinctCount, DataType::Utf8).unwrap();
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
        let mut accumulator = MultisetAccumulator::new(MultisetKind::Max, DataType::Int64).unwrap();
        let values: ArrayRef = Arc::new(Int64Array::from(vec![5, 9, 9, 1]));
        accumulator.update_batch(&[values]).unwrap();
        let state = accumulator.state().unwrap();
        let arrays: Vec<ArrayRef> = state
            .iter()
            .map(|value| value.to_array().unwrap())
            .collect();
        let mut restored = MultisetAccumulator::new(MultisetKind::Max, DataType::Int64).unwrap();
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
