//! Top-N per partition: `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` OVER
//! (PARTITION BY … ORDER BY …) kept to the rows ranked at most `limit`,
//! each with its rank. A partition's rows are ordered by their ORDER BY
//! key in Arrow's row format (which sorts as the ORDER BY does), then by
//! the whole row, so rows with equal keys have one fixed order. For each
//! partition a batch touches, the ranked rows before and after it are
//! compared and the difference emitted: a row whose rank moved is
//! retracted and emitted again with its new rank. Work per batch is the
//! touched partitions' top `limit` rows, never their history.
//!
//! Over an input that never retracts, a row ranked past the limit can
//! never come back, so only the ranked rows are kept (bounded state);
//! over an updating input every row is kept, as a retraction lets the
//! next one in (the state grows with the input).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use crate::error::Result;
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::operators::ordered_partition::{
    apply, in_place, key_of, keys, touched, Entry, EntryRef, Partition, Partitions, PACKED_ENTRIES,
};
use crate::stream::operators::top_n_windows::PartitionEnds;
pub use crate::stream::operators::top_n_windows::PartitionWindow;
use crate::stream::spill::SpillSpace;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankKind {
    RowNumber,
    Rank,
    DenseRank,
}

impl RankKind {
    pub fn name(self) -> &'static str {
        match self {
            RankKind::RowNumber => "row_number",
            RankKind::Rank => "rank",
            RankKind::DenseRank => "dense_rank",
        }
    }
}

pub struct TopNSpec {
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub order: Vec<PhysicalSortExpr>,
    pub kind: RankKind,
    pub limit: u64,
    /// How many of the ranked rows are not shown (`OFFSET`): the rows
    /// ranked in `offset + 1 ..= limit` are.
    pub offset: u64,
    /// The input retracts rows: keep every row, not only the ranked ones.
    pub keeps_all: bool,
    /// Whether rows carry their rank (`ORDER BY … LIMIT` and `DISTINCT ON`
    /// show the top rows without it).
    pub rank_column: bool,
    /// The input's columns, then the rank (UInt64) if it is shown.
    pub schema: SchemaRef,
    /// Partitions of a watermarked window: dropped when it ends.
    pub window: Option<PartitionWindow>,
    /// EMIT ON WINDOW CLOSE: a window's ranked rows are emitted once, when
    /// the watermark passes its end (needs `window`).
    pub emit_on_close: bool,
}

pub struct TopNOperator {
    spec: TopNSpec,
    partition_converter: RowConverter,
    order_converter: RowConverter,
    row_converter: RowConverter,
    partitions: Partitions,
    /// When each partition's window ends (a windowed top-N).
    ends: Option<PartitionEnds>,
}

/// A ranked row: its bytes and rank.
type Ranked<'a> = (&'a [u8], u64);

/// Rows to emit: bytes, rank, +1 or -1.
type Emitted = Vec<(Box<[u8]>, u64, i64)>;

/// A batch's rows for one partition, with the batch's encodings.
struct NewRows<'a> {
    indices: &'a [usize],
    order: &'a Option<Rows>,
    rows: &'a Rows,
    chunk: &'a Chunk,
}

impl TopNOperator {
    pub fn new(spec: TopNSpec) -> Result<Self> {
        let input = spec.schema.fields().len() - usize::from(spec.rank_column);
        let fields = |types: Vec<SortField>| RowConverter::new(types);
        let partition_types = spec
            .partition
            .iter()
            .map(|expr| Ok(SortField::new(expr.data_type(&spec.schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let order_types = spec
            .order
            .iter()
            .map(|sort| {
                let data_type = sort.expr.data_type(&spec.schema)?;
                Ok(SortField::new_with_options(data_type, sort.options))
            })
            .collect::<Result<Vec<_>>>()?;
        let row_types = spec.schema.fields()[..input]
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(TopNOperator {
            ends: spec.window.clone().map(PartitionEnds::new),
            partition_converter: fields(partition_types)?,
            order_converter: fields(order_types)?,
            row_converter: fields(row_types)?,
            spec,
            partitions: Partitions::default(),
        })
    }

    /// The rows of `entries` (a partition's, in order) ranked within the
    /// limit, best first.
    fn ranked<'a>(&self, entries: impl Iterator<Item = EntryRef<'a>>) -> Vec<Ranked<'a>> {
        let mut ranked = Vec::new();
        let (mut position, mut distinct) = (0u64, 0u64);
        let mut previous: Option<(&[u8], u64)> = None;
        for (order, row, count) in entries {
            for _ in 0..count.max(0) {
                position += 1;
                let rank = match (self.spec.kind, previous) {
                    (RankKind::RowNumber, _) => position,
                    (_, Some((key, rank))) if key == order => rank,
                    (RankKind::Rank, _) => position,
                    (RankKind::DenseRank, _) => distinct + 1,
                };
                if previous.is_none_or(|(key, _)| key != order) {
                    distinct += 1;
                }
                if rank > self.spec.limit {
                    return ranked;
                }
                previous = Some((order, rank));
                ranked.push((row, rank));
            }
        }
        ranked
    }

    /// The ranked rows shown: past the offset.
    fn shown<'a>(&self, entries: impl Iterator<Item = EntryRef<'a>>) -> Vec<Ranked<'a>> {
        let mut ranked = self.ranked(entries);
        ranked.retain(|&(_, rank)| rank > self.spec.offset);
        ranked
    }

