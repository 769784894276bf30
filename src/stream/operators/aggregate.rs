//! GROUP BY over a stream, with DataFusion's accumulators per group. A
//! windowed aggregate keeps its state as bins keyed by window end; a bin is
//! complete when the watermark reaches its end. Then its rows are emitted
//! (EMIT ON WINDOW CLOSE) and its state dropped. Rows arriving under a
//! watermark at or past their window's end are late: dropped and counted.
//! Without a window there is one bin that never closes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, filter, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::aggregate_state::{decode_bin, encode_bin};
use super::window::{nanoseconds, WindowSpec};
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::{decode_i64, encode_i64, StateReader, StateWriter};
use crate::stream::message::{without_nulls, Chunk, Message};
use crate::stream::operator::{Operator, Output};
use crate::stream::EmitMode;

/// One aggregate call and its optional FILTER (WHERE ...).
pub struct AggregateCall {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

/// Which group column is the window (its start or its end) and its shape.
#[derive(Debug, Clone, Copy)]
pub struct WindowGroup {
    pub column: usize,
    pub is_end: bool,
    pub spec: WindowSpec,
}

/// One window's groups: group key (row format) -> accumulators.
pub type Bin = HashMap<Vec<u8>, Vec<Box<dyn Accumulator>>>;

/// A window bin's key when the aggregate has no window.
const UNWINDOWED: i64 = i64::MAX;

pub struct AggregateOperator {
    groups: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    window: Option<WindowGroup>,
    emit: EmitMode,
    /// Group columns then aggregate values.
    schema: SchemaRef,
    converter: RowConverter,
    /// Window end -> group key (row format) -> accumulators.
    bins: BTreeMap<i64, Bin>,
    watermark: Option<i64>,
    late_rows: Arc<AtomicU64>,
    /// Bins changed and bins closed since the last checkpoint: a
    /// checkpoint writes only those.
    changed: BTreeSet<i64>,
    closed: BTreeSet<i64>,
}

/// Rows to emit: group key, aggregate values, diff.
type Emitted = Vec<(Vec<u8>, Vec<ScalarValue>, i64)>;

impl AggregateOperator {
    pub fn new(
        groups: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        window: Option<WindowGroup>,
        emit: EmitMode,
        schema: SchemaRef,
        late_rows: Arc<AtomicU64>,
    ) -> Result<Self> {
        let fields = schema.fields()[..groups.len()]
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        Ok(AggregateOperator {
            groups,
            calls,
            window,
            emit,
            schema,
            converter: RowConverter::new(fields)?,
            bins: BTreeMap::new(),
            watermark: None,
            late_rows,
            changed: BTreeSet::new(),
            closed: BTreeSet::new(),
        })
    }

    /// Window end of every row (UNWINDOWED without a window; None for a
    /// NULL window column).
    fn window_ends(&self, keys: &[ArrayRef], rows: usize) -> Result<Vec<Option<i64>>> {
        let Some(window) = &self.window else {
            return Ok(vec![Some(UNWINDOWED); rows]);
        };
        let column = nanoseconds(&keys[window.column])?;
        let shift = if window.is_end {
            0
        } else {
            window.spec.size_ns
        };
        Ok(column
            .iter()
            .map(|value| value.map(|v| v + shift))
            .collect())
    }

    fn evaluate_arguments(
        &self,
        chunk: &Chunk,
    ) -> Result<Vec<(Vec<ArrayRef>, Option<BooleanArray>)>> {
        let rows = chunk.num_rows();
        self.calls
            .iter()
            .map(|call| {
                let arguments = call
                    .function
                    .expressions()
                    .iter()
                    .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                let mask = match &call.filter {
                    Some(predicate) => {
                        let mask = predicate.evaluate(&chunk.rows)?.into_array(rows)?;
                        Some(without_nulls(mask.as_boolean()))
                    }
                    None => None,
                };
                Ok((arguments, mask))
            })
            .collect()
    }

