use super::*;
use crate::state::SledStore;
use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;

fn chunk(names: &[&str], counts: &[i64], diffs: &[i64]) -> Chunk {
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let rows = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(names.to_vec())),
            Arc::new(Int64Array::from(counts.to_vec())),
        ],
    )
    .unwrap();
    Chunk {
        rows,
        diffs: Some(Int64Array::from(diffs.to_vec())),
        watermarks: None,
    }
}

fn all_rows(result: &ViewResult) -> RecordBatch {
    let batches: Vec<RecordBatch> = result
        .rows(None)
        .unwrap()
        .read()
        .unwrap()
        .map(|batch| batch.unwrap())
        .collect();
    datafusion::arrow::compute::concat_batches(&result.schema(), &batches).unwrap()
}

#[test]
fn a_subscription_asked_for_during_a_commit_starts_after_it() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let schema = chunk(&[], &[], &[]).rows.schema();
    let result = ViewResult::open(4, schema, RowLayout::Multiset, store.clone()).unwrap();
    store
        .commit(result.apply(&chunk(&["a"], &[1], &[1])).unwrap())
        .unwrap();
    result.publish();
    let writes = result.apply(&chunk(&["b"], &[2], &[1])).unwrap();
    let Subscribing::AfterCommit(mut waiting) = result.subscribe(1 << 20) else {
        panic!("a commit is staged: the subscription must wait for it");
    };
    assert!(waiting.try_recv().is_err());
    store.commit(writes).unwrap();
    result.publish();
    let subscription = waiting.try_recv().unwrap().unwrap();
    let snapshot: usize = subscription
        .snapshot
        .map(|batch| batch.unwrap().num_rows())
        .sum();
    assert_eq!(snapshot, 2, "the commit it waited for is in the snapshot");
    assert!(subscription.changes.take().unwrap().is_empty());
    store
        .commit(result.apply(&chunk(&["c"], &[3], &[1])).unwrap())
        .unwrap();
    result.publish();
    let changes = subscription.changes.take().unwrap();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].epoch > subscription.epoch);
    assert_eq!(changes[0].rows.num_rows(), 1);
}

#[test]
fn retractions_replace_rows_durably() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let schema = chunk(&[], &[], &[]).rows.schema();
    let result = ViewResult::open(3, schema.clone(), RowLayout::Multiset, store.clone()).unwrap();
    store
        .commit(result.apply(&chunk(&["b", "a"], &[1, 1], &[1, 1])).unwrap())
        .unwrap();
    result.publish();
    let writes = result
        .apply(&chunk(&["a", "a"], &[1, 2], &[-1, 1]))
        .unwrap();
    assert_eq!(result.row_count(), 2, "staged changes are not visible yet");
    store.commit(writes).unwrap();
    result.publish();
    assert_eq!(all_rows(&result).num_rows(), 2);
    let reopened = ViewResult::open(3, schema, RowLayout::Multiset, store.clone()).unwrap();
    let batch = all_rows(&reopened);
    let names: Vec<_> = batch
        .column(0)
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    let counts: Vec<_> = batch
        .column(1)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(counts, vec![2, 1]);
    assert_eq!(reopened.row_count(), 2);
}

