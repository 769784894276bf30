//! The vectorised on-update aggregate against the row-level one, which
//! uses DataFusion's own accumulators: the same random rows (inserted and,
//! over a retracting input, taken back), windows closing, write groups
//! failing and checkpoints restored — each into the other operator's
//! format — must give the same changes, batch by batch.

use super::*;
use crate::state::SledStore;
use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
use crate::stream::operator::Stage;
use crate::stream::operators::window::WindowKind;
use crate::stream::{LatePolicy, LateRows};
use datafusion::arrow::array::{Float64Array, Int64Array, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::functions_aggregate::average::avg_udaf;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::{AggregateUDF, Operator as BinaryOperator};
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{binary, col, lit};
use retraction::Retraction;
use std::sync::atomic::AtomicU64;

fn time() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("window_start", time(), true),
    ]))
}

/// A test's shape: windowed or not, retracting or not.
#[derive(Clone, Copy, Debug)]
struct Shape {
    windowed: bool,
    retracting: bool,
}

fn call(
    function: Arc<AggregateUDF>,
    argument: Arc<dyn PhysicalExpr>,
    name: &str,
    distinct: bool,
) -> AggregateCall {
    let input = input_schema();
    let mut builder = AggregateExprBuilder::new(function, vec![argument])
        .schema(input)
        .alias(name);
    if distinct {
        builder = builder.distinct();
    }
    AggregateCall::new(Arc::new(builder.build().unwrap()), None)
}

fn calls(shape: Shape) -> Vec<AggregateCall> {
    let input = input_schema();
    let v = || col("v", &input).unwrap();
    let f = || col("f", &input).unwrap();
    let mut calls = vec![
        call(count_udaf(), v(), "n", false),
        call(sum_udaf(), v(), "total", false),
        call(avg_udaf(), f(), "mean", false),
    ];
    let positive = binary(v(), BinaryOperator::Gt, lit(0i64), &input).unwrap();
    let mut filtered = call(sum_udaf(), v(), "positive", false);
    filtered.filter = Some(positive);
    calls.push(filtered);
    if shape.retracting {
        for call in &mut calls {
            call.retraction = Retraction::Sliding;
        }
        let mut rows = call(count_udaf(), lit(1i64), "__weir_group_rows", false);
        rows.retraction = Retraction::Sliding;
        calls.push(rows);
    } else {
        calls.push(call(min_udaf(), v(), "least", false));
        calls.push(call(max_udaf(), v(), "most", false));
        calls.push(call(count_udaf(), v(), "kinds", true));
    }
    calls
}

fn window() -> WindowGroup {
    WindowGroup {
        column: 0,
        is_end: false,
        spec: WindowSpec {
            kind: WindowKind::Tumble,
            size_ns: 10,
            slide_ns: 10,
            offset_ns: 0,
        },
        other: None,
    }
}

/// Both operators' parts: groups, calls, window, output schema.
type Parts = (
    Vec<Arc<dyn PhysicalExpr>>,
    Vec<AggregateCall>,
    Option<WindowGroup>,
    SchemaRef,
);

fn parts(shape: Shape) -> Parts {
    let input = input_schema();
    let calls = calls(shape);
    let mut fields = Vec::new();
    let mut groups = Vec::new();
    if shape.windowed {
        groups.push(col("window_start", &input).unwrap());
        fields.push(Field::new("window_start", time(), true));
    }
    groups.push(col("k", &input).unwrap());
    fields.push(Field::new("k", DataType::Int64, true));
    for call in &calls {
        fields.push(call.function.field().as_ref().clone().with_nullable(true));
    }
    let window = shape.windowed.then(window);
    (groups, calls, window, Arc::new(Schema::new(fields)))
}

fn handling() -> LateHandling {
    LateHandling {
        policy: LatePolicy::Drop,
        rows: LateRows::new(Arc::new(AtomicU64::new(0)), false),
        side_output: None,
    }
}

fn vectorised(shape: Shape) -> Stage {
    let (groups, calls, window, schema) = parts(shape);
    assert!(group_states::all_supported(&calls).unwrap());
    let operator =
        UpdatingAggregateOperator::new(groups, calls, window, schema, handling(), shape.retracting)
            .unwrap();
    Stage::new(Box::new(operator))
}

