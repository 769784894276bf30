//! `generate_subscripts(array, 1)`, the set-returning function catalog
//! queries pair with `unnest(array)` (SQLAlchemy's key and index listing),
//! as `unnest(range(1, array_length(array, 1) + 1))`: DataFusion zips
//! several `unnest`s in one select list as Postgres zips set-returning
//! functions, so each element keeps its subscript.
//!
//! Postgres' `information_schema._pg_expandarray(array)` (pgjdbc's
//! `getPrimaryKeys` and `getIndexInfo`) returns a row `(x, n)` per element:
//! the element and its subscript. It becomes `named_struct('x',
//! unnest(array), 'n', <the subscripts above, as integer>)`; its fields are
//! read with `(…).x` (`field_access`).

use std::ops::ControlFlow;

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut SubscriptsRewriter);
}

struct SubscriptsRewriter;

impl VisitorMut for SubscriptsRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(rewritten) = as_unnest(expr) {
            *expr = rewritten;
        }
        ControlFlow::Continue(())
    }
}

fn as_unnest(expr: &Expr) -> Option<Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let name = function.name.0.last()?.to_string().to_ascii_lowercase();
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let argument = |argument: &FunctionArg| match argument {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Some(expr.to_string()),
        _ => None,
    };
    let sql = match (name.as_str(), list.args.as_slice()) {
        ("generate_subscripts", [array, dimension]) => {
            subscripts(&argument(array)?, &argument(dimension)?)
        }
        ("_pg_expandarray", [array]) => {
            let array = argument(array)?;
            let subscripts = subscripts(&array, "1");
            format!("named_struct('x', unnest({array}), 'n', CAST({subscripts} AS INT))")
        }
        _ => return None,
    };
    Parser::new(&WeirDialect::new())
        .try_with_sql(&sql)
        .ok()?
        .parse_expr()
        .ok()
}

fn subscripts(array: &str, dimension: &str) -> String {
    format!("unnest(range(1, CAST(array_length({array}, {dimension}) AS BIGINT) + 1))")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscripts_become_an_unnested_range() {
        let expr = Parser::new(&WeirDialect::new())
            .try_with_sql("generate_subscripts(i.indkey, 1)")
            .unwrap()
            .parse_expr()
            .unwrap();
        assert_eq!(
            as_unnest(&expr).unwrap().to_string(),
            "unnest(range(1, CAST(array_length(i.indkey, 1) AS BIGINT) + 1))"
        );
    }

    #[test]
    fn expanded_arrays_pair_each_element_with_its_subscript() {
        let expr = Parser::new(&WeirDialect::new())
            .try_with_sql("information_schema._pg_expandarray(i.indkey)")
            .unwrap()
            .parse_expr()
            .unwrap();
        assert_eq!(
            as_unnest(&expr).unwrap().to_string(),
            "named_struct('x', unnest(i.indkey), 'n', \
             CAST(unnest(range(1, CAST(array_length(i.indkey, 1) AS BIGINT) + 1)) AS INT))"
        );
    }
}
