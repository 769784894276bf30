//! Unit tests of the session aggregate: merging, closing, lateness,
//! checkpoints and bounded state.

use std::collections::HashMap;

use super::*;
use crate::stream::operator::Stage;
use crate::stream::time_columns::nanoseconds;
use crate::stream::{LatePolicy, LateRows};
use datafusion::arrow::array::{AsArray, StringArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;
use std::sync::atomic::{AtomicU64, Ordering};

const GAP: i64 = 10;

fn time() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

/// COUNT(*) per (k, window_start, window_end) over sessions with gap 10 ns.
fn operator(
    emit: EmitMode,
    policy: LatePolicy,
) -> (Stage<SessionAggregateOperator>, Arc<AtomicU64>) {
    operator_in(emit, policy, 1)
}

/// The same operator with its keys split into `partitions`.
fn operator_in(
    emit: EmitMode,
    policy: LatePolicy,
    partitions: usize,
) -> (Stage<SessionAggregateOperator>, Arc<AtomicU64>) {
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("window_start", time(), true),
        Field::new("window_end", time(), true),
    ]));
    let count = AggregateExprBuilder::new(count_udaf(), vec![col("k", &input).unwrap()])
        .schema(input.clone())
        .alias("n")
        .build()
        .unwrap();
    let output = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("window_start", time(), true),
        Field::new("window_end", time(), true),
        Field::new("n", DataType::Int64, false),
    ]));
    let groups = ["k", "window_start", "window_end"]
        .map(|name| col(name, &input).unwrap())
        .to_vec();
    let columns = SessionColumns {
        start: Some(1),
        end: Some(2),
        gap_ns: GAP,
    };
    let calls = vec![AggregateCall::new(Arc::new(count), None)];
    let late = Arc::new(AtomicU64::new(0));
    let handling = LateHandling {
        policy,
        rows: LateRows::new(late.clone(), false),
        side_output: None,
    };
    let operator =
        SessionAggregateOperator::new(groups, columns, calls, emit, output, handling, partitions)
            .unwrap();
    (Stage::new(Box::new(operator)), late)
}

/// Rows `(k, ts)` as the window operator makes them, with the watermark
/// each arrived under.
fn chunk(rows: &[(&str, i64)], watermarks: &[Option<i64>]) -> Chunk {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("window_start", time(), true),
        Field::new("window_end", time(), true),
    ]));
    let keys: StringArray = rows.iter().map(|(k, _)| Some(*k)).collect();
    let starts = TimestampNanosecondArray::from_iter_values(rows.iter().map(|(_, t)| *t));
    let ends = TimestampNanosecondArray::from_iter_values(rows.iter().map(|(_, t)| t + GAP));
    Chunk {
        rows: RecordBatch::try_new(
            schema,
            vec![Arc::new(keys), Arc::new(starts), Arc::new(ends)],
        )
        .unwrap(),
        diffs: None,
        watermarks: Some(Int64Array::from(watermarks.to_vec())),
    }
}

/// Emitted rows as `(k, start, end, n, diff)`.
fn rows(output: &Output) -> Vec<(String, i64, i64, i64, i64)> {
    let mut all = Vec::new();
    for message in output {
        let Message::Batch(chunk) = message else {
            continue;
        };
        let keys = chunk.rows.column(0).as_string::<i32>();
        let starts = nanoseconds(chunk.rows.column(1)).unwrap();
        let ends = nanoseconds(chunk.rows.column(2)).unwrap();
        let counts = chunk.rows.column(3).as_primitive::<Int64Type>();
        for row in 0..chunk.num_rows() {
            all.push((
                keys.value(row).to_string(),
                starts.value(row),
                ends.value(row),
                counts.value(row),
                chunk.diff(row),
            ));
        }
    }
    all
}

/// A write group of `rows` and a watermark, committed.
fn push(
    operator: &mut Stage<SessionAggregateOperator>,
    rows: &[(&str, i64)],
    watermark: i64,
) -> Output {
    let output = push_uncommitted(operator, rows, watermark);
    operator.commit();
    output
}

