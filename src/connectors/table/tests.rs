//! Unit tests of the table log: durability, reopening, watermarks.

use super::*;
use crate::state::{SledStore, WriteBatch};
use crate::stream::Message;
use datafusion::arrow::array::{Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn batch(ids: &[i64], names: &[&str]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(names.to_vec())),
        ],
    )
    .unwrap()
}

const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn ids_of(range: std::ops::Range<i64>) -> Vec<i64> {
    range.collect()
}

/// The first column of every committed row, read back from the store.
fn ids(log: &TableLog) -> Vec<i64> {
    EntryReader::new(&*log.store, log.id, log.schema(), None, 0, log.row_count())
        .unwrap()
        .flat_map(|entry| {
            let rows = entry.unwrap().rows;
            let column = rows
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            column.values().to_vec()
        })
        .collect()
}

/// Every message of a history, chunks joined.
fn messages(history: History) -> Vec<Message> {
    history.flat_map(|chunk| chunk.unwrap()).collect()
}

/// A plain table (no stream options) over `store`.
fn plain(id: u64, store: &Arc<dyn StateStore>) -> Arc<TableLog> {
    Arc::new(
        TableLog::open(
            id,
            "t",
            schema(),
            &Constraints::default(),
            None,
            GroupCommitter::new(store.clone(), None),
            false,
        )
        .unwrap(),
    )
}

#[tokio::test]
async fn appended_rows_are_reloaded_in_order() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(7, &store);
    assert_eq!(
        log.append(vec![batch(&[1, 2], &["a", "b"])], None)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        log.append(vec![batch(&[3], &["c"])], None).await.unwrap(),
        1
    );
    assert_eq!(log.append(vec![], None).await.unwrap(), 0);

    let reopened = plain(7, &store);
    assert_eq!(reopened.row_count(), 3);
    assert_eq!(ids(&reopened), vec![1, 2, 3]);
    // The next write continues the log instead of overwriting entry 0.
    reopened
        .append(vec![batch(&[4], &["d"])], None)
        .await
        .unwrap();
    assert_eq!(
        reopened
            .store
            .scan_prefix(&entries_prefix(7))
            .unwrap()
            .len(),
        3
    );
    assert_eq!(ids(&plain(7, &store)), vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn large_writes_are_split_into_entries() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(1, &store);
    let count = ROWS_PER_ENTRY + 10;
    let values: Vec<i64> = (0..count as i64).collect();
    let names = vec!["x"; count];
    log.append(vec![batch(&values, &names)], None)
        .await
        .unwrap();
    assert_eq!(store.scan_prefix(&entries_prefix(1)).unwrap().len(), 2);
    assert_eq!(plain(1, &store).row_count(), count as u64);
    assert_eq!(ids(&plain(1, &store)), ids_of(0..count as i64));
}

/// A stream of (ts) rows with `WATERMARK FOR ts` and an idle timeout.
fn clocked() -> (SchemaRef, StreamDefinition) {
    use datafusion::arrow::datatypes::TimeUnit;
    let schema = Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    )]));
    let stream = StreamDefinition {
        watermark: Some(crate::catalog::WatermarkDefinition {
            column: "ts".to_string(),
            delay_ms: 0,
            idle_timeout_ms: Some(1),
            processing_time: false,
        }),
        append_only: true,
        proctime: None,
        retention_ms: None,
        source: None,
    };
    (schema, stream)
}

fn times(schema: &SchemaRef, values: &[i64]) -> RecordBatch {
    use datafusion::arrow::array::TimestampNanosecondArray;
    let column = TimestampNanosecondArray::from(values.to_vec());
    RecordBatch::try_new(schema.clone(), vec![Arc::new(column)]).unwrap()
}

