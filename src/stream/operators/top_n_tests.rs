use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt64Type};
use datafusion::physical_expr::expressions::col;

use super::*;
use crate::state::SledStore;
use crate::stream::checkpoint::testing::{commit_state, stored_state};
use crate::testing::Random;

/// A row: partition (NULL allowed), order value, payload.
type Row = (Option<i64>, i64, i64);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("p", DataType::Int64, true),
        Field::new("o", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
}

/// Top `limit` per `p` by `o` descending.
fn top_n(kind: RankKind, limit: u64, keeps_all: bool) -> TopNOperator {
    top_n_past(kind, limit, 0, keeps_all)
}

/// Ranks `offset + 1 ..= limit` per `p` by `o` descending.
fn top_n_past(kind: RankKind, limit: u64, offset: u64, keeps_all: bool) -> TopNOperator {
    let input = input_schema();
    let mut fields = input.fields().to_vec();
    fields.push(Arc::new(Field::new("rank", DataType::UInt64, false)));
    TopNOperator::new(TopNSpec {
        partition: vec![col("p", &input).unwrap()],
        order: vec![PhysicalSortExpr {
            expr: col("o", &input).unwrap(),
            options: SortOptions {
                descending: true,
                nulls_first: false,
            },
        }],
        kind,
        limit,
        offset,
        keeps_all,
        rank_column: true,
        window: None,
        emit_on_close: false,
        schema: Arc::new(Schema::new(fields)),
    })
    .unwrap()
}

fn changes(rows: &[(Row, i64)]) -> Chunk {
    let column = |f: fn(&Row) -> Option<i64>| -> ArrayRef {
        Arc::new(rows.iter().map(|(row, _)| f(row)).collect::<Int64Array>())
    };
    let columns = vec![
        column(|r| r.0),
        column(|r| Some(r.1)),
        column(|r| Some(r.2)),
    ];
    Chunk {
        rows: RecordBatch::try_new(input_schema(), columns).unwrap(),
        diffs: Some(rows.iter().map(|(_, diff)| *diff).collect()),
        watermarks: None,
    }
}

type Ranked = (Option<i64>, i64, i64, u64);

fn accumulate(output: Output, view: &mut HashMap<Ranked, i64>) {
    for message in output {
        let Message::Batch(chunk) = message else {
            continue;
        };
        let int = |index: usize| chunk.rows.column(index).as_primitive::<Int64Type>().clone();
        let (p, o, v) = (int(0), int(1), int(2));
        let rank = chunk.rows.column(3).as_primitive::<UInt64Type>().clone();
        for row in 0..chunk.num_rows() {
            let partition = p.is_valid(row).then(|| p.value(row));
            let key = (partition, o.value(row), v.value(row), rank.value(row));
            *view.entry(key).or_default() += chunk.diff(row);
        }
    }
    view.retain(|_, count| *count != 0);
}

/// The ranked rows of the multiset `rows`, computed by sorting.
fn reference(
    kind: RankKind,
    (limit, offset): (u64, u64),
    rows: &HashMap<Row, i64>,
) -> HashMap<Ranked, i64> {
    let mut partitions: HashMap<Option<i64>, Vec<Row>> = HashMap::new();
    for (row, count) in rows {
        for _ in 0..*count {
            partitions.entry(row.0).or_default().push(*row);
        }
    }
    let mut view = HashMap::new();
    for (_, mut rows) in partitions {
        rows.sort_by_key(|row| (Reverse(row.1), row.2));
        for (index, row) in rows.iter().enumerate() {
            let better = |other: &Row| other.1 > row.1;
            let rank = match kind {
                RankKind::RowNumber => index as u64 + 1,
                RankKind::Rank => rows.iter().filter(|other| better(other)).count() as u64 + 1,
                RankKind::DenseRank => {
                    let mut values: Vec<i64> =
                        rows.iter().filter(|o| better(o)).map(|o| o.1).collect();
                    values.dedup();
                    values.len() as u64 + 1
                }
            };
            if rank <= limit && rank > offset {
                *view.entry((row.0, row.1, row.2, rank)).or_default() += 1;
            }
        }
    }
    view
}

