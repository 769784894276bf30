//! A join whose rows expire (a window or interval join) writing its
//! changes as runs past a tiny budget, against the same join in memory:
//! random rows on both sides, watermarks rising, failed write groups
//! rolled back, checkpoints and crashes (both restored from their last
//! checkpoint). Rows must meet, and be forgotten, exactly as in memory —
//! after a restore too, where the deadlines are rebuilt from the runs.

use super::*;

/// The expiring join writing to `store` past `budget_bytes`, restored
/// from it.
fn spilling_expiring_join(store: &Arc<SledStore>, budget_bytes: usize) -> JoinOperator {
    attached(expiring_join(), store, budget_bytes)
}

fn in_memory_join(store: &SledStore) -> JoinOperator {
    let mut operator = expiring_join();
    operator.restore(&stored_state(store)).unwrap();
    operator
}

fn expiring_spilled_run(seed: u64) {
    let mut random = Random(seed);
    let spilled_directory = tempfile::tempdir().unwrap();
    let spilled_store = Arc::new(SledStore::open(spilled_directory.path()).unwrap());
    let memory_directory = tempfile::tempdir().unwrap();
    let memory_store = SledStore::open(memory_directory.path()).unwrap();
    let budget_bytes = [0, 300, 3000][random.below(3) as usize];
    let mut spilled = spilling_expiring_join(&spilled_store, budget_bytes);
    let mut memory = in_memory_join(&memory_store);
    let mut watermarks = [0i64; 2];
    for step in 0..300 {
        let side = random.below(2) as usize;
        let message = match random.below(4) {
            0 => {
                watermarks[side] += random.below(6) as i64;
                Message::Watermark(watermarks[side])
            }
            _ => {
                let rows: Vec<(Row, i64)> = (0..=random.below(4))
                    .map(|_| {
                        let time = watermarks[side] + random.below(20) as i64;
                        ((Some(random.below(4) as i64), time), 1)
                    })
                    .collect();
                changes(["a", "b"][side], &rows)
            }
        };
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        memory
            .on_message(side, message.clone(), &mut expected)
            .unwrap();
        spilled.on_message(side, message, &mut got).unwrap();
        let (mut expected_view, mut got_view) = (HashMap::new(), HashMap::new());
        accumulate(expected, &mut expected_view);
        accumulate(got, &mut got_view);
        let context = format!("seed {seed} budget {budget_bytes} step {step}");
        assert_eq!(got_view, expected_view, "{context}");
        for (got, expected) in spilled.sides.iter().zip(&memory.sides) {
            assert_eq!(got.stored(), expected.stored(), "{context}");
        }
        match random.below(10) {
            0 => {
                assert!(memory.rollback().unwrap());
                assert!(spilled.rollback().unwrap());
            }
            1 | 2 => {
                memory.commit();
                spilled.commit();
                commit_state(&memory_store, |state| memory.checkpoint(state).unwrap());
                commit_state(&*spilled_store, |state| spilled.checkpoint(state).unwrap());
                if random.below(2) == 0 {
                    memory = in_memory_join(&memory_store);
                    spilled = spilling_expiring_join(&spilled_store, budget_bytes);
                    watermarks = [0, 0];
                }
            }
            _ => {
                memory.commit();
                spilled.commit();
            }
        }
    }
}

#[test]
fn an_expiring_join_writing_runs_joins_and_forgets_as_one_in_memory() {
    for seed in 1..12 {
        expiring_spilled_run(seed * 7_919);
    }
}
