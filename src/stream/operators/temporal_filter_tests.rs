use std::sync::atomic::{AtomicI64, Ordering};

use datafusion::arrow::array::{AsArray, TimestampNanosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::physical_expr::expressions::col;

use super::*;
use crate::state::SledStore;
use crate::stream::checkpoint::testing::{commit_state, stored_state};

static CLOCK_NS: AtomicI64 = AtomicI64::new(0);

fn clock_ns() -> i64 {
    CLOCK_NS.load(Ordering::SeqCst)
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    )]))
}

/// `ts > now() - 100 ns AND ts <= now()`: a row shows from its time for
/// 100 ns.
fn sliding() -> TemporalFilterOperator {
    let time = col("ts", &schema()).unwrap();
    let bounds = vec![
        TimeBound {
            time: Arc::clone(&time),
            offset_ns: -100,
            ends: true,
            inclusive: false,
        },
        TimeBound {
            time,
            offset_ns: 0,
            ends: false,
            inclusive: true,
        },
    ];
    TemporalFilterOperator::new(schema(), bounds)
        .unwrap()
        .with_clock(clock_ns)
}

fn rows(times: &[Option<i64>], diff: i64) -> Chunk {
    let column = TimestampNanosecondArray::from(times.to_vec());
    Chunk {
        rows: RecordBatch::try_new(schema(), vec![Arc::new(column)]).unwrap(),
        diffs: Some(Int64Array::from(vec![diff; times.len()])),
        watermarks: None,
    }
}

/// The (time, diff) pairs of `output`'s batches.
fn changes(output: &Output) -> Vec<(i64, i64)> {
    output
        .iter()
        .filter_map(|message| match message {
            Message::Batch(chunk) => Some(chunk),
            _ => None,
        })
        .flat_map(|chunk| {
            let times = chunk
                .rows
                .column(0)
                .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
            (0..chunk.num_rows())
                .map(|row| (times.value(row), chunk.diff(row)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A checkpoint at `now` and the barrier after it, as the runtime runs them.
fn checkpoint_at(
    operator: &mut TemporalFilterOperator,
    store: &SledStore,
    now: i64,
) -> Vec<(i64, i64)> {
    CLOCK_NS.store(now, Ordering::SeqCst);
    commit_state(store, |state| operator.checkpoint(state).unwrap());
    let mut output = Vec::new();
    operator.on_barrier(1, &mut output).unwrap();
    assert!(matches!(output.last(), Some(Message::Barrier(1))));
    changes(&output)
}

#[test]
fn rows_show_when_their_time_comes_and_leave_when_it_passes_across_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut operator = sliding();
    CLOCK_NS.store(1_000, Ordering::SeqCst);
    let mut output = Vec::new();
    let batch = rows(&[Some(1_000), Some(1_050), Some(800), None], 1);
    operator
        .on_batch(batch, Context::default(), &mut output)
        .unwrap();
    assert_eq!(
        changes(&output),
        vec![(1_000, 1)],
        "1,050 is ahead, 800 is over, NULL never shows"
    );
    assert_eq!(checkpoint_at(&mut operator, &store, 1_049), vec![]);
    assert_eq!(
        checkpoint_at(&mut operator, &store, 1_050),
        vec![(1_050, 1)]
    );

    // A restart: the restored operator shows and ends what the first would.
    let mut restored = sliding();
    restored.restore(&stored_state(&store)).unwrap();
    assert_eq!(
        checkpoint_at(&mut restored, &store, 1_100),
        vec![(1_000, -1)]
    );
    // A retraction of a shown row is passed on and the row forgotten.
    let mut output = Vec::new();
    restored
        .on_batch(rows(&[Some(1_050)], -1), Context::default(), &mut output)
        .unwrap();
    assert_eq!(changes(&output), vec![(1_050, -1)]);
    assert_eq!(checkpoint_at(&mut restored, &store, 2_000), vec![]);
    assert_eq!(restored.memory_bytes(), 0);
    assert!(stored_state(&store)
        .with_prefix(ROW_PREFIX)
        .next()
        .is_none());
}

static UNDO_CLOCK_NS: AtomicI64 = AtomicI64::new(0);

fn undo_clock_ns() -> i64 {
    UNDO_CLOCK_NS.load(Ordering::SeqCst)
}

/// A failed write group is undone: rows it held go, rows it retracted
/// come back, and the rows it showed or ended as time passed are shown or
/// ended again by the next batch, as by one that never saw the group.
#[test]
fn a_rolled_back_group_leaves_the_filter_as_if_it_never_came() {
    UNDO_CLOCK_NS.store(1_000, Ordering::SeqCst);
    let mut undone = sliding().with_clock(undo_clock_ns);
    let mut never = sliding().with_clock(undo_clock_ns);
    // 950 shows now; 1_050 shows at 1_050.
    for operator in [&mut undone, &mut never] {
        let mut output = Vec::new();
        let committed = rows(&[Some(950), Some(1_050)], 1);
        operator
            .on_batch(committed, Context::default(), &mut output)
            .unwrap();
        operator.commit();
    }
    // The failed group comes at 1_060: 1_050 shows, 950 is retracted and
    // 1_055 is held.
    UNDO_CLOCK_NS.store(1_060, Ordering::SeqCst);
    let mut output = Vec::new();
    undone
        .on_batch(rows(&[Some(950)], -1), Context::default(), &mut output)
        .unwrap();
    undone
        .on_batch(rows(&[Some(1_055)], 1), Context::default(), &mut output)
        .unwrap();
    assert!(undone.rollback().unwrap());
    UNDO_CLOCK_NS.store(1_070, Ordering::SeqCst);
    let (mut got, mut expected) = (Vec::new(), Vec::new());
    let later = rows(&[Some(1_065)], 1);
    undone
        .on_batch(later.clone(), Context::default(), &mut got)
        .unwrap();
    never
        .on_batch(later, Context::default(), &mut expected)
        .unwrap();
    assert_eq!(changes(&got), changes(&expected));
    assert!(changes(&got).contains(&(1_050, 1)), "{:?}", changes(&got));
    assert_eq!(undone.rows, never.rows);
    assert_eq!(undone.bytes, never.bytes);
}
