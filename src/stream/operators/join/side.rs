//! One input of a join: its rows so far as a multiset grouped by join key.
//! Rows and keys are held in Arrow's row format (bytes that compare equal
//! exactly when the values do), so a probe is one hash lookup per row and
//! building output converts the matched rows back in one call.

use std::collections::BTreeMap;

use datafusion::common::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::rows::{SideRows, ROW_OVERHEAD_BYTES};
use super::undo::{DeadlineList, DueRows, SideUndo};
use crate::error::Result;
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::Chunk;
use crate::stream::spill::SpillSpace;

/// The rows of one key, each with its multiplicity.
#[derive(Debug, Default)]
pub struct KeyGroup {
    pub rows: HashMap<Box<[u8]>, i64>,
    /// The sum of the multiplicities: rows of this key present now.
    pub total: i64,
}

/// A batch's join keys in row format, and whether each row can match at
/// all (a NULL key matches nothing unless NULLs are equal).
pub struct BatchKeys {
    pub keys: Rows,
    pub matchable: Vec<bool>,
}

pub struct JoinSide {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    nulls_match: bool,
    key_converter: RowConverter,
    row_converter: RowConverter,
    schema: SchemaRef,
    /// The rows by key. A row that comes and goes between two checkpoints
    /// leaves no change to write: a COPY of millions of rows through a
    /// join that forgets rows is one write group, with no checkpoint in
    /// it.
    rows: SideRows,
    /// What the deadline lists take.
    bytes: usize,
    /// When the other side's watermark makes rows unmatchable.
    expiry: Option<SideExpiry>,
    /// `state_ttl`: how long after it came a row is forgotten, and the
    /// rows by when.
    ttl: Option<(i64, Deadlines)>,
    /// What the write group running now changed.
    undo: SideUndo,
}

/// A side whose rows can only match rows of the other side up to a time:
/// a row with time `t` in `column` matches no row of the other side after
/// that side's watermark passes `t + allowance_ns` (an interval or window
/// join; see `sql/streaming/join_bounds.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub column: usize,
    pub allowance_ns: i64,
}

struct SideExpiry {
    expiry: Expiry,
    /// Stored rows by the watermark that ends them.
    rows_by_end: Deadlines,
}

/// Stored rows by the time (a watermark, or the clock for a TTL) after
/// which they are forgotten. A row may be listed more than once.
#[derive(Default)]
struct Deadlines(BTreeMap<i64, Vec<Box<[u8]>>>);

impl Deadlines {
    fn remember(&mut self, deadline: i64, row: &[u8]) {
        self.0.entry(deadline).or_default().push(row.into());
    }

    /// Takes out the rows whose deadline is before `time`.
    fn due(&mut self, time: i64) -> DueRows {
        if self
            .0
            .first_key_value()
            .is_none_or(|(first, _)| *first >= time)
        {
            return DueRows::new();
        }
        let kept = self.0.split_off(&time);
        std::mem::replace(&mut self.0, kept)
    }

    /// Puts entries `due` took out back.
    fn put_back(&mut self, rows: DueRows) {
        for (deadline, rows) in rows {
            self.0.entry(deadline).or_default().extend(rows);
        }
    }
}

/// Rows restored from a checkpoint are converted this many at a time.
const RESTORE_BATCH_ROWS: usize = 8192;

impl JoinSide {
    pub fn new(
        index: usize,
        schema: SchemaRef,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_fields: Vec<SortField>,
        nulls_match: bool,
    ) -> Result<Self> {
        let row_fields = schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(JoinSide {
            keys,
            nulls_match,
            key_converter: RowConverter::new(key_fields)?,
            row_converter: RowConverter::new(row_fields)?,
            schema,
            rows: SideRows::new(format!("rows/{index}/").into_bytes()),
            bytes: 0,
            expiry: None,
            ttl: None,
            undo: SideUndo::default(),
        })
    }

    /// Rows of this side expire as `expiry` says.
    pub fn with_expiry(mut self, expiry: Option<Expiry>) -> Self {
        self.expiry = expiry.map(|expiry| SideExpiry {
            expiry,
            rows_by_end: Deadlines::default(),
        });
        self
    }

    /// Rows of this side are forgotten `ttl_ns` after they came.
    pub fn with_ttl(mut self, ttl_ns: Option<i64>) -> Self {
        self.ttl = ttl_ns.map(|ttl_ns| (ttl_ns, Deadlines::default()));
        self
    }

    /// Notes that stored `row` came at `now_ns` (under a TTL).
    pub fn remember_arrival(&mut self, now_ns: i64, row: &[u8]) {
        if let Some((ttl_ns, deadlines)) = self.ttl.as_mut() {
            self.bytes += row.len() + ROW_OVERHEAD_BYTES;
            deadlines.remember(now_ns.saturating_add(*ttl_ns), row);
        }
    }

