//! Window table functions in FROM: `TUMBLE(t, ts, size [, offset])`,
//! `HOP(t, ts, slide, size [, offset])` and `CUMULATE(t, ts, step, size
//! [, offset])`, also in Flink's spelling
//! `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`. Each adds `window_start`
//! and `window_end` to every row of `t` (a table, view or subquery).
//!
//! For queries they are rewritten into plain SQL that DataFusion plans:
//! TUMBLE bins the time column on its grid (`grid_floor.rs`, a `date_bin`
//! that fails rather than give NULL before 1677); HOP lists every window start
//! in `(ts - size, ts]` on the slide grid and unnests them, so a HOP size need
//! not be a multiple of its slide; CUMULATE lists the ends on the step grid
//! from the row to the end of its size-long period. Windows align to
//! 1970-01-01 plus offset.

use std::ops::ControlFlow;

use crate::sql::dialect::WeirDialect;
use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, Ident, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::{Result, WeirError};
use crate::stream::operators::window_spec::{too_many_windows, WindowKind, MAX_WINDOWS_PER_ROW};

mod flink_spelling;
pub mod grid_floor;
mod session;

pub use flink_spelling::normalize_flink_spelling;
use grid_floor::GRID_FLOOR_FUNCTION_NAME;

const WINDOW_FUNCTIONS: &[&str] = &["TUMBLE", "HOP", "SESSION", "CUMULATE"];

/// Replaces window function calls in FROM by the subqueries they stand for.
pub fn rewrite(statement: ast::Statement) -> Result<ast::Statement> {
    rewrite_with(statement, false)
}

/// For a materialized view: window calls become the internal table
/// function the streaming planner recognises (sql::streaming).
pub fn rewrite_streaming(statement: ast::Statement) -> Result<ast::Statement> {
    rewrite_with(statement, true)
}

fn rewrite_with(mut statement: ast::Statement, streaming: bool) -> Result<ast::Statement> {
    let mut rewriter = WindowRewriter {
        streaming,
        session_keys: Vec::new(),
    };
    match statement.visit(&mut rewriter) {
        ControlFlow::Continue(()) => Ok(statement),
        ControlFlow::Break(error) => Err(error),
    }
}

struct WindowRewriter {
    streaming: bool,
    /// The GROUP BY keys of each enclosing query (SESSION's key).
    session_keys: Vec<Vec<String>>,
}

impl VisitorMut for WindowRewriter {
    type Break = WeirError;

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<WeirError> {
        session::parenthesize_set_operands(&mut query.body);
        self.session_keys.push(session::session_keys(query));
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut ast::Query) -> ControlFlow<WeirError> {
        self.session_keys.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<WeirError> {
        let TableFactor::Table {
            name,
            alias,
            args: Some(args),
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let function = name.to_string().to_ascii_uppercase();
        if !WINDOW_FUNCTIONS.contains(&function.as_str()) {
            return ControlFlow::Continue(());
        }
        let rewritten = if self.streaming {
            window_call(&function, &args.args, alias.take())
        } else {
            let keys = self.session_keys.last().cloned().unwrap_or_default();
            window_subquery(&function, &args.args, alias.take(), &keys)
        };
        match rewritten {
            Ok(derived) => {
                *factor = derived;
                ControlFlow::Continue(())
            }
            Err(error) => ControlFlow::Break(error),
        }
    }
}

/// `PROCTIME()` as a window's time argument.
fn is_proctime(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(function)
        if function.name.to_string().eq_ignore_ascii_case("proctime")
            && matches!(&function.args, ast::FunctionArguments::List(list) if list.args.is_empty()))
}

/// The checked arguments of a window call.
struct WindowArguments<'a> {
    arguments: Vec<&'a Expr>,
    /// Where the offset argument would be (3 for TUMBLE, 4 for HOP).
    minimum: usize,
    usage: &'static str,
    /// Slide and size (just size for TUMBLE), in nanoseconds.
    lengths: Vec<i128>,
}

