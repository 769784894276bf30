//! `CAST(x AS regclass)` of a computed name (Metabase's field sync:
//! `CAST(FORMAT('%I.%I', schema, table) AS REGCLASS)`): datafusion-pg-catalog
//! turns only a literal name into a pg_class lookup, and DataFusion then
//! casts the text to an integer and fails (22P02). Here the computed name
//! becomes the same lookup, split into schema (default `public`, the search
//! path) and relation, quotes removed. A name that matches no relation is
//! NULL, where Postgres fails with 42P01.

use std::ops::ControlFlow;

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{self, Expr, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::parser::Parser;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut RegclassRewriter);
}

struct RegclassRewriter;

impl VisitorMut for RegclassRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Cast {
            expr: name,
            data_type,
            ..
        } = expr
        else {
            return ControlFlow::Continue(());
        };
        let is_regclass = data_type
            .to_string()
            .to_ascii_lowercase()
            .ends_with("regclass");
        if !is_regclass || !computes_text(name) {
            return ControlFlow::Continue(());
        }
        if let Some(lookup) = lookup(name) {
            *expr = lookup;
        }
        ControlFlow::Continue(())
    }
}

/// Only an expression that visibly makes text: an oid cast to regclass
/// (`a.attrelid::regclass`, everywhere in psql's queries) is the same
/// number, and a literal is the catalog parser's.
fn computes_text(expr: &Expr) -> bool {
    match expr {
        Expr::Nested(inner) => computes_text(inner),
        Expr::BinaryOp {
            op: ast::BinaryOperator::StringConcat,
            ..
        } => true,
        Expr::Cast { data_type, .. } => {
            let name = data_type.to_string().to_ascii_lowercase();
            ["text", "varchar", "character varying", "name"].contains(&name.as_str())
        }
        Expr::Function(function) => {
            let name = function.name.to_string().to_ascii_lowercase();
            let name = name.rsplit('.').next().unwrap_or_default();
            TEXT_FUNCTIONS.contains(&name)
        }
        _ => false,
    }
}

const TEXT_FUNCTIONS: &[&str] = &[
    "format",
    "concat",
    "concat_ws",
    "quote_ident",
    "lower",
    "upper",
    "btrim",
    "trim",
    "replace",
];

fn lookup(name: &Expr) -> Option<Expr> {
    // Aliases no query of a client uses: the name usually reads the outer
    // query's `c` and `n`, which these must not capture.
    let sql = format!(
        "(SELECT first_value(regclass_class.oid) FROM pg_catalog.pg_class regclass_class \
         JOIN pg_catalog.pg_namespace regclass_namespace \
         ON regclass_namespace.oid = regclass_class.relnamespace \
         WHERE regclass_class.relname = btrim(regexp_replace({name}, '^.*\\.', ''), '\"') \
         AND regclass_namespace.nspname = CASE WHEN strpos({name}, '.') > 0 \
         THEN btrim(split_part({name}, '.', 1), '\"') ELSE 'public' END)"
    );
    Parser::new(&WeirDialect::new())
        .try_with_sql(&sql)
        .ok()?
        .parse_expr()
        .ok()
}

#[cfg(test)]
mod tests {
    fn rewritten(sql: &str) -> String {
        crate::sql::ast_build::rewritten(sql, super::rewrite)
    }

    #[test]
    fn computed_names_are_looked_up() {
        let sql = rewritten("SELECT CAST(format('%I.%I', s, t) AS REGCLASS) FROM x");
        assert!(
            sql.contains("FROM pg_catalog.pg_class regclass_class"),
            "{sql}"
        );
        assert!(
            sql.contains("regclass_class.relname = btrim(regexp_replace(format('%I.%I', s, t)"),
            "{sql}"
        );
    }

    #[test]
    fn literal_names_are_left_to_the_catalog_parser() {
        let sql =
            "SELECT CAST('t' AS REGCLASS), CAST(a.attrelid AS REGCLASS), CAST(x AS TEXT) FROM y";
        assert_eq!(rewritten(sql), sql);
    }
}