#[tokio::test]
async fn raised_watermarks_are_logged_and_replayed_where_they_happened() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let (schema, stream) = clocked();
    let open = || {
        let constraints = Constraints::default();
        Arc::new(
            TableLog::open(
                3,
                "t",
                schema.clone(),
                &constraints,
                Some(&stream),
                GroupCommitter::new(store.clone(), None),
                false,
            )
            .unwrap(),
        )
    };
    let log = open();
    log.append(vec![times(&schema, &[10, 20])], None)
        .await
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let due = log.due_watermark().expect("idle past the timeout");
    assert!(due > 20, "moves on from the last watermark");
    log.raise_watermark(100).await.unwrap();
    log.append(vec![times(&schema, &[50])], None).await.unwrap();
    assert_eq!(
        log.watermark_ns(),
        Some(100),
        "a row behind it does not lower it"
    );

    let reopened = open();
    assert_eq!(reopened.watermark_ns(), Some(100));
    let watermarks: Vec<i64> = messages(reopened.history().unwrap())
        .into_iter()
        .filter_map(|message| match message {
            Message::Watermark(watermark) => Some(watermark),
            _ => None,
        })
        .collect();
    // After the first rows (20), the raise (100), then the 50 row (still 100).
    assert_eq!(watermarks, vec![20, 100, 100]);
    // From a checkpoint after the first two rows the raise still comes back.
    let tail = messages(reopened.history_from(2).unwrap());
    assert!(matches!(tail.first(), Some(Message::Watermark(100))));
    // From the middle of a write, the skipped row still moved the watermark.
    let tail = messages(reopened.history_from(1).unwrap());
    let Some(Message::Batch(chunk)) = tail.first() else {
        panic!("rows first: {tail:?}");
    };
    assert_eq!(chunk.num_rows(), 1);
    assert_eq!(chunk.watermarks.as_ref().unwrap().value(0), 10);
}

#[tokio::test]
async fn spilled_rows_stay_invisible_until_the_commit_and_go_if_it_never_comes() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(2, &store);
    log.append(vec![batch(&[1], &["a"])], None).await.unwrap();
    let many = (0..append::SPILL_ROWS as i64 + 5).collect::<Vec<_>>();
    let names = vec!["x"; many.len()];
    let mut write = BulkWrite::begin(log.clone()).await;
    write.add(batch(&many, &names)).unwrap();
    assert!(
        store.scan_prefix(&entries_prefix(2)).unwrap().len() > 1,
        "rows past the spill bound are in the log"
    );
    assert_eq!(log.row_count(), 1, "but not visible");
    assert_eq!(ids(&plain(2, &store)), vec![1], "nor after a reopen");
    drop(write);
    assert_eq!(store.scan_prefix(&entries_prefix(2)).unwrap().len(), 1);

    let mut write = BulkWrite::begin(log.clone()).await;
    write.add(batch(&many, &names)).unwrap();
    write.add(batch(&[-1], &["y"])).unwrap();
    assert_eq!(write.commit(None).await.unwrap(), many.len() as u64 + 1);
    let mut expected = vec![1];
    expected.extend(&many);
    expected.push(-1);
    assert_eq!(ids(&log), expected);
    assert_eq!(ids(&plain(2, &store)), expected);
}

