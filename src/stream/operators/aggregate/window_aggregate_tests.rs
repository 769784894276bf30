//! Unit tests of the vectorised window aggregate: checked against the
//! row-at-a-time `AggregateOperator` (EMIT ON WINDOW CLOSE, late rows
//! dropped) on random input, with checkpoints restored into fresh operators
//! and failed write groups undone at random moments.

use super::*;
use crate::state::{SledStore, StateStore};
use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
use crate::stream::operator::Stage;
use crate::stream::operators::aggregate::AggregateOperator;
use crate::stream::operators::window_spec::{WindowKind, WindowSpec};
use crate::stream::time_columns::nanoseconds;
use crate::stream::{EmitMode, LatePolicy, LateRows};
use crate::testing::Random;
use datafusion::arrow::array::{Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::median::median_udaf;
use datafusion::functions_aggregate::min_max::min_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::{AggregateUDF, Operator as BinaryOperator};
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{binary, col, lit};
use std::sync::atomic::{AtomicU64, Ordering};

fn time() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("window_start", time(), true),
        Field::new("window_end", time(), true),
    ]))
}

/// count(v), count(DISTINCT v), sum(v) FILTER (WHERE v > 0), min(k),
/// median(v) (no groups accumulator: DataFusion's adapter).
fn calls() -> Vec<AggregateCall> {
    let input = input_schema();
    let v = col("v", &input).unwrap();
    let k = col("k", &input).unwrap();
    let call = |function: Arc<AggregateUDF>, argument, distinct: bool, name: &str| {
        let builder = AggregateExprBuilder::new(function, vec![argument])
            .schema(input.clone())
            .alias(name);
        let builder = if distinct {
            builder.distinct()
        } else {
            builder
        };
        Arc::new(builder.build().unwrap())
    };
    let positive = binary(v.clone(), BinaryOperator::Gt, lit(0i64), &input).unwrap();
    vec![
        AggregateCall::new(call(count_udaf(), v.clone(), false, "n"), None),
        AggregateCall::new(call(count_udaf(), v.clone(), true, "distinct_v"), None),
        AggregateCall::new(
            call(sum_udaf(), v.clone(), false, "positive_sum"),
            Some(positive),
        ),
        AggregateCall::new(call(min_udaf(), k, false, "least_k"), None),
        AggregateCall::new(call(median_udaf(), v, false, "median_v"), None),
    ]
}

/// The window spec: HOP with 10 ns slide and 30 ns size (rows of a batch
/// fall in several windows).
fn window() -> WindowGroup {
    WindowGroup {
        column: 0,
        is_end: false,
        spec: WindowSpec {
            kind: WindowKind::Hop,
            size_ns: 30,
            slide_ns: 10,
            offset_ns: 0,
        },
        other: Some(2),
    }
}

fn parts() -> (Vec<Arc<dyn PhysicalExpr>>, Vec<AggregateCall>, SchemaRef) {
    let input = input_schema();
    let calls = calls();
    let mut fields = vec![
        Field::new("window_start", time(), true),
        Field::new("k", DataType::Utf8, true),
        Field::new("window_end", time(), true),
    ];
    fields.extend(
        calls
            .iter()
            .map(|call| call.function.field().as_ref().clone()),
    );
    let groups = vec![
        col("window_start", &input).unwrap(),
        col("k", &input).unwrap(),
        col("window_end", &input).unwrap(),
    ];
    (groups, calls, Arc::new(Schema::new(fields)))
}

fn handling(late: &Arc<AtomicU64>) -> LateHandling {
    LateHandling {
        policy: LatePolicy::Drop,
        rows: LateRows::new(late.clone(), false),
        side_output: None,
    }
}

fn vectorised(late: &Arc<AtomicU64>, partitions: usize) -> Stage<WindowAggregateOperator> {
    let (groups, calls, schema) = parts();
    let late = handling(late);
    let operator = WindowAggregateOperator::new(groups, calls, window(), schema, late, partitions);
    Stage::new(Box::new(operator.unwrap()))
}

fn reference(late: &Arc<AtomicU64>) -> Stage<AggregateOperator> {
    let (groups, calls, schema) = parts();
    let emit = EmitMode::OnWindowClose;
    let operator = AggregateOperator::new(
        groups,
        calls,
        Some(window()),
        emit,
        schema,
        handling(late),
        false,
    );
    Stage::new(Box::new(operator.unwrap()))
}

/// Emitted rows as sorted text lines (with their diffs).
fn lines(output: &Output) -> Vec<String> {
    let mut all = Vec::new();
    for message in output {
        match message {
            Message::Batch(chunk) => {
                for row in 0..chunk.num_rows() {
                    let cells: Vec<String> = chunk
                        .rows
                        .columns()
                        .iter()
                        .map(|column| array_value_to_string(column, row).unwrap())
                        .collect();
                    all.push(format!("{} x{}", cells.join("|"), chunk.diff(row)));
                }
            }
            Message::Watermark(watermark) => all.push(format!("watermark {watermark}")),
            Message::Barrier(_) | Message::Fire(_) => {}
        }
    }
    all.sort();
    all
}

