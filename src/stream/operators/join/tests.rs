use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::Operator as BinaryOperator;
use datafusion::physical_expr::expressions::{binary, col};

use super::*;
use crate::state::SledStore;
use crate::stream::checkpoint::testing::{commit_state, stored_state};
use crate::testing::Random;

/// A joined row: left key, left value, right key, right value.
type Joined = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);
/// A side's row: key (NULL allowed) and value.
type Row = (Option<i64>, i64);

fn side_schema(value: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new(value, DataType::Int64, false),
    ]))
}

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("a", DataType::Int64, true),
        Field::new("k", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
    ]))
}

fn join(kind: JoinKind, with_filter: bool) -> JoinOperator {
    let input = |value: &str| {
        let schema = side_schema(value);
        JoinInput {
            keys: vec![col("k", &schema).unwrap()],
            schema,
        }
    };
    let schema = match kind.tests_existence() {
        true => Arc::new(Schema::new(output_schema().fields()[..2].to_vec())),
        false => output_schema(),
    };
    // a < b, over the joined row (columns 1 and 3).
    let filter = with_filter.then(|| {
        let a = Arc::new(datafusion::physical_expr::expressions::Column::new("a", 1));
        let b = Arc::new(datafusion::physical_expr::expressions::Column::new("b", 3));
        binary(a, BinaryOperator::Lt, b, &schema).unwrap()
    });
    JoinOperator::new(JoinSpec {
        kind,
        left: input("a"),
        right: input("b"),
        key_types: vec![DataType::Int64],
        nulls_match: false,
        filter,
        schema,
        expiry: [None, None],
        ttl_ns: [None, None],
        lookup: false,
        output_watermark: None,
    })
    .unwrap()
}

fn changes(value: &str, rows: &[(Row, i64)]) -> Message {
    let keys: Int64Array = rows.iter().map(|((key, _), _)| *key).collect();
    let values: Int64Array = rows.iter().map(|((_, value), _)| Some(*value)).collect();
    let batch =
        RecordBatch::try_new(side_schema(value), vec![Arc::new(keys), Arc::new(values)]).unwrap();
    Message::batch(Chunk {
        rows: batch,
        diffs: Some(rows.iter().map(|(_, diff)| *diff).collect()),
        watermarks: None,
    })
}

/// Adds the output's changes to `view`, dropping rows whose count is 0.
fn accumulate(output: Output, view: &mut HashMap<Joined, i64>) {
    for message in output {
        let Message::Batch(chunk) = message else {
            continue;
        };
        let column = |index: usize| chunk.rows.column(index).as_primitive::<Int64Type>().clone();
        // Semi and anti joins show the left columns only.
        let columns: Vec<Int64Array> = (0..chunk.rows.num_columns()).map(column).collect();
        for row in 0..chunk.num_rows() {
            let value = |index: usize| {
                let column = columns.get(index)?;
                column.is_valid(row).then(|| column.value(row))
            };
            let joined = (value(0), value(1), value(2), value(3));
            assert_eq!(chunk.diff(row).abs(), 1, "a joined row is one row");
            *view.entry(joined).or_default() += chunk.diff(row);
        }
    }
    view.retain(|_, count| *count != 0);
}

/// The join of the two multisets, computed row by row.
fn reference(
    kind: JoinKind,
    with_filter: bool,
    left: &HashMap<Row, i64>,
    right: &HashMap<Row, i64>,
) -> HashMap<Joined, i64> {
    let matches = |l: &Row, r: &Row| l.0.is_some() && l.0 == r.0 && (!with_filter || l.1 < r.1);
    let mut view = HashMap::new();
    if kind.tests_existence() {
        for (l, count) in left {
            let matched = right.keys().any(|r| matches(l, r));
            if matched == (kind == JoinKind::Semi) {
                view.insert((l.0, Some(l.1), None, None), *count);
            }
        }
        return view;
    }
    for (l, lc) in left {
        for (r, rc) in right {
            if matches(l, r) {
                *view.entry((l.0, Some(l.1), r.0, Some(r.1))).or_default() += lc * rc;
            }
        }
    }
    if kind.preserves(0) {
        for (l, count) in left {
            if !right.keys().any(|r| matches(l, r)) {
                view.insert((l.0, Some(l.1), None, None), *count);
            }
        }
    }
    if kind.preserves(1) {
        for (r, count) in right {
            if !left.keys().any(|l| matches(l, r)) {
                view.insert((None, None, r.0, Some(r.1)), *count);
            }
        }
    }
    view
}

