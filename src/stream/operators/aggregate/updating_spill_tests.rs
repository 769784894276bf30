//! The GROUP BY without a window spilling its groups (`updating_spill`)
//! against the row-level aggregate in memory: the same random rows
//! (inserted, and over a retracting input taken back to empty and
//! refilled), with a budget small enough that nearly every batch lets the
//! groups go, checkpoints, crashes (restored from the last checkpoint)
//! and failed write groups (undone in place) among them.

use super::*;
use crate::stream::spill::SpillSpace;

/// The vectorised operator spilling to `store` past `budget_bytes`,
/// restored from it.
fn spilling(shape: Shape, store: &Arc<SledStore>, budget_bytes: usize) -> Stage {
    let (groups, calls, window, schema) = parts(shape);
    let operator =
        UpdatingAggregateOperator::new(groups, calls, window, schema, handling(), shape.retracting)
            .unwrap();
    let mut stage: Stage = Stage::new(Box::new(operator));
    stage.attach(SpillSpace::for_test(
        store.clone(),
        b"opstate/a/",
        budget_bytes,
    ));
    stage.restore(&stored_state(&**store)).unwrap();
    stage
}

fn random_rows(random: &mut Random, shape: Shape, live: &mut Vec<Row>) -> Vec<(Row, i64)> {
    let mut rows = Vec::new();
    for _ in 0..1 + random.below(12) {
        if shape.retracting && !live.is_empty() && random.below(2) == 0 {
            let row = live.swap_remove(random.below(live.len() as u64) as usize);
            rows.push((row, -1));
            continue;
        }
        let key = match random.below(40) {
            0 => None,
            key => Some(key),
        };
        let value = (random.below(6) > 0).then(|| random.below(14) - 3);
        let float = (random.below(6) > 0).then(|| random.below(9) as f64);
        let row = (key, value, float, 0);
        live.push(row);
        rows.push((row, 1));
    }
    rows
}

fn spilled_run(shape: Shape, seed: u64, budget_bytes: usize) {
    let mut random = Random(seed);
    let directory = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut spilled = spilling(shape, &store, budget_bytes);
    let mut reference = Tested::new(row_level(shape));
    let (mut committed, mut live): (Vec<Row>, Vec<Row>) = (Vec::new(), Vec::new());
    let mut checkpointed = Vec::new();
    let mut compared = 0;
    for step in 0..300 {
        let context = format!("{shape:?} seed {seed} budget {budget_bytes} step {step}");
        // A write group of one to three batches.
        for _ in 0..1 + random.below(3) {
            let rows = random_rows(&mut random, shape, &mut live);
            let input = chunk(&rows, None);
            let (mut expected, mut got) = (Vec::new(), Vec::new());
            let stage = &mut reference.stage;
            stage.on_batch(input.clone(), &mut expected).unwrap();
            spilled.on_batch(input, &mut got).unwrap();
            assert_eq!(changes(&got), changes(&expected), "{context}");
            compared += expected.len();
        }
        match random.below(12) {
            0 | 1 => {
                assert!(reference.stage.rollback().unwrap());
                assert!(spilled.rollback().unwrap(), "{context}");
                live = committed.clone();
            }
            2 | 3 => {
                commit_checkpoint(&mut reference.stage, &reference.store);
                commit_checkpoint(&mut spilled, &*store);
                reference.stage.commit();
                spilled.commit();
                committed = live.clone();
                checkpointed = live.clone();
            }
            4 => {
                // A crash: both start again from their last checkpoints.
                reference.stage = row_level(shape);
                let state = stored_state(&reference.store);
                reference.stage.restore(&state).unwrap();
                spilled = spilling(shape, &store, budget_bytes);
                live = checkpointed.clone();
                committed = checkpointed.clone();
            }
            _ => {
                reference.stage.commit();
                spilled.commit();
                committed = live.clone();
            }
        }
    }
    assert!(compared > 100, "{shape:?}: too few changes compared");
}

#[test]
fn a_spilled_group_by_changes_the_view_as_one_in_memory_does() {
    for retracting in [false, true] {
        let shape = Shape {
            windowed: false,
            retracting,
        };
        for (seed, budget_bytes) in [0, 2_000, 20_000, usize::MAX].into_iter().enumerate() {
            spilled_run(shape, seed as u64, budget_bytes);
            spilled_run(shape, seed as u64 + 10, budget_bytes);
        }
    }
}

/// A bin over budget is written out and let go; its groups come back
/// from the runs when a batch touches them, and after a restart.
#[test]
fn a_group_by_over_budget_lets_its_groups_go_and_reads_them_back() {
    let shape = Shape {
        windowed: false,
        retracting: true,
    };
    let directory = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut stage = spilling(shape, &store, 1_000);
    let row = |key: i64| ((Some(key), Some(key), Some(1.0), 0), 1);
    let many: Vec<_> = (0..2_000).map(row).collect();
    stage.on_batch(chunk(&many, None), &mut Vec::new()).unwrap();
    stage.commit();
    assert!(stage.memory_bytes() < 50_000, "the groups were let go");
    let mut output = Vec::new();
    stage.on_batch(chunk(&[row(7)], None), &mut output).unwrap();
    assert_eq!(changes(&output), vec!["7,1,7,1,7,1 -1", "7,2,14,1,14,2 +1"]);
    stage.commit();
    commit_checkpoint(&mut stage, &*store);
    let mut restarted = spilling(shape, &store, 1_000);
    output.clear();
    restarted
        .on_batch(chunk(&[row(7)], None), &mut output)
        .unwrap();
    assert_eq!(
        changes(&output),
        vec!["7,2,14,1,14,2 -1", "7,3,21,1,21,3 +1"]
    );
}