fn window_arguments<'a>(function: &str, args: &'a [FunctionArg]) -> Result<WindowArguments<'a>> {
    let arguments: Vec<&Expr> = args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Ok(expr),
            other => Err(WeirError::syntax(format!(
                "{function}: unsupported argument {other}"
            ))),
        })
        .collect::<Result<_>>()?;
    let usage = match function {
        "TUMBLE" => "TUMBLE(table, time_column, size [, offset])",
        "HOP" => "HOP(table, time_column, slide, size [, offset])",
        "CUMULATE" => "CUMULATE(table, time_column, step, size [, offset])",
        "SESSION" => "SESSION(table, time_column, gap)",
        other => {
            return Err(
                WeirError::unsupported(format!("{other} windows are not supported yet"))
                    .with_hint("TUMBLE and HOP windows are available."),
            )
        }
    };
    let (minimum, maximum) = match function {
        "TUMBLE" => (3, 4),
        "SESSION" => (3, 3),
        _ => (4, 5),
    };
    if arguments.len() < minimum || arguments.len() > maximum {
        return Err(
            WeirError::syntax(format!("wrong number of arguments to {function}"))
                .with_hint(format!("Use {usage}.")),
        );
    }
    let lengths = check_sizes(function, &arguments[2..minimum], usage)?;
    if let ("CUMULATE", [step, size]) = (function, &lengths[..]) {
        if size % step != 0 {
            return Err(WeirError::new(
                crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                "CUMULATE: the size must be a whole number of steps",
            )
            .with_hint(format!(
                "Use {usage}, e.g. a 1 hour size with 10 minute steps."
            )));
        }
    }
    Ok(WindowArguments {
        arguments,
        minimum,
        usage,
        lengths,
    })
}

fn default_alias(alias: Option<TableAlias>, name: String) -> Option<TableAlias> {
    Some(alias.unwrap_or_else(|| TableAlias {
        name: Ident::new(name),
        columns: Vec::new(),
        explicit: true,
        at: None,
    }))
}

fn parse_from(sql: &str) -> Result<ast::Query> {
    Ok(*Parser::new(&WeirDialect::new())
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_query())
        .map_err(WeirError::from)?)
}

/// `__weir_window('TUMBLE', 'input', 'time', size_ns, slide_ns, offset_ns)`.
fn window_call(
    function: &str,
    args: &[FunctionArg],
    alias: Option<TableAlias>,
) -> Result<TableFactor> {
    let WindowArguments {
        arguments,
        minimum,
        usage,
        lengths,
    } = window_arguments(function, args)?;
    let input = match arguments[0] {
        Expr::Identifier(ident) => ident.clone(),
        Expr::CompoundIdentifier(parts) => parts.last().cloned().unwrap_or_else(|| Ident::new("")),
        _ => {
            return Err(WeirError::unsupported(format!(
                "{function} over a subquery is not supported in a materialized view"
            ))
            .with_hint("Create a view or materialized view for the subquery and window that."))
        }
    };
    let time = match arguments[1] {
        Expr::Identifier(ident) => ident.clone(),
        Expr::CompoundIdentifier(parts) => parts.last().cloned().unwrap_or_else(|| Ident::new("")),
        // The input's PROCTIME() column, found when the window is planned.
        call if is_proctime(call) => {
            Ident::new(crate::sql::streaming::window_function::PROCTIME_COLUMN)
        }
        other => {
            return Err(WeirError::syntax(format!(
                "{function}: the time column must be a column name, not {other}"
            ))
            .with_hint(format!("Use {usage}.")))
        }
    };
    let offset = match arguments.get(minimum) {
        Some(offset) => match super::interval::interval_nanoseconds(offset) {
            Some(nanoseconds) if i64::try_from(nanoseconds).is_ok() => nanoseconds,
            Some(_) => {
                return Err(WeirError::new(
                    crate::error::sqlstate::DATETIME_FIELD_OVERFLOW,
                    format!("{function}: offset {offset} is longer than the range of timestamps"),
                )
                .with_hint(format!(
                    "Use {usage} with an offset shorter than the window."
                )))
            }
            None => {
                return Err(WeirError::unsupported(format!(
                    "{function}: offset {offset} must be a constant interval"
                ))
                .with_hint(format!("Use {usage}.")))
            }
        },
        None => 0,
    };
    let (slide, size) = match lengths[..] {
        [size] => (size, size),
        [slide, size] => (slide, size),
        _ => return Err(WeirError::internal("window lengths")),
    };
    let name = |ident: &Ident| match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    };
    let quoted = |text: String| format!("'{}'", text.replace('\'', "''"));
    let sql = format!(
        "SELECT * FROM {}({}, {}, {}, {size}, {slide}, {offset})",
        crate::sql::streaming::window_function::WINDOW_FUNCTION_NAME,
        quoted(function.to_string()),
        quoted(name(&input)),
        quoted(name(&time)),
    );
    let query = parse_from(&sql)?;
    let ast::SetExpr::Select(select) = *query.body else {
        return Err(WeirError::internal("window call did not parse as a SELECT"));
    };
    let mut factor = select
        .from
        .into_iter()
        .next()
        .map(|table| table.relation)
        .ok_or_else(|| WeirError::internal("window call has no FROM"))?;
    if let TableFactor::Table { alias: slot, .. } = &mut factor {
        *slot = default_alias(alias, name(&input));
    }
    Ok(factor)
}

