//! A correlated scalar subquery that selects a plain value, `(SELECT b.v
//! FROM b WHERE b.k = a.k)`, which Postgres runs per row and fails with
//! 21000 only where it finds more than one row. DataFusion refuses it
//! while planning ("Correlated scalar subquery must be aggregated"), so it
//! becomes `single_row_value((SELECT array_agg(b.v) AS v FROM b WHERE …))`:
//! an aggregate DataFusion decorrelates (or weir runs per row:
//! sql::per_row_subqueries), and a function that takes the one element,
//! NULL for none, and raises 21000 for more — per outer row, as Postgres.
//!
//! Only subqueries that name a relation they do not read themselves (an
//! outer one) are rewritten: an uncorrelated one plans as it did (views
//! keep their plans), and one correlated only through unqualified names is
//! left to DataFusion.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::array::{new_null_array, Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::take::take;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    self, Expr, GroupByExpr, Ident, SelectItem, SetExpr, TableFactor, Visit, VisitMut, Visitor,
    VisitorMut,
};

use super::ast_build::call;
use super::output_names::item_name;
use crate::error::{sqlstate, WeirError};

/// The function that takes a subquery's one value.
pub const FUNCTION_NAME: &str = "single_row_value";

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut SingleRowRewriter);
}

struct SingleRowRewriter;

impl VisitorMut for SingleRowRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Subquery(query) = expr {
            if plain_value(query) && correlated(query) {
                aggregate_values(query);
                let subquery = std::mem::replace(expr, Expr::value(ast::Value::Null));
                *expr = call(FUNCTION_NAME, vec![subquery], vec![]);
            }
        }
        ControlFlow::Continue(())
    }
}

/// A select of one value that is not an aggregate, without grouping,
/// DISTINCT, a limit or set operations.
fn plain_value(query: &ast::Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let element = match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(expr)] | [SelectItem::ExprWithAlias { expr, .. }] => expr,
        _ => return false,
    };
    let ungrouped =
        matches!(&select.group_by, GroupByExpr::Expressions(items, _) if items.is_empty());
    query.limit_clause.is_none()
        && query.fetch.is_none()
        && !select.from.is_empty()
        && ungrouped
        && select.having.is_none()
        && select.distinct.is_none()
        && select.qualify.is_none()
        && !super::first_row_subquery::aggregates(element)
}

/// Whether a qualified name in the subquery names a relation it does not
/// read itself.
fn correlated(query: &ast::Query) -> bool {
    #[derive(Default)]
    struct Names {
        relations: HashSet<String>,
        qualifiers: HashSet<String>,
    }
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            let alias = match factor {
                TableFactor::Table { name, alias, .. } => {
                    if let Some(last) = name.0.last().and_then(|part| part.as_ident()) {
                        self.relations.insert(super::names::identifier(last));
                    }
                    alias
                }
                TableFactor::Derived { alias, .. }
                | TableFactor::Function { alias, .. }
                | TableFactor::UNNEST { alias, .. }
                | TableFactor::NestedJoin { alias, .. } => alias,
                _ => &None,
            };
            if let Some(alias) = alias {
                self.relations.insert(super::names::identifier(&alias.name));
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::CompoundIdentifier(parts) = expr {
                if let [.., qualifier, _] = parts.as_slice() {
                    self.qualifiers.insert(super::names::identifier(qualifier));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names::default();
    let _ = query.visit(&mut names);
    names
        .qualifiers
        .iter()
        .any(|qualifier| !names.relations.contains(qualifier))
}

/// `SELECT v …` as `SELECT array_agg(v) AS <v's name> …`.
fn aggregate_values(query: &mut ast::Query) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let (element, alias) = match select.projection.first() {
        Some(SelectItem::UnnamedExpr(expr)) => (expr.clone(), Ident::new(item_name(expr))),
        Some(SelectItem::ExprWithAlias { expr, alias }) => (expr.clone(), alias.clone()),
        _ => return,
    };
    select.projection = vec![SelectItem::ExprWithAlias {
        expr: call("array_agg", vec![element], vec![]),
        alias,
    }];
    query.order_by = None;
}

/// `single_row_value(values)`: the list's one element, NULL for an empty
/// or NULL list, 21000 for more than one.
pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(SingleRowValue {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SingleRowValue {
    signature: Signature,
}

impl ScalarUDFImpl for SingleRowValue {
    fn name(&self) -> &str {
        FUNCTION_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        match arguments.first() {
            Some(DataType::List(item) | DataType::LargeList(item)) => Ok(item.data_type().clone()),
            Some(DataType::Null) | None => Ok(DataType::Null),
            Some(other) => Ok(other.clone()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [lists] = arrays.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "{FUNCTION_NAME} takes one list"
            )));
        };
        let DataType::List(item) = lists.data_type() else {
            return Ok(ColumnarValue::Array(new_null_array(
                args.return_field.data_type(),
                lists.len(),
            )));
        };
        let lists = lists.as_list::<i32>();
        let mut positions: Vec<Option<u32>> = Vec::with_capacity(lists.len());
        for row in 0..lists.len() {
            if lists.is_null(row) {
                positions.push(None);
                continue;
            }
            let (start, end) = (lists.value_offsets()[row], lists.value_offsets()[row + 1]);
            match end - start {
                0 => positions.push(None),
                1 => positions.push(Some(start as u32)),
                _ => {
                    return Err(DataFusionError::External(Box::new(WeirError::new(
                        sqlstate::CARDINALITY_VIOLATION,
                        "more than one row returned by a subquery used as an expression",
                    ))))
                }
            }
        }
        let values: ArrayRef = take(lists.values(), &UInt32Array::from(positions), None)?;
        debug_assert_eq!(values.data_type(), item.data_type());
        Ok(ColumnarValue::Array(Arc::new(values)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, rewrite)
    }

    #[test]
    fn a_correlated_plain_value_becomes_one_value_of_an_aggregate() {
        assert_eq!(
            rewritten("SELECT (SELECT b.v FROM b WHERE b.k = a.k) FROM a"),
            "SELECT single_row_value((SELECT array_agg(b.v) AS v FROM b WHERE b.k = a.k)) FROM a"
        );
    }

    #[test]
    fn uncorrelated_aggregated_and_limited_subqueries_stay() {
        for sql in [
            "SELECT (SELECT b.v FROM b WHERE b.k = 1) FROM a",
            "SELECT (SELECT max(b.v) FROM b WHERE b.k = a.k) FROM a",
            "SELECT (SELECT b.v FROM b WHERE b.k = a.k LIMIT 1) FROM a",
            "SELECT (SELECT DISTINCT b.v FROM b WHERE b.k = a.k) FROM a",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}
