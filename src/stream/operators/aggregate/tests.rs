//! Unit tests of the aggregate operator: closing, lateness, checkpoints.

use super::*;
use crate::stream::operator::Stage;
use crate::stream::operators::window::WindowKind;
use crate::stream::{LatePolicy, LateRows};
use datafusion::arrow::array::{AsArray, Int64Array, StringArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;
use std::sync::atomic::{AtomicU64, Ordering};

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
fn operator(emit: EmitMode) -> (Stage<AggregateOperator>, Arc<AtomicU64>) {
    operator_with(emit, LatePolicy::Drop)
}

pub(super) fn operator_with(
    emit: EmitMode,
    policy: LatePolicy,
) -> (Stage<AggregateOperator>, Arc<AtomicU64>) {
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
        other: None,
    };
    let groups = vec![
        col("window_start", &input).unwrap(),
        col("k", &input).unwrap(),
    ];
    let calls = vec![AggregateCall::new(Arc::new(count), None)];
    let handling = LateHandling {
        policy,
        rows: LateRows::new(late.clone(), false),
        side_output: None,
    };
    let operator =
        AggregateOperator::new(groups, calls, Some(window), emit, output, handling, false).unwrap();
    (Stage::new(Box::new(operator)), late)
}

/// Rows `(k, window_start)` with the watermark each arrived under.
pub(super) fn chunk(rows: &[(&str, i64)], watermarks: &[Option<i64>]) -> Chunk {
    let keys: StringArray = rows.iter().map(|(k, _)| Some(*k)).collect();
    let starts = TimestampNanosecondArray::from_iter_values(rows.iter().map(|(_, s)| *s));
    Chunk {
        rows: RecordBatch::try_new(input_schema(), vec![Arc::new(keys), Arc::new(starts)]).unwrap(),
        diffs: None,
        watermarks: Some(Int64Array::from(watermarks.to_vec())),
    }
}

/// Emitted rows as `(window_start, k, n, diff)`.
pub(super) fn rows(output: &Output) -> Vec<(i64, String, i64, i64)> {
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
    assert!(
        aggregate.operator().bins.is_empty(),
        "closed windows leave no state"
    );
}

#[test]
fn a_restored_checkpoint_continues_like_the_original() {
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let checkpoint =
        |aggregate: &mut Stage<AggregateOperator>| commit_checkpoint(aggregate, &store);
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

    let (mut restored, _) = operator(EmitMode::OnWindowClose);
    restored.restore(&stored_state(&store)).unwrap();
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

#[test]
fn rows_within_the_allowed_lateness_correct_an_emitted_window() {
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 20,
    };
    let (mut aggregate, late) = operator_with(EmitMode::OnWindowClose, policy);
    let mut output = Vec::new();
    aggregate
        .on_batch(chunk(&[("a", 0)], &[None]), &mut output)
        .unwrap();
    aggregate.on_watermark(10, &mut output).unwrap();
    assert_eq!(rows(&output), vec![(0, "a".into(), 1, 1)]);
    // The output watermark leaves room for corrections.
    assert!(matches!(output.last(), Some(Message::Watermark(w)) if *w <= -10));

    // 15 ns late: a correction (retraction, then the new row).
    let mut output = Vec::new();
    let late_row = chunk(&[("a", 0), ("b", 0)], &[Some(25), Some(25)]);
    aggregate.on_batch(late_row, &mut output).unwrap();
    assert_eq!(
        rows(&output),
        vec![
            (0, "a".into(), 1, -1),
            (0, "a".into(), 2, 1),
            (0, "b".into(), 1, 1)
        ]
    );
    assert_eq!(late.load(Ordering::Relaxed), 0);

    // At end + allowed lateness the window's state goes; later rows are late.
    let mut output = Vec::new();
    aggregate.on_watermark(30, &mut output).unwrap();
    assert!(aggregate.operator().bins.is_empty());
    aggregate
        .on_batch(chunk(&[("a", 0)], &[Some(30)]), &mut output)
        .unwrap();
    assert_eq!(late.load(Ordering::Relaxed), 1);
    assert!(rows(&output).is_empty());
}

#[test]
fn state_stays_bounded_over_a_long_run() {
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 50,
    };
    for (emit, policy) in [
        (EmitMode::OnWindowClose, LatePolicy::Drop),
        (EmitMode::OnUpdate, policy),
        (EmitMode::OnWindowClose, policy),
    ] {
        let (mut aggregate, _) = operator_with(emit, policy);
        let mut most_bins = 0;
        for step in 0..10_000i64 {
            let time = step * 3;
            // Mostly in order, some rows 40 ns behind.
            let late_time = (time - 40).max(0);
            let starts = [time - time % 10, late_time - late_time % 10];
            let input = chunk(
                &[("a", starts[0]), ("b", starts[1])],
                &[Some(time - 1), Some(time)],
            );
            let mut output = Vec::new();
            aggregate.on_batch(input, &mut output).unwrap();
            aggregate.on_watermark(time, &mut output).unwrap();
            most_bins = most_bins.max(aggregate.operator().bins.len());
        }
        // Windows of 10 ns open for at most 10 + 50 ns past the watermark.
        assert!(most_bins <= 8, "{most_bins} bins held under {policy:?}");
    }
}

/// A failed write group is undone: groups it changed or made go back,
/// windows it closed and dropped come back, the watermark goes back; the
/// aggregate then emits exactly what one that never saw the group does.
#[test]
fn a_rolled_back_group_leaves_the_aggregate_as_if_it_never_came() {
    for emit in [EmitMode::OnUpdate, EmitMode::OnWindowClose] {
        let (mut undone, _) = operator(emit);
        let (mut never, _) = operator(emit);
        let committed = chunk(&[("a", 0), ("b", 0), ("a", 10)], &[None, None, None]);
        undone.on_batch(committed.clone(), &mut Vec::new()).unwrap();
        never.on_batch(committed, &mut Vec::new()).unwrap();
        undone.commit();
        never.commit();
        // Changes group a, makes group c, closes and drops window 0.
        let failed = chunk(&[("a", 0), ("c", 10)], &[None, None]);
        undone.on_batch(failed, &mut Vec::new()).unwrap();
        undone.on_watermark(15, &mut Vec::new()).unwrap();
        assert!(
            !undone.operator().bins.contains_key(&10),
            "window 0 dropped"
        );
        assert!(undone.rollback().unwrap());
        let later = chunk(&[("a", 0), ("b", 10)], &[None, None]);
        let (mut got, mut expected) = (Vec::new(), Vec::new());
        undone.on_batch(later.clone(), &mut got).unwrap();
        never.on_batch(later, &mut expected).unwrap();
        undone.on_watermark(30, &mut got).unwrap();
        never.on_watermark(30, &mut expected).unwrap();
        assert_eq!(rows(&got), rows(&expected), "{emit:?}");
        assert!(!rows(&got).is_empty());
    }
}
