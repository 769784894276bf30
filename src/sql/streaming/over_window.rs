//! OVER windows in a view that are not a bounded top-N (`lag`, `lead`,
//! aggregates over frames, running totals, rankings without a rank
//! filter) become an `OverWindowNode`. The node works out how far a
//! change reaches (`Reach`): a constant `lag`/`lead` offset or a ROWS
//! frame with constant bounds reaches a few rows; anything else (UNBOUNDED,
//! RANGE or GROUPS frames, ranks, IGNORE NULLS) reaches the partition,
//! and EXPLAIN says which.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{NullTreatment, WindowFunction};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Window, WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::physical_expr::create_physical_sort_exprs;
use datafusion::physical_planner::create_window_expr;

use super::errors::{shown, unsupported};
use super::{Planner, Segment, StreamNode};
use crate::error::{Result, WeirError};
use crate::stream::operators::over_window::{OverWindowSpec, Reach};
use crate::stream::EmitMode;

/// OVER windows sharing one PARTITION BY and ORDER BY: the operator's
/// spec, and its EXPLAIN line.
pub struct OverWindowNode {
    pub spec: OverWindowSpec,
    display: String,
}

impl OverWindowNode {
    pub fn describe(&self) -> String {
        self.display.clone()
    }
}

impl Planner<'_> {
    pub(super) fn over_window(&mut self, window: &Window) -> Result<Segment> {
        if self.emit == EmitMode::OnWindowClose {
            return Err(unsupported(
                "EMIT ON WINDOW CLOSE over a window function (OVER ...)",
                "A row's lag, lead or frame changes whenever its neighbours do, so it is never final: leave out EMIT ON WINDOW CLOSE.",
            ));
        }
        let functions: Vec<&WindowFunction> = window
            .window_expr
            .iter()
            .map(|expr| match strip_alias(expr) {
                Expr::WindowFunction(function) => Ok(function.as_ref()),
                other => Err(WeirError::internal(format!(
                    "a window node computing {other}"
                ))),
            })
            .collect::<Result<_>>()?;
        let first = functions
            .first()
            .ok_or_else(|| WeirError::internal("a window node without functions"))?;
        let (partition, order) = (&first.params.partition_by, &first.params.order_by);
        if functions
            .iter()
            .any(|f| &f.params.partition_by != partition || &f.params.order_by != order)
        {
            return Err(WeirError::internal(
                "window functions of one node with different PARTITION BY or ORDER BY",
            ));
        }
        let mut segment = self.segment(&window.input)?;
        let input = window.input.as_ref();
        let reach = functions
            .iter()
            .map(|function| reach(function))
            .reduce(Reach::union)
            .unwrap_or(Reach::Partition);
        let display = format!(
            "OverWindow: partition=[{}] order=[{}] functions=[{}] state=every row (unbounded) work per change={}",
            partition.iter().map(shown).collect::<Vec<_>>().join(", "),
            order
                .iter()
                .map(|sort| sort.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            functions
                .iter()
                .map(|function| call(function))
                .collect::<Vec<_>>()
                .join(", "),
            describe(reach)
        );
        let spec = OverWindowSpec {
            partition: partition
                .iter()
                .map(|expr| self.physical(expr, input))
                .collect::<Result<_>>()?,
            order: create_physical_sort_exprs(
                order,
                input.schema(),
                self.props,
                &PhysicalPlanningContext::default(),
            )?,
            functions: window
                .window_expr
                .iter()
                .map(|expr| {
                    create_window_expr(
                        expr,
                        input.schema(),
                        self.props,
                        &PhysicalPlanningContext::default(),
                    )
                })
                .collect::<datafusion::error::Result<_>>()?,
            reach,
            schema: Arc::new(window.schema.as_arrow().clone()),
        };
        segment
            .nodes
            .push(StreamNode::OverWindow(OverWindowNode { spec, display }));
        segment.updating = true;
        segment.watermark = None;
        segment.window = None;
        Ok(segment)
    }
}

/// A function as EXPLAIN shows it: its call, and its frame where it has
/// one (PARTITION BY and ORDER BY are the node's).
fn call(function: &WindowFunction) -> String {
    let arguments: Vec<String> = function.params.args.iter().map(shown).collect();
    let mut text = format!("{}({})", function.fun.name(), arguments.join(", "));
    if framed(function) {
        text = format!("{text} {}", function.params.window_frame);
    }
    text
}

fn framed(function: &WindowFunction) -> bool {
    matches!(function.fun, WindowFunctionDefinition::AggregateUDF(_))
        || matches!(
            function.fun.name(),
            "first_value" | "last_value" | "nth_value"
        )
}

fn describe(reach: Reach) -> String {
    match reach {
        Reach::Rows { before, after } => {
            format!("the rows it reaches ({before} before, {after} after)")
        }
        Reach::Partition => "its partition".to_string(),
    }
}