    fn emit_rows(&self, emitted: Emitted, output: &mut Output) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let parser = self.converter.parser();
        let keys = emitted.iter().map(|(key, _, _)| parser.parse(key));
        // Without GROUP BY there is one group and no key columns.
        let mut columns = if self.groups.is_empty() {
            Vec::new()
        } else {
            self.converter.convert_rows(keys)?
        };
        for (index, field) in self.schema.fields()[self.groups.len()..].iter().enumerate() {
            let values = emitted.iter().map(|(_, values, _)| values[index].clone());
            let column = ScalarValue::iter_to_array(values)?;
            columns.push(if column.data_type() == field.data_type() {
                column
            } else {
                cast(&column, field.data_type())?
            });
        }
        let diffs = Int64Array::from_iter_values(emitted.iter().map(|(_, _, diff)| *diff));
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        let all_inserts = diffs.values().iter().all(|diff| *diff == 1);
        output.push(Message::batch(Chunk {
            rows,
            diffs: (!all_inserts).then_some(diffs),
            watermarks: None,
        }));
        Ok(())
    }
}

/// The checkpoint entry of the bin ending at `end`.
fn bin_name(end: i64) -> Vec<u8> {
    let mut name = b"bin/".to_vec();
    name.extend_from_slice(&end.to_be_bytes());
    name
}

/// Fresh accumulators for a new group.
pub fn new_accumulators(calls: &[AggregateCall]) -> Result<Vec<Box<dyn Accumulator>>> {
    calls
        .iter()
        .map(|call| Ok(call.function.create_accumulator()?))
        .collect()
}

fn evaluate(accumulators: &mut [Box<dyn Accumulator>]) -> Result<Vec<ScalarValue>> {
    accumulators
        .iter_mut()
        .map(|accumulator| Ok(accumulator.evaluate()?))
        .collect()
}

/// The arguments of one aggregate call for the rows at `indices`.
fn arguments_for(
    arguments: &(Vec<ArrayRef>, Option<BooleanArray>),
    indices: &UInt32Array,
) -> Result<Vec<ArrayRef>> {
    let (columns, mask) = arguments;
    let mask = match mask {
        Some(mask) => Some(take(mask, indices, None)?),
        None => None,
    };
    columns
        .iter()
        .map(|column| {
            let taken = take(column.as_ref(), indices, None)?;
            Ok(match &mask {
                Some(mask) => filter(&taken, mask.as_boolean())?,
                None => taken,
            })
        })
        .collect()
}