fn window_subquery(
    function: &str,
    args: &[FunctionArg],
    alias: Option<TableAlias>,
    session_keys: &[String],
) -> Result<TableFactor> {
    let WindowArguments {
        arguments,
        minimum,
        usage,
        lengths,
    } = window_arguments(function, args)?;
    let (input, default_name) = window_input(arguments[0], function)?;
    let time = match arguments[1] {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => arguments[1].to_string(),
        // In a query, processing time is the time the query runs.
        call if is_proctime(call) => "proctime()".to_string(),
        other => {
            return Err(WeirError::syntax(format!(
                "{function}: the time column must be a column name, not {other}"
            ))
            .with_hint(format!("Use {usage}.")))
        }
    };
    let offset = arguments.get(minimum).map(|offset| offset.to_string());
    let origin = match offset {
        Some(offset) => format!("(TIMESTAMP '1970-01-01 00:00:00' + {offset})"),
        None => "TIMESTAMP '1970-01-01 00:00:00'".to_string(),
    };
    if function == "SESSION" {
        let query = session::session_subquery(&input, &time, arguments[2], session_keys)?;
        return Ok(TableFactor::Derived {
            lateral: false,
            subquery: Box::new(query),
            alias: default_alias(alias, default_name),
            sample: None,
        });
    }
    // Window starts are floors on the window's grid (grid_floor.rs);
    // adding an interval to a timestamp fails past 2262 by itself.
    let floor =
        |step_ns: i128, at: &str| format!("{GRID_FLOOR_FUNCTION_NAME}({step_ns}, {at}, {origin})");
    let sql = match (function, &lengths[..], &arguments[2..]) {
        ("TUMBLE", [size_ns], [size, ..]) => {
            let start = floor(*size_ns, &time);
            format!(
                "SELECT *, {start} AS window_start, {start} + {size} AS window_end FROM {input}"
            )
        }
        // Every window of the row's size-long period that ends after it.
        ("CUMULATE", [step_ns, size_ns], [step, size, ..]) => {
            let period = floor(*size_ns, &time);
            let first_end = floor(*step_ns, &time);
            format!(
                "SELECT *, {period} AS window_start, \
                 unnest(range({first_end} + {step}, {period} + {size} + {step}, {step})) AS window_end FROM {input}"
            )
        }
        // The first start is the slide after ts - size, computed as the
        // slide at or before ts - (size - slide): the same instant, but no
        // intermediate time before 1677 when every window starts after it.
        ("HOP", [slide_ns, _], [slide, size, ..]) => {
            let first = floor(*slide_ns, &format!("{time} - ({size} - {slide})"));
            let last = floor(*slide_ns, &time);
            format!(
                "SELECT *, window_start + {size} AS window_end FROM (\
                 SELECT *, unnest(range({first}, {last} + {slide}, {slide})) AS window_start \
                 FROM {input}) AS __hop_windows"
            )
        }
        _ => {
            return Err(WeirError::internal(format!(
                "{function}: unexpected window arguments"
            )))
        }
    };
    Ok(TableFactor::Derived {
        lateral: false,
        subquery: Box::new(parse_from(&sql)?),
        alias: default_alias(alias, default_name),
        sample: None,
    })
}

