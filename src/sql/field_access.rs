//! Postgres reads a field of a composite value with `(value).field`
//! (pgjdbc: `(information_schema._pg_expandarray(i.indkey)).n`,
//! `(result.KEYS).x`); DataFusion refuses a dot after an expression ("Dot
//! access not supported"), so each such access becomes `get_field(value,
//! 'field')`. Subscripts (`a[1]`) are left to DataFusion.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, AccessExpr, Expr, VisitMut, VisitorMut};

use super::ast_build::call;

pub fn rewrite(statement: &mut ast::Statement) {
    let _ = statement.visit(&mut FieldAccessRewriter);
}

struct FieldAccessRewriter;

impl VisitorMut for FieldAccessRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::CompoundFieldAccess { root, access_chain } = expr else {
            return ControlFlow::Continue(());
        };
        let fields: Option<Vec<String>> = access_chain
            .iter()
            .map(|access| match access {
                AccessExpr::Dot(Expr::Identifier(field)) => Some(field.value.clone()),
                _ => None,
            })
            .collect();
        let Some(fields) = fields else {
            return ControlFlow::Continue(());
        };
        let mut value = match root.as_ref() {
            Expr::Nested(inner) => inner.as_ref().clone(),
            other => other.clone(),
        };
        for field in fields {
            let name = Expr::value(ast::Value::SingleQuotedString(field));
            value = call("get_field", vec![value, name], vec![]);
        }
        *expr = value;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dots_after_an_expression_read_fields() {
        assert_eq!(
            crate::sql::ast_build::rewritten(
                "SELECT (f(a)).n, (r.keys).x, (r.s).a.b, r.list[1] FROM r",
                super::rewrite
            ),
            "SELECT get_field(f(a), 'n'), get_field(r.keys, 'x'), \
             get_field(get_field(r.s, 'a'), 'b'), r.list[1] FROM r"
        );
    }
}
