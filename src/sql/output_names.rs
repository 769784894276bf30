//! Postgres's names for unaliased result columns. DataFusion names a column
//! after its whole expression (`count(*)`, `Float64(1.5)`); Postgres uses the
//! function or type name, or `?column?`. Clients and BI tools show these
//! names, so weir reports Postgres's.

use datafusion::sql::sqlparser::ast::{
    DataType, Expr, Ident, Query, SelectItem, SetExpr, Statement,
};

/// For each output column of a plain SELECT, the Postgres name if it
/// differs from what DataFusion would choose (None keeps DataFusion's).
/// Returns None when columns cannot be matched one to one (wildcards,
/// set operations, non-queries).
pub fn output_names(statement: &Statement) -> Option<Vec<Option<String>>> {
    let Statement::Query(query) = statement else {
        return None;
    };
    select_names(query)
}

fn select_names(query: &Query) -> Option<Vec<Option<String>>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(expr) => Some(expression_name(expr)),
            SelectItem::ExprWithAlias { alias, .. } => {
                Some(super::repeated_columns::reported_name(&alias.value).map(str::to_string))
            }
            _ => None,
        })
        .collect()
}

/// The name Postgres gives an unaliased select item.
pub(super) fn item_name(expr: &Expr) -> String {
    strong_name(expr)
        .or_else(|| expression_name(expr))
        .unwrap_or_else(|| "?column?".to_string())
}

/// The name of a column reference or function call, which a cast keeps.
fn strong_name(expr: &Expr) -> Option<String> {
    let ident_name = |ident: &Ident| match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    };
    match expr {
        Expr::Identifier(ident) => Some(ident_name(ident)),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident_name),
        Expr::Function(_) => expression_name(expr),
        Expr::Cast { expr: inner, .. } | Expr::Nested(inner) => strong_name(inner),
        _ => None,
    }
}

pub(super) fn expression_name(expr: &Expr) -> Option<String> {
    if let Some(Expr::Subquery(query)) = single_row_subquery(expr) {
        // The rewrite named the aggregate as Postgres names the value.
        if let SetExpr::Select(select) = query.body.as_ref() {
            if let [SelectItem::ExprWithAlias { alias, .. }] = select.projection.as_slice() {
                return Some(alias.value.clone());
            }
        }
    }
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Function(function) => function
            .name
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map(|ident| ident.value.to_ascii_lowercase()),
        // Postgres names a cast after the column or function it casts, else
        // after its type (`a::text` is `a`, `1::text` is `text`).
        Expr::Cast {
            expr: inner,
            data_type,
            ..
        } => Some(strong_name(inner).unwrap_or_else(|| type_name(data_type))),
        Expr::TypedString(typed) => Some(type_name(&typed.data_type)),
        Expr::Nested(inner) => expression_name(inner).or_else(|| Some("?column?".to_string())),
        Expr::Case { .. } => Some("case".to_string()),
        Expr::Array(_) => Some("array".to_string()),
        Expr::Exists { .. } => Some("exists".to_string()),
        Expr::Subquery(query) => select_names(query)
            .and_then(|names| names.into_iter().next().flatten())
            .or_else(|| Some("?column?".to_string())),
        _ => Some("?column?".to_string()),
    }
}

/// The name Postgres gives a type in column headers (its internal name).
fn type_name(data_type: &DataType) -> String {
    let text = data_type.to_string().to_ascii_lowercase();
    let base = text.split('(').next().unwrap_or(&text).trim();
    let name = match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "double" | "float8" | "float" => "float8",
        "boolean" | "bool" => "bool",
        "decimal" | "numeric" => "numeric",
        "character varying" | "varchar" => "varchar",
        "character" | "char" => "bpchar",
        "timestamp with time zone" | "timestamptz" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "time" | "time without time zone" => "time",
        other => other,
    };
    name.to_string()
}

/// The subquery inside `single_row_value(…)` (sql::single_row_subquery),
/// which names the column as the subquery would.
fn single_row_subquery(expr: &Expr) -> Option<&Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    if !function
        .name
        .to_string()
        .eq_ignore_ascii_case(super::single_row_subquery::FUNCTION_NAME)
    {
        return None;
    }
    let datafusion::sql::sqlparser::ast::FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match list.args.as_slice() {
        [datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
            datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(subquery @ Expr::Subquery(_)),
        )] => Some(subquery),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{parse, Statement as WeirStatement};

    fn names(sql: &str) -> Option<Vec<Option<String>>> {
        let WeirStatement::Standard(statement) = parse(sql).unwrap().remove(0) else {
            panic!("not a standard statement");
        };
        output_names(&statement)
    }

    fn some(name: &str) -> Option<String> {
        Some(name.to_string())
    }

    #[test]
    fn functions_casts_and_expressions() {
        assert_eq!(
            names("SELECT count(*), 1.5::float8, CAST(x AS INTEGER), 1 + 2, a, t.b, c AS d FROM t"),
            Some(vec![
                some("count"),
                some("float8"),
                // Postgres: a cast of a column keeps the column's name.
                some("x"),
                some("?column?"),
                None,
                None,
                None
            ])
        );
        assert_eq!(
            names("SELECT DATE '2026-01-01', now()"),
            Some(vec![some("date"), some("now")])
        );
    }

    #[test]
    fn wildcards_and_non_selects_keep_datafusion_names() {
        assert_eq!(names("SELECT *, count(*) FROM t"), None);
        assert_eq!(names("SELECT 1 UNION SELECT 2"), None);
        assert_eq!(names("INSERT INTO t VALUES (1)"), None);
    }
}
