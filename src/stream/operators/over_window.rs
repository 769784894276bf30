//! OVER windows other than a bounded top-N: `lag`/`lead`, aggregates over
//! frames (`AVG(x) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 10
//! PRECEDING AND CURRENT ROW)`), running totals, rankings without a rank
//! filter. Every row of each partition is kept in ORDER BY order
//! (`ordered_partition`). For each partition a batch changes, the rows
//! whose results can change are found, their results computed before and
//! after the change by DataFusion's window expressions over a slice of the
//! partition, and the difference emitted: a row whose result moved is
//! retracted and emitted again with the new one.
//!
//! How far a change reaches is the functions' `Reach`. With a bounded one
//! (`lag(x, 2)`, `ROWS BETWEEN 10 PRECEDING AND 1 FOLLOWING`) the work per
//! change is a few rows either side of it; otherwise (running totals,
//! ranks, RANGE frames, whole-partition frames) it is the partition.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use crate::error::Result;
use crate::stream::checkpoint::{StateReader, StateWriter};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};
use crate::stream::operators::ordered_partition::{
    apply, key_of, keys, touched, Entry, Partition, Partitions,
};
use crate::stream::spill::SpillSpace;

/// How many neighbours a row's results depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// At most `before` rows before it and `after` rows after it (in
    /// partition order).
    Rows { before: u64, after: u64 },
    /// The whole partition.
    Partition,
}

impl Reach {
    /// The reach of several functions computed together.
    pub fn union(self, other: Reach) -> Reach {
        match (self, other) {
            (
                Reach::Rows { before, after },
                Reach::Rows {
                    before: other_before,
                    after: other_after,
                },
            ) => Reach::Rows {
                before: before.max(other_before),
                after: after.max(other_after),
            },
            _ => Reach::Partition,
        }
    }
}

pub struct OverWindowSpec {
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub order: Vec<PhysicalSortExpr>,
    pub functions: Vec<Arc<dyn WindowExpr>>,
    pub reach: Reach,
    /// The input's columns, then one per function.
    pub schema: SchemaRef,
}

/// The rows between two entries (inclusive; None: that end is open).
#[derive(Debug, Clone)]
struct Span {
    low: Option<Entry>,
    high: Option<Entry>,
}

impl Span {
    fn contains(&self, entry: &Entry) -> bool {
        self.low.as_ref().is_none_or(|low| low <= entry)
            && self.high.as_ref().is_none_or(|high| entry <= high)
    }
}

/// A result row: the input row and the functions' results, row format.
type ResultRow = (Box<[u8]>, Box<[u8]>);

pub struct OverWindowOperator {
    spec: OverWindowSpec,
    input_schema: SchemaRef,
    partition_converter: RowConverter,
    order_converter: RowConverter,
    row_converter: RowConverter,
    result_converter: RowConverter,
    partitions: Partitions,
}