/// A batch of rows around `now`, some behind the watermark, as the window
/// operator sends them: one row per window the event falls in.
fn random_chunk(random: &mut Random, now: i64, watermark: Option<i64>) -> Chunk {
    let rows = 1 + random.below(40) as usize;
    let mut keys = Vec::new();
    let mut values = Vec::new();
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    for _ in 0..rows {
        let event = now - random.below(25) as i64;
        let key = ["a", "b", "c", "d"][random.below(4) as usize];
        let value = random.below(12) as i64 - 4;
        for (start, end) in window().spec.windows(event).unwrap() {
            keys.push((random.below(10) > 0).then_some(key));
            values.push((value != 7).then_some(value));
            starts.push(start);
            ends.push(end);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(keys)),
        Arc::new(Int64Array::from(values)),
        Arc::new(TimestampNanosecondArray::from_iter_values(starts)),
        Arc::new(TimestampNanosecondArray::from_iter_values(ends)),
    ];
    let rows = RecordBatch::try_new(input_schema(), columns).unwrap();
    let watermarks = Int64Array::from(vec![watermark; rows.num_rows()]);
    Chunk {
        rows,
        diffs: None,
        watermarks: Some(watermarks),
    }
}

/// Checkpoints `operator` into `store` and passes the barrier (what the
/// operator holds back goes out before it, into `output`); when `restore`
/// is a partition count, replaces it by a fresh one with that many,
/// restored from what the store holds.
fn checkpoint(
    operator: &mut Stage<WindowAggregateOperator>,
    store: &SledStore,
    late: &Arc<AtomicU64>,
    restore: Option<usize>,
    output: &mut Output,
) {
    commit_checkpoint(operator, store);
    operator.on_barrier(1, output).unwrap();
    let Some(partitions) = restore else {
        return;
    };
    let mut restored = vectorised(late, partitions);
    restored.restore(&stored_state(store)).unwrap();
    *operator = restored;
}

/// Now and then many chunks at once: big enough for the partitions to
/// work on their threads while the operator goes on.
fn random_input(random: &mut Random, now: i64, watermark: Option<i64>) -> Chunk {
    if random.below(4) > 0 {
        return random_chunk(random, now, watermark);
    }
    let chunks: Vec<Chunk> = (0..60)
        .map(|_| random_chunk(random, now, watermark))
        .collect();
    let rows: Vec<RecordBatch> = chunks.iter().map(|chunk| chunk.rows.clone()).collect();
    let rows = datafusion::arrow::compute::concat_batches(&input_schema(), &rows).unwrap();
    let watermarks = Int64Array::from(vec![watermark; rows.num_rows()]);
    Chunk {
        rows,
        diffs: None,
        watermarks: Some(watermarks),
    }
}

#[test]
fn equals_the_row_at_a_time_aggregate_across_checkpoints() {
    for seed in 1..=20u64 {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        let (late, reference_late) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // 1 to 3 partitions, and a restore may change the number.
        let partitions = 1 + seed as usize % 3;
        let mut operator = vectorised(&late, partitions);
        let mut expected = reference(&reference_late);
        let mut watermark = None;
        let (mut actual_output, mut expected_output) = (Vec::new(), Vec::new());
        for step in 0..200i64 {
            let now = step * 3;
            let chunk = random_input(&mut random, now, watermark);
            operator
                .on_batch(chunk.clone(), &mut actual_output)
                .unwrap();
            expected.on_batch(chunk, &mut expected_output).unwrap();
            if random.below(3) == 0 {
                let next = now - 10;
                watermark = Some(watermark.map_or(next, |w: i64| w.max(next)));
                operator.on_watermark(next, &mut actual_output).unwrap();
                expected.on_watermark(next, &mut expected_output).unwrap();
            }
            if random.below(5) == 0 {
                // Half the time the checkpointed operator goes on itself.
                let restore = (random.below(2) == 0).then(|| 1 + random.below(3) as usize);
                checkpoint(&mut operator, &store, &late, restore, &mut actual_output);
            }
            // The end of a write group: everything held back is out.
            if random.below(3) == 0 || step == 199 {
                actual_output.extend(operator.flush().unwrap());
                operator.commit();
                assert_eq!(
                    lines(&actual_output),
                    lines(&expected_output),
                    "seed {seed}, step {step}"
                );
                if random.below(2) == 0 {
                    fail_a_write_group(&mut operator, &mut random, &late, (now, watermark));
                }
            }
        }
        assert!(
            expected_output.len() > 50,
            "seed {seed}: too few windows closed"
        );
        let dropped = late.load(Ordering::Relaxed);
        assert_eq!(dropped, reference_late.load(Ordering::Relaxed));
        assert!(dropped > 0, "seed {seed}: no late rows were generated");
    }
}

