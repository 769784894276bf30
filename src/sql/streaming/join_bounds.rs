//! When an inner join's rows stop matching: from its conditions on time
//! columns. A condition `x <= y + k` (x a column of one side, y of the
//! other, k a constant interval) means a row of y's side with time `t` can
//! only meet rows of x's side with `x <= t + k`; when x is bounded below
//! by its side's watermark (the watermark column itself, or `window_end`
//! of a window over it), every later row of x's side has `x >=` that
//! watermark, so once the watermark passes `t + k` the row can go. Interval
//! joins (`a.ts BETWEEN b.ts - INTERVAL '1' MINUTE AND b.ts`) and window
//! joins (`ON a.window_end = b.window_end`) bound both sides this way.
//! Only inner joins forget rows (an outer join's NULL-padded rows depend
//! on every row of a key), and only of inputs whose every later change —
//! a retraction too — keeps x above the watermark: append-only inputs, and
//! windowed aggregates emitting on update (`Segment::changes_bounded`: a
//! window's row changes only while the window is open). A retraction then
//! meets exactly the rows its row met: the other side's rows it could
//! match are still kept, and no later row of theirs can match it.

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Join, Operator};

use crate::stream::operators::join::Expiry;

/// A bound found for one side: its rows expire as `expiry` says.
pub struct SideBound {
    pub expiry: Expiry,
    pub display: String,
}

/// `x - y <= allowance_ns` between columns of different sides.
struct Difference<'a> {
    x: &'a Column,
    y: &'a Column,
    allowance_ns: i64,
}

/// Per side (left, right), the bound on its rows, if the join has one.
/// `time_columns` are, per side, its columns bounded by its watermark.
pub fn side_bounds(
    join: &Join,
    residual: Option<&Expr>,
    time_columns: [&[String]; 2],
) -> [Option<SideBound>; 2] {
    let mut differences = Vec::new();
    for (left, right) in &join.on {
        if let (Expr::Column(x), Expr::Column(y)) = (left, right) {
            differences.push(Difference {
                x,
                y,
                allowance_ns: 0,
            });
            differences.push(Difference {
                x: y,
                y: x,
                allowance_ns: 0,
            });
        }
    }
    if let Some(residual) = residual {
        for condition in split_conjunction(residual) {
            differences.extend(comparisons(condition));
        }
    }
    let side_of = |column: &Column| {
        if join.left.schema().has_column(column) {
            Some(0)
        } else if join.right.schema().has_column(column) {
            Some(1)
        } else {
            None
        }
    };
    let mut bounds: [Option<SideBound>; 2] = [None, None];
    for difference in differences {
        let (Some(x_side), Some(y_side)) = (side_of(difference.x), side_of(difference.y)) else {
            continue;
        };
        if x_side == y_side || !time_columns[x_side].contains(&difference.x.name) {
            continue;
        }
        let schema = if y_side == 0 {
            join.left.schema()
        } else {
            join.right.schema()
        };
        let Ok(column) = schema.index_of_column(difference.y) else {
            continue;
        };
        let tighter = bounds[y_side]
            .as_ref()
            .is_none_or(|bound| difference.allowance_ns < bound.expiry.allowance_ns);
        if tighter {
            bounds[y_side] = Some(SideBound {
                expiry: Expiry {
                    column,
                    allowance_ns: difference.allowance_ns,
                },
                display: display(difference.y, difference.x, difference.allowance_ns),
            });
        }
    }
    bounds
}

fn display(row_time: &Column, other: &Column, allowance_ns: i64) -> String {
    let shift = match allowance_ns {
        0 => String::new(),
        ns if ns % 1_000_000 == 0 => format!(" {:+} ms", ns / 1_000_000),
        ns => format!(" {ns:+} ns"),
    };
    format!(
        "until watermark of {} > {}{shift}",
        other.flat_name(),
        row_time.flat_name()
    )
}

/// The differences a comparison between two sides' times states.
fn comparisons(condition: &Expr) -> Vec<Difference<'_>> {
    match condition {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (Some((a, a_shift)), Some((b, b_shift))) = (term(left), term(right)) else {
                return Vec::new();
            };
            // a + a_shift (op) b + b_shift
            let a_below_b = Difference {
                x: a,
                y: b,
                allowance_ns: b_shift.saturating_sub(a_shift),
            };
            let b_below_a = Difference {
                x: b,
                y: a,
                allowance_ns: a_shift.saturating_sub(b_shift),
            };
            match op {
                Operator::Lt | Operator::LtEq => vec![a_below_b],
                Operator::Gt | Operator::GtEq => vec![b_below_a],
                Operator::Eq => vec![a_below_b, b_below_a],
                _ => Vec::new(),
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let (Some((value, shift)), Some((low, low_shift)), Some((high, high_shift))) =
                (term(expr), term(low), term(high))
            else {
                return Vec::new();
            };
            vec![
                // value + shift >= low + low_shift
                Difference {
                    x: low,
                    y: value,
                    allowance_ns: shift.saturating_sub(low_shift),
                },
                // value + shift <= high + high_shift
                Difference {
                    x: value,
                    y: high,
                    allowance_ns: high_shift.saturating_sub(shift),
                },
            ]
        }
        _ => Vec::new(),
    }
}

/// A column, or a column plus or minus a constant interval: the column
/// and the shift in nanoseconds.
fn term(expr: &Expr) -> Option<(&Column, i64)> {
    match expr {
        Expr::Column(column) => Some((column, 0)),
        Expr::Cast(cast) => term(&cast.expr),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, shift) = term(left)?;
            let Expr::Literal(value, _) = right.as_ref() else {
                return None;
            };
            let amount = interval_ns(value)?;
            match op {
                Operator::Plus => Some((column, shift.checked_add(amount)?)),
                Operator::Minus => Some((column, shift.checked_sub(amount)?)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A fixed-length interval in nanoseconds (months have no fixed length).
fn interval_ns(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(interval)) if interval.months == 0 => (interval.days
            as i64)
            .checked_mul(86_400_000_000_000)?
            .checked_add(interval.nanoseconds),
        ScalarValue::IntervalDayTime(Some(interval)) => (interval.days as i64)
            .checked_mul(86_400_000_000_000)?
            .checked_add((interval.milliseconds as i64).checked_mul(1_000_000)?),
        ScalarValue::DurationNanosecond(Some(ns)) => Some(*ns),
        ScalarValue::DurationMicrosecond(Some(us)) => us.checked_mul(1_000),
        ScalarValue::DurationMillisecond(Some(ms)) => ms.checked_mul(1_000_000),
        ScalarValue::DurationSecond(Some(s)) => s.checked_mul(1_000_000_000),
        _ => None,
    }
}