fn push_uncommitted(
    operator: &mut Stage<SessionAggregateOperator>,
    rows: &[(&str, i64)],
    watermark: i64,
) -> Output {
    let mut output = Vec::new();
    let watermarks = vec![Some(watermark); rows.len()];
    operator
        .on_batch(chunk(rows, &watermarks), &mut output)
        .unwrap();
    operator.on_watermark(watermark, &mut output).unwrap();
    output.extend(operator.flush().unwrap());
    output
}

/// The state of the operator's first partition (its jobs all finished).
fn first_partition(
    sessions: &Stage<SessionAggregateOperator>,
) -> std::sync::MutexGuard<'_, SessionPartition> {
    let mut partitions = sessions.operator().partitions.peek();
    partitions.next().unwrap()
}

#[test]
fn a_bridging_row_merges_two_sessions_and_retracts_them() {
    let (mut sessions, _) = operator(EmitMode::OnUpdate, LatePolicy::Drop);
    let first = push(&mut sessions, &[("a", 0), ("a", 15), ("b", 5)], -100);
    assert_eq!(
        rows(&first),
        vec![
            ("a".into(), 0, 10, 1, 1),
            ("a".into(), 15, 25, 1, 1),
            ("b".into(), 5, 15, 1, 1)
        ]
    );
    let bridged = push(&mut sessions, &[("a", 8)], -100);
    let mut changes = rows(&bridged);
    changes.sort();
    assert_eq!(
        changes,
        vec![
            ("a".into(), 0, 10, 1, -1),
            ("a".into(), 0, 25, 3, 1),
            ("a".into(), 15, 25, 1, -1)
        ]
    );
}

#[test]
fn sessions_close_at_their_end_and_never_reopen() {
    let (mut sessions, late) = operator(EmitMode::OnWindowClose, LatePolicy::Drop);
    assert!(rows(&push(&mut sessions, &[("a", 0), ("a", 4)], -100)).is_empty());
    let closed = push(&mut sessions, &[("b", 30)], 14);
    assert_eq!(rows(&closed), vec![("a".into(), 0, 14, 2, 1)]);
    // 10 would only join the complete session: late, though [10, 20) is open.
    assert!(rows(&push(&mut sessions, &[("a", 10)], 14)).is_empty());
    assert_eq!(late.load(Ordering::Relaxed), 1);
    // Two gaps later (no new session can then touch it) the marker is gone
    // and the key has no state left.
    let keys = sessions
        .operator()
        .key_rows(&chunk(&[("a", 0)], &[None]))
        .unwrap();
    let key = keys.unwrap().row(0).data().to_vec();
    push(&mut sessions, &[], 33);
    assert!(first_partition(&sessions).keys.find(&key).is_some());
    push(&mut sessions, &[], 34);
    assert!(first_partition(&sessions).keys.find(&key).is_none());
}

#[test]
fn a_row_whose_own_window_is_complete_joins_the_open_session_it_touches() {
    for emit in [EmitMode::OnUpdate, EmitMode::OnWindowClose] {
        let (mut sessions, late) = operator(emit, LatePolicy::Drop);
        let mut shown = rows(&push(&mut sessions, &[("a", 0)], -100));
        // Under watermark 8, -5's own [-5, 5) is complete, but it touches
        // the open [0, 10): it joins (the design's SESSION rule, as Flink).
        shown.extend(rows(&push(&mut sessions, &[("a", -5)], 8)));
        // -20's own [-20, -10) is complete and touches nothing: late.
        shown.extend(rows(&push(&mut sessions, &[("a", -20)], 8)));
        assert_eq!(late.load(Ordering::Relaxed), 1, "{emit:?}");
        shown.extend(rows(&push(&mut sessions, &[], 10)));
        let mut net: HashMap<(String, i64, i64, i64), i64> = HashMap::new();
        for (key, start, end, count, diff) in shown {
            *net.entry((key, start, end, count)).or_default() += diff;
        }
        net.retain(|_, diff| *diff != 0);
        let expected = HashMap::from([(("a".to_string(), -5, 10, 2), 1)]);
        assert_eq!(net, expected, "{emit:?}");
    }
}