    /// Forgets the rows whose TTL has run out at `now_ns`.
    pub fn expire_ttl(&mut self, now_ns: i64) -> Result<()> {
        let due = match self.ttl.as_mut() {
            Some((_, deadlines)) => deadlines.due(now_ns),
            None => return Ok(()),
        };
        self.undo.note_taken_out(DeadlineList::Ttl, &due);
        self.forget(due.into_values().flatten().collect())
    }

    /// Per row of `batch`, the other side's watermark past which it can
    /// match nothing (NULL time: it never matches); None without expiry.
    pub fn match_ends(&self, batch: &RecordBatch) -> Result<Option<Int64Array>> {
        let Some(side) = &self.expiry else {
            return Ok(None);
        };
        let column = batch.column(side.expiry.column);
        let nanoseconds = match column.data_type() {
            DataType::Timestamp(_, zone) => datafusion::arrow::compute::cast(
                column,
                &DataType::Timestamp(TimeUnit::Nanosecond, zone.clone()),
            )?,
            _ => datafusion::arrow::compute::cast(column, &DataType::Int64)?,
        };
        let times = datafusion::arrow::compute::cast(&nanoseconds, &DataType::Int64)?;
        let allowance = side.expiry.allowance_ns;
        Ok(Some(
            times
                .as_primitive::<Int64Type>()
                .iter()
                .map(|time| time.map(|time| time.saturating_add(allowance)))
                .collect(),
        ))
    }

    /// Notes that stored `row` can match nothing once the other side's
    /// watermark passes `end`.
    pub fn remember_end(&mut self, end: i64, row: &[u8]) {
        if let Some(side) = self.expiry.as_mut() {
            self.bytes += row.len() + ROW_OVERHEAD_BYTES;
            side.rows_by_end.remember(end, row);
        }
    }

    /// Forgets the rows no row of the other side can match once its
    /// watermark is `watermark` (the join's output keeps what they made).
    pub fn expire(&mut self, watermark: i64) -> Result<()> {
        let due = match self.expiry.as_mut() {
            Some(side) => side.rows_by_end.due(watermark),
            None => return Ok(()),
        };
        self.undo.note_taken_out(DeadlineList::Expiry, &due);
        self.forget(due.into_values().flatten().collect())
    }

    /// The write group committed: forget how to undo it.
    pub fn commit(&mut self) {
        self.undo.clear();
    }

    /// The write group failed: every change it made is taken back, last
    /// first, and the deadline entries it took out are put back. False if
    /// the group changed too much to keep its undo: the caller rebuilds.
    pub fn rollback(&mut self) -> bool {
        if self.undo.given_up() {
            self.undo.clear();
            return false;
        }
        let undo = std::mem::take(&mut self.undo);
        for (key, row, diff) in undo.changes_last_first() {
            self.apply(key, row, -diff);
        }
        for (list, rows) in undo.taken_out {
            for row in rows.values().flatten() {
                self.bytes += row.len() + ROW_OVERHEAD_BYTES;
            }
            match (list, self.expiry.as_mut(), self.ttl.as_mut()) {
                (DeadlineList::Expiry, Some(side), _) => side.rows_by_end.put_back(rows),
                (DeadlineList::Ttl, _, Some((_, deadlines))) => deadlines.put_back(rows),
                _ => {}
            }
        }
        self.undo.clear();
        true
    }

    /// Sets how much a write group's undo may hold (tests).
    #[cfg(test)]
    pub fn with_undo_limit(mut self, bytes: usize) -> Self {
        self.undo = SideUndo::with_limit(bytes);
        self
    }

    /// Removes every copy of `due` rows (each listed row's deadline entry
    /// is gone already).
    fn forget(&mut self, due: Vec<Box<[u8]>>) -> Result<()> {
        for row in &due {
            self.bytes -= row.len() + ROW_OVERHEAD_BYTES;
        }
        let rows: HashSet<Box<[u8]>> = due.into_iter().collect();
        let rows: Vec<Box<[u8]>> = rows.into_iter().collect();
        for piece in rows.chunks(RESTORE_BATCH_ROWS) {
            let columns = self.columns(piece.iter().map(|row| &**row))?;
            let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
            let keys = self.batch_keys(&batch)?;
            for (index, row) in piece.iter().enumerate() {
                let key = keys.keys.row(index);
                if let Some(count) = self.rows.count(key.as_ref(), row) {
                    self.apply(key.as_ref(), row, -count);
                }
            }
        }
        Ok(())
    }