/// How many rows around a row one function's result reads.
fn reach(function: &WindowFunction) -> Reach {
    let params = &function.params;
    if params.null_treatment == Some(NullTreatment::IgnoreNulls) {
        // Skipping NULLs reaches as far as the next non-NULL value.
        return Reach::Partition;
    }
    let name = function.fun.name();
    let shifted = match name {
        "lag" => Some(1),
        "lead" => Some(-1),
        _ => None,
    };
    if let Some(direction) = shifted {
        let offset = match params.args.get(1) {
            None => Some(1),
            Some(Expr::Literal(value, _)) => integer(value).or(Some(1)),
            Some(_) => None,
        };
        return match offset.and_then(|offset| offset.checked_mul(direction)) {
            Some(back) if back >= 0 => Reach::Rows {
                before: back as u64,
                after: 0,
            },
            Some(back) => Reach::Rows {
                before: 0,
                after: back.unsigned_abs(),
            },
            None => Reach::Partition,
        };
    }
    if framed(function) {
        frame_reach(&params.window_frame)
    } else {
        Reach::Partition
    }
}

/// A ROWS frame with constant bounds reaches that many rows.
fn frame_reach(frame: &WindowFrame) -> Reach {
    if frame.units != WindowFrameUnits::Rows {
        return Reach::Partition;
    }
    let offset = |bound: &WindowFrameBound| match bound {
        WindowFrameBound::CurrentRow => Some(0),
        WindowFrameBound::Preceding(value) => integer(value).map(|rows| -rows),
        WindowFrameBound::Following(value) => integer(value),
    };
    match (offset(&frame.start_bound), offset(&frame.end_bound)) {
        (Some(start), Some(end)) => Reach::Rows {
            before: (-start.min(end)).max(0) as u64,
            after: start.max(end).max(0) as u64,
        },
        _ => Reach::Partition,
    }
}

/// A constant integer (None for NULL, which stands for UNBOUNDED in a
/// frame bound, and for anything else).
fn integer(value: &ScalarValue) -> Option<i64> {
    match value.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(value)) => Some(value),
        _ => None,
    }
}

fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip_alias(&alias.expr),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(start: WindowFrameBound, end: WindowFrameBound) -> WindowFrame {
        WindowFrame::new_bounds(WindowFrameUnits::Rows, start, end)
    }

    #[test]
    fn lag_and_lead_reach_their_offset_either_way_and_extreme_offsets_do_not_overflow() {
        use datafusion::functions_window::expr_fn::{lag, lead};
        use datafusion::logical_expr::col;
        let reach_of = |expr: Expr| match expr {
            Expr::WindowFunction(function) => reach(&function),
            other => panic!("{other}"),
        };
        let rows = |before, after| Reach::Rows { before, after };
        assert_eq!(reach_of(lag(col("v"), None, None)), rows(1, 0));
        assert_eq!(reach_of(lag(col("v"), Some(3), None)), rows(3, 0));
        assert_eq!(reach_of(lag(col("v"), Some(-2), None)), rows(0, 2));
        assert_eq!(reach_of(lead(col("v"), Some(2), None)), rows(0, 2));
        assert_eq!(
            reach_of(lag(col("v"), Some(i64::MIN), None)),
            rows(0, 1 << 63)
        );
        assert_eq!(
            reach_of(lead(col("v"), Some(i64::MIN), None)),
            Reach::Partition
        );
    }

    #[test]
    fn a_rows_frame_with_constant_bounds_reaches_that_far() {
        let n = |value: u64| ScalarValue::UInt64(Some(value));
        let unbounded = ScalarValue::UInt64(None);
        let cases = [
            (
                rows(
                    WindowFrameBound::Preceding(n(10)),
                    WindowFrameBound::CurrentRow,
                ),
                Reach::Rows {
                    before: 10,
                    after: 0,
                },
            ),
            (
                rows(
                    WindowFrameBound::Preceding(n(2)),
                    WindowFrameBound::Following(n(3)),
                ),
                Reach::Rows {
                    before: 2,
                    after: 3,
                },
            ),
            (
                rows(
                    WindowFrameBound::Following(n(1)),
                    WindowFrameBound::Following(n(4)),
                ),
                Reach::Rows {
                    before: 0,
                    after: 4,
                },
            ),
            (
                rows(
                    WindowFrameBound::Preceding(unbounded),
                    WindowFrameBound::CurrentRow,
                ),
                Reach::Partition,
            ),
            (WindowFrame::new(Some(true)), Reach::Partition),
        ];
        for (frame, expected) in cases {
            assert_eq!(frame_reach(&frame), expected, "{frame}");
        }
    }
}
