//! `generate_subscripts(array, 1)`, the set-returning function catalog
//! queries pair with `unnest(array)` (SQLAlchemy's key and index listing),
//! as `unnest(range(1, array_length(array, 1) + 1))`: DataFusion zips
//! several `unnest`s in one select list as Postgres zips set-returning
//! functions, so each element keeps its subscript.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
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
    if name != "generate_subscripts" {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let [array, dimension] = list.args.as_slice() else {
        return None;
    };
    let argument = |argument: &FunctionArg| match argument {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Some(expr.to_string()),
        _ => None,
    };
    let (array, dimension) = (argument(array)?, argument(dimension)?);
    let sql = format!("unnest(range(1, CAST(array_length({array}, {dimension}) AS BIGINT) + 1))");
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .ok()?
        .parse_expr()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscripts_become_an_unnested_range() {
        let expr = Parser::new(&PostgreSqlDialect {})
            .try_with_sql("generate_subscripts(i.indkey, 1)")
            .unwrap()
            .parse_expr()
            .unwrap();
        assert_eq!(
            as_unnest(&expr).unwrap().to_string(),
            "unnest(range(1, CAST(array_length(i.indkey, 1) AS BIGINT) + 1))"
        );
    }
}