/// Random inserts and deletes on both sides; after every batch the joined
/// changes so far equal the join of what each side holds.
fn random_changes_match_the_reference(kind: JoinKind, with_filter: bool, seed: u64) {
    let mut random = Random(seed);
    let mut operator = join(kind, with_filter);
    let mut inputs: [HashMap<Row, i64>; 2] = [HashMap::new(), HashMap::new()];
    let mut view = HashMap::new();
    for step in 0..200 {
        let side = random.below(2) as usize;
        let batch = random_batch(&mut random, &mut inputs[side]);
        let mut output = Vec::new();
        let value = ["a", "b"][side];
        operator
            .on_message(side, changes(value, &batch), &mut output)
            .unwrap();
        accumulate(output, &mut view);
        let expected = reference(kind, with_filter, &inputs[0], &inputs[1]);
        assert_eq!(view, expected, "{kind:?} seed {seed} step {step}");
    }
}

/// A few random inserts and deletes of `input`'s rows, applied to it.
fn random_batch(random: &mut Random, input: &mut HashMap<Row, i64>) -> Vec<(Row, i64)> {
    let mut batch = Vec::new();
    for _ in 0..=random.below(4) {
        let present: Vec<Row> = input.keys().copied().collect();
        let retract = !present.is_empty() && random.below(3) == 0;
        let (row, diff) = if retract {
            (present[random.below(present.len() as u64) as usize], -1)
        } else {
            let key = random.below(5);
            let key = (key != 4).then_some(key as i64);
            ((key, random.below(4) as i64), 1)
        };
        let count = input.entry(row).or_default();
        *count += diff;
        if *count == 0 {
            input.remove(&row);
        }
        batch.push((row, diff));
    }
    batch
}

/// A join spilling to `store` past `budget_bytes`, restored from it.
fn spilling_join(kind: JoinKind, store: &Arc<SledStore>, budget_bytes: usize) -> JoinOperator {
    attached(join(kind, false), store, budget_bytes)
}

/// `operator` spilling to `store` past `budget_bytes`, restored from it.
fn attached(
    mut operator: JoinOperator,
    store: &Arc<SledStore>,
    budget_bytes: usize,
) -> JoinOperator {
    operator.attach(SpillSpace::for_test(
        store.clone(),
        b"opstate/j/",
        budget_bytes,
    ));
    operator.restore(&stored_state(&**store)).unwrap();
    operator
}

/// The random changes of `random_changes_match_the_reference` through a
/// join whose sides spill after nearly every batch, with checkpoints,
/// crashes (a new join restored from the last checkpoint) and failed
/// write groups (rolled back) among them.
fn spilled_changes_match_the_reference(kind: JoinKind, seed: u64) {
    let mut random = Random(seed);
    let directory = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(directory.path()).unwrap());
    let budget_bytes = [0, 400, 4000][random.below(3) as usize];
    let mut operator = spilling_join(kind, &store, budget_bytes);
    let mut inputs: [HashMap<Row, i64>; 2] = [HashMap::new(), HashMap::new()];
    let mut view = HashMap::new();
    for step in 0..300 {
        let side = random.below(2) as usize;
        let value = ["a", "b"][side];
        operator.commit();
        if random.below(12) == 0 {
            let mut failed = inputs[side].clone();
            let batch = random_batch(&mut random, &mut failed);
            let mut output = Vec::new();
            operator
                .on_message(side, changes(value, &batch), &mut output)
                .unwrap();
            assert!(operator.rollback().unwrap());
        } else {
            let batch = random_batch(&mut random, &mut inputs[side]);
            let mut output = Vec::new();
            operator
                .on_message(side, changes(value, &batch), &mut output)
                .unwrap();
            accumulate(output, &mut view);
        }
        if random.below(8) == 0 {
            commit_state(&*store, |state| operator.checkpoint(state).unwrap());
            if random.below(2) == 0 {
                operator = spilling_join(kind, &store, budget_bytes);
            }
        }
        let expected = reference(kind, false, &inputs[0], &inputs[1]);
        assert_eq!(view, expected, "{kind:?} seed {seed} step {step}");
    }
    commit_state(&*store, |state| operator.checkpoint(state).unwrap());
    let restored = spilling_join(kind, &store, usize::MAX);
    for (side, input) in restored.sides.iter().zip(&inputs) {
        assert_eq!(
            side.stored().len(),
            input.iter().filter(|(row, _)| row.0.is_some()).count()
        );
    }
}