#[test]
fn a_final_session_stays_while_a_row_could_touch_it_and_an_open_one() {
    let (mut sessions, late) = operator(EmitMode::OnUpdate, LatePolicy::Drop);
    push(&mut sessions, &[("a", 0), ("a", 15)], -100);
    // [0, 10) becomes final; [15, ...) is kept open by new rows.
    for (time, watermark) in [(24, 12), (33, 24), (42, 32)] {
        push(&mut sessions, &[("a", time)], watermark);
    }
    // Two gaps past [0, 10): 8 touches it and the open session; it is late.
    let shown = rows(&push(&mut sessions, &[("a", 8)], 32));
    assert!(shown.is_empty(), "{shown:?}");
    assert_eq!(late.load(Ordering::Relaxed), 1);
    // Once the open session is final too, both go in time.
    push(&mut sessions, &[], 200);
    assert!(first_partition(&sessions).keys.iter().next().is_none());
}

#[test]
fn update_corrects_a_closed_session_within_the_allowed_lateness() {
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 20,
    };
    let (mut sessions, late) = operator(EmitMode::OnWindowClose, policy);
    push(&mut sessions, &[("a", 0)], -100);
    assert_eq!(
        rows(&push(&mut sessions, &[], 10)),
        vec![("a".into(), 0, 10, 1, 1)]
    );
    // Extends the session to 15: retracted now, shown again at 15.
    assert_eq!(
        rows(&push(&mut sessions, &[("a", 5)], 12)),
        vec![("a".into(), 0, 10, 1, -1)]
    );
    assert_eq!(
        rows(&push(&mut sessions, &[], 15)),
        vec![("a".into(), 0, 15, 2, 1)]
    );
    assert_eq!(late.load(Ordering::Relaxed), 0);
}

#[test]
fn a_restored_checkpoint_continues_like_the_original() {
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let (mut original, _) = operator(EmitMode::OnWindowClose, LatePolicy::Drop);
    push(&mut original, &[("a", 0), ("b", 3), ("a", 40)], 5);
    push(&mut original, &[], 13);
    commit_checkpoint(&mut original, &store);
    let (mut restored, _) = operator(EmitMode::OnWindowClose, LatePolicy::Drop);
    restored.restore(&stored_state(&store)).unwrap();
    for operator in [&mut original, &mut restored] {
        // b's session is complete: 12 is late; 45 merges with a at 40.
        let output = push(operator, &[("b", 12), ("a", 45)], 13);
        assert!(rows(&output).is_empty());
    }
    let expected = rows(&push(&mut original, &[], 60));
    assert_eq!(rows(&push(&mut restored, &[], 60)), expected);
    assert_eq!(expected, vec![("a".into(), 40, 55, 2, 1)]);
}

#[test]
fn a_checkpoint_deletes_only_keys_it_stored() {
    use crate::state::{SledStore, StateStore};
    use crate::stream::checkpoint::testing::commit_checkpoint;
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let checkpoint =
        |sessions: &mut Stage<SessionAggregateOperator>| commit_checkpoint(sessions, &store);
    let (mut sessions, _) = operator(EmitMode::OnWindowClose, LatePolicy::Drop);
    push(&mut sessions, &[("a", 0)], 0);
    assert_eq!(
        checkpoint(&mut sessions),
        2,
        "a's sessions and the watermark"
    );
    // a's session is forgotten; b's comes and goes between two checkpoints.
    push(&mut sessions, &[("b", 100)], 100);
    push(&mut sessions, &[("c", 200)], 200);
    assert_eq!(
        first_partition(&sessions).keys.pending_writes(),
        2,
        "b left no trace to write"
    );
    assert_eq!(
        checkpoint(&mut sessions),
        3,
        "a deleted, c stored, watermark"
    );
    let stored: Vec<Vec<u8>> = store
        .scan_prefix(b"op/session/")
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(stored.len(), 1, "only c's sessions are stored");
}