#[tokio::test]
async fn a_log_in_the_old_layout_is_migrated_on_open() {
    use crate::state::batch_codec::encode_batch;
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut old = WriteBatch::new();
    for (sequence, rows) in [batch(&[1, 2], &["a", "b"]), batch(&[3], &["c"])]
        .iter()
        .enumerate()
    {
        let mut entry = legacy_rows_prefix(4);
        entry.extend_from_slice(&(sequence as u64).to_be_bytes());
        old.put(entry, encode_batch(rows).unwrap());
    }
    store.commit(old).unwrap();
    let log = plain(4, &store);
    assert_eq!(ids(&log), vec![1, 2, 3]);
    assert!(store
        .scan_prefix(&legacy_rows_prefix(4))
        .unwrap()
        .is_empty());
    log.append(vec![batch(&[4], &["d"])], None).await.unwrap();
    assert_eq!(ids(&plain(4, &store)), vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn queries_stream_the_committed_rows_with_any_projection() {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(5, &store);
    let many: Vec<i64> = (0..ROWS_PER_ENTRY as i64 * 2 + 3).collect();
    log.append(vec![batch(&many, &vec!["x"; many.len()])], None)
        .await
        .unwrap();
    log.append(vec![batch(&[-7], &["last"])], None)
        .await
        .unwrap();
    let context = datafusion::prelude::SessionContext::new();
    let table = DurableTable::new(log.clone(), Constraints::default(), HashMap::new());
    context.register_table("t", Arc::new(table)).unwrap();
    let value = |sql: &'static str| {
        let context = context.clone();
        async move {
            let batches = context.sql(sql).await.unwrap().collect().await.unwrap();
            batches[0].column(0).as_primitive::<Int64Type>().value(0)
        }
    };
    assert_eq!(value("SELECT count(*) FROM t").await, many.len() as i64 + 1);
    assert_eq!(
        value("SELECT sum(id) FROM t WHERE name = 'x'").await,
        many.iter().sum::<i64>()
    );
    assert_eq!(value("SELECT id FROM t WHERE name = 'last'").await, -7);
}

#[tokio::test]
async fn expired_entries_are_deleted_up_to_the_covered_rows() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let (schema, mut stream) = clocked();
    stream.retention_ms = Some(1_000);
    let log = Arc::new(
        TableLog::open(
            8,
            "t",
            schema.clone(),
            &Constraints::default(),
            Some(&stream),
            GroupCommitter::new(store.clone(), None),
            false,
        )
        .unwrap(),
    );
    const SECOND: i64 = 1_000_000_000;
    // One write per second of event time: entries at rows 0, 2, 4, 6, 8.
    for second in 0..5 {
        let at = second * SECOND;
        log.append(vec![times(&schema, &[at, at + 1])], None)
            .await
            .unwrap();
    }
    // Watermark 4 s, retention 1 s: rows before 3 s may go, but only
    // those the checkpoint covers (the first 4 rows).
    assert_eq!(log.expire(4).unwrap(), 2, "the 0 s entry only");
    assert_eq!(log.expire(10).unwrap(), 4, "then the 1 s and 2 s entries");
    assert_eq!(log.expire(10).unwrap(), 0);
    assert_eq!(store.scan_prefix(&entries_prefix(8)).unwrap().len(), 2);
    let remaining: Vec<Message> = messages(log.history().unwrap());
    let rows: usize = remaining
        .iter()
        .map(|message| match message {
            Message::Batch(chunk) => chunk.num_rows(),
            _ => 0,
        })
        .sum();
    assert_eq!(rows, 4);
    // The kept rows still arrive under the watermark they had.
    let Some(Message::Batch(first)) = remaining.first() else {
        panic!("rows first: {remaining:?}");
    };
    assert_eq!(first.watermarks.as_ref().unwrap().value(0), 2 * SECOND + 1);
    assert_eq!(log.row_count(), 10, "offsets stay absolute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_commits_keep_their_order_and_wait_for_a_spilling_write() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(9, &store);
    let writers = (0..8i64).map(|writer| {
        let log = log.clone();
        tokio::spawn(async move {
            for sequence in 0..40 {
                let id = writer * 1_000 + sequence;
                log.append(vec![batch(&[id], &["w"])], None).await.unwrap();
            }
        })
    });
    let writers: Vec<_> = writers.collect();
    // A write too big for memory spills in the middle of the small ones.
    let many = (0..append::SPILL_ROWS as i64 + 3)
        .map(|row| -1 - row)
        .collect::<Vec<_>>();
    let mut big = BulkWrite::begin(log.clone()).await;
    big.add(batch(&many, &vec!["b"; many.len()])).unwrap();
    big.commit(None).await.unwrap();
    for writer in writers {
        writer.await.unwrap();
    }
    let stored = ids(&plain(9, &store));
    assert_eq!(stored, ids(&log));
    assert_eq!(stored.len(), 8 * 40 + many.len());
    let big_at = stored.iter().position(|id| *id == -1).unwrap();
    assert_eq!(
        &stored[big_at..big_at + many.len()],
        &many[..],
        "in one piece"
    );
    for writer in 0..8 {
        let own: Vec<i64> = stored
            .iter()
            .copied()
            .filter(|id| (writer * 1_000..writer * 1_000 + 1_000).contains(id))
            .collect();
        assert_eq!(
            own,
            (writer * 1_000..writer * 1_000 + 40).collect::<Vec<_>>()
        );
    }
    let (groups, writes) = log.committer.committed();
    assert_eq!(writes, 8 * 40 + 1);
    assert!(groups < writes, "{writes} writes in {groups} commits");
    let entries = store.scan_prefix(&entries_prefix(9)).unwrap().len();
    let big_entries = many.len().div_ceil(ROWS_PER_ENTRY);
    assert!(
        entries - big_entries < 8 * 40,
        "one-row writes share entries"
    );
}

#[tokio::test]
async fn a_write_to_a_dropped_table_fails_and_writes_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(10, &store);
    log.append(vec![batch(&[1], &["a"])], None).await.unwrap();
    log.mark_dropped();
    let error = log
        .append(vec![batch(&[2], &["b"])], None)
        .await
        .unwrap_err();
    assert_eq!(error.code, "42P01");
    assert_eq!(ids(&plain(10, &store)), vec![1]);
}

