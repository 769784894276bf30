//! Planning temporal filters: the conditions of a WHERE that compare a
//! row's time with `now()` (± a fixed interval) become a
//! `TemporalFilterNode`, which shows each row while the clock is inside
//! its bounds and retracts it when the clock leaves them; the rest of the
//! WHERE stays an ordinary filter. RisingWave's and Flink's spelling:
//! `WHERE ts > now() - INTERVAL '1' HOUR`, `now() - INTERVAL '1' HOUR < ts`,
//! `ts + INTERVAL '1' HOUR >= now()`, and `ts <= now()` (show a row only
//! once its time has come).

use datafusion::common::tree_node::TreeNode;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, JoinType, LogicalPlan, Operator};

use super::errors::shown;
use super::nodes::{FilterNode, StreamNode, TemporalFilterNode};
use super::{determinism, Planner, Segment};
use crate::error::Result;
use crate::stream::operators::temporal_filter::TimeBound;

/// One recognised condition: the row's side, the offset from now(), and
/// how it compares (see `TimeBound`).
pub(super) struct Condition {
    time: Expr,
    offset_ns: i64,
    ends: bool,
    inclusive: bool,
}

/// A WHERE's temporal conditions (as written, and understood) and the rest.
pub(super) struct Split {
    temporal: Vec<(Expr, Condition)>,
    rest: Option<Expr>,
}

/// Splits a WHERE into its temporal conditions and the rest, when it has
/// at least one temporal condition.
pub(super) fn split(predicate: &Expr) -> Option<Split> {
    let mut temporal = Vec::new();
    let mut rest = Vec::new();
    for conjunct in split_conjunction_owned(predicate.clone()) {
        match condition(&conjunct) {
            Some(condition) => temporal.push((conjunct, condition)),
            None => rest.push(conjunct),
        }
    }
    (!temporal.is_empty()).then(|| Split {
        temporal,
        rest: conjunction(rest),
    })
}

fn condition(expr: &Expr) -> Option<Condition> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    let (time, offset_ns, op) = match (now_offset(left), now_offset(right)) {
        (None, Some(offset)) => (left.as_ref(), offset, *op),
        (Some(offset), None) => (right.as_ref(), offset, op.swap()?),
        _ => return None,
    };
    if calls_now(time) {
        return None;
    }
    let (ends, inclusive) = match op {
        Operator::Gt => (true, false),
        Operator::GtEq => (true, true),
        Operator::Lt => (false, false),
        Operator::LtEq => (false, true),
        _ => return None,
    };
    Some(Condition {
        time: time.clone(),
        offset_ns,
        ends,
        inclusive,
    })
}