    /// Drops the rows of `partition` ranked past the limit (input that
    /// never retracts), noted under `key`.
    fn prune(&mut self, key: &[u8], partition: &mut Partition) {
        // Each copy takes a position and a rank is at most its position:
        // a partition with no more copies than the limit keeps them all
        // (the common case: one row per partition, as in a dedup).
        let copies: i64 = partition.values().map(|count| (*count).max(0)).sum();
        if copies as u64 <= self.spec.limit {
            return;
        }
        let kept: HashSet<&[u8]> = self
            .ranked(in_place(partition))
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        let dropped: Vec<(Entry, i64)> = partition
            .iter()
            .filter(|((_, row), _)| !kept.contains(&**row))
            .map(|(entry, count)| (entry.clone(), *count))
            .collect();
        for (entry, count) in dropped {
            self.partitions.note(key, &entry, -count);
            partition.remove(&entry);
        }
    }

    /// Makes partition `key` of `new` rows when it has none and they are
    /// insertions that all rank within the limit (a dedup's new key, the
    /// common case): packed at once, each shown row emitted, without the
    /// tree and difference map of a change. False when it does not apply.
    fn make_partition(
        &mut self,
        key: &[u8],
        new: NewRows<'_>,
        emitted: &mut Emitted,
    ) -> Result<bool> {
        if new.indices.len() > PACKED_ENTRIES || self.partitions.contains(key)? {
            return Ok(false);
        }
        let mut entries: Vec<EntryRef<'_>> = Vec::with_capacity(new.indices.len());
        let mut copies = 0;
        for &index in new.indices {
            let diff = new.chunk.diff(index);
            if diff <= 0 {
                return Ok(false);
            }
            copies += diff;
            let row = new.rows.row(index).data();
            entries.push((key_of(new.order, index), row, diff));
        }
        if !self.spec.keeps_all && copies as u64 > self.spec.limit {
            return Ok(false);
        }
        entries.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        entries.dedup_by(|later, earlier| {
            let same = (later.0, later.1) == (earlier.0, earlier.1);
            if same {
                earlier.2 += later.2;
            }
            same
        });
        if !self.spec.emit_on_close {
            let shown = self.shown(entries.iter().copied());
            emitted.extend(shown.into_iter().map(|(row, rank)| (row.into(), rank, 1)));
        }
        self.partitions.insert_new(key, &entries);
        Ok(true)
    }

    /// Emits what changed in `before` → `after` (rows with their ranks).
    fn changes(
        before: Vec<(Box<[u8]>, u64)>,
        after: Vec<Ranked<'_>>,
        emitted: &mut Vec<(Box<[u8]>, u64, i64)>,
    ) {
        if before.is_empty() {
            // A new partition (or one that showed nothing): only insertions.
            emitted.extend(after.into_iter().map(|(row, rank)| (row.into(), rank, 1)));
            return;
        }
        let mut difference: HashMap<(Box<[u8]>, u64), i64> = HashMap::new();
        for (row, rank) in before {
            *difference.entry((row, rank)).or_default() -= 1;
        }
        for (row, rank) in after {
            *difference.entry((row.into(), rank)).or_default() += 1;
        }
        let mut changes: Vec<_> = difference
            .into_iter()
            .filter(|(_, diff)| *diff != 0)
            .collect();
        // Retractions first, then in rank order: a stable output.
        changes.sort_by(|((_, a_rank), a_diff), ((_, b_rank), b_diff)| {
            (a_diff.signum(), a_rank).cmp(&(b_diff.signum(), b_rank))
        });
        for ((row, rank), diff) in changes {
            let sign = diff.signum();
            for _ in 0..diff.abs() {
                emitted.push((row.clone(), rank, sign));
            }
        }
    }