const ALL_KINDS: [JoinKind; 6] = [
    JoinKind::Inner,
    JoinKind::Left,
    JoinKind::Right,
    JoinKind::Full,
    JoinKind::Semi,
    JoinKind::Anti,
];

#[test]
fn every_join_kind_equals_the_join_of_its_inputs_under_inserts_and_retractions() {
    for kind in ALL_KINDS {
        for seed in 1..20 {
            random_changes_match_the_reference(kind, false, seed * 7919);
        }
    }
}

#[test]
fn every_join_kind_equals_the_join_of_its_inputs_with_its_sides_spilled() {
    for kind in ALL_KINDS {
        for seed in 1..8 {
            spilled_changes_match_the_reference(kind, seed * 104_729);
        }
    }
}

#[test]
fn an_inner_join_condition_beyond_the_keys_filters_joined_rows() {
    for seed in 1..20 {
        random_changes_match_the_reference(JoinKind::Inner, true, seed * 104_729);
    }
}

#[test]
fn outer_joins_with_a_residual_condition_are_refused() {
    let schema = side_schema("a");
    let input = || JoinInput {
        keys: vec![col("k", &schema).unwrap()],
        schema: schema.clone(),
    };
    let result = JoinOperator::new(JoinSpec {
        kind: JoinKind::Left,
        left: input(),
        right: input(),
        key_types: vec![DataType::Int64],
        nulls_match: false,
        filter: Some(col("a", &schema).unwrap()),
        schema: output_schema(),
        expiry: [None, None],
        ttl_ns: [None, None],
        lookup: false,
        output_watermark: None,
    });
    assert!(result.is_err());
}

#[test]
fn a_barrier_passes_once_both_sides_sent_it_and_the_state_survives_a_restart() {
    let mut operator = join(JoinKind::Left, false);
    let mut output = Vec::new();
    let left = [((Some(1), 10), 1), ((Some(2), 20), 1), ((None, 30), 1)];
    operator
        .on_message(0, changes("a", &left), &mut output)
        .unwrap();
    operator
        .on_message(1, changes("b", &[((Some(1), 5), 2)]), &mut output)
        .unwrap();
    assert_eq!(
        operator
            .on_message(0, Message::Barrier(1), &mut output)
            .unwrap(),
        None
    );
    assert_eq!(
        operator
            .on_message(1, Message::Barrier(1), &mut output)
            .unwrap(),
        Some(1)
    );
    assert!(matches!(output.last(), Some(Message::Barrier(1))));

    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    commit_state(&store, |state| operator.checkpoint(state).unwrap());
    // Key 2's row goes, and a second checkpoint deletes its entry.
    operator
        .on_message(0, changes("a", &[((Some(2), 20), -1)]), &mut Vec::new())
        .unwrap();
    commit_state(&store, |state| operator.checkpoint(state).unwrap());
    let mut restored = join(JoinKind::Left, false);
    restored.restore(&stored_state(&store)).unwrap();
    for side in 0..2 {
        assert_eq!(restored.sides[side].stored(), operator.sides[side].stored());
    }

    // The restored join retracts key 1's rows when the right side's go.
    let mut view = HashMap::new();
    let mut output = Vec::new();
    restored
        .on_message(1, changes("b", &[((Some(1), 5), -2)]), &mut output)
        .unwrap();
    accumulate(output, &mut view);
    let expected = HashMap::from([
        ((Some(1), Some(10), Some(1), Some(5)), -2),
        ((Some(1), Some(10), None, None), 1),
    ]);
    assert_eq!(view, expected);
}

