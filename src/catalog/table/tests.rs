//! Unit tests of the table log: durability, reopening, watermarks.

use super::*;
use crate::state::SledStore;
use datafusion::arrow::array::{Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

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

/// A plain table (no stream options) over `store`.
fn plain(id: u64, store: &Arc<dyn StateStore>) -> Arc<TableLog> {
    Arc::new(
        TableLog::open(
            id,
            "t",
            schema(),
            &Constraints::default(),
            None,
            store.clone(),
            None,
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
    let ids: Vec<i64> = reopened
        .snapshot()
        .iter()
        .flat_map(|batch| {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            column.values().to_vec()
        })
        .collect();
    assert_eq!(ids, vec![1, 2, 3]);
    // The next write continues the sequence instead of overwriting entry 0.
    reopened
        .append(vec![batch(&[4], &["d"])], None)
        .await
        .unwrap();
    assert_eq!(
        reopened.store.scan_prefix(&rows_prefix(7)).unwrap().len(),
        3
    );
}

#[tokio::test]
async fn large_writes_are_split_into_entries() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let log = plain(1, &store);
    let count = ROWS_PER_ENTRY + 10;
    let ids: Vec<i64> = (0..count as i64).collect();
    let names = vec!["x"; count];
    log.append(vec![batch(&ids, &names)], None).await.unwrap();
    assert_eq!(store.scan_prefix(&rows_prefix(1)).unwrap().len(), 2);
    assert_eq!(plain(1, &store).row_count(), count);
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
                store.clone(),
                None,
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
    let watermarks: Vec<i64> = reopened
        .history()
        .unwrap()
        .iter()
        .filter_map(|message| match message {
            Message::Watermark(watermark) => Some(*watermark),
            _ => None,
        })
        .collect();
    // After the first rows (20), the raise (100), then the 50 row (still 100).
    assert_eq!(watermarks, vec![20, 100, 100]);
    // From a checkpoint after the first two rows the raise still comes back.
    let tail = reopened.history_from(2).unwrap();
    assert!(matches!(tail.first(), Some(Message::Watermark(100))));
}
