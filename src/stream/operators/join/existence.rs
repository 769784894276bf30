//! Semi and anti joins (`IN` / `EXISTS` / `NOT EXISTS` subqueries): the
//! output is the left input's rows, each as often as it is there, while
//! its key has a match on the right (semi) or has none (anti). A left
//! change is shown or not by the right's row count of its key; a right
//! change shows or retracts every left row of its key when that count
//! crosses zero. Right rows are never shown.

use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::{JoinKind, JoinOperator, Matches};
use crate::error::Result;
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::Output;

impl JoinOperator {
    pub(super) fn on_existence_batch(
        &mut self,
        side: usize,
        chunk: &Chunk,
        output: &mut Output,
    ) -> Result<()> {
        match side {
            0 => self.left_changes(chunk, output),
            _ => self.right_changes(chunk, output),
        }
    }

    /// Left rows are shown (or retracted) as the right has their key.
    fn left_changes(&mut self, chunk: &Chunk, output: &mut Output) -> Result<()> {
        let anti = self.kind == JoinKind::Anti;
        let [left, right] = &mut self.sides;
        let keys = left.batch_keys(&chunk.rows)?;
        let rows = left.batch_rows(&chunk.rows)?;
        right.prefetch(&keys)?;
        let mut shown = Matches::default();
        for index in 0..chunk.num_rows() {
            let key = keys.keys.row(index);
            let matchable = keys.matchable[index];
            let matched = matchable && right.total(key.as_ref()) > 0;
            if matched != anti {
                shown.push(Some(index as u32), None, chunk.diff(index));
            }
            if matchable {
                left.apply(key.as_ref(), rows.row(index).as_ref(), chunk.diff(index));
            }
        }
        let Matches {
            mut probe, diffs, ..
        } = shown;
        let indices = probe.finish();
        let columns = taken(chunk.rows.columns(), &indices)?;
        push(&self.schema, columns, diffs, output)
    }

    /// A right change shows or retracts its key's left rows when the
    /// key's right row count crosses zero.
    fn right_changes(&mut self, chunk: &Chunk, output: &mut Output) -> Result<()> {
        let anti = self.kind == JoinKind::Anti;
        let [left, right] = &mut self.sides;
        let keys = right.batch_keys(&chunk.rows)?;
        let rows = right.batch_rows(&chunk.rows)?;
        right.prefetch(&keys)?;
        left.prefetch(&keys)?;
        let mut shown = Matches::default();
        for index in 0..chunk.num_rows() {
            if !keys.matchable[index] {
                continue;
            }
            let key = keys.keys.row(index);
            let key = key.as_ref();
            let before = right.total(key);
            let after = before + chunk.diff(index);
            let gained_first = before <= 0 && after > 0;
            let lost_last = before > 0 && after <= 0;
            if let (true, Some(group)) = (gained_first || lost_last, left.group(key)) {
                let sign = if gained_first != anti { 1 } else { -1 };
                for (row, count) in &group.rows {
                    shown.push(None, Some(&**row), sign * count);
                }
            }
            right.apply(key, rows.row(index).as_ref(), chunk.diff(index));
        }
        let Matches {
            mut stored,
            stored_rows,
            diffs,
            ..
        } = shown;
        if diffs.is_empty() {
            return Ok(());
        }
        let columns = left.columns(stored_rows)?;
        let columns = taken(&columns, &stored.finish())?;
        push(&self.schema, columns, diffs, output)
    }
}

fn taken(columns: &[ArrayRef], indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(columns
        .iter()
        .map(|column| take(column, indices, None))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Sends the rows (none: nothing) with their diffs.
fn push(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    diffs: Vec<i64>,
    output: &mut Output,
) -> Result<()> {
    if diffs.is_empty() {
        return Ok(());
    }
    let options = RecordBatchOptions::new().with_row_count(Some(diffs.len()));
    let rows = RecordBatch::try_new_with_options(schema.clone(), columns, &options)?;
    output.push(Message::batch(Chunk {
        rows,
        diffs: Some(Int64Array::from(diffs)),
        watermarks: None,
    }));
    Ok(())
}
