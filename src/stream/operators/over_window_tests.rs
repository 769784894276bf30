use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::functions_window::expr_fn::{lag, lead, row_number};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    col, Expr, ExprFunctionExt, WindowFrame, WindowFrameBound, WindowFrameUnits,
    WindowFunctionDefinition,
};
use datafusion::physical_expr::expressions::col as physical_col;
use datafusion::physical_planner::create_window_expr;

use super::*;
use crate::state::SledStore;
use crate::stream::checkpoint::testing::{commit_state, stored_state};
use crate::testing::Random;

/// A row: partition (NULL allowed), order value, payload.
type Row = (Option<i64>, i64, i64);

/// A result row: the row and each function's result.
type Shown = (Option<i64>, i64, i64, Vec<Option<i64>>);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("p", DataType::Int64, true),
        Field::new("o", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]))
}

fn over(function: Expr, frame: Option<WindowFrame>) -> Expr {
    let builder = function
        .partition_by(vec![col("p")])
        .order_by(vec![col("o").sort(true, false)]);
    match frame {
        Some(frame) => builder.window_frame(frame).build().unwrap(),
        None => builder.build().unwrap(),
    }
}

/// `SUM(v) OVER (… ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)`.
fn sum_around() -> Expr {
    let sum = Expr::from(WindowFunction::new(
        WindowFunctionDefinition::AggregateUDF(sum_udaf()),
        vec![col("v")],
    ));
    let one = ScalarValue::UInt64(Some(1));
    let frame = WindowFrame::new_bounds(
        WindowFrameUnits::Rows,
        WindowFrameBound::Preceding(one.clone()),
        WindowFrameBound::Following(one),
    );
    over(sum, Some(frame))
}

/// lag(v, 2), the sum of v and its neighbours, lead(v, 1).
fn bounded_functions() -> Vec<Expr> {
    vec![
        over(lag(col("v"), Some(2), None), None),
        sum_around(),
        over(lead(col("v"), Some(1), None), None),
    ]
}