    pub fn batch_keys(&self, batch: &RecordBatch) -> Result<BatchKeys> {
        let rows = batch.num_rows();
        let mut columns = self
            .keys
            .iter()
            .map(|key| key.evaluate(batch)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
        if columns.is_empty() {
            // A cross join: every row has the same key (rows need a column).
            columns.push(Arc::new(datafusion::arrow::array::BooleanArray::from(
                vec![true; rows],
            )));
        }
        let matchable = (0..rows)
            .map(|row| self.nulls_match || columns.iter().all(|column| column.is_valid(row)))
            .collect();
        Ok(BatchKeys {
            keys: self.key_converter.convert_columns(&columns)?,
            matchable,
        })
    }

    /// The batch's rows in row format, as they are stored.
    pub fn batch_rows(&self, batch: &RecordBatch) -> Result<Rows> {
        Ok(self.row_converter.convert_columns(batch.columns())?)
    }

    /// Key `key`'s rows, if any are there now (read by `prefetch`).
    pub fn group(&self, key: &[u8]) -> Option<&KeyGroup> {
        self.rows.group(key)
    }

    /// Rows of `key` present now (read by `prefetch`).
    pub fn total(&self, key: &[u8]) -> i64 {
        self.rows.total(key)
    }

    /// Reads the groups of a batch's matchable keys that were spilled, so
    /// `group` and `total` have them.
    pub fn prefetch(&mut self, keys: &BatchKeys) -> Result<()> {
        let matchable = (keys.keys.iter().zip(&keys.matchable))
            .filter(|(_, matchable)| **matchable)
            .map(|(key, _)| key.data());
        self.rows.prefetch(matchable)
    }

    /// Adds `diff` to the multiplicity of `row` under `key`.
    pub fn apply(&mut self, key: &[u8], row: &[u8], diff: i64) {
        self.undo.note(key, row, diff);
        self.rows.apply(key, row, diff);
    }

    /// Spills to `space` past the memory budget. A side whose rows expire
    /// (by watermark or TTL) keeps every row in memory — they are bounded,
    /// and forgetting a row needs its count — and only writes its changes
    /// out as runs.
    pub fn attach(&mut self, space: SpillSpace, head: Vec<u8>) {
        let evicts = self.expiry.is_none() && self.ttl.is_none();
        self.rows.attach(space, head, evicts);
    }

    /// Past the memory budget, writes the rows' changes out and lets them
    /// go from memory (between batches).
    pub fn settle(&mut self) -> Result<()> {
        self.rows.settle()
    }

    /// Adds a batch's rows with their diffs (a lookup join's table side,
    /// which joins nothing as it changes).
    pub fn apply_batch(&mut self, chunk: &Chunk) -> Result<()> {
        let keys = self.batch_keys(&chunk.rows)?;
        let rows = self.batch_rows(&chunk.rows)?;
        for index in 0..chunk.num_rows() {
            if keys.matchable[index] {
                let key = keys.keys.row(index);
                self.apply(key.as_ref(), rows.row(index).as_ref(), chunk.diff(index));
            }
        }
        Ok(())
    }

    /// Stored rows back as columns of the side's schema.
    pub fn columns<'a>(&self, rows: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        let parser = self.row_converter.parser();
        let rows = rows.into_iter().map(|bytes| parser.parse(bytes));
        Ok(self.row_converter.convert_rows(rows)?)
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.rows.memory_bytes() + self.undo.memory_bytes()
    }

    /// Writes what changed since the last checkpoint (`SideRows`).
    pub fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        self.rows.checkpoint(state)
    }

    /// Restores the rows of a checkpoint; under a TTL they count as
    /// having come at `now_ns` (the checkpoint keeps no arrival times).
    pub fn restore(&mut self, state: &StateReader, now_ns: i64) -> Result<()> {
        let entries = self.rows.restore(state)?;
        self.remember_restored_runs(now_ns)?;
        for piece in entries.chunks(RESTORE_BATCH_ROWS) {
            let columns = self.columns(piece.iter().map(|(row, _)| *row))?;
            let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
            let keys = self.batch_keys(&batch)?;
            let ends = self.match_ends(&batch)?;
            for (index, (row, count)) in piece.iter().enumerate() {
                self.apply(keys.keys.row(index).as_ref(), row, *count);
                self.remember_arrival(now_ns, row);
                if let Some(end) = ends
                    .as_ref()
                    .and_then(|ends| ends.is_valid(index).then(|| ends.value(index)))
                {
                    self.remember_end(end, row);
                }
            }
        }
        self.rows.restored();
        self.undo.clear();
        Ok(())
    }

    /// Lists the deadlines of the rows read back from runs (a side whose
    /// rows expire reads them all).
    fn remember_restored_runs(&mut self, now_ns: i64) -> Result<()> {
        if self.expiry.is_none() && self.ttl.is_none() {
            return Ok(());
        }
        let rows: Vec<Box<[u8]>> = self.rows.rows().map(Box::from).collect();
        for piece in rows.chunks(RESTORE_BATCH_ROWS) {
            let columns = self.columns(piece.iter().map(|row| &**row))?;
            let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
            let ends = self.match_ends(&batch)?;
            for (index, row) in piece.iter().enumerate() {
                self.remember_arrival(now_ns, row);
                if let Some(end) = ends
                    .as_ref()
                    .and_then(|ends| ends.is_valid(index).then(|| ends.value(index)))
                {
                    self.remember_end(end, row);
                }
            }
        }
        Ok(())
    }

    /// Every stored row (for tests and checks).
    #[cfg(test)]
    pub fn stored(&self) -> std::collections::HashSet<(Vec<u8>, i64)> {
        self.rows.stored()
    }
}
