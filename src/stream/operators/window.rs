//! Assigns each row to its TUMBLE, HOP or CUMULATE windows (or its own
//! SESSION window), appending `window_start` and `window_end`. A row is
//! repeated once per window it falls in. Windows align to 1970-01-01 plus
//! the offset; their shape is `window_spec`.

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::time_columns::{nanoseconds, timestamps};

pub use super::window_spec::{describe_duration, WindowKind, WindowSpec};

pub struct WindowOperator {
    spec: WindowSpec,
    time_column: usize,
    /// Input columns plus window_start and window_end.
    schema: SchemaRef,
}

impl WindowOperator {
    pub fn new(spec: WindowSpec, time_column: usize, schema: SchemaRef) -> Self {
        WindowOperator {
            spec,
            time_column,
            schema,
        }
    }
}

impl Operator for WindowOperator {
    fn name(&self) -> &'static str {
        "Window"
    }

    /// Nothing to undo: it keeps no state.
    fn rollback(&mut self) -> Result<bool> {
        Ok(true)
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        let times = nanoseconds(chunk.rows.column(self.time_column))?;
        let mut indices = Vec::with_capacity(times.len());
        let mut starts = Vec::with_capacity(times.len());
        let mut ends = Vec::with_capacity(times.len());
        for (row, time) in times.iter().enumerate() {
            // A row without an event time belongs to no window.
            let Some(time) = time else { continue };
            for (start, end) in self.spec.windows(time)? {
                indices.push(row as u32);
                starts.push(start);
                ends.push(end);
            }
        }
        let windowed = chunk.take(&UInt32Array::from(indices))?;
        let time_type = self
            .schema
            .field(self.schema.fields().len() - 1)
            .data_type();
        let mut columns = windowed.rows.columns().to_vec();
        columns.push(timestamps(starts, time_type)?);
        columns.push(timestamps(ends, time_type)?);
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        output.push(Message::batch(windowed.with_rows(rows)));
        Ok(())
    }
}
