//! A bound on expression nesting. A statement such as `1 + 1 + ... + 1`
//! with tens of thousands of terms parses into a tree that deep, and every
//! recursive pass over it (display, planning, even dropping it) could
//! overflow a thread's stack and abort the server. Like Postgres
//! (`max_stack_depth`), weir refuses such statements with 54001 instead.
//! Array constructors are limited to Postgres's 6 dimensions: deeper nesting
//! makes list type planning blow up.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, Statement, Visit, Visitor};

use crate::error::{Result, WeirError};

/// Deepest expression or subquery nesting accepted.
pub const MAX_NESTING_DEPTH: usize = 400;
/// Postgres's MAXDIM.
pub const MAX_ARRAY_DIMENSIONS: usize = 6;

#[derive(Default)]
struct DepthCheck {
    depth: usize,
    array_depth: usize,
}

enum TooDeep {
    Nesting,
    Arrays,
}

impl DepthCheck {
    fn enter(&mut self) -> ControlFlow<TooDeep> {
        self.depth += 1;
        if self.depth > MAX_NESTING_DEPTH {
            ControlFlow::Break(TooDeep::Nesting)
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl Visitor for DepthCheck {
    type Break = TooDeep;

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<TooDeep> {
        if matches!(expr, Expr::Array(_)) {
            self.array_depth += 1;
            if self.array_depth > MAX_ARRAY_DIMENSIONS {
                return ControlFlow::Break(TooDeep::Arrays);
            }
        }
        self.enter()
    }

    fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<TooDeep> {
        if matches!(expr, Expr::Array(_)) {
            self.array_depth -= 1;
        }
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<TooDeep> {
        self.enter()
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<TooDeep> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

/// Fails with 54001 when `statement` nests deeper than the limit. The walk
/// stops at the limit, so checking is itself bounded.
pub fn check_nesting(statement: &Statement) -> Result<()> {
    let mut check = DepthCheck::default();
    match statement.visit(&mut check) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(TooDeep::Arrays) => Err(WeirError::new(
            "54000",
            format!(
                "number of array dimensions exceeds the maximum allowed ({MAX_ARRAY_DIMENSIONS})"
            ),
        )),
        ControlFlow::Break(TooDeep::Nesting) => Err(WeirError::new(
            "54001",
            format!(
                "statement too complex: expressions nest deeper than {MAX_NESTING_DEPTH} levels"
            ),
        )
        .with_hint(
            "Split the expression, or use IN (...) / a VALUES list instead of long chains.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::dialect::WeirDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn statement(sql: &str) -> Statement {
        Parser::new(&WeirDialect::new())
            .try_with_sql(sql)
            .unwrap()
            .parse_statement()
            .unwrap()
    }

    #[test]
    fn long_chains_are_refused_and_normal_ones_pass() {
        let long = format!("SELECT {}", vec!["1"; 5_000].join(" + "));
        assert_eq!(check_nesting(&statement(&long)).unwrap_err().code, "54001");
        let fine = format!("SELECT {}", vec!["1"; 100].join(" + "));
        assert!(check_nesting(&statement(&fine)).is_ok());
    }

    #[test]
    fn arrays_have_at_most_six_dimensions() {
        let nested = |n: usize| format!("SELECT {}1{}", "ARRAY[".repeat(n), "]".repeat(n));
        assert!(check_nesting(&statement(&nested(6))).is_ok());
        assert_eq!(
            check_nesting(&statement(&nested(7))).unwrap_err().code,
            "54000"
        );
    }
}