/// Window sizes must be positive constant intervals no longer than the
/// timestamp range, and a HOP or CUMULATE must not put a row into an
/// unbounded number of windows.
fn check_sizes(function: &str, sizes: &[&Expr], usage: &str) -> Result<Vec<i128>> {
    let lengths = sizes
        .iter()
        .map(|size| match super::interval::interval_nanoseconds(size) {
            Some(length) if length > i128::from(i64::MAX) => Err(WeirError::new(
                crate::error::sqlstate::DATETIME_FIELD_OVERFLOW,
                format!(
                    "{function}: {} {size} is longer than the range of timestamps",
                    length_name(function)
                ),
            )
            .with_hint(format!("Use {usage} with a shorter interval."))),
            Some(length) if length > 0 => Ok(length),
            Some(_) => Err(WeirError::new(
                crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "{function}: {} {size} must be positive",
                    length_name(function)
                ),
            )),
            None => Err(WeirError::unsupported(format!(
                "{function}: {} {size} must be a constant interval of fixed length",
                length_name(function)
            ))
            .with_hint(format!(
                "Use {usage} with intervals such as INTERVAL '5' MINUTE (not months or years)."
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    if let [slide, size] = lengths[..] {
        let windows = size / slide;
        if windows > i128::from(MAX_WINDOWS_PER_ROW) {
            let kind = if function == "CUMULATE" {
                WindowKind::Cumulate
            } else {
                WindowKind::Hop
            };
            return Err(too_many_windows(kind, windows as i64));
        }
    }
    Ok(lengths)
}

/// What a window function's interval arguments are called in errors.
fn length_name(function: &str) -> &'static str {
    if function == "SESSION" {
        "gap"
    } else {
        "window size"
    }
}

/// The FROM text for the window's input and the alias the result gets by
/// default (the table's name, so `t.column` keeps working).
fn window_input(argument: &Expr, function: &str) -> Result<(String, String)> {
    match argument {
        Expr::Identifier(ident) => Ok((ident.to_string(), ident.value.to_ascii_lowercase())),
        Expr::CompoundIdentifier(parts) => {
            let last = parts.last().map_or(function.to_ascii_lowercase(), |p| {
                p.value.to_ascii_lowercase()
            });
            Ok((argument.to_string(), last))
        }
        Expr::Subquery(query) => Ok((
            format!("({query}) AS __window_input"),
            function.to_ascii_lowercase(),
        )),
        other => Err(WeirError::syntax(format!(
            "{function}: the first argument must be a table or a subquery, not {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumble_becomes_a_derived_table() {
        let statement = Parser::new(&WeirDialect::new())
            .try_with_sql("SELECT window_start, count(*) FROM TUMBLE(pv, ts, INTERVAL '5' MINUTE) GROUP BY window_start")
            .unwrap()
            .parse_statement()
            .unwrap();
        let rewritten = rewrite(statement).unwrap().to_string();
        assert!(
            rewritten
                .contains("__weir_window_floor(300000000000, ts, TIMESTAMP '1970-01-01 00:00:00')"),
            "{rewritten}"
        );
        assert!(rewritten.contains(") AS pv GROUP BY"), "{rewritten}");
    }

    #[test]
    fn wrong_arguments_are_clear_errors() {
        let statement = Parser::new(&WeirDialect::new())
            .try_with_sql("SELECT * FROM TUMBLE(pv, ts)")
            .unwrap()
            .parse_statement()
            .unwrap();
        let error = rewrite(statement).unwrap_err();
        assert_eq!(error.code, "42601");
        assert!(error
            .hint
            .unwrap()
            .contains("TUMBLE(table, time_column, size"));
    }
}