/// An inner join whose rows match the other side's only while its
/// watermark has not passed their value (column 1): a window join.
fn expiring_join() -> JoinOperator {
    let input = |value: &str| {
        let schema = side_schema(value);
        JoinInput {
            keys: vec![col("k", &schema).unwrap()],
            schema,
        }
    };
    let expiry = Some(Expiry {
        column: 1,
        allowance_ns: 0,
    });
    JoinOperator::new(JoinSpec {
        kind: JoinKind::Inner,
        left: input("a"),
        right: input("b"),
        key_types: vec![DataType::Int64],
        nulls_match: false,
        filter: None,
        schema: output_schema(),
        expiry: [expiry, expiry],
        ttl_ns: [None, None],
        lookup: false,
        output_watermark: None,
    })
    .unwrap()
}

#[test]
fn rows_leave_an_expiring_join_once_the_other_watermark_passes_them() {
    let mut operator = expiring_join();
    let mut view = HashMap::new();
    let mut send = |operator: &mut JoinOperator, side: usize, message: Message| {
        let mut output = Vec::new();
        operator.on_message(side, message, &mut output).unwrap();
        accumulate(output, &mut view);
    };
    send(
        &mut operator,
        0,
        changes("a", &[((Some(1), 10), 1), ((Some(1), 20), 1)]),
    );
    assert_eq!(operator.sides[0].stored().len(), 2);
    // The right watermark passes 10: that left row can match nothing more.
    send(&mut operator, 1, Message::Watermark(15));
    assert_eq!(operator.sides[0].stored().len(), 1);
    send(&mut operator, 1, changes("b", &[((Some(1), 30), 1)]));
    // A left row the right watermark already passed meets what is stored
    // but is not kept.
    send(&mut operator, 0, changes("a", &[((Some(1), 12), 1)]));
    assert_eq!(operator.sides[0].stored().len(), 1);
    send(&mut operator, 0, Message::Watermark(31));
    assert!(operator.sides[1].stored().is_empty());
    send(&mut operator, 1, changes("b", &[((Some(1), 40), 1)]));
    let expected: HashMap<Joined, i64> = [
        ((Some(1), Some(20), Some(1), Some(30)), 1),
        ((Some(1), Some(12), Some(1), Some(30)), 1),
        ((Some(1), Some(20), Some(1), Some(40)), 1),
    ]
    .into();
    assert_eq!(view, expected);
}

#[test]
fn the_output_watermark_is_the_least_lagged_input_watermark_and_only_rises() {
    let mut operator = expiring_join();
    operator.output_watermark = Some([0, 5]);
    let mut watermarks = Vec::new();
    for (side, watermark) in [(0, 10), (1, 12), (0, 20), (1, 11), (1, 30), (0, 40)] {
        let mut output = Vec::new();
        operator
            .on_message(side, Message::Watermark(watermark), &mut output)
            .unwrap();
        watermarks.extend(output.into_iter().filter_map(|message| match message {
            Message::Watermark(watermark) => Some(watermark),
            _ => None,
        }));
    }
    // None until both sides have one; then min(left, right - 5), rising.
    assert_eq!(watermarks, [7, 20, 25]);
}

