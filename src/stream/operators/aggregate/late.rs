//! Late rows in a windowed aggregate: which rows are late (the watermark
//! they arrived under against their window's end plus the allowed
//! lateness), how they are reported, and the side output — each late row
//! with the window it missed and that watermark, one row per missed window.

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use super::WindowGroup;
use crate::error::Result;
use crate::stream::message::Chunk;
use crate::stream::time_columns::timestamps;
use crate::stream::{LatePolicy, LateRows};

/// What a windowed aggregate does with late rows.
#[derive(Clone, Default)]
pub struct LateHandling {
    pub policy: LatePolicy,
    pub rows: LateRows,
    /// Set when the view keeps late rows (`late_data = 'side_output'`).
    pub side_output: Option<SideOutputShape>,
}

impl LateHandling {
    /// Counts `late` rows of `chunk`, keeping them for the side output.
    pub fn report(&self, chunk: &Chunk, late: &[LateRow]) -> Result<()> {
        match &self.side_output {
            Some(shape) if !late.is_empty() => self.rows.keep(shape.rows(chunk, late)?),
            _ => self.rows.count(late.len() as u64),
        }
        Ok(())
    }
}

/// Row `row` (its window ending at `end`) as late when the watermark it
/// arrived under is at or past that end plus the allowed lateness.
pub fn late_row(
    window: &WindowGroup,
    chunk: &Chunk,
    current_watermark: Option<i64>,
    row: usize,
    end: i64,
    lateness_ns: i64,
) -> Option<LateRow> {
    let watermark = chunk.watermark_before(row, current_watermark)?;
    (watermark >= end.saturating_add(lateness_ns)).then(|| LateRow {
        row: row as u32,
        start: window.spec.start_of(end),
        end,
        watermark,
    })
}

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