#[test]
fn state_stays_bounded_over_a_long_run() {
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 30,
    };
    for (emit, policy) in [
        (EmitMode::OnWindowClose, LatePolicy::Drop),
        (EmitMode::OnUpdate, policy),
    ] {
        let (mut sessions, _) = operator(emit, policy);
        let mut most = 0;
        for step in 0..5_000i64 {
            let key = ["a", "b", "c", "d"][(step % 4) as usize];
            let time = step * 4;
            // Each key gets a row every 16 ns: one session per row.
            push(&mut sessions, &[(key, time), ("late", time - 25)], time - 1);
            let partition = first_partition(&sessions);
            most = most.max(partition.open_ends.len() + partition.marker_ends.len());
        }
        assert!(most <= 40, "{most} sessions held under {policy:?}");
    }
}

/// Rows with a net nonzero diff, sorted: what the view holds.
fn net_rows(output: &Output) -> Vec<(String, i64, i64, i64, i64)> {
    let mut net: HashMap<(String, i64, i64, i64), i64> = HashMap::new();
    for (key, start, end, count, diff) in rows(output) {
        *net.entry((key, start, end, count)).or_default() += diff;
    }
    let mut held: Vec<_> = net
        .into_iter()
        .filter(|(_, diff)| *diff != 0)
        .map(|((key, start, end, count), diff)| (key, start, end, count, diff))
        .collect();
    held.sort();
    held
}

#[test]
fn results_do_not_depend_on_the_partition_count() {
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 15,
    };
    let names: Vec<String> = (0..300).map(|key| format!("k{key}")).collect();
    // Batches big enough for threads (each partition's share over 2048
    // rows at 2 partitions, around it at 3); times out of order within a batch,
    // so sessions extend, merge, close, take corrections and go late.
    let batches: Vec<Vec<(&str, i64)>> = (0..6i64)
        .map(|batch| {
            (0..6000i64)
                .map(|row| {
                    let key = &names[((row * 7 + batch) % 300) as usize];
                    let behind = if row % 50 == 0 { 70 } else { 0 };
                    (key.as_str(), batch * 40 + (row * 13) % 47 - behind)
                })
                .collect()
        })
        .collect();
    let run = |partitions: usize, restore_at: usize| {
        let mut outputs = Vec::new();
        let (mut sessions, late) = operator_in(EmitMode::OnUpdate, policy, partitions);
        for (step, batch) in batches.iter().enumerate() {
            if step == 3 {
                let directory = tempfile::tempdir().unwrap();
                let store = SledStore::open(directory.path()).unwrap();
                commit_checkpoint(&mut sessions, &store);
                let restored = operator_in(EmitMode::OnUpdate, policy, restore_at);
                sessions = restored.0;
                sessions.restore(&stored_state(&store)).unwrap();
            }
            outputs.extend(push(&mut sessions, batch, step as i64 * 40 - 20));
        }
        outputs.extend(push(&mut sessions, &[], 1_000));
        (net_rows(&outputs), late.load(Ordering::Relaxed))
    };
    let (one, late_one) = run(1, 1);
    assert!(one.len() > 300, "{} sessions", one.len());
    assert!(late_one > 0);
    for (partitions, restore_at) in [(2, 2), (3, 1), (1, 4)] {
        let (held, _) = run(partitions, restore_at);
        assert_eq!(
            held, one,
            "{partitions} partitions, restored at {restore_at}"
        );
    }
}

