//! What flows between operators: batches of rows, watermarks and barriers.

use datafusion::arrow::array::{Array, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{filter, filter_record_batch, take, take_record_batch};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;

#[derive(Debug, Clone)]
pub enum Message {
    Batch(Box<Chunk>),
    /// The stream's event-time watermark (ns since the epoch) on its
    /// watermark column: later on-time rows are at or after it.
    Watermark(i64),
    /// A checkpoint boundary (used by checkpoints; forwarded today).
    Barrier(u64),
    /// An `EMIT EVERY` firing of the view with this id: its aggregates
    /// publish what changed since the last firing. Other views drop it.
    Fire(u64),
}

impl Message {
    pub fn batch(chunk: Chunk) -> Self {
        Message::Batch(Box::new(chunk))
    }

    /// The rows it carries (0 for a watermark or barrier).
    pub fn num_rows(&self) -> usize {
        match self {
            Message::Batch(chunk) => chunk.num_rows(),
            _ => 0,
        }
    }
}

/// Rows with, optionally, a diff per row (+1 insert, -1 retraction; None
/// means all inserts) and the watermark each row arrived under (None means
/// the stream's current watermark, the last `Watermark` message).
#[derive(Debug, Clone)]
pub struct Chunk {
    pub rows: RecordBatch,
    pub diffs: Option<Int64Array>,
    pub watermarks: Option<Int64Array>,
}

impl Chunk {
    pub fn inserts(rows: RecordBatch) -> Self {
        Chunk {
            rows,
            diffs: None,
            watermarks: None,
        }
    }

    pub fn num_rows(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn diff(&self, row: usize) -> i64 {
        self.diffs.as_ref().map_or(1, |diffs| diffs.value(row))
    }

    /// The watermark row `row` arrived under, or `current` when the chunk
    /// carries none.
    pub fn watermark_before(&self, row: usize, current: Option<i64>) -> Option<i64> {
        match &self.watermarks {
            Some(watermarks) if watermarks.is_valid(row) => Some(watermarks.value(row)),
            Some(_) => None,
            None => current,
        }
    }

    /// Same rows order and diffs, new columns (e.g. after a projection).
    pub fn with_rows(&self, rows: RecordBatch) -> Self {
        Chunk {
            rows,
            diffs: self.diffs.clone(),
            watermarks: self.watermarks.clone(),
        }
    }

    /// Keeps the rows where `mask` is true (NULL counts as false).
    pub fn filter(&self, mask: &BooleanArray) -> Result<Self> {
        let mask = without_nulls(mask);
        Ok(Chunk {
            rows: filter_record_batch(&self.rows, &mask)?,
            diffs: filter_int64(self.diffs.as_ref(), &mask)?,
            watermarks: filter_int64(self.watermarks.as_ref(), &mask)?,
        })
    }

    /// The rows at `indices`, in that order (rows may repeat).
    pub fn take(&self, indices: &UInt32Array) -> Result<Self> {
        Ok(Chunk {
            rows: take_record_batch(&self.rows, indices)?,
            diffs: take_int64(self.diffs.as_ref(), indices)?,
            watermarks: take_int64(self.watermarks.as_ref(), indices)?,
        })
    }
}

/// A filter mask where NULL means false.
pub fn without_nulls(mask: &BooleanArray) -> BooleanArray {
    if mask.null_count() == 0 {
        mask.clone()
    } else {
        datafusion::arrow::compute::prep_null_mask_filter(mask)
    }
}

fn filter_int64(array: Option<&Int64Array>, mask: &BooleanArray) -> Result<Option<Int64Array>> {
    array
        .map(|array| Ok(downcast_int64(filter(array, mask)?)))
        .transpose()
}

fn take_int64(array: Option<&Int64Array>, indices: &UInt32Array) -> Result<Option<Int64Array>> {
    array
        .map(|array| Ok(downcast_int64(take(array, indices, None)?)))
        .transpose()
}

fn downcast_int64(array: datafusion::arrow::array::ArrayRef) -> Int64Array {
    use datafusion::arrow::array::AsArray;
    array
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int32Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn chunk() -> Chunk {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        let column: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 3]));
        Chunk {
            rows: RecordBatch::try_new(schema, vec![column]).unwrap(),
            diffs: Some(Int64Array::from(vec![1, -1, 1])),
            watermarks: Some(Int64Array::from(vec![None, Some(5), Some(7)])),
        }
    }

    #[test]
    fn filter_and_take_keep_diffs_and_watermarks_aligned() {
        let kept = chunk()
            .filter(&BooleanArray::from(vec![Some(false), Some(true), None]))
            .unwrap();
        assert_eq!(kept.num_rows(), 1);
        assert_eq!(kept.diff(0), -1);
        assert_eq!(kept.watermark_before(0, None), Some(5));

        let repeated = chunk().take(&UInt32Array::from(vec![2, 2, 0])).unwrap();
        assert_eq!(repeated.num_rows(), 3);
        assert_eq!(repeated.watermark_before(1, None), Some(7));
        assert_eq!(repeated.watermark_before(2, Some(1)), None);
        assert_eq!(
            Chunk::inserts(chunk().rows).watermark_before(0, Some(9)),
            Some(9)
        );
    }
}
