//! EMIT ON WINDOW CLOSE for a query without aggregation: each row is held
//! until the watermark is strictly past its event time, then emitted in
//! event-time order (ties in arrival order). A row already behind the
//! watermark when it arrives is late: dropped and counted.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{concat_batches, lexsort_to_indices, SortColumn};

use crate::error::Result;
use crate::state::batch_codec::{decode_batches, encode_batch};
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::time_columns::nanoseconds;
use crate::stream::LateRows;

pub struct EmitOnCloseOperator {
    time_column: usize,
    pending: Vec<Chunk>,
    late_rows: LateRows,
    /// Whether `pending` changed since the last checkpoint.
    changed: bool,
    /// `pending` and `changed` at the last commit, once the write group
    /// running now changed them (a copy of the chunks' handles: the rows'
    /// arrays are shared).
    before: Option<(Vec<Chunk>, bool)>,
}

impl EmitOnCloseOperator {
    pub fn new(time_column: usize, late_rows: LateRows) -> Self {
        EmitOnCloseOperator {
            time_column,
            pending: Vec::new(),
            late_rows,
            changed: false,
            before: None,
        }
    }

    fn before_change(&mut self) {
        if self.before.is_none() {
            self.before = Some((self.pending.clone(), self.changed));
        }
    }
}

impl Operator for EmitOnCloseOperator {
    fn memory_bytes(&self) -> usize {
        self.pending
            .iter()
            .map(|chunk| chunk.rows.get_array_memory_size())
            .sum()
    }

    fn name(&self) -> &'static str {
        "EmitOnClose"
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, _output: &mut Output) -> Result<()> {
        let times = nanoseconds(chunk.rows.column(self.time_column))?;
        let on_time: BooleanArray = (0..chunk.num_rows())
            .map(|row| {
                let late = match (
                    chunk.watermark_before(row, context.watermark),
                    times.is_valid(row),
                ) {
                    (Some(watermark), true) => watermark > times.value(row),
                    _ => false,
                };
                Some(!late && times.is_valid(row))
            })
            .collect();
        let late = on_time.iter().filter(|keep| *keep == Some(false)).count();
        self.late_rows.count(late as u64);
        // A copy (`take`, not a filter that may return a slice): rows held
        // until the watermark must not pin the whole appended batch.
        let indices: UInt32Array = on_time
            .iter()
            .enumerate()
            .filter_map(|(row, keep)| (keep == Some(true)).then_some(row as u32))
            .collect();
        let kept = chunk.take(&indices)?;
        if kept.num_rows() > 0 {
            self.before_change();
            self.changed = true;
            self.pending.push(Chunk {
                watermarks: None,
                ..kept
            });
        }
        Ok(())
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if !std::mem::take(&mut self.changed) {
            return Ok(());
        }
        match self.pending.first() {
            None => state.delete(b"pending"),
            Some(first) => {
                let rows: Vec<_> = self
                    .pending
                    .iter()
                    .map(|chunk| chunk.rows.clone())
                    .collect();
                let all = concat_batches(&first.rows.schema(), &rows)?;
                state.put(b"pending", encode_batch(&all)?);
            }
        }
        Ok(())
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        if let Some(value) = state.get(b"pending") {
            self.pending = decode_batches(value, "rows waiting for the watermark")?
                .into_iter()
                .map(Chunk::inserts)
                .collect();
        }
        Ok(())
    }

    fn commit(&mut self) {
        self.before = None;
    }

    fn rollback(&mut self) -> Result<bool> {
        if let Some((pending, changed)) = self.before.take() {
            self.pending = pending;
            self.changed = changed;
        }
        Ok(true)
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        if self.pending.is_empty() {
            output.push(Message::Watermark(watermark_ns));
            return Ok(());
        }
        self.before_change();
        let first = &self.pending[0];
        let schema = first.rows.schema();
        let rows: Vec<_> = self
            .pending
            .iter()
            .map(|chunk| chunk.rows.clone())
            .collect();
        let all = Chunk::inserts(concat_batches(&schema, &rows)?);
        let times = nanoseconds(all.rows.column(self.time_column))?;
        let ready: BooleanArray = times
            .iter()
            .map(|time| time.map(|time| watermark_ns > time))
            .collect();
        let waiting = datafusion::arrow::compute::not(&ready)?;
        let emitted = all.filter(&ready)?;
        let kept = all.filter(&waiting)?;
        self.pending = if kept.num_rows() > 0 {
            vec![kept]
        } else {
            Vec::new()
        };
        if emitted.num_rows() > 0 {
            let emitted_times = nanoseconds(emitted.rows.column(self.time_column))?;
            let arrival = UInt32Array::from_iter_values(0..emitted.num_rows() as u32);
            let order = lexsort_to_indices(
                &[
                    SortColumn {
                        values: Arc::new(emitted_times),
                        options: None,
                    },
                    SortColumn {
                        values: Arc::new(arrival),
                        options: None,
                    },
                ],
                None,
            )?;
            output.push(Message::batch(emitted.take(&order)?));
        }
        output.push(Message::Watermark(watermark_ns));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::operator::Stage;
    use datafusion::arrow::array::{Int64Array, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn chunk(times: &[i64], watermarks: &[Option<i64>]) -> Chunk {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        )]));
        let column = TimestampNanosecondArray::from_iter_values(times.iter().copied());
        Chunk {
            rows: RecordBatch::try_new(schema, vec![Arc::new(column)]).unwrap(),
            diffs: None,
            watermarks: Some(Int64Array::from(watermarks.to_vec())),
        }
    }

    fn emitted(output: &Output) -> Vec<i64> {
        output
            .iter()
            .filter_map(|message| match message {
                Message::Batch(chunk) => Some(nanoseconds(chunk.rows.column(0)).unwrap()),
                _ => None,
            })
            .flat_map(|times| times.values().to_vec())
            .collect()
    }

    #[test]
    fn rows_wait_for_the_watermark_and_leave_in_event_time_order() {
        let late = Arc::new(AtomicU64::new(0));
        let operator = EmitOnCloseOperator::new(0, LateRows::new(late.clone(), false));
        let mut operator = Stage::new(Box::new(operator));
        let mut output = Vec::new();
        operator
            .on_batch(
                chunk(&[7, 3, 5, 9], &[None, Some(2), Some(2), Some(2)]),
                &mut output,
            )
            .unwrap();
        operator.on_watermark(7, &mut output).unwrap();
        // Strictly past: 7 stays until the watermark moves beyond it.
        assert_eq!(emitted(&output), vec![3, 5]);

        let mut output = Vec::new();
        // 4 arrives behind watermark 7: late.
        operator
            .on_batch(chunk(&[4, 8], &[Some(7), Some(7)]), &mut output)
            .unwrap();
        operator.on_watermark(20, &mut output).unwrap();
        assert_eq!(emitted(&output), vec![7, 8, 9]);
        assert_eq!(late.load(Ordering::Relaxed), 1);
    }
}