/// A write group that fails: rows and watermarks (closing windows) go in,
/// what comes out is dropped, and the operator undoes the group (the
/// pipeline puts the late-row count back).
fn fail_a_write_group(
    operator: &mut Stage<WindowAggregateOperator>,
    random: &mut Random,
    late: &Arc<AtomicU64>,
    (now, watermark): (i64, Option<i64>),
) {
    let late_before = late.load(Ordering::Relaxed);
    let mut dropped = Vec::new();
    for _ in 0..1 + random.below(3) {
        let later = now + random.below(20) as i64;
        let chunk = random_input(random, later, watermark);
        operator.on_batch(chunk, &mut dropped).unwrap();
        if random.below(2) == 0 {
            let next = later - random.below(15) as i64;
            operator.on_watermark(next, &mut dropped).unwrap();
        }
    }
    if random.below(2) == 0 {
        dropped.extend(operator.flush().unwrap());
    }
    assert!(operator.rollback().unwrap());
    late.store(late_before, Ordering::Relaxed);
}

/// The order of what comes out: each closed window's rows before the
/// watermark that follows its close, as a downstream operator needs.
#[test]
fn rows_of_a_window_come_out_before_the_watermark_that_closed_it() {
    let late = Arc::new(AtomicU64::new(0));
    let mut operator = vectorised(&late, 2);
    let mut random = Random(5);
    let mut output = Vec::new();
    for step in 0..40i64 {
        let watermark = (step > 0).then(|| step * 3 - 13);
        let chunk = random_input(&mut random, step * 3, watermark);
        operator.on_batch(chunk, &mut output).unwrap();
        operator.on_watermark(step * 3 - 10, &mut output).unwrap();
    }
    output.extend(operator.flush().unwrap());
    let mut watermark = i64::MIN;
    let mut rows = 0;
    for message in &output {
        match message {
            Message::Watermark(next) => {
                assert!(*next >= watermark);
                watermark = *next;
            }
            Message::Batch(chunk) => {
                let starts = nanoseconds(chunk.rows.column(0)).unwrap();
                for start in starts.iter().flatten() {
                    assert!(
                        start >= watermark,
                        "a row of a window before the watermark: {start} < {watermark}"
                    );
                    rows += 1;
                }
            }
            Message::Barrier(_) | Message::Fire(_) => {}
        }
    }
    assert!(rows > 30, "{rows} rows");
}

#[test]
fn closed_windows_leave_no_state_and_no_checkpoint_entry() {
    let late = Arc::new(AtomicU64::new(0));
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut operator = vectorised(&late, 2);
    let mut random = Random(7);
    let mut output = Vec::new();
    for step in 0..50 {
        let chunk = random_chunk(&mut random, step * 3, None);
        operator.on_batch(chunk, &mut output).unwrap();
    }
    checkpoint(&mut operator, &store, &late, Some(2), &mut output);
    assert!(operator.memory_bytes() > 0);
    operator.on_watermark(1_000, &mut output).unwrap();
    output.extend(operator.flush().unwrap());
    // Until the write group commits, its undo keeps the closed windows.
    assert!(operator.memory_bytes() > 0);
    operator.commit();
    assert_eq!(operator.memory_bytes(), 0);
    checkpoint(&mut operator, &store, &late, Some(2), &mut output);
    let left: Vec<_> = store.scan_prefix(b"op/bin/").unwrap();
    assert!(left.is_empty(), "{} closed bins still stored", left.len());
}

/// Batches big enough to be added by several threads give the same windows
/// as one partition.
#[test]
fn partitions_on_threads_give_the_same_windows() {
    let (one_late, many_late) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut one = vectorised(&one_late, 1);
    let mut many = vectorised(&many_late, 4);
    let mut random = Random(11);
    let (mut one_output, mut many_output) = (Vec::new(), Vec::new());
    for step in 0..20i64 {
        let chunks: Vec<RecordBatch> = (0..200)
            .map(|i| random_chunk(&mut random, step * 30 + i / 10, None).rows)
            .collect();
        let rows = datafusion::arrow::compute::concat_batches(&input_schema(), &chunks).unwrap();
        assert!(rows.num_rows() > 2048, "big enough for threads");
        let chunk = Chunk::inserts(rows);
        one.on_batch(chunk.clone(), &mut one_output).unwrap();
        many.on_batch(chunk, &mut many_output).unwrap();
        one.on_watermark(step * 30 - 5, &mut one_output).unwrap();
        many.on_watermark(step * 30 - 5, &mut many_output).unwrap();
    }
    one_output.extend(one.flush().unwrap());
    many_output.extend(many.flush().unwrap());
    let expected = lines(&one_output);
    assert!(expected.len() > 100);
    assert_eq!(lines(&many_output), expected);
}