    fn emit(&self, emitted: Vec<(Box<[u8]>, u64, i64)>, output: &mut Output) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let parser = self.row_converter.parser();
        let rows = emitted.iter().map(|(row, _, _)| parser.parse(row));
        let mut columns: Vec<ArrayRef> = self.row_converter.convert_rows(rows)?;
        if self.spec.rank_column {
            let ranks: UInt64Array = emitted.iter().map(|(_, rank, _)| Some(*rank)).collect();
            columns.push(Arc::new(ranks));
        }
        let diffs: Int64Array = emitted.iter().map(|(_, _, diff)| Some(*diff)).collect();
        output.push(Message::batch(Chunk {
            rows: RecordBatch::try_new(self.spec.schema.clone(), columns)?,
            diffs: Some(diffs),
            watermarks: None,
        }));
        Ok(())
    }

    fn evaluate(
        &self,
        exprs: &[Arc<dyn PhysicalExpr>],
        batch: &RecordBatch,
    ) -> Result<Vec<ArrayRef>> {
        exprs
            .iter()
            .map(|expr| Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect()
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> &'static str {
        "TopN"
    }

    fn on_batch(&mut self, chunk: Chunk, context: Context, output: &mut Output) -> Result<()> {
        let (chunk, row_ends) = match &self.ends {
            Some(ends) => {
                let row_ends = ends.row_ends(&chunk.rows)?;
                let arrived_under = |row: usize| match &chunk.watermarks {
                    Some(watermarks) if watermarks.is_valid(row) => Some(watermarks.value(row)),
                    _ => context.watermark,
                };
                let on_time = PartitionEnds::on_time(&row_ends, arrived_under);
                let row_ends = datafusion::arrow::compute::filter(&row_ends, &on_time)?;
                (chunk.filter(&on_time)?, Some(row_ends))
            }
            None => (chunk, None),
        };
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        let batch = &chunk.rows;
        let partitions = self.evaluate(&self.spec.partition, batch)?;
        let partitions = keys(&self.partition_converter, &partitions)?;
        let order_exprs: Vec<_> = self
            .spec
            .order
            .iter()
            .map(|sort| Arc::clone(&sort.expr))
            .collect();
        let order = self.evaluate(&order_exprs, batch)?;
        let order = keys(&self.order_converter, &order)?;
        let rows = self.row_converter.convert_columns(batch.columns())?;
        let touched = touched(&partitions, chunk.num_rows());
        if let (Some(ends), Some(row_ends)) = (self.ends.as_mut(), &row_ends) {
            let row_ends = row_ends.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for (key, indices) in &touched {
                if let Some(&first) = indices.first() {
                    if row_ends.is_valid(first) {
                        ends.note(key, row_ends.value(first));
                    }
                }
            }
        }
        let mut emitted = Vec::new();
        for (key, indices) in touched {
            let new = NewRows {
                indices: &indices,
                order: &order,
                rows: &rows,
                chunk: &chunk,
            };
            if self.make_partition(key, new, &mut emitted)? {
                continue;
            }
            let mut partition = self.partitions.checkout(key)?;
            let mut before: Vec<(Box<[u8]>, u64)> = self
                .shown(in_place(&partition))
                .into_iter()
                .map(|(row, rank)| (row.into(), rank))
                .collect();
            for index in indices {
                let entry: Entry = (key_of(&order, index).into(), rows.row(index).data().into());
                self.partitions.note(key, &entry, chunk.diff(index));
                apply(&mut partition, entry, chunk.diff(index));
            }
            if !self.spec.keeps_all {
                self.prune(key, &mut partition);
            }
            let mut after = self.shown(in_place(&partition));
            if !self.spec.rank_column {
                // A row that only moved within the top rows did not change.
                before.iter_mut().for_each(|(_, rank)| *rank = 0);
                after.iter_mut().for_each(|(_, rank)| *rank = 0);
            }
            if !self.spec.emit_on_close {
                Self::changes(before, after, &mut emitted);
            }
            self.partitions.checkin(key, partition);
        }
        self.partitions.settle()?;
        self.emit(emitted, output)
    }

    /// Watermarks stop here (the output's rows change as ranks move, or
    /// under EMIT ON WINDOW CLOSE come at a window's end); a windowed
    /// top-N drops the partitions whose window ended, emitting their
    /// ranked rows first under EMIT ON WINDOW CLOSE.
    fn on_watermark(&mut self, watermark: i64, _: Context, output: &mut Output) -> Result<()> {
        let Some(ends) = self.ends.as_mut() else {
            return Ok(());
        };
        let mut emitted = Vec::new();
        for key in ends.ended(watermark) {
            if let Some(partition) = self.partitions.take(&key)? {
                if self.spec.emit_on_close {
                    let ranked = self.shown(in_place(&partition));
                    emitted.extend(ranked.into_iter().map(|(row, rank)| (row.into(), rank, 1)));
                }
            }
            self.partitions.touch(&key);
        }
        self.emit(emitted, output)
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        if let Some(ends) = self.ends.as_mut() {
            ends.checkpoint(state);
        }
        self.partitions.checkpoint(state)
    }

    fn attach(&mut self, space: SpillSpace) {
        self.partitions.attach(space);
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        if let Some(ends) = self.ends.as_mut() {
            ends.restore(state);
        }
        self.partitions.restore(state, "TopN")
    }

    fn memory_bytes(&self) -> usize {
        self.partitions.memory_bytes()
    }

    fn commit(&mut self) {
        self.partitions.commit();
        if let Some(ends) = self.ends.as_mut() {
            ends.commit();
        }
    }

    /// The partitions take their changes back (those a window's end took
    /// out come back), and the windows' ends theirs.
    fn rollback(&mut self) -> Result<bool> {
        let undone = self.partitions.rollback()?;
        if let Some(ends) = self.ends.as_mut() {
            ends.rollback();
        }
        Ok(undone)
    }
}

#[cfg(test)]
#[path = "top_n_tests.rs"]
mod tests;