/// The clock of the TTL test (nanoseconds).
static TEST_CLOCK_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn test_clock_ns() -> i64 {
    TEST_CLOCK_NS.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn a_state_ttl_forgets_rows_by_the_clock_and_counts_restored_rows_from_the_restore() {
    TEST_CLOCK_NS.store(1_000, std::sync::atomic::Ordering::SeqCst);
    let mut operator = join(JoinKind::Inner, false);
    operator.sides = operator.sides.map(|side| side.with_ttl(Some(100)));
    let mut operator = operator.with_clock(test_clock_ns);
    let mut view = HashMap::new();
    let send = |operator: &mut JoinOperator,
                view: &mut HashMap<Joined, i64>,
                side: usize,
                message: Message| {
        let mut output = Vec::new();
        operator.on_message(side, message, &mut output).unwrap();
        accumulate(output, view);
    };
    let tick = |ns: i64| TEST_CLOCK_NS.store(ns, std::sync::atomic::Ordering::SeqCst);
    send(
        &mut operator,
        &mut view,
        0,
        changes("a", &[((Some(1), 10), 1)]),
    );
    tick(1_050);
    send(
        &mut operator,
        &mut view,
        1,
        changes("b", &[((Some(1), 5), 1)]),
    );
    assert_eq!(view.len(), 1, "within the TTL the rows meet");
    // At 1,101 the left row (came at 1,000) is gone, the right one (1,050) not.
    tick(1_101);
    send(&mut operator, &mut view, 1, Message::Barrier(1));
    assert!(operator.sides[0].stored().is_empty());
    assert_eq!(operator.sides[1].stored().len(), 1);
    send(
        &mut operator,
        &mut view,
        0,
        changes("a", &[((Some(1), 20), 1)]),
    );
    assert_eq!(view.len(), 2);
    send(
        &mut operator,
        &mut view,
        1,
        changes("b", &[((Some(1), 6), 1)]),
    );
    assert_eq!(
        view.len(),
        3,
        "the forgotten left row meets no later right row"
    );

    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    commit_state(&store, |state| operator.checkpoint(state).unwrap());
    tick(5_000);
    let mut restored = join(JoinKind::Inner, false);
    restored.sides = restored.sides.map(|side| side.with_ttl(Some(100)));
    let mut restored = restored.with_clock(test_clock_ns);
    restored.restore(&stored_state(&store)).unwrap();
    tick(5_099);
    send(&mut restored, &mut view, 1, Message::Barrier(2));
    assert_eq!(
        restored.sides[1].stored().len(),
        2,
        "restored rows count from the restore"
    );
    tick(5_101);
    send(&mut restored, &mut view, 1, Message::Barrier(3));
    assert!(restored.sides[0].stored().is_empty() && restored.sides[1].stored().is_empty());
    commit_state(&store, |state| restored.checkpoint(state).unwrap());
    assert_eq!(
        restored.memory_bytes(),
        0,
        "deadlines are not kept for forgotten rows"
    );
}

#[test]
fn a_lookup_join_meets_the_table_as_it_is_and_forwards_the_left_watermark() {
    let mut operator = join(JoinKind::Left, false);
    operator.lookup = true;
    let mut view = HashMap::new();
    let mut output = Vec::new();
    operator
        .on_message(1, changes("b", &[((Some(1), 5), 1)]), &mut output)
        .unwrap();
    assert!(output.is_empty(), "a table change joins nothing");
    operator
        .on_message(
            0,
            changes("a", &[((Some(1), 10), 1), ((Some(2), 20), 1)]),
            &mut output,
        )
        .unwrap();
    // The table changes; the row already joined keeps what it met.
    operator
        .on_message(
            1,
            changes("b", &[((Some(1), 5), -1), ((Some(1), 6), 1)]),
            &mut output,
        )
        .unwrap();
    operator
        .on_message(0, changes("a", &[((Some(1), 11), 1)]), &mut output)
        .unwrap();
    operator
        .on_message(0, Message::Watermark(7), &mut output)
        .unwrap();
    operator
        .on_message(1, Message::Watermark(9), &mut output)
        .unwrap();
    let watermarks: Vec<i64> = output
        .iter()
        .filter_map(|message| match message {
            Message::Watermark(watermark) => Some(*watermark),
            _ => None,
        })
        .collect();
    assert_eq!(
        watermarks,
        vec![7],
        "only the left's watermark goes through"
    );
    accumulate(output, &mut view);
    let expected: HashMap<Joined, i64> = [
        ((Some(1), Some(10), Some(1), Some(5)), 1),
        ((Some(2), Some(20), None, None), 1),
        ((Some(1), Some(11), Some(1), Some(6)), 1),
    ]
    .into();
    assert_eq!(view, expected);
    assert!(
        operator.sides[0].stored().is_empty(),
        "left rows are not kept"
    );
}

/// A write group that failed is undone: the join then behaves exactly as
/// one that never saw it, for every kind (rows, outer rows' NULL padding,
/// semi and anti joins' counts).
#[test]
fn a_rolled_back_group_leaves_the_join_as_if_it_never_came() {
    let kinds = [
        JoinKind::Inner,
        JoinKind::Left,
        JoinKind::Right,
        JoinKind::Full,
        JoinKind::Semi,
        JoinKind::Anti,
    ];
    for kind in kinds {
        let (mut undone, mut never) = (join(kind, false), join(kind, false));
        let committed = [
            (0, changes("a", &[((Some(1), 10), 1), ((Some(2), 20), 1)])),
            (1, changes("b", &[((Some(1), 5), 1), ((None, 6), 1)])),
        ];
        for (side, message) in committed {
            undone
                .on_message(side, message.clone(), &mut Vec::new())
                .unwrap();
            never.on_message(side, message, &mut Vec::new()).unwrap();
        }
        undone.commit();
        never.commit();
        // The failed group: adds, retracts the last row of a key, adds a
        // new key on both sides, and moves the right watermark.
        let failed = [
            (0, changes("a", &[((Some(2), 20), -1), ((Some(3), 30), 2)])),
            (1, changes("b", &[((Some(1), 5), -1), ((Some(3), 7), 1)])),
            (1, Message::Watermark(100)),
        ];
        for (side, message) in failed {
            undone.on_message(side, message, &mut Vec::new()).unwrap();
        }
        assert!(undone.rollback().unwrap());
        let later = [
            (1, changes("b", &[((Some(2), 8), 1), ((Some(1), 5), -1)])),
            (0, changes("a", &[((Some(1), 11), 1)])),
        ];
        for (side, message) in later {
            let (mut got, mut expected) = (Vec::new(), Vec::new());
            undone.on_message(side, message.clone(), &mut got).unwrap();
            never.on_message(side, message, &mut expected).unwrap();
            let (mut got_rows, mut expected_rows) = (HashMap::new(), HashMap::new());
            accumulate(got, &mut got_rows);
            accumulate(expected, &mut expected_rows);
            assert_eq!(got_rows, expected_rows, "{kind:?}");
        }
        for side in 0..2 {
            assert_eq!(
                undone.sides[side].stored(),
                never.sides[side].stored(),
                "{kind:?} side {side}"
            );
        }
        assert_eq!(undone.watermarks, never.watermarks, "{kind:?}");
    }
}

/// A group past the undo limit keeps nothing: undoing it is refused (the
/// view is rebuilt from its checkpoint), and the next group is undone again.
#[test]
fn a_group_past_the_undo_limit_is_refused_and_the_next_is_undone() {
    let mut operator = join(JoinKind::Inner, false);
    operator.sides = operator.sides.map(|side| side.with_undo_limit(256));
    let rows: Vec<(Row, i64)> = (0..50).map(|i| ((Some(i % 5), i), 1)).collect();
    operator
        .on_message(0, changes("a", &rows), &mut Vec::new())
        .unwrap();
    assert!(!operator.rollback().unwrap(), "too much to undo");
    operator.commit();
    let before = operator.sides[0].stored();
    operator
        .on_message(0, changes("a", &[((Some(1), 99), 1)]), &mut Vec::new())
        .unwrap();
    assert!(operator.rollback().unwrap());
    assert_eq!(operator.sides[0].stored(), before);
}

/// A row that comes and goes between two checkpoints writes nothing; one
/// the last checkpoint has and that goes is deleted.
#[test]
fn rows_that_come_and_go_between_checkpoints_leave_nothing_to_write() {
    let mut operator = join(JoinKind::Inner, false);
    let entries = |operator: &mut JoinOperator| {
        let mut batch = crate::state::WriteBatch::new();
        operator
            .checkpoint(&mut StateWriter::new(b"j/".to_vec(), &mut batch))
            .unwrap();
        batch.len()
    };
    operator
        .on_message(0, changes("a", &[((Some(1), 10), 1)]), &mut Vec::new())
        .unwrap();
    assert_eq!(entries(&mut operator), 1);
    let passing = [((Some(2), 20), 1), ((Some(2), 20), -1), ((Some(1), 10), 1)];
    operator
        .on_message(0, changes("a", &passing), &mut Vec::new())
        .unwrap();
    operator
        .on_message(0, changes("a", &[((Some(1), 10), -1)]), &mut Vec::new())
        .unwrap();
    assert_eq!(entries(&mut operator), 0, "back as checkpointed");
    operator
        .on_message(0, changes("a", &[((Some(1), 10), -1)]), &mut Vec::new())
        .unwrap();
    assert_eq!(entries(&mut operator), 1, "a checkpointed row deleted");
}

#[path = "expiry_tests.rs"]
mod expiry;