fn random_changes_match_the_reference(kind: RankKind, keeps_all: bool, seed: u64) {
    // Every other seed skips a first rank (OFFSET 1).
    let offset = seed % 2;
    let limit = offset + 1 + seed % 3;
    let mut random = Random(seed);
    let mut operator = top_n_past(kind, limit, offset, keeps_all);
    let mut input: HashMap<Row, i64> = HashMap::new();
    let mut view = HashMap::new();
    for step in 0..150 {
        let mut batch = Vec::new();
        for _ in 0..=random.below(4) {
            let present: Vec<Row> = input.keys().copied().collect();
            let retract = keeps_all && !present.is_empty() && random.below(3) == 0;
            let (row, diff) = if retract {
                (present[random.below(present.len() as u64) as usize], -1)
            } else {
                let partition = random.below(4);
                let partition = (partition != 3).then_some(partition as i64);
                (
                    (partition, random.below(6) as i64, random.below(3) as i64),
                    1,
                )
            };
            let count = input.entry(row).or_default();
            *count += diff;
            if *count == 0 {
                input.remove(&row);
            }
            batch.push((row, diff));
        }
        let mut output = Vec::new();
        operator
            .on_batch(changes(&batch), Context::default(), &mut output)
            .unwrap();
        accumulate(output, &mut view);
        let expected = reference(kind, (limit, offset), &input);
        assert_eq!(
            view, expected,
            "{kind:?} keeps_all={keeps_all} offset={offset} seed {seed} step {step}"
        );
    }
}

#[test]
fn every_rank_kind_keeps_the_top_rows_under_inserts_and_retractions() {
    for kind in [RankKind::RowNumber, RankKind::Rank, RankKind::DenseRank] {
        for seed in 1..16 {
            random_changes_match_the_reference(kind, true, seed * 7919);
            random_changes_match_the_reference(kind, false, seed * 104_729);
        }
    }
}

#[test]
fn over_inserts_only_rows_past_the_limit_are_not_kept() {
    let mut operator = top_n(RankKind::RowNumber, 2, false);
    let rows: Vec<(Row, i64)> = (0..100).map(|i| ((Some(1), i, 0), 1)).collect();
    operator
        .on_batch(changes(&rows), Context::default(), &mut Vec::new())
        .unwrap();
    let one: ArrayRef = Arc::new(Int64Array::from(vec![Some(1)]));
    let keys = operator
        .partition_converter
        .convert_columns(&[one])
        .unwrap();
    let kept = operator.partitions.entries(keys.row(0).data()).count();
    assert_eq!((operator.partitions.len(), kept), (1, 2));
}

#[test]
fn the_partitions_survive_a_checkpoint() {
    let mut operator = top_n(RankKind::Rank, 2, true);
    let rows = [
        ((Some(1), 5, 0), 1),
        ((Some(1), 7, 1), 1),
        ((None, 3, 2), 2),
    ];
    operator
        .on_batch(changes(&rows), Context::default(), &mut Vec::new())
        .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    commit_state(&store, |state| operator.checkpoint(state).unwrap());
    let mut restored = top_n(RankKind::Rank, 2, true);
    restored.restore(&stored_state(&store)).unwrap();
    assert_eq!(restored.partitions, operator.partitions);
    // Retracting the best row of partition 1 moves 5 up to rank 1.
    let mut view = HashMap::new();
    let mut output = Vec::new();
    restored
        .on_batch(
            changes(&[((Some(1), 7, 1), -1)]),
            Context::default(),
            &mut output,
        )
        .unwrap();
    accumulate(output, &mut view);
    let expected = HashMap::from([
        ((Some(1), 7, 1, 1), -1),
        ((Some(1), 5, 0, 2), -1),
        ((Some(1), 5, 0, 1), 1),
    ]);
    assert_eq!(view, expected);
    assert!(
        crate::stream::operators::ordered_partition::decode(&[1, 0, 0], "TopN").is_err(),
        "a damaged partition is refused"
    );
}