fn row_level(shape: Shape) -> Stage {
    let (groups, calls, window, schema) = parts(shape);
    let operator = AggregateOperator::new(
        groups,
        calls,
        window,
        EmitMode::OnUpdate,
        schema,
        handling(),
        shape.retracting,
    )
    .unwrap();
    Stage::new(Box::new(operator))
}

/// Emitted rows as text with their diffs, sorted.
fn changes(output: &Output) -> Vec<String> {
    let mut all = Vec::new();
    for message in output {
        let Message::Batch(chunk) = message else {
            continue;
        };
        for row in 0..chunk.num_rows() {
            let values: Vec<String> = chunk
                .rows
                .columns()
                .iter()
                .map(|column| {
                    ScalarValue::try_from_array(column, row)
                        .unwrap()
                        .to_string()
                })
                .collect();
            all.push(format!("{} {:+}", values.join(","), chunk.diff(row)));
        }
    }
    all.sort();
    all
}

/// A small deterministic generator.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> i64 {
        (self.next() % bound) as i64
    }
}

type Row = (Option<i64>, Option<i64>, Option<f64>, i64);

fn chunk(rows: &[(Row, i64)], watermark: Option<i64>) -> Chunk {
    let keys: Int64Array = rows.iter().map(|((k, _, _, _), _)| *k).collect();
    let values: Int64Array = rows.iter().map(|((_, v, _, _), _)| *v).collect();
    let floats: Float64Array = rows.iter().map(|((_, _, f, _), _)| *f).collect();
    let starts = TimestampNanosecondArray::from_iter_values(rows.iter().map(|(row, _)| row.3));
    let diffs = Int64Array::from_iter_values(rows.iter().map(|(_, diff)| *diff));
    let all_inserts = diffs.values().iter().all(|diff| *diff == 1);
    Chunk {
        rows: RecordBatch::try_new(
            input_schema(),
            vec![
                Arc::new(keys),
                Arc::new(values),
                Arc::new(floats),
                Arc::new(starts),
            ],
        )
        .unwrap(),
        diffs: (!all_inserts).then_some(diffs),
        watermarks: Some(Int64Array::from(vec![watermark; rows.len()])),
    }
}

/// One operator and the store its checkpoints go to.
struct Tested {
    stage: Stage,
    store: SledStore,
    _directory: tempfile::TempDir,
}

impl Tested {
    fn new(stage: Stage) -> Self {
        let directory = tempfile::tempdir().unwrap();
        let store = SledStore::open(directory.path()).unwrap();
        Tested {
            stage,
            store,
            _directory: directory,
        }
    }
}

fn run(shape: Shape, seed: u64) {
    let mut random = Random(seed);
    let mut vectorised_side = Tested::new(vectorised(shape));
    let mut row_side = Tested::new(row_level(shape));
    // The rows the view holds (committed, and in the write group).
    let (mut committed, mut live): (Vec<Row>, Vec<Row>) = (Vec::new(), Vec::new());
    let mut watermark: Option<i64> = None;
    let mut compared = 0;
    for step in 0..400 {
        let base = step / 8 * 10;
        let mut rows = Vec::new();
        for _ in 0..1 + random.below(12) {
            if shape.retracting && !live.is_empty() && random.below(3) == 0 {
                let row = live.swap_remove(random.below(live.len() as u64) as usize);
                rows.push((row, -1));
                continue;
            }
            let key = match random.below(8) {
                0 => None,
                key => Some(key),
            };
            let value = (random.below(6) > 0).then(|| random.below(14) - 3);
            let float = (random.below(6) > 0).then(|| random.below(9) as f64);
            let start = if shape.windowed {
                base + random.below(3) * 10 - 10
            } else {
                0
            };
            let row = (key, value, float, start.max(0));
            live.push(row);
            rows.push((row, 1));
        }
        let input = chunk(&rows, watermark);
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        row_side
            .stage
            .on_batch(input.clone(), &mut expected)
            .unwrap();
        vectorised_side.stage.on_batch(input, &mut got).unwrap();
        assert_eq!(
            changes(&got),
            changes(&expected),
            "{shape:?} seed {seed} step {step}"
        );
        compared += expected.len();
        if shape.windowed && random.below(4) == 0 {
            let next = base - 10;
            if watermark.is_none_or(|w| next > w) {
                watermark = Some(next);
                row_side.stage.on_watermark(next, &mut expected).unwrap();
                vectorised_side.stage.on_watermark(next, &mut got).unwrap();
                // Rows of closed windows are never taken back.
                live.retain(|row| row.3 + 10 > next);
            }
        }
        match random.below(10) {
            0 | 1 => {
                assert!(row_side.stage.rollback().unwrap());
                assert!(vectorised_side.stage.rollback().unwrap());
                live = committed.clone();
                watermark = row_side.stage.watermark();
            }
            2 => {
                commit_checkpoint(&mut row_side.stage, &row_side.store);
                commit_checkpoint(&mut vectorised_side.stage, &vectorised_side.store);
                row_side.stage.commit();
                vectorised_side.stage.commit();
                committed = live.clone();
                // Each restored from the other's checkpoint.
                std::mem::swap(&mut row_side.store, &mut vectorised_side.store);
                std::mem::swap(&mut row_side._directory, &mut vectorised_side._directory);
                row_side.stage = row_level(shape);
                row_side
                    .stage
                    .restore(&stored_state(&row_side.store))
                    .unwrap();
                vectorised_side.stage = vectorised(shape);
                let state = stored_state(&vectorised_side.store);
                vectorised_side.stage.restore(&state).unwrap();
            }
            _ => {
                row_side.stage.commit();
                vectorised_side.stage.commit();
                committed = live.clone();
            }
        }
    }
    assert!(compared > 100, "{shape:?}: too few changes compared");
}

