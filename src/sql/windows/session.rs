//! SESSION windows in a query (not a materialized view): rows of one key
//! whose times are at most `gap` apart form a session `[first, last + gap)`.
//! The key is the enclosing query's GROUP BY (without the window columns).
//! Planned with SQL window functions: a row starts a new session when the
//! previous row of its key is more than `gap` before it; a running sum of
//! those starts numbers the sessions.

use datafusion::sql::sqlparser::ast::{self, Expr, GroupByExpr, SetExpr};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::{Result, WeirError};

/// The session key of `query`: its GROUP BY expressions other than the
/// window columns, unqualified (they are evaluated over the window's input).
pub fn session_keys(query: &ast::Query) -> Vec<String> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    let GroupByExpr::Expressions(expressions, _) = &select.group_by else {
        return Vec::new();
    };
    expressions
        .iter()
        .filter_map(|expr| {
            let name = match expr {
                Expr::Identifier(ident) => Some(ident),
                Expr::CompoundIdentifier(parts) => parts.last(),
                _ => None,
            };
            match name {
                Some(ident) if ["window_start", "window_end"].contains(&ident.value.as_str()) => {
                    None
                }
                Some(ident) => Some(ident.to_string()),
                None => Some(expr.to_string()),
            }
        })
        .collect()
}

/// Makes each SELECT of a set operation (`A EXCEPT ALL B`) a query of its
/// own, `(SELECT ...)`, which means the same: a SESSION call in it then
/// takes its key from that SELECT's GROUP BY, as in a query alone.
pub fn parenthesize_set_operands(body: &mut SetExpr) {
    let SetExpr::SetOperation { left, right, .. } = body else {
        return;
    };
    // Only where a SESSION call may be: other queries keep their shape.
    let text = format!("{left} {right}").to_ascii_uppercase();
    if !text.contains("SESSION") {
        return;
    }
    for side in [left, right] {
        match side.as_mut() {
            SetExpr::Select(_) => {
                let query = ast::Query {
                    with: None,
                    body: Box::new(side.as_ref().clone()),
                    order_by: None,
                    limit_clause: None,
                    fetch: None,
                    locks: Vec::new(),
                    for_clause: None,
                    settings: None,
                    format_clause: None,
                    pipe_operators: Vec::new(),
                };
                **side = SetExpr::Query(Box::new(query));
            }
            operation @ SetExpr::SetOperation { .. } => parenthesize_set_operands(operation),
            _ => {}
        }
    }
}

/// The derived table for `SESSION(input, time, gap)` with session `keys`.
pub fn session_subquery(
    input: &str,
    time: &str,
    gap: &Expr,
    keys: &[String],
) -> Result<ast::Query> {
    let partition = |extra: &str| {
        let mut columns: Vec<&str> = keys.iter().map(String::as_str).collect();
        if !extra.is_empty() {
            columns.push(extra);
        }
        if columns.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {}", columns.join(", "))
        }
    };
    let by_key = partition("");
    let by_session = partition("__weir_session");
    let sql = format!(
        "SELECT * EXCLUDE (__weir_new, __weir_session), \
         min({time}) OVER ({by_session}) AS window_start, \
         max({time}) OVER ({by_session}) + {gap} AS window_end FROM (\
         SELECT *, sum(__weir_new) OVER ({by_key} ORDER BY {time} ROWS UNBOUNDED PRECEDING) AS __weir_session FROM (\
         SELECT *, CASE WHEN lag({time}) OVER ({by_key} ORDER BY {time}) + {gap} >= {time} THEN CAST(0 AS INT) ELSE CAST(1 AS INT) END AS __weir_new \
         FROM {input} WHERE {time} IS NOT NULL) AS __weir_gaps) AS __weir_sessions"
    );
    // GenericDialect: it has SELECT * EXCLUDE, which hides the helpers.
    // __weir_new is an INT so its running sum stays a bigint (a sum of
    // bigints is numeric).
    Ok(*Parser::new(&GenericDialect {})
        .try_with_sql(&sql)
        .and_then(|mut parser| parser.parse_query())
        .map_err(|error| {
            WeirError::syntax(format!("SESSION: cannot build the window query: {error}"))
        })?)
}