/// Rows around `watermark` (some late) for keys a to f.
fn random_rows(random: &mut crate::testing::Random, watermark: i64) -> Vec<(&'static str, i64)> {
    (0..random.below(12))
        .map(|_| {
            let key = ["a", "b", "c", "d", "e", "f"][random.below(6) as usize];
            (key, watermark - 20 + random.below(50) as i64)
        })
        .collect()
}

/// A write group that fails — its rows extend, merge, close, finalize and
/// forget sessions — is undone: the operator goes on exactly as one that
/// never saw it, under each emit mode and late policy, in one or more
/// partitions, across a checkpoint restored into a fresh operator.
#[test]
fn a_failed_write_group_leaves_no_trace() {
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
    let lateness = LatePolicy::Update {
        allowed_lateness_ns: 15,
    };
    let cases = [
        (EmitMode::OnUpdate, lateness, 1),
        (EmitMode::OnWindowClose, LatePolicy::Drop, 2),
        (EmitMode::OnUpdate, LatePolicy::Drop, 3),
        (EmitMode::OnWindowClose, lateness, 1),
    ];
    for (case, (emit, policy, partitions)) in cases.into_iter().enumerate() {
        let mut random = crate::testing::Random(case as u64 * 7919 + 17);
        let (mut undone, mut late_undone) = operator_in(emit, policy, partitions);
        let (mut clean, late_clean) = operator_in(emit, policy, partitions);
        let (mut failed, mut watermark) = (0, 0);
        for step in 0..400 {
            let batch = random_rows(&mut random, watermark);
            if random.below(3) == 0 {
                let late = late_undone.load(Ordering::Relaxed);
                let later = watermark + random.below(40) as i64;
                push_uncommitted(&mut undone, &batch, later);
                assert!(undone.rollback().unwrap());
                late_undone.store(late, Ordering::Relaxed);
                failed += 1;
                continue;
            }
            if step == 200 {
                let directory = tempfile::tempdir().unwrap();
                let store = SledStore::open(directory.path()).unwrap();
                commit_checkpoint(&mut undone, &store);
                let (restored, late) = operator_in(emit, policy, partitions);
                late.store(late_undone.load(Ordering::Relaxed), Ordering::Relaxed);
                (undone, late_undone) = (restored, late);
                undone.restore(&stored_state(&store)).unwrap();
            }
            watermark += random.below(8) as i64;
            let (kept, expected) = (
                push(&mut undone, &batch, watermark),
                push(&mut clean, &batch, watermark),
            );
            assert_eq!(rows(&kept), rows(&expected), "case {case}, step {step}");
        }
        assert!(failed > 100);
        let late = late_undone.load(Ordering::Relaxed);
        assert_eq!(late, late_clean.load(Ordering::Relaxed), "case {case}");
    }
}

/// A write group that outgrows the undo bound (a few kB in tests) keeps
/// nothing more: its failure is refused, so the view is rebuilt; the next
/// write group keeps its undo again.
#[test]
fn a_write_group_past_the_undo_bound_is_not_undone_in_place() {
    let (mut sessions, _) = operator(EmitMode::OnUpdate, LatePolicy::Drop);
    push_uncommitted(&mut sessions, &[("a", 0)], -100);
    assert!(sessions.rollback().unwrap(), "a small group is undone");
    let names: Vec<String> = (0..2_000).map(|key| format!("key{key}")).collect();
    let big: Vec<(&str, i64)> = names.iter().map(|name| (name.as_str(), 0)).collect();
    push(&mut sessions, &big, -100);
    // Every key's sessions kept before the group changes them.
    let again: Vec<(&str, i64)> = names.iter().map(|name| (name.as_str(), 5)).collect();
    push_uncommitted(&mut sessions, &again, -100);
    assert!(
        !sessions.rollback().unwrap(),
        "a big group gave its undo up"
    );
    push_uncommitted(&mut sessions, &[("a", 0)], -100);
    assert!(
        sessions.rollback().unwrap(),
        "the next group keeps its undo"
    );
}