#[test]
fn the_vectorised_aggregate_changes_the_view_as_the_row_level_one_does() {
    for windowed in [false, true] {
        for retracting in [false, true] {
            for seed in 0..6 {
                run(
                    Shape {
                        windowed,
                        retracting,
                    },
                    seed,
                );
            }
        }
    }
}

/// A group whose rows all went comes back without what its float sum
/// kept (0.1 + 0.2 - 0.1 - 0.2 is not 0).
#[test]
fn an_emptied_group_starts_afresh() {
    let shape = Shape {
        windowed: false,
        retracting: true,
    };
    let mut stage = vectorised(shape);
    let row = |f: f64| (Some(1), Some(1), Some(f), 0);
    let steps = [
        vec![(row(0.1), 1), (row(0.2), 1)],
        vec![(row(0.1), -1), (row(0.2), -1)],
        vec![(row(0.3), 1)],
    ];
    let mut output = Vec::new();
    for rows in steps {
        output.clear();
        stage.on_batch(chunk(&rows, None), &mut output).unwrap();
    }
    assert_eq!(changes(&output), vec!["1,1,1,0.3,1,1 +1"]);
}

/// A write group past the undo bound keeps nothing more: if it fails, the
/// operator says it cannot undo it (its view is rebuilt from the
/// checkpoint); the next write group keeps its undo again.
#[test]
fn a_write_group_past_the_undo_bound_is_not_undone_in_place() {
    let shape = Shape {
        windowed: true,
        retracting: false,
    };
    let (groups, calls, window, schema) = parts(shape);
    let operator = UpdatingAggregateOperator::new(groups, calls, window, schema, handling(), false)
        .unwrap()
        .with_undo_limit(4 << 10);
    let mut stage = Stage::new(Box::new(operator));
    let row = |key: i64, start: i64| ((Some(key), Some(key), Some(1.0), start), 1);
    let small: Vec<_> = (0..4).map(|key| row(key, 0)).collect();
    stage
        .on_batch(chunk(&small, None), &mut Vec::new())
        .unwrap();
    assert!(
        stage.rollback().unwrap(),
        "a small group is undone in place"
    );
    let big: Vec<_> = (0..2_000).map(|key| row(key, 10)).collect();
    stage.on_batch(chunk(&big, None), &mut Vec::new()).unwrap();
    assert!(!stage.rollback().unwrap(), "a big group gave its undo up");
    stage
        .on_batch(chunk(&small, None), &mut Vec::new())
        .unwrap();
    assert!(stage.rollback().unwrap(), "the next group keeps its undo");
}

#[path = "updating_spill_tests.rs"]
mod spill;