impl OverWindowOperator {
    pub fn new(spec: OverWindowSpec) -> Result<Self> {
        let inputs = spec.schema.fields().len() - spec.functions.len();
        let input_schema = Arc::new(Schema::new(spec.schema.fields()[..inputs].to_vec()));
        let partition_types = spec
            .partition
            .iter()
            .map(|expr| Ok(SortField::new(expr.data_type(&input_schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let order_types = spec
            .order
            .iter()
            .map(|sort| {
                let data_type = sort.expr.data_type(&input_schema)?;
                Ok(SortField::new_with_options(data_type, sort.options))
            })
            .collect::<Result<Vec<_>>>()?;
        let field_types = |from: usize, to: usize| -> Vec<SortField> {
            spec.schema.fields()[from..to]
                .iter()
                .map(|field| SortField::new(field.data_type().clone()))
                .collect()
        };
        Ok(OverWindowOperator {
            partition_converter: RowConverter::new(partition_types)?,
            order_converter: RowConverter::new(order_types)?,
            row_converter: RowConverter::new(field_types(0, inputs))?,
            result_converter: RowConverter::new(field_types(inputs, spec.schema.fields().len()))?,
            input_schema,
            spec,
            partitions: Partitions::default(),
        })
    }

    /// The spans of `partition` whose rows' results `changes` can move,
    /// in order and disjoint.
    fn spans(&self, partition: &Partition, changes: &BTreeMap<Entry, i64>) -> Vec<Span> {
        let Reach::Rows { before, after } = self.spec.reach else {
            return vec![Span {
                low: None,
                high: None,
            }];
        };
        // Rows a change takes away do not separate the others from it: walk
        // only over rows that are there both before and after.
        let staying = |entry: &Entry, count: i64| {
            let removed = changes.get(entry).map_or(0, |diff| (-diff).max(0));
            (count - removed).max(0) as u64
        };
        let mut spans: Vec<Span> = Vec::new();
        for entry in changes.keys() {
            let span = Span {
                low: walk(partition.range(..entry).rev(), after, entry, staying),
                high: walk(
                    partition.range((Bound::Excluded(entry), Bound::Unbounded)),
                    before,
                    entry,
                    staying,
                ),
            };
            match spans.last_mut() {
                Some(last) if overlaps(last, &span) => last.high = span.high,
                _ => spans.push(span),
            }
        }
        spans
    }

    /// Adds `sign` × each result row of `spans` to `difference`.
    fn results(
        &self,
        partition: &Partition,
        spans: &[Span],
        sign: i64,
        difference: &mut HashMap<ResultRow, i64>,
    ) -> Result<()> {
        let (before, after) = match self.spec.reach {
            Reach::Rows { before, after } => (before, after),
            Reach::Partition => (0, 0),
        };
        let counted = |_: &Entry, count: i64| count.max(0) as u64;
        for span in spans {
            // The rows the span's results read: `before` more ahead of it,
            // `after` more behind.
            let context_low = match &span.low {
                Some(low) => walk(partition.range(..low).rev(), before, low, counted),
                None => None,
            };
            let context_high = match &span.high {
                Some(high) => walk(
                    partition.range((Bound::Excluded(high), Bound::Unbounded)),
                    after,
                    high,
                    counted,
                ),
                None => None,
            };
            let range = (bound(&context_low), bound(&context_high));
            let mut rows: Vec<&[u8]> = Vec::new();
            let mut inside: Vec<u32> = Vec::new();
            for (entry, count) in partition.range::<Entry, _>(range) {
                for _ in 0..(*count).max(0) {
                    if span.contains(entry) {
                        inside.push(rows.len() as u32);
                    }
                    rows.push(&entry.1);
                }
            }
            if inside.is_empty() {
                continue;
            }
            let results = self.evaluate(&rows, &inside)?;
            for (position, &index) in inside.iter().enumerate() {
                let key = (
                    rows[index as usize].into(),
                    results.row(position).data().into(),
                );
                *difference.entry(key).or_default() += sign;
            }
        }
        Ok(())
    }

    /// The functions' results for the rows at `inside` of `rows` (a slice
    /// of one partition, in order).
    fn evaluate(&self, rows: &[&[u8]], inside: &[u32]) -> Result<datafusion::arrow::row::Rows> {
        let parser = self.row_converter.parser();
        let columns = self
            .row_converter
            .convert_rows(rows.iter().map(|row| parser.parse(row)))?;
        let batch = RecordBatch::try_new(self.input_schema.clone(), columns)?;
        let indices = UInt32Array::from(inside.to_vec());
        let inputs = self.input_schema.fields().len();
        let results = self
            .spec
            .functions
            .iter()
            .enumerate()
            .map(|(index, function)| {
                let result = take(&function.evaluate(&batch)?, &indices, None)?;
                // The plan may type a result wider than DataFusion computes
                // it (`sum(int)`: the plan coerces the argument twice).
                let expected = self.spec.schema.field(inputs + index).data_type();
                Ok(match result.data_type() == expected {
                    true => result,
                    false => cast(&result, expected)?,
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(self.result_converter.convert_columns(&results)?)
    }

    fn emit(&self, difference: HashMap<ResultRow, i64>, output: &mut Output) -> Result<()> {
        let mut changes: Vec<(ResultRow, i64)> = difference
            .into_iter()
            .filter(|(_, diff)| *diff != 0)
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        // Retractions first, then in row order: a stable output.
        changes.sort_by(|(a_row, a_diff), (b_row, b_diff)| {
            (a_diff.signum(), a_row).cmp(&(b_diff.signum(), b_row))
        });
        let expanded: Vec<(&ResultRow, i64)> = changes
            .iter()
            .flat_map(|(row, diff)| {
                std::iter::repeat_n((row, diff.signum()), diff.unsigned_abs() as usize)
            })
            .collect();
        let rows = self.row_converter.parser();
        let results = self.result_converter.parser();
        let mut columns = self
            .row_converter
            .convert_rows(expanded.iter().map(|((row, _), _)| rows.parse(row)))?;
        columns.extend(
            self.result_converter.convert_rows(
                expanded
                    .iter()
                    .map(|((_, result), _)| results.parse(result)),
            )?,
        );
        let diffs: Int64Array = expanded.iter().map(|(_, diff)| Some(*diff)).collect();
        output.push(Message::batch(Chunk {
            rows: RecordBatch::try_new(self.spec.schema.clone(), columns)?,
            diffs: Some(diffs),
            watermarks: None,
        }));
        Ok(())
    }
}

/// The entry `steps` rows away from `from` along `entries` (rows counted by
/// `count`); `from` itself for 0 steps, None when the partition ends first.
fn walk<'a>(
    entries: impl Iterator<Item = (&'a Entry, &'a i64)>,
    steps: u64,
    from: &Entry,
    count: impl Fn(&Entry, i64) -> u64,
) -> Option<Entry> {
    if steps == 0 {
        return Some(from.clone());
    }
    let mut walked = 0;
    for (entry, copies) in entries {
        walked += count(entry, *copies);
        if walked >= steps {
            return Some(entry.clone());
        }
    }
    None
}

fn overlaps(earlier: &Span, later: &Span) -> bool {
    match (&earlier.high, &later.low) {
        (Some(high), Some(low)) => low <= high,
        _ => true,
    }
}

fn bound(end: &Option<Entry>) -> Bound<&Entry> {
    end.as_ref().map_or(Bound::Unbounded, Bound::Included)
}

impl Operator for OverWindowOperator {
    fn name(&self) -> &'static str {
        "OverWindow"
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        let batch = &chunk.rows;
        let evaluate = |exprs: Vec<&Arc<dyn PhysicalExpr>>| -> Result<Vec<ArrayRef>> {
            exprs
                .into_iter()
                .map(|expr| Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?))
                .collect()
        };
        let partitions = evaluate(self.spec.partition.iter().collect())?;
        let partitions = keys(&self.partition_converter, &partitions)?;
        let order = evaluate(self.spec.order.iter().map(|sort| &sort.expr).collect())?;
        let order = keys(&self.order_converter, &order)?;
        let rows = self.row_converter.convert_columns(batch.columns())?;
        let mut difference = HashMap::new();
        for (key, indices) in touched(&partitions, chunk.num_rows()) {
            let mut changes: BTreeMap<Entry, i64> = BTreeMap::new();
            for index in indices {
                let entry = (key_of(&order, index).into(), rows.row(index).data().into());
                *changes.entry(entry).or_default() += chunk.diff(index);
            }
            changes.retain(|_, diff| *diff != 0);
            if changes.is_empty() {
                continue;
            }
            let mut partition = self.partitions.checkout(key)?;
            let spans = self.spans(&partition, &changes);
            self.results(&partition, &spans, -1, &mut difference)?;
            for (entry, diff) in changes {
                self.partitions.note(key, &entry, diff);
                apply(&mut partition, entry, diff);
            }
            self.results(&partition, &spans, 1, &mut difference)?;
            self.partitions.checkin(key, partition);
        }
        self.partitions.settle()?;
        self.emit(difference, output)
    }

    /// Watermarks stop here: a row's results change when its neighbours
    /// do, whatever its time.
    fn on_watermark(&mut self, _: i64, _: Context, _: &mut Output) -> Result<()> {
        Ok(())
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        self.partitions.checkpoint(state)
    }

    fn attach(&mut self, space: SpillSpace) {
        self.partitions.attach(space);
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        self.partitions.restore(state, "OverWindow")
    }

    fn memory_bytes(&self) -> usize {
        self.partitions.memory_bytes()
    }

    fn commit(&mut self) {
        self.partitions.commit();
    }

    /// Its only state is the partitions, which take their changes back
    /// (false: the group outgrew their log; the view is rebuilt).
    fn rollback(&mut self) -> Result<bool> {
        self.partitions.rollback()
    }
}

#[cfg(test)]
#[path = "over_window_tests.rs"]
mod tests;
