//! EXCEPT ALL and INTERSECT ALL count copies, as Postgres does:
//! `{1,1,1,2} EXCEPT ALL {1}` is `{1,1,2}` and `{1,1} INTERSECT ALL {1}`
//! is `{1}`. DataFusion plans both as an anti / semi join on every column,
//! so one copy on the right removed (or kept) every copy on the left.
//!
//! Numbering the copies of each row on both sides turns the counting into
//! that join: the k-th copy of a row on the left is in `L EXCEPT ALL R`
//! exactly when R has fewer than k copies of it, which is an anti join on
//! (every column, copy number); INTERSECT ALL is the semi join, keeping
//! min(m, n) copies. Both sides are numbered by `row_number()` over a
//! partition of equal rows, whose order does not matter (the copies are
//! equal), so the result is the same set of rows however they are
//! numbered, in a query and in a materialized view alike.
//!
//! Runs on plans fresh from SQL, before the optimizer: there the only
//! semi / anti joins matching NULLs with NULLs are set operations (IN and
//! EXISTS are still subquery expressions); the DISTINCT forms have a
//! Distinct under the join and are left alone.

use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, Join, JoinType, LogicalPlan, LogicalPlanBuilder,
};

/// The name of a side's copy number (never in the result).
const COPY_LEFT: &str = "__weir_copy_left";
const COPY_RIGHT: &str = "__weir_copy_right";

/// `plan` with every EXCEPT ALL / INTERSECT ALL counting copies.
pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Join(join) if is_counted_set_operation(&join) => {
            counted(join).map(Transformed::yes)
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|transformed| transformed.data)
}

fn is_counted_set_operation(join: &Join) -> bool {
    matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
        && join.null_equality == NullEquality::NullEqualsNull
        && join.filter.is_none()
        && join.on.len() == join.left.schema().fields().len()
        && !matches!(join.left.as_ref(), LogicalPlan::Distinct(_))
}

/// The join on every column and the copy number, without the number.
fn counted(join: Join) -> Result<LogicalPlan> {
    let result_columns: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let left = numbered(join.left.as_ref().clone(), COPY_LEFT)?;
    let right = numbered(join.right.as_ref().clone(), COPY_RIGHT)?;
    let (mut left_keys, mut right_keys): (Vec<Column>, Vec<Column>) = join
        .on
        .iter()
        .map(|(left, right)| Ok((column_of(left)?, column_of(right)?)))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    left_keys.push(Column::from_name(COPY_LEFT));
    right_keys.push(Column::from_name(COPY_RIGHT));
    LogicalPlanBuilder::from(left)
        .join_detailed(
            right,
            join.join_type,
            (left_keys, right_keys),
            None,
            NullEquality::NullEqualsNull,
        )?
        .project(result_columns)?
        .build()
}

/// `plan` with a column numbering the copies of each of its rows.
fn numbered(plan: LogicalPlan, name: &str) -> Result<LogicalPlan> {
    let every_column: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let copy_number = row_number().partition_by(every_column).build()?.alias(name);
    LogicalPlanBuilder::from(plan)
        .window(vec![copy_number])?
        .build()
}

fn column_of(expr: &Expr) -> Result<Column> {
    match expr {
        Expr::Column(column) => Ok(column.clone()),
        other => datafusion::common::internal_err!("a set operation keyed by {other}"),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    async fn rows(sql: &str) -> Vec<String> {
        let context = SessionContext::new();
        let plan = context.state().create_logical_plan(sql).await.unwrap();
        let plan = super::rewrite(plan).unwrap();
        let batches = context
            .execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches).unwrap();
        let mut lines: Vec<String> = text
            .to_string()
            .lines()
            .filter(|line| line.starts_with("| ") && !line.contains(" a "))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    const LEFT: &str = "SELECT * FROM (VALUES (1), (1), (1), (2), (NULL), (NULL)) l(a)";
    const RIGHT: &str = "SELECT * FROM (VALUES (1), (3), (NULL)) r(a)";

    #[tokio::test]
    async fn except_all_removes_one_copy_per_copy() {
        let got = rows(&format!("{LEFT} EXCEPT ALL {RIGHT}")).await;
        assert_eq!(got, ["|   |", "| 1 |", "| 1 |", "| 2 |"]);
    }

    #[tokio::test]
    async fn intersect_all_keeps_the_smaller_count() {
        let got = rows(&format!("{LEFT} INTERSECT ALL {LEFT} EXCEPT ALL {RIGHT}")).await;
        assert_eq!(got, ["|   |", "| 1 |", "| 1 |", "| 2 |"]);
        let got = rows(&format!("{LEFT} INTERSECT ALL {RIGHT}")).await;
        assert_eq!(got, ["|   |", "| 1 |"]);
    }

    #[tokio::test]
    async fn distinct_forms_are_left_alone() {
        assert_eq!(rows(&format!("{LEFT} EXCEPT {RIGHT}")).await, ["| 2 |"]);
        assert_eq!(
            rows(&format!("{LEFT} INTERSECT {RIGHT}")).await,
            ["|   |", "| 1 |"]
        );
    }
}