/// `now()`, `now() ± interval` (through casts): the offset from now.
fn now_offset(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Cast(cast) => now_offset(&cast.expr),
        Expr::TryCast(cast) => now_offset(&cast.expr),
        Expr::ScalarFunction(call)
            if call.args.is_empty()
                && matches!(call.name(), "now" | "current_timestamp" | "proctime") =>
        {
            Some(0)
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let base = now_offset(left)?;
            let interval = interval_ns(right)?;
            match op {
                Operator::Plus => base.checked_add(interval),
                Operator::Minus => base.checked_sub(interval),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A fixed-length interval literal, in nanoseconds (months vary: None).
fn interval_ns(expr: &Expr) -> Option<i64> {
    let value = match expr {
        Expr::Literal(value, _) => value,
        Expr::Cast(cast) => return interval_ns(&cast.expr),
        _ => return None,
    };
    const DAY_NS: i128 = 86_400_000_000_000;
    let nanoseconds = match value {
        ScalarValue::IntervalMonthDayNano(Some(value)) if value.months == 0 => {
            value.days as i128 * DAY_NS + value.nanoseconds as i128
        }
        ScalarValue::IntervalDayTime(Some(value)) => {
            value.days as i128 * DAY_NS + value.milliseconds as i128 * 1_000_000
        }
        _ => return None,
    };
    i64::try_from(nanoseconds).ok()
}

fn calls_now(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|node| {
        if let Expr::ScalarFunction(call) = node {
            found |= matches!(call.name(), "now" | "current_timestamp" | "proctime");
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

impl Planner<'_> {
    /// A WHERE with temporal conditions: the rest filters first, then the
    /// temporal filter; its output retracts rows (when a condition ends
    /// them) and has no watermark (rows may show after it).
    pub(super) fn temporal_filter(&mut self, filter: &Filter) -> Result<Option<Segment>> {
        let Some(Split { temporal, rest }) = split(&filter.predicate) else {
            return Ok(None);
        };
        if let Some(rest) = &rest {
            if self.non_deterministic.is_none() {
                self.non_deterministic = determinism::non_deterministic_expression(rest);
            }
        }
        let mut segment = match (rest, filter.input.as_ref()) {
            (Some(rest), LogicalPlan::Join(join)) if join.join_type == JoinType::Inner => {
                self.filtered_join(&rest, join)?
            }
            (Some(rest), _) => {
                let mut segment = self.segment(&filter.input)?;
                segment.nodes.push(StreamNode::Filter(FilterNode {
                    predicate: self.physical(&rest, &filter.input)?,
                    display: shown(&rest),
                }));
                segment
            }
            (None, _) => self.segment(&filter.input)?,
        };
        let mut bounds = Vec::new();
        let mut display = Vec::new();
        for (conjunct, condition) in temporal {
            display.push(shown(&conjunct));
            bounds.push(TimeBound {
                time: self.physical(&condition.time, &filter.input)?,
                offset_ns: condition.offset_ns,
                ends: condition.ends,
                inclusive: condition.inclusive,
            });
        }
        let ends = bounds.iter().any(|bound| bound.ends);
        segment
            .nodes
            .push(StreamNode::TemporalFilter(TemporalFilterNode {
                bounds,
                schema: std::sync::Arc::new(filter.input.schema().as_arrow().clone()),
                display: format!(
                    "{} state={}",
                    display.join(" AND "),
                    match ends {
                        true => "rows until the clock passes their bound",
                        false => "rows until the clock reaches them",
                    }
                ),
            }));
        segment.updating |= ends;
        segment.watermark = None;
        segment.window = None;
        Ok(Some(segment))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn conditions(predicate: &str) -> Option<(Vec<(i64, bool, bool)>, bool)> {
        let context = SessionContext::new();
        context
            .sql("CREATE TABLE t (ts TIMESTAMP, n INT)")
            .await
            .unwrap();
        let plan = context
            .sql(&format!("SELECT * FROM t WHERE {predicate}"))
            .await
            .unwrap()
            .into_unoptimized_plan();
        let mut found = None;
        let _ = plan.apply(|node| {
            if let datafusion::logical_expr::LogicalPlan::Filter(filter) = node {
                found = split(&filter.predicate).map(|Split { temporal, rest }| {
                    let bounds = temporal
                        .iter()
                        .map(|(_, c)| (c.offset_ns, c.ends, c.inclusive))
                        .collect();
                    (bounds, rest.is_some())
                });
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        });
        found
    }

    #[tokio::test]
    async fn conditions_on_now_in_either_order_with_intervals() {
        const HOUR_NS: i64 = 3_600_000_000_000;
        assert_eq!(
            conditions("ts > now() - INTERVAL '1' HOUR AND n > 0").await,
            Some((vec![(-HOUR_NS, true, false)], true))
        );
        assert_eq!(
            conditions("now() - INTERVAL '1' HOUR <= ts AND ts <= now()").await,
            Some((vec![(-HOUR_NS, true, true), (0, false, true)], false))
        );
        assert_eq!(conditions("n > 0").await, None);
        assert_eq!(
            conditions("ts > now() - INTERVAL '1' MONTH").await,
            None,
            "a month has no fixed length"
        );
    }
}