#[tokio::test]
async fn firings_are_replayed_between_their_rows_and_trimmed_once_covered() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(4, &store);
    log.append(vec![batch(&[1, 2], &["a", "b"])], None)
        .await
        .unwrap();
    assert_eq!(
        log.fire_views(vec![7], 100, WAIT).await.unwrap().unwrap(),
        2
    );
    // No row since: the same entry, both views.
    assert_eq!(
        log.fire_views(vec![9], 150, WAIT).await.unwrap().unwrap(),
        2
    );
    log.append(vec![batch(&[3], &["c"])], None).await.unwrap();
    assert_eq!(
        log.fire_views(vec![7], 200, WAIT).await.unwrap().unwrap(),
        3
    );
    let shape = |history: History| -> Vec<String> {
        messages(history)
            .into_iter()
            .map(|message| match message {
                Message::Batch(chunk) => format!("rows {}", chunk.num_rows()),
                Message::Fire(view) => format!("fire {view}"),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let reopened = plain(4, &store);
    assert_eq!(
        shape(reopened.history().unwrap()),
        vec!["rows 2", "fire 7", "fire 9", "rows 1", "fire 7"]
    );
    assert_eq!(shape(reopened.history_from(3).unwrap()), vec!["fire 7"]);
    assert_eq!(reopened.last_firing_of(9), Some((2, 150)));
    assert_eq!(reopened.last_firing_of(7), Some((3, 200)));

    // Covered up to row 3: the entry at 2 stays, as view 9's last.
    reopened.trim_firings(3).unwrap();
    assert_eq!(reopened.last_firing_of(9), Some((2, 150)));
    reopened
        .append(vec![batch(&[4], &["d"])], None)
        .await
        .unwrap();
    reopened.fire_views(vec![7, 9], 300, WAIT).await.unwrap();
    reopened.trim_firings(4).unwrap();
    let trimmed = plain(4, &store);
    assert_eq!(
        shape(trimmed.history().unwrap()),
        vec!["rows 2", "rows 1", "rows 1", "fire 7", "fire 9"]
    );
    assert_eq!(trimmed.last_firing_of(9), Some((4, 300)));
}

#[tokio::test]
async fn a_proctime_tables_covered_raises_are_trimmed_to_the_last() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let (schema, mut stream) = clocked();
    let open = |stream: &StreamDefinition| {
        Arc::new(
            TableLog::open(
                5,
                "t",
                schema.clone(),
                &Constraints::default(),
                Some(stream),
                GroupCommitter::new(store.clone(), None),
                false,
            )
            .unwrap(),
        )
    };
    let event_time = open(&stream);
    for (row, watermark) in [(10, 100), (20, 200), (30, 300)] {
        event_time
            .append(vec![times(&schema, &[row])], None)
            .await
            .unwrap();
        event_time.raise_watermark(watermark).await.unwrap();
    }
    // An event-time table keeps every raise: they decide lateness.
    event_time.trim_ticks(3).unwrap();
    assert_eq!(lock(&event_time.ticks).len(), 3);

    if let Some(watermark) = stream.watermark.as_mut() {
        (watermark.processing_time, watermark.idle_timeout_ms) = (true, None);
    }
    let processing_time = open(&stream);
    let before = messages(processing_time.history_from(3).unwrap());
    processing_time.trim_ticks(3).unwrap();
    // Raises before row 3 (at rows 1 and 2): the last stays.
    assert_eq!(
        lock(&processing_time.ticks)
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![2, 3]
    );
    let reopened = open(&stream);
    assert_eq!(lock(&reopened.ticks).len(), 2);
    assert_eq!(reopened.watermark_ns(), Some(300));
    let after = messages(reopened.history_from(3).unwrap());
    assert_eq!(
        format!("{after:?}"),
        format!("{before:?}"),
        "a replay from the checkpoint"
    );
}