#[test]
fn a_query_reads_one_commit_while_later_ones_land() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let schema = chunk(&[], &[], &[]).rows.schema();
    let result = ViewResult::open(1, schema, RowLayout::Multiset, store.clone()).unwrap();
    let names: Vec<String> = (0..20_000).map(|i| format!("row{i:05}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ones = vec![1; refs.len()];
    store
        .commit(result.apply(&chunk(&refs, &ones, &ones)).unwrap())
        .unwrap();
    result.publish();
    let mut reading = result.rows(None).unwrap().read().unwrap();
    let first = reading.next().unwrap().unwrap();
    // Every row is replaced (count 1 -> 2) while the query is half way.
    let minus = vec![-1; refs.len()];
    store
        .commit(result.apply(&chunk(&refs, &ones, &minus)).unwrap())
        .unwrap();
    let twos = vec![2; refs.len()];
    store
        .commit(result.apply(&chunk(&refs, &twos, &ones)).unwrap())
        .unwrap();
    result.publish();
    let mut seen = first.num_rows();
    for batch in reading {
        let batch = batch.unwrap();
        let counts = batch.column(1).as_primitive::<Int64Type>();
        assert!(
            counts.values().iter().all(|&n| n == 1),
            "the old epoch only"
        );
        seen += batch.num_rows();
    }
    assert_eq!(seen, refs.len());
    let now = all_rows(&result);
    assert_eq!(now.num_rows(), refs.len());
    let counts = now.column(1).as_primitive::<Int64Type>();
    assert!(counts.values().iter().all(|&n| n == 2));
    // With no reader left, the next change drops the old versions.
    drop(now);
    let value = store.scan_prefix(&view_rows_prefix(1)).unwrap()[0].1.len();
    assert!(
        value <= 1 + 2 * 16,
        "old versions are collected: {value} bytes"
    );
}

fn names_and_counts(batch: &RecordBatch) -> Vec<(String, i64)> {
    let names = batch.column(0).as_string::<i32>();
    let counts = batch.column(1).as_primitive::<Int64Type>();
    names
        .iter()
        .zip(counts.iter())
        .map(|(name, count)| (name.unwrap().to_string(), count.unwrap()))
        .collect()
}

fn keyed(id: u64, store: &Arc<dyn StateStore>) -> ViewResult {
    let schema = chunk(&[], &[], &[]).rows.schema();
    ViewResult::open(id, schema, RowLayout::Keyed(vec![0]), store.clone()).unwrap()
}

/// One statement: its changes applied (what they write put in the store
/// at once, as the dataflow's spill does), sealed, committed, published.
fn commit(result: &ViewResult, store: &Arc<dyn StateStore>, changes: &[Chunk]) {
    let mut writes = WriteBatch::new();
    for change in changes {
        writes.extend(result.apply(change).unwrap());
        if !writes.is_empty() {
            if let Some(reservation) = result.reserve().unwrap() {
                store.commit(reservation).unwrap();
            }
            let rows = writes.split_off_prefix(&crate::state::all_view_rows_prefix());
            store.stage(rows).unwrap();
            result.spilled();
        }
    }
    writes.extend(ViewSink::seal(result).unwrap());
    store.commit(writes).unwrap();
    result.publish();
}

fn pairs(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter()
        .map(|(name, n)| (name.to_string(), *n))
        .collect()
}

#[test]
fn a_keyed_view_keeps_each_key_s_last_row_through_updates_and_deletes() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(5, &store);
    commit(&result, &store, &[chunk(&["b", "a"], &[1, 1], &[1, 1])]);
    // An update with the insertion first, one with the retraction first
    // (two chunks of one statement), and a delete to empty.
    commit(&result, &store, &[chunk(&["a", "a"], &[2, 1], &[1, -1])]);
    let second = chunk(&["a", "a"], &[2, 3], &[1, -1]);
    commit(
        &result,
        &store,
        &[chunk(&["a", "a"], &[2, 3], &[-1, 1]), second],
    );
    commit(&result, &store, &[chunk(&["b"], &[1], &[-1])]);
    assert_eq!(names_and_counts(&all_rows(&result)), pairs(&[("a", 2)]));
    assert_eq!(result.row_count(), 1);
    // Refilled after its delete, then reopened from the store.
    commit(&result, &store, &[chunk(&["b"], &[7], &[1])]);
    let reopened = keyed(5, &store);
    assert_eq!(reopened.layout(), &RowLayout::Keyed(vec![0]));
    let rows = names_and_counts(&all_rows(&reopened));
    assert_eq!(rows, pairs(&[("a", 2), ("b", 7)]));
    assert_eq!(reopened.row_count(), 2);
}

#[test]
fn many_statements_leave_few_runs_and_merged_ones_are_deleted() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(10, &store);
    let names: Vec<String> = (0..400).map(|i| format!("k{i:03}")).collect();
    for (statement, name) in names.iter().enumerate() {
        // Each statement adds a key and updates the one before it.
        let mut change = chunk(&[name], &[1], &[1]);
        if statement > 0 {
            let previous = names[statement - 1].as_str();
            change = chunk(&[name, previous, previous], &[1, 1, 2], &[1, -1, 1]);
        }
        commit(&result, &store, &[change]);
    }
    let rows = names_and_counts(&all_rows(&result));
    assert_eq!(rows.len(), 400);
    assert!(rows[..399].iter().all(|(_, n)| *n == 2) && rows[399].1 == 1);
    let runs = result.committed_runs();
    assert!(runs.len() <= 6, "{} runs", runs.len());
    let stored = crate::state::runs::stored_run_ids(&*store, &super::view_rows_prefix(10)).unwrap();
    assert!(stored.len() <= runs.len() + 2, "merged runs go: {stored:?}");
}