impl Operator for AggregateOperator {
    fn name(&self) -> &'static str {
        "Aggregate"
    }

    fn checkpoint(&mut self, state: &mut StateWriter) -> Result<()> {
        for end in std::mem::take(&mut self.closed) {
            state.delete(&bin_name(end));
        }
        for end in std::mem::take(&mut self.changed) {
            if let Some(bin) = self.bins.get_mut(&end) {
                state.put(&bin_name(end), encode_bin(bin)?);
            }
        }
        if let Some(watermark) = self.watermark {
            state.put(b"watermark", encode_i64(watermark));
        }
        Ok(())
    }

    fn restore(&mut self, state: &StateReader) -> Result<()> {
        self.watermark = state.get(b"watermark").and_then(decode_i64);
        for (name, value) in state.with_prefix(b"bin/") {
            let end = decode_i64(&name[4..])
                .ok_or_else(|| WeirError::internal("malformed checkpoint key"))?;
            self.bins.insert(end, decode_bin(&self.calls, value)?);
        }
        Ok(())
    }

    fn on_batch(&mut self, chunk: Chunk, output: &mut Output) -> Result<()> {
        let rows = chunk.num_rows();
        let keys = self
            .groups
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let key_rows = self.converter.convert_columns(&keys)?;
        let ends = self.window_ends(&keys, rows)?;
        let arguments = self.evaluate_arguments(&chunk)?;

        // Rows of this chunk per (window end, group key), in first-seen order.
        let mut positions: HashMap<(i64, &[u8]), usize> = HashMap::new();
        let mut members: Vec<(i64, &[u8], Vec<u32>)> = Vec::new();
        let mut late = 0;
        for (row, end) in ends.iter().enumerate() {
            let Some(end) = *end else { continue };
            if chunk.diff(row) != 1 {
                return Err(WeirError::internal("an aggregate received a retraction"));
            }
            if self.window.is_some()
                && chunk
                    .watermark_before(row, self.watermark)
                    .is_some_and(|watermark| watermark >= end)
            {
                late += 1;
                continue;
            }
            let key = if self.groups.is_empty() {
                &[][..]
            } else {
                key_rows.row(row).data()
            };
            let position = *positions.entry((end, key)).or_insert_with(|| {
                members.push((end, key, Vec::new()));
                members.len() - 1
            });
            members[position].2.push(row as u32);
        }
        self.late_rows.fetch_add(late, Ordering::Relaxed);

        let mut emitted = Vec::new();
        for (end, key, indices) in members {
            self.changed.insert(end);
            let indices = UInt32Array::from(indices);
            let bin = self.bins.entry(end).or_default();
            let existed = bin.contains_key(key);
            if !existed {
                bin.insert(key.to_vec(), new_accumulators(&self.calls)?);
            }
            let accumulators = bin
                .get_mut(key)
                .ok_or_else(|| WeirError::internal("a group vanished"))?;
            if self.emit == EmitMode::OnUpdate && existed {
                emitted.push((key.to_vec(), evaluate(accumulators)?, -1));
            }
            for (accumulator, arguments) in accumulators.iter_mut().zip(&arguments) {
                accumulator.update_batch(&arguments_for(arguments, &indices)?)?;
            }
            if self.emit == EmitMode::OnUpdate {
                emitted.push((key.to_vec(), evaluate(accumulators)?, 1));
            }
        }
        self.emit_rows(emitted, output)
    }

    fn on_watermark(&mut self, watermark_ns: i64, output: &mut Output) -> Result<()> {
        if self
            .watermark
            .is_some_and(|current| current >= watermark_ns)
        {
            return Ok(());
        }
        self.watermark = Some(watermark_ns);
        let Some(window) = self.window else {
            return Ok(());
        };
        // Bins with end <= watermark are complete.
        let open = self.bins.split_off(&watermark_ns.saturating_add(1));
        let complete = std::mem::replace(&mut self.bins, open);
        for end in complete.keys() {
            self.changed.remove(end);
            self.closed.insert(*end);
        }
        if self.emit == EmitMode::OnWindowClose {
            let mut emitted = Vec::new();
            for (_, bin) in complete {
                let mut groups: Vec<_> = bin.into_iter().collect();
                groups.sort_by(|a, b| a.0.cmp(&b.0));
                for (key, mut accumulators) in groups {
                    let values = evaluate(&mut accumulators)?;
                    emitted.push((key, values, 1));
                }
            }
            self.emit_rows(emitted, output)?;
            // Results are final, so the output has a watermark: every later
            // row's window starts at or after the earliest open window.
            let start = window.spec.earliest_open_start(watermark_ns);
            let shift = if window.is_end {
                window.spec.size_ns
            } else {
                0
            };
            output.push(Message::Watermark(start + shift));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::operators::window::WindowKind;
    use datafusion::arrow::array::{StringArray, TimestampNanosecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    fn time() -> DataType {
        DataType::Timestamp(TimeUnit::Nanosecond, None)
    }

    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("window_start", time(), true),
        ]))
    }

    /// COUNT(*) per (window_start, k) over 10 ns TUMBLE windows.
    fn operator(emit: EmitMode) -> (AggregateOperator, Arc<AtomicU64>) {
        let input = input_schema();
        let count = AggregateExprBuilder::new(count_udaf(), vec![col("k", &input).unwrap()])
            .schema(input.clone())
            .alias("n")
            .build()
            .unwrap();
        let output = Arc::new(Schema::new(vec![
            Field::new("window_start", time(), true),
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let late = Arc::new(AtomicU64::new(0));
        let window = WindowGroup {
            column: 0,
            is_end: false,
            spec: WindowSpec {
                kind: WindowKind::Tumble,
                size_ns: 10,
                slide_ns: 10,
                offset_ns: 0,
            },
        };
        let groups = vec![
            col("window_start", &input).unwrap(),
            col("k", &input).unwrap(),
        ];
        let calls = vec![AggregateCall {
            function: Arc::new(count),
            filter: None,
        }];
        let operator =
            AggregateOperator::new(groups, calls, Some(window), emit, output, late.clone())
                .unwrap();
        (operator, late)
    }

    /// Rows `(k, window_start)` with the watermark each arrived under.
    fn chunk(rows: &[(&str, i64)], watermarks: &[Option<i64>]) -> Chunk {
        let keys: StringArray = rows.iter().map(|(k, _)| Some(*k)).collect();
        let starts = TimestampNanosecondArray::from_iter_values(rows.iter().map(|(_, s)| *s));
        Chunk {
            rows: RecordBatch::try_new(input_schema(), vec![Arc::new(keys), Arc::new(starts)])
                .unwrap(),
            diffs: None,
            watermarks: Some(Int64Array::from(watermarks.to_vec())),
        }
    }

    /// Emitted rows as `(window_start, k, n, diff)`.
    fn rows(output: &Output) -> Vec<(i64, String, i64, i64)> {
        let mut all = Vec::new();
        for message in output {
            let Message::Batch(chunk) = message else {
                continue;
            };
            let starts = nanoseconds(chunk.rows.column(0)).unwrap();
            let keys = chunk.rows.column(1).as_string::<i32>();
            let counts = chunk.rows.column(2).as_primitive::<Int64Type>();
            for row in 0..chunk.num_rows() {
                all.push((
                    starts.value(row),
                    keys.value(row).to_string(),
                    counts.value(row),
                    chunk.diff(row),
                ));
            }
        }
        all
    }

    #[test]
    fn windows_emit_once_when_the_watermark_passes_their_end() {
        let (mut aggregate, late) = operator(EmitMode::OnWindowClose);
        let mut output = Vec::new();
        let input = chunk(
            &[("a", 0), ("b", 0), ("a", 0), ("a", 10)],
            &[None, Some(1), Some(2), Some(3)],
        );
        aggregate.on_batch(input, &mut output).unwrap();
        assert!(output.is_empty(), "nothing is final yet");
        aggregate.on_watermark(10, &mut output).unwrap();
        assert_eq!(
            rows(&output),
            vec![(0, "a".into(), 2, 1), (0, "b".into(), 1, 1)]
        );
        // The output watermark is the start of the earliest open window.
        assert!(matches!(output.last(), Some(Message::Watermark(10))));

        // A row for the closed window arriving under watermark 10 is late.
        let mut output = Vec::new();
        aggregate
            .on_batch(
                chunk(&[("a", 0), ("a", 10)], &[Some(10), Some(10)]),
                &mut output,
            )
            .unwrap();
        assert_eq!(late.load(Ordering::Relaxed), 1);
        aggregate.on_watermark(25, &mut output).unwrap();
        assert_eq!(rows(&output), vec![(10, "a".into(), 2, 1)]);
        assert!(aggregate.bins.is_empty(), "closed windows leave no state");
    }

    #[test]
    fn a_restored_checkpoint_continues_like_the_original() {
        use crate::state::{SledStore, StateStore, WriteBatch};
        use crate::stream::checkpoint::{StateReader, StateWriter};
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let checkpoint = |aggregate: &mut AggregateOperator| {
            let mut batch = WriteBatch::new();
            aggregate
                .checkpoint(&mut StateWriter::new(b"op/".to_vec(), &mut batch))
                .unwrap();
            store.commit(batch).unwrap();
        };
        let (mut original, _) = operator(EmitMode::OnWindowClose);
        let mut ignored = Vec::new();
        let first = chunk(&[("a", 0), ("b", 10), ("a", 20)], &[None, Some(1), Some(2)]);
        original.on_batch(first, &mut ignored).unwrap();
        original.on_watermark(10, &mut ignored).unwrap();
        checkpoint(&mut original);
        original
            .on_batch(chunk(&[("b", 20)], &[Some(10)]), &mut ignored)
            .unwrap();
        // Only the changed bin is rewritten; the closed one is deleted.
        checkpoint(&mut original);

        let entries = store
            .scan_prefix(b"op/")
            .unwrap()
            .into_iter()
            .map(|(key, value)| (key[3..].to_vec(), value))
            .collect();
        let (mut restored, _) = operator(EmitMode::OnWindowClose);
        restored.restore(&StateReader { entries }).unwrap();
        let (mut expected, mut actual) = (Vec::new(), Vec::new());
        original.on_watermark(40, &mut expected).unwrap();
        restored.on_watermark(40, &mut actual).unwrap();
        assert_eq!(rows(&actual), rows(&expected));
        assert_eq!(rows(&actual).len(), 3);
    }

    #[test]
    fn updates_retract_the_previous_row() {
        let (mut aggregate, _) = operator(EmitMode::OnUpdate);
        let mut output = Vec::new();
        aggregate
            .on_batch(chunk(&[("a", 0)], &[None]), &mut output)
            .unwrap();
        aggregate
            .on_batch(
                chunk(&[("a", 0), ("a", 0)], &[Some(0), Some(0)]),
                &mut output,
            )
            .unwrap();
        assert_eq!(
            rows(&output),
            vec![
                (0, "a".into(), 1, 1),
                (0, "a".into(), 1, -1),
                (0, "a".into(), 3, 1)
            ]
        );
    }
}
