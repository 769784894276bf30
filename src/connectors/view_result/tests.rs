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

fn commit(result: &ViewResult, store: &Arc<dyn StateStore>, change: Chunk) {
    store.commit(result.apply(&change).unwrap()).unwrap();
    result.publish();
}

#[test]
fn a_keyed_view_keeps_one_entry_per_key_through_updates_and_deletes() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(5, &store);
    commit(&result, &store, chunk(&["b", "a"], &[1, 1], &[1, 1]));
    // An update with the insertion first, one with the retraction first,
    // and a delete to empty.
    commit(&result, &store, chunk(&["a", "a"], &[2, 1], &[1, -1]));
    commit(&result, &store, chunk(&["a", "a"], &[2, 3], &[-1, 1]));
    commit(&result, &store, chunk(&["b"], &[1], &[-1]));
    let expected = vec![("a".to_string(), 3)];
    assert_eq!(names_and_counts(&all_rows(&result)), expected);
    let entries = store.scan_prefix(&view_rows_prefix(5)).unwrap();
    // One entry per key: b's keeps its last row for readers of that
    // commit until the key is next written.
    assert_eq!(entries.len(), 2);
    // Refilled after its delete, then reopened from the store.
    commit(&result, &store, chunk(&["b"], &[7], &[1]));
    let reopened = keyed(5, &store);
    assert_eq!(reopened.layout(), &RowLayout::Keyed(vec![0]));
    let rows = names_and_counts(&all_rows(&reopened));
    assert_eq!(rows, vec![("a".to_string(), 3), ("b".to_string(), 7)]);
    assert_eq!(reopened.row_count(), 2);
}

#[test]
fn a_keyed_view_refuses_a_second_row_for_a_key() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(6, &store);
    commit(&result, &store, chunk(&["a"], &[1], &[1]));
    let error = result.apply(&chunk(&["a"], &[2], &[1])).unwrap_err();
    assert_eq!(error.code, "XX000");
    result.discard();
    assert_eq!(names_and_counts(&all_rows(&result)), vec![("a".into(), 1)]);
}

#[test]
fn a_keyed_query_reads_one_commit_while_later_ones_land() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(8, &store);
    let names: Vec<String> = (0..20_000).map(|i| format!("row{i:05}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ones = vec![1; refs.len()];
    commit(&result, &store, chunk(&refs, &ones, &ones));
    let mut reading = result.rows(None).unwrap().read().unwrap();
    let mut seen = reading.next().unwrap().unwrap().num_rows();
    // Every key's row goes 1 -> 2 while the query is half way.
    let twos = vec![2; refs.len()];
    let mut update = refs.clone();
    update.extend(&refs);
    let values: Vec<i64> = ones.iter().chain(&twos).copied().collect();
    let diffs: Vec<i64> = vec![-1; refs.len()]
        .into_iter()
        .chain(ones.clone())
        .collect();
    commit(&result, &store, chunk(&update, &values, &diffs));
    for batch in reading {
        let batch = batch.unwrap();
        let counts = batch.column(1).as_primitive::<Int64Type>();
        assert!(counts.values().iter().all(|&n| n == 1), "the old epoch");
        seen += batch.num_rows();
    }
    assert_eq!(seen, refs.len());
    let now = all_rows(&result);
    let counts = now.column(1).as_primitive::<Int64Type>();
    assert!(counts.values().iter().all(|&n| n == 2) && now.num_rows() == refs.len());
}

#[test]
fn a_keyed_statement_spilled_to_the_store_commits_or_is_discarded() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let result = keyed(9, &store);
    commit(&result, &store, chunk(&["a", "b"], &[1, 1], &[1, 1]));
    // A big statement: its first changes go to the store before it ends,
    // then it touches the same key again.
    let spill = |result: &ViewResult| {
        let mut writes = result
            .apply(&chunk(&["a", "a"], &[1, 2], &[-1, 1]))
            .unwrap();
        store.commit(result.reserve().unwrap().unwrap()).unwrap();
        store
            .stage(writes.split_off_prefix(&crate::state::all_view_rows_prefix()))
            .unwrap();
        result.spilled();
        let mut rest = result
            .apply(&chunk(&["a", "a", "b"], &[2, 3, 1], &[-1, 1, -1]))
            .unwrap();
        rest.extend(writes);
        rest
    };
    let writes = spill(&result);
    result.discard();
    drop(writes);
    let before = vec![("a".to_string(), 1), ("b".to_string(), 1)];
    assert_eq!(names_and_counts(&all_rows(&result)), before);
    assert_eq!(
        names_and_counts(&all_rows(&keyed(9, &store))),
        before,
        "after a crash too"
    );
    let writes = spill(&result);
    store.commit(writes).unwrap();
    result.publish();
    assert_eq!(names_and_counts(&all_rows(&result)), vec![("a".into(), 3)]);
    assert_eq!(
        names_and_counts(&all_rows(&keyed(9, &store))),
        vec![("a".into(), 3)]
    );
}