#[test]
fn a_keyed_view_refuses_a_second_row_for_a_key_in_a_statement() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(6, &store);
    commit(&result, &store, &[chunk(&["a"], &[1], &[1])]);
    result.apply(&chunk(&["b"], &[2], &[1])).unwrap();
    let error = result.apply(&chunk(&["b"], &[3], &[1])).unwrap_err();
    assert_eq!(error.code, "XX000");
    result.discard();
    assert_eq!(names_and_counts(&all_rows(&result)), pairs(&[("a", 1)]));
}

#[test]
fn a_keyed_query_reads_one_commit_while_later_ones_land() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(8, &store);
    let names: Vec<String> = (0..20_000).map(|i| format!("row{i:05}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ones = vec![1; refs.len()];
    commit(&result, &store, &[chunk(&refs, &ones, &ones)]);
    let mut reading = result.rows(None).unwrap().read().unwrap();
    let mut seen = reading.next().unwrap().unwrap().num_rows();
    // Every key's row goes 1 -> 2, many times over, while the query is
    // half way; the runs it reads are merged away meanwhile (past a dozen
    // runs), and later commits delete only what no reader holds.
    for value in 2..20 {
        let mut update = refs.clone();
        update.extend(&refs);
        let values: Vec<i64> = vec![value - 1; refs.len()]
            .into_iter()
            .chain(vec![value; refs.len()])
            .collect();
        let diffs: Vec<i64> = vec![-1; refs.len()]
            .into_iter()
            .chain(ones.clone())
            .collect();
        commit(&result, &store, &[chunk(&update, &values, &diffs)]);
    }
    for batch in reading {
        let batch = batch.unwrap();
        let counts = batch.column(1).as_primitive::<Int64Type>();
        assert!(counts.values().iter().all(|&n| n == 1), "the old commit");
        seen += batch.num_rows();
    }
    assert_eq!(seen, refs.len());
    let now = all_rows(&result);
    let counts = now.column(1).as_primitive::<Int64Type>();
    assert!(counts.values().iter().all(|&n| n == 19) && now.num_rows() == refs.len());
    assert!(result.committed_runs().len() <= 12);
    // Once the reader is gone, the next commit deletes what it held.
    commit(
        &result,
        &store,
        &[chunk(&["row00000", "row00000"], &[19, 20], &[-1, 1])],
    );
    let stored = crate::state::runs::stored_run_ids(&*store, &super::view_rows_prefix(8)).unwrap();
    assert_eq!(stored.len(), result.committed_runs().len());
}

#[test]
fn a_big_keyed_statement_writes_runs_early_and_a_crash_or_failure_leaves_none() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(9, &store);
    commit(&result, &store, &[chunk(&["a", "b"], &[1, 1], &[1, 1])]);
    // A statement bigger than the staged limit (4 kB in unit tests): its
    // first changes become runs before it ends, spilled to the store.
    let names: Vec<String> = (0..300).map(|i| format!("new{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ones = vec![1; refs.len()];
    let spill = |result: &ViewResult| {
        let mut writes = WriteBatch::new();
        for (name, one) in refs.iter().zip(&ones) {
            writes.extend(result.apply(&chunk(&[name], &[*one], &[1])).unwrap());
        }
        store.commit(result.reserve().unwrap().unwrap()).unwrap();
        store
            .stage(writes.split_off_prefix(&crate::state::all_view_rows_prefix()))
            .unwrap();
        result.spilled();
        writes.extend(
            result
                .apply(&chunk(&["a", "a", "b"], &[1, 3, 1], &[-1, 1, -1]))
                .unwrap(),
        );
        writes.extend(ViewSink::seal(result).unwrap());
        writes
    };
    let before = pairs(&[("a", 1), ("b", 1)]);
    let writes = spill(&result);
    drop(writes);
    // A crash: the reopened view reads what was committed, and retires
    // the runs the statement left.
    let reopened = keyed(9, &store);
    assert_eq!(names_and_counts(&all_rows(&reopened)), before);
    commit(&reopened, &store, &[chunk(&["c"], &[1], &[1])]);
    // (A run merged away by a commit goes with the next one.)
    commit(&reopened, &store, &[chunk(&["c", "c"], &[1, 1], &[-1, 1])]);
    let stored = crate::state::runs::stored_run_ids(&*store, &super::view_rows_prefix(9)).unwrap();
    assert_eq!(
        stored.len(),
        reopened.committed_runs().len(),
        "orphans deleted"
    );
    // A failure: discarded, then committed for real.
    let writes = spill(&reopened);
    reopened.discard();
    drop(writes);
    let with_c = pairs(&[("a", 1), ("b", 1), ("c", 1)]);
    assert_eq!(names_and_counts(&all_rows(&reopened)), with_c);
    let writes = spill(&reopened);
    store.commit(writes).unwrap();
    reopened.publish();
    let rows = names_and_counts(&all_rows(&keyed(9, &store)));
    assert_eq!(rows.len(), 302);
    assert_eq!(&rows[..2], &pairs(&[("a", 3), ("c", 1)])[..]);
}

fn counted(id: u64, store: &Arc<dyn StateStore>) -> ViewResult {
    let schema = chunk(&[], &[], &[]).rows.schema();
    ViewResult::open(id, schema, RowLayout::Counted, store.clone()).unwrap()
}

/// The rows a counted view shows, each with how many times.
fn counted_rows(result: &ViewResult) -> BTreeMap<(String, i64), i64> {
    let mut rows = BTreeMap::new();
    for row in names_and_counts(&all_rows(result)) {
        *rows.entry(row).or_insert(0) += 1;
    }
    rows
}

#[test]
fn a_counted_view_keeps_repeated_rows_through_statements_failures_and_crashes() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut result = counted(11, &store);
    let mut model: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut seed = 7u64;
    let mut next = |below: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    for statement in 0..120 {
        // Each statement's chunks: rows added (repeats too) and rows the
        // view holds taken away — down to none of a row, and back.
        let mut pending = model.clone();
        let mut chunks = Vec::new();
        // Every tenth statement outgrows the staged limit (4 kB in unit
        // tests) and writes runs before it ends.
        let size = if statement % 10 == 9 { 200 } else { 6 };
        for _ in 0..1 + next(3) {
            let (mut names, mut values, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..size {
                let row = (format!("r{}", next(40)), next(3) as i64);
                let held = pending.get(&row).copied().unwrap_or(0);
                let diff = if held > 0 && next(2) == 0 { -1 } else { 1 };
                *pending.entry(row.clone()).or_insert(0) += diff;
                names.push(row.0);
                values.push(row.1);
                diffs.push(diff);
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            chunks.push(chunk(&names, &values, &diffs));
        }
        pending.retain(|_, count| *count != 0);
        match next(8) {
            // A failed statement, then a crash: neither leaves a trace.
            0 => {
                for change in &chunks {
                    result.apply(change).unwrap();
                }
                result.discard();
            }
            1 => {
                for change in &chunks {
                    drop(result.apply(change).unwrap());
                }
                result = counted(11, &store);
            }
            _ => {
                commit(&result, &store, &chunks);
                model = pending;
            }
        }
        assert_eq!(counted_rows(&result), model, "statement {statement}");
        let rows: i64 = model.values().sum();
        assert_eq!(result.row_count(), rows);
    }
    let reopened = counted(11, &store);
    assert_eq!(reopened.layout(), &RowLayout::Counted);
    assert_eq!(counted_rows(&reopened), model);
    // Runs left by failed statements go with the next commits.
    for _ in 0..2 {
        commit(&reopened, &store, &[chunk(&["x", "x"], &[0, 0], &[1, -1])]);
    }
    let (committed, stored) = (
        reopened.committed_runs().len(),
        crate::state::runs::stored_run_ids(&*store, &super::view_rows_prefix(11))
            .unwrap()
            .len(),
    );
    assert!(
        committed <= 12 && stored <= committed + 1,
        "{committed} {stored}"
    );
}