fn operator(functions: Vec<Expr>, reach: Reach) -> OverWindowOperator {
    let input = input_schema();
    let logical = DFSchema::try_from(input.as_ref().clone()).unwrap();
    let functions: Vec<_> = functions
        .iter()
        .map(|expr| {
            create_window_expr(
                expr,
                &logical,
                &ExecutionProps::new(),
                &PhysicalPlanningContext::default(),
            )
            .unwrap()
        })
        .collect();
    let mut fields = input.fields().to_vec();
    for (index, function) in functions.iter().enumerate() {
        let data_type = function.field().unwrap().data_type().clone();
        fields.push(Arc::new(Field::new(format!("f{index}"), data_type, true)));
    }
    OverWindowOperator::new(OverWindowSpec {
        partition: vec![physical_col("p", &input).unwrap()],
        order: vec![PhysicalSortExpr {
            expr: physical_col("o", &input).unwrap(),
            options: SortOptions::default(),
        }],
        functions,
        reach,
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

/// Adds the output's changes to `view`; results are read as Int64.
fn accumulate(output: Output, view: &mut HashMap<Shown, i64>) {
    for message in output {
        let Message::Batch(chunk) = message else {
            continue;
        };
        let columns: Vec<Int64Array> = chunk
            .rows
            .columns()
            .iter()
            .map(|column| {
                let column = datafusion::arrow::compute::cast(column, &DataType::Int64).unwrap();
                column.as_primitive::<Int64Type>().clone()
            })
            .collect();
        let value = |column: &Int64Array, row| column.is_valid(row).then(|| column.value(row));
        for row in 0..chunk.num_rows() {
            let results = columns[3..].iter().map(|c| value(c, row)).collect();
            let key = (
                value(&columns[0], row),
                columns[1].value(row),
                columns[2].value(row),
                results,
            );
            *view.entry(key).or_default() += chunk.diff(row);
        }
    }
    view.retain(|_, count| *count != 0);
}

fn run(operator: &mut OverWindowOperator, rows: &[(Row, i64)], view: &mut HashMap<Shown, i64>) {
    let mut output = Vec::new();
    operator
        .on_batch(changes(rows), Context::default(), &mut output)
        .unwrap();
    accumulate(output, view);
}

/// Each row with lag(v, 2), the sum of v and its neighbours, lead(v, 1)
/// and its row number, computed by sorting each partition by (o, v), the
/// order the operator breaks ties in.
fn reference(rows: &HashMap<Row, i64>) -> HashMap<Shown, i64> {
    let mut partitions: HashMap<Option<i64>, Vec<Row>> = HashMap::new();
    for (row, count) in rows {
        for _ in 0..*count {
            partitions.entry(row.0).or_default().push(*row);
        }
    }
    let mut view = HashMap::new();
    for (_, mut rows) in partitions {
        rows.sort_by_key(|row| (row.1, row.2));
        let v = |index: usize| rows.get(index).map(|row| row.2);
        for (index, row) in rows.iter().enumerate() {
            let around = index.saturating_sub(1)..(index + 2).min(rows.len());
            let results = vec![
                index.checked_sub(2).and_then(v),
                Some(rows[around].iter().map(|row| row.2).sum()),
                v(index + 1),
                Some(index as i64 + 1),
            ];
            *view.entry((row.0, row.1, row.2, results)).or_default() += 1;
        }
    }
    view
}

/// The view with only each row's first `shown` results.
fn first_results(view: HashMap<Shown, i64>, shown: usize) -> HashMap<Shown, i64> {
    let mut kept = HashMap::new();
    for ((p, o, v, results), count) in view {
        *kept
            .entry((p, o, v, results[..shown].to_vec()))
            .or_default() += count;
    }
    kept
}

#[test]
fn lag_lead_and_a_frame_follow_inserts_and_deletes() {
    let mut operator = operator(
        bounded_functions(),
        Reach::Rows {
            before: 2,
            after: 1,
        },
    );
    let mut view = HashMap::new();
    let rows: Vec<(Row, i64)> = (1..=4).map(|i| ((Some(1), i, i * 10), 1)).collect();
    run(&mut operator, &rows, &mut view);
    let shown = |o: i64, results: [Option<i64>; 3]| ((Some(1), o, o * 10, results.to_vec()), 1);
    let expected = HashMap::from([
        shown(1, [None, Some(30), Some(20)]),
        shown(2, [None, Some(60), Some(30)]),
        shown(3, [Some(10), Some(90), Some(40)]),
        shown(4, [Some(20), Some(70), None]),
    ]);
    assert_eq!(view, expected);
    run(&mut operator, &[((Some(1), 2, 20), -1)], &mut view);
    let expected = HashMap::from([
        shown(1, [None, Some(40), Some(30)]),
        shown(3, [None, Some(80), Some(40)]),
        shown(4, [Some(10), Some(70), None]),
    ]);
    assert_eq!(view, expected);
}

fn random_changes_match_the_reference(seed: u64, functions: Vec<Expr>, reach: Reach, shown: usize) {
    let mut random = Random(seed);
    let mut operator = operator(functions, reach);
    let mut input: HashMap<Row, i64> = HashMap::new();
    let mut view = HashMap::new();
    for step in 0..120 {
        let mut batch = Vec::new();
        for _ in 0..=random.below(5) {
            let present: Vec<Row> = input.keys().copied().collect();
            let (row, diff) = if !present.is_empty() && random.below(3) == 0 {
                (present[random.below(present.len() as u64) as usize], -1)
            } else {
                let partition = random.below(3);
                let partition = (partition != 2).then_some(partition as i64);
                let row = (partition, random.below(12) as i64, random.below(3) as i64);
                (row, 1)
            };
            let count = input.entry(row).or_default();
            *count += diff;
            if *count == 0 {
                input.remove(&row);
            }
            batch.push((row, diff));
        }
        run(&mut operator, &batch, &mut view);
        let expected = first_results(reference(&input), shown);
        assert_eq!(view, expected, "seed {seed} step {step}");
    }
}

#[test]
fn random_changes_keep_bounded_reach_results_equal_to_a_sort() {
    for seed in 1..25 {
        let reach = Reach::Rows {
            before: 2,
            after: 1,
        };
        random_changes_match_the_reference(seed * 7919, bounded_functions(), reach, 3);
    }
}

#[test]
fn random_changes_keep_whole_partition_results_equal_to_a_sort() {
    for seed in 1..10 {
        let mut functions = bounded_functions();
        functions.push(over(row_number(), None));
        random_changes_match_the_reference(seed * 104_729, functions, Reach::Partition, 4);
    }
}

#[test]
fn the_partitions_survive_a_checkpoint() {
    let reach = Reach::Rows {
        before: 2,
        after: 1,
    };
    let mut operator = operator(bounded_functions(), reach);
    let rows = [
        ((Some(1), 5, 0), 1),
        ((Some(1), 7, 1), 1),
        ((None, 3, 2), 2),
    ];
    let mut view = HashMap::new();
    run(&mut operator, &rows, &mut view);
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    commit_state(&store, |state| operator.checkpoint(state).unwrap());
    let mut restored = self::operator(bounded_functions(), reach);
    restored.restore(&stored_state(&store)).unwrap();
    assert_eq!(restored.partitions, operator.partitions);
    run(&mut restored, &[((Some(1), 6, 4), 1)], &mut view);
    let input = HashMap::from([
        ((Some(1), 5, 0), 1),
        ((Some(1), 7, 1), 1),
        ((None, 3, 2), 2),
        ((Some(1), 6, 4), 1),
    ]);
    assert_eq!(view, first_results(reference(&input), 3));
}
