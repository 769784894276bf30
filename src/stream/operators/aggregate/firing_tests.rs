//! Unit tests of `EMIT EVERY` in the aggregate operator: one change per
//! group per firing, final rows at close, late corrections batched, and
//! pending groups across a checkpoint.

use super::tests::{chunk, operator_with, rows};
use super::*;
use crate::stream::operator::Stage;
use crate::stream::LatePolicy;

fn firing(emit: EmitMode, policy: LatePolicy) -> Stage<AggregateOperator> {
    let (mut stage, _) = operator_with(emit, policy);
    stage.operator_mut().publish_at_firings();
    stage
}

fn fire(aggregate: &mut Stage<AggregateOperator>) -> Vec<(i64, String, i64, i64)> {
    let mut output = Vec::new();
    aggregate.operator_mut().fire(&mut output).unwrap();
    rows(&output)
}

#[test]
fn each_group_changes_once_per_firing() {
    let mut aggregate = firing(EmitMode::OnUpdate, LatePolicy::Drop);
    let mut output = Vec::new();
    let input = chunk(&[("a", 0), ("a", 0), ("b", 0)], &[None, None, None]);
    aggregate.on_batch(input, &mut output).unwrap();
    assert!(output.is_empty(), "changes wait for the firing");
    assert_eq!(
        fire(&mut aggregate),
        vec![(0, "a".into(), 2, 1), (0, "b".into(), 1, 1)]
    );
    let input = chunk(&[("a", 0), ("a", 0)], &[None, None]);
    aggregate.on_batch(input, &mut output).unwrap();
    assert_eq!(
        fire(&mut aggregate),
        vec![(0, "a".into(), 2, -1), (0, "a".into(), 4, 1)]
    );
    assert!(fire(&mut aggregate).is_empty(), "nothing changed since");
}

#[test]
fn early_firings_then_the_final_row_at_close_then_batched_corrections() {
    let policy = LatePolicy::Update {
        allowed_lateness_ns: 100,
    };
    let mut aggregate = firing(EmitMode::OnWindowClose, policy);
    let mut output = Vec::new();
    aggregate
        .on_batch(chunk(&[("a", 0)], &[None]), &mut output)
        .unwrap();
    assert_eq!(fire(&mut aggregate), vec![(0, "a".into(), 1, 1)]);
    aggregate
        .on_batch(chunk(&[("a", 0), ("a", 10)], &[None, None]), &mut output)
        .unwrap();
    // The window [0, 10) closes: its final row now, not at the firing.
    aggregate.on_watermark(10, &mut output).unwrap();
    assert_eq!(
        rows(&output),
        vec![(0, "a".into(), 1, -1), (0, "a".into(), 2, 1)]
    );
    output.clear();
    // Two late rows for it, and the watermark moves on: the correction
    // waits for the firing, once for both rows.
    for watermark in [11, 12] {
        let late = chunk(&[("a", 0)], &[Some(watermark)]);
        aggregate.on_batch(late, &mut output).unwrap();
    }
    aggregate.on_watermark(15, &mut output).unwrap();
    assert!(rows(&output).is_empty(), "{output:?}");
    assert_eq!(
        fire(&mut aggregate),
        vec![
            (0, "a".into(), 2, -1),
            (0, "a".into(), 4, 1),
            (10, "a".into(), 1, 1)
        ]
    );
    // A correction still pending when the window's state goes is
    // published then.
    aggregate
        .on_batch(chunk(&[("a", 0)], &[Some(50)]), &mut output)
        .unwrap();
    aggregate.on_watermark(200, &mut output).unwrap();
    assert_eq!(
        rows(&output),
        vec![(0, "a".into(), 4, -1), (0, "a".into(), 5, 1)]
    );
}

#[test]
fn pending_groups_survive_a_restore() {
    use crate::state::SledStore;
    use crate::stream::checkpoint::testing::{commit_checkpoint, stored_state};
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut original = firing(EmitMode::OnUpdate, LatePolicy::Drop);
    let mut ignored = Vec::new();
    let first = chunk(&[("a", 0), ("b", 0)], &[None, None]);
    original.on_batch(first, &mut ignored).unwrap();
    fire(&mut original);
    let second = chunk(&[("a", 0), ("c", 10)], &[None, None]);
    original.on_batch(second, &mut ignored).unwrap();
    commit_checkpoint(&mut original, &store);

    let mut restored = firing(EmitMode::OnUpdate, LatePolicy::Drop);
    restored.restore(&stored_state(&store)).unwrap();
    let expected = fire(&mut original);
    assert_eq!(
        expected,
        vec![
            (0, "a".into(), 1, -1),
            (0, "a".into(), 2, 1),
            (10, "c".into(), 1, 1)
        ]
    );
    assert_eq!(fire(&mut restored), expected);
}

#[test]
fn a_fire_message_publishes_then_passes_on() {
    let mut aggregate = firing(EmitMode::OnUpdate, LatePolicy::Drop);
    let input = Message::batch(chunk(&[("a", 0)], &[None]));
    let output = aggregate.run(vec![input, Message::Fire(7)]).unwrap();
    assert_eq!(rows(&output), vec![(0, "a".into(), 1, 1)]);
    assert!(matches!(output.last(), Some(Message::Fire(7))));
}

/// A failed write group's changes to the pending groups are undone in
/// reverse: a group it noted after a firing took the group's earlier entry
/// comes back with that entry.
#[test]
fn pending_groups_roll_back_notes_and_firings_in_reverse() {
    use super::firing::PendingGroups;
    use datafusion::common::ScalarValue;
    let row = |n: i64| Ok(Some(vec![ScalarValue::Int64(Some(n))]));
    let mut pending = PendingGroups::default();
    pending.note(10, b"a", || row(1)).unwrap();
    pending.commit();
    pending.note(10, b"b", || row(2)).unwrap();
    assert_eq!(pending.take_all().len(), 2);
    pending.note(10, b"a", || row(3)).unwrap();
    pending.rollback();
    let left = pending.take_all();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, (10, b"a".to_vec()));
    assert_eq!(left[0].1, Some(vec![ScalarValue::Int64(Some(1))]));
}
