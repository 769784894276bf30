//! Unit tests of re-planning views by the SQL edition that made them.

use super::*;
use crate::catalog::SQL_EDITION;
use datafusion::arrow::datatypes::DataType;

async fn sum_type(state: &SessionState) -> DataType {
    let plan = state
        .create_logical_plan("SELECT sum(v) FROM (VALUES (CAST(1 AS BIGINT))) AS t(v)")
        .await
        .unwrap();
    plan.schema().field(0).data_type().clone()
}

#[tokio::test]
async fn a_view_from_before_numeric_sums_is_planned_with_bigint_sums() {
    let state = super::super::new_context().unwrap().state();
    let current = planning_state(state.clone(), SQL_EDITION);
    assert_eq!(sum_type(&current).await, DataType::Decimal128(38, 0));
    let legacy = planning_state(state, 0);
    assert_eq!(sum_type(&legacy).await, DataType::Int64);
}

/// Edition 2 reads `0.1` as a numeric; a view from before keeps its
/// double (and its bigint integer literals: sql::literal_types).
#[tokio::test]
async fn a_view_from_before_postgres_literal_types_keeps_doubles() {
    let state = super::super::new_context().unwrap().state();
    let literal_type = |state: SessionState| async move {
        let plan = state.create_logical_plan("SELECT 0.5").await.unwrap();
        plan.schema().field(0).data_type().clone()
    };
    let current = planning_state(state.clone(), SQL_EDITION);
    assert_eq!(literal_type(current).await, DataType::Decimal128(1, 1));
    assert_eq!(
        literal_type(planning_state(state, 1)).await,
        DataType::Float64
    );
}

/// Edition 4 rounds a numeric cast to an integer; a view from before
/// keeps truncating, as its stored rows were computed.
#[tokio::test]
async fn a_view_from_before_rounding_casts_keeps_truncating() {
    let state = super::super::new_context().unwrap().state();
    let value = |state: SessionState| async move {
        let plan = state
            .create_logical_plan("SELECT CAST(v AS INT) FROM (VALUES (2.5)) AS t(v)")
            .await
            .unwrap();
        let plan = state.optimize(&plan).unwrap();
        let physical = state.create_physical_plan(&plan).await.unwrap();
        let batches = datafusion::physical_plan::collect(physical, state.task_ctx())
            .await
            .unwrap();
        let column = batches[0].column(0).clone();
        datafusion::arrow::array::AsArray::as_primitive::<datafusion::arrow::datatypes::Int32Type>(
            &column,
        )
        .value(0)
    };
    assert_eq!(value(planning_state(state.clone(), SQL_EDITION)).await, 3);
    assert_eq!(value(planning_state(state, 3)).await, 2);
}

/// Edition 4 makes `timestamp - timestamp` an interval; a view from
/// before keeps the duration its stored rows have.
#[tokio::test]
async fn a_view_from_before_interval_differences_keeps_durations() {
    let state = super::super::new_context().unwrap().state();
    let difference_type = |state: SessionState| async move {
        let plan = state
            .create_logical_plan("SELECT TIMESTAMP '2024-01-02' - TIMESTAMP '2024-01-01'")
            .await
            .unwrap();
        plan.schema().field(0).data_type().clone()
    };
    assert!(matches!(
        difference_type(planning_state(state.clone(), SQL_EDITION)).await,
        DataType::Interval(_)
    ));
    assert!(matches!(
        difference_type(planning_state(state, 3)).await,
        DataType::Duration(_)
    ));
}

/// Edition 5 merges a USING join's columns (sql::using_joins); a view
/// from before keeps DataFusion's columns: the left table's first.
#[tokio::test]
async fn a_view_from_before_merged_join_columns_keeps_the_tables_order() {
    let state = super::super::new_context().unwrap().state();
    let columns = |state: SessionState| async move {
        let mut statement = crate::sql::parse(
            "SELECT * FROM (VALUES (1, 2)) AS a(x, g) JOIN (VALUES (2, 3)) AS b(g, y) USING (g)",
        )
        .unwrap()
        .pop();
        let Some(crate::sql::Statement::Standard(statement)) = statement.as_mut() else {
            unreachable!("a query");
        };
        crate::sql::using_joins::rewrite(statement, &state)
            .await
            .unwrap();
        let plan = state
            .statement_to_plan(DataFusionStatement::Statement(statement.clone()))
            .await
            .unwrap();
        let names: Vec<String> = plan
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        names.join(",")
    };
    assert_eq!(
        columns(planning_state(state.clone(), SQL_EDITION)).await,
        "g,x,y"
    );
    assert_eq!(columns(planning_state(state, 4)).await, "x,g,y");
}
