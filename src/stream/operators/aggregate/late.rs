//! The side output of a windowed aggregate: each late row with the window
//! it missed and the watermark it arrived under, one row per missed window.

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::stream::message::Chunk;
use crate::stream::time_columns::timestamps;

/// The shape of `<view>_late`: which input columns it keeps, then
/// window_start, window_end and watermark.
#[derive(Debug, Clone)]
pub struct SideOutputShape {
    pub columns: Vec<usize>,
    pub schema: SchemaRef,
}

/// One late row: its position in the chunk, the window it missed and the
/// watermark it arrived under.
pub struct LateRow {
    pub row: u32,
    pub start: i64,
    pub end: i64,
    pub watermark: i64,
}

impl SideOutputShape {
    pub fn rows(&self, chunk: &Chunk, late: &[LateRow]) -> Result<RecordBatch> {
        let indices = UInt32Array::from_iter_values(late.iter().map(|row| row.row));
        let mut columns = self
            .columns
            .iter()
            .map(|&column| Ok(take(chunk.rows.column(column), &indices, None)?))
            .collect::<Result<Vec<_>>>()?;
        let fields = self.schema.fields();
        let time_type = fields[fields.len() - 1].data_type();
        columns.push(timestamps(
            late.iter().map(|row| row.start).collect(),
            time_type,
        )?);
        columns.push(timestamps(
            late.iter().map(|row| row.end).collect(),
            time_type,
        )?);
        columns.push(timestamps(
            late.iter().map(|row| row.watermark).collect(),
            time_type,
        )?);
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}
