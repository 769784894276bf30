//! Planning a join in a view: its two inputs become two branches that meet
//! at a `JoinNode`. DataFusion's rule that finds equi-join keys in the ON
//! condition does the SQL work; what remains of the condition either
//! filters one input before the join (a condition on the side whose rows
//! are not preserved) or the joined rows (inner joins). An inner join
//! whose conditions bound the inputs' times against each other's
//! watermarks (interval and window joins, `join_bounds.rs`) forgets rows
//! as watermarks pass; any other join holds every input row (EXPLAIN says
//! `state=unbounded`).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::NullEquality;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{Expr, ExprSchemable, Join, JoinType, LogicalPlan};
use datafusion::optimizer::decorrelate_predicate_subquery::DecorrelatePredicateSubquery;
use datafusion::optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate;
use datafusion::optimizer::scalar_subquery_to_join::ScalarSubqueryToJoin;
use datafusion::optimizer::{OptimizerContext, OptimizerRule};

use super::errors::{has_subquery, shown, unsupported};
use super::join_bounds::{side_bounds, SideBound};
use super::nodes::{FilterNode, StreamNode};
use super::{JunctionNode, PhysicalExprs, Planner, Segment};
use crate::error::{Result, WeirError};
use crate::stream::operators::join::{Expiry, JoinInput, JoinKind, JoinSpec};
use crate::stream::EmitMode;

/// Where two branches meet in a join.
pub struct JoinNode {
    pub kind: JoinKind,
    pub left_keys: PhysicalExprs,
    pub right_keys: PhysicalExprs,
    pub key_types: Vec<DataType>,
    pub nulls_match: bool,
    pub filter: Option<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    pub left_schema: SchemaRef,
    pub right_schema: SchemaRef,
    pub schema: SchemaRef,
    pub expiry: [Option<Expiry>; 2],
    pub ttl_ns: [Option<i64>; 2],
    pub lookup: bool,
    /// The output watermark's lags per side and the column it is on.
    pub output_watermark: Option<([i64; 2], String)>,
    display: String,
}

impl JoinNode {
    pub fn describe(&self) -> String {
        self.display.clone()
    }

    pub fn spec(self) -> JoinSpec {
        JoinSpec {
            kind: self.kind,
            left: JoinInput {
                schema: self.left_schema,
                keys: self.left_keys,
            },
            right: JoinInput {
                schema: self.right_schema,
                keys: self.right_keys,
            },
            key_types: self.key_types,
            nulls_match: self.nulls_match,
            filter: self.filter,
            schema: self.schema,
            expiry: self.expiry,
            ttl_ns: self.ttl_ns,
            lookup: self.lookup,
            output_watermark: self.output_watermark.map(|(lags, _)| lags),
        }
    }
}

impl Planner<'_> {
    /// `WHERE` over a comma or inner join: its conditions join the ON
    /// condition, so equalities between the inputs become keys.
    pub(super) fn filtered_join(&mut self, predicate: &Expr, join: &Join) -> Result<Segment> {
        let filter = match &join.filter {
            Some(on) => on.clone().and(predicate.clone()),
            None => predicate.clone(),
        };
        let mut join = join.clone();
        join.filter = Some(filter);
        self.join(&join)
    }

    /// A WHERE with `IN` / `EXISTS` subqueries, as DataFusion's rule turns
    /// them into semi and anti joins, or a WHERE or select list with scalar
    /// subqueries; what cannot be turned into joins is refused.
    pub(super) fn decorrelated(&mut self, filter: &LogicalPlan) -> Result<Segment> {
        let context = OptimizerContext::new();
        let rewritten = DecorrelatePredicateSubquery::new().rewrite(filter.clone(), &context)?;
        // Scalar subqueries (`amount > (SELECT AVG(amount) FROM …)`) become
        // a left join with the subquery's aggregate, DataFusion's rule too.
        let rewritten = match rewritten.transformed {
            true => rewritten,
            false => {
                // Uncorrelated ones too (a batch query runs those apart).
                let mut options = datafusion::config::ConfigOptions::new();
                options
                    .optimizer
                    .enable_physical_uncorrelated_scalar_subquery = false;
                let context = OptimizerContext::new_with_config_options(Arc::new(options));
                ScalarSubqueryToJoin::new().rewrite(filter.clone(), &context)?
            }
        };
        // A rule may change something below and leave the subquery where
        // it was (an outer row's column in a join's ON inside EXISTS):
        // planning that again would never end.
        let still_there = match &rewritten.data {
            LogicalPlan::Filter(filter) => has_subquery(&filter.predicate),
            LogicalPlan::Projection(projection) => projection.expr.iter().any(has_subquery),
            _ => false,
        };
        if !rewritten.transformed || still_there {
            return Err(unsupported(
                "a subquery that cannot be turned into a join",
                "Correlate IN / EXISTS subqueries by equality at the top level of WHERE, or make the subquery a materialized view and join it.",
            ));
        }
        self.segment(&rewritten.data)
    }

    pub(super) fn join(&mut self, join: &Join) -> Result<Segment> {
        let kind = join_kind(join.join_type)?;
        // Without an aggregate the view's EMIT ON WINDOW CLOSE holds the
        // joined rows back until the join's watermark passes them (plan).
        let aggregated = self.aggregates > 0;
        if self.emit == EmitMode::OnWindowClose && aggregated && !self.versioned(&join.right) {
            return Err(unsupported(
                "EMIT ON WINDOW CLOSE over a join",
                "Leave out EMIT ON WINDOW CLOSE: the join's rows are shown as they change (a lookup join, FOR SYSTEM_TIME AS OF PROCTIME(), keeps the stream's watermark).",
            ));
        }
        if join.null_aware {
            return Err(unsupported(
                "NOT IN (subquery)",
                "Use NOT EXISTS (SELECT ... WHERE inner.key = outer.key): NOT IN is empty whenever the subquery has a NULL.",
            ));
        }
        let join = equijoin_keys(join)?;
        let (pushed, residual) = split_condition(&join, kind);
        // An uncorrelated scalar subquery's left join is ON true.
        let residual = residual.filter(|condition| {
            !matches!(
                condition,
                Expr::Literal(datafusion::common::ScalarValue::Boolean(Some(true)), _)
            )
        });
        if residual.is_some() && kind != JoinKind::Inner {
            return Err(unsupported(
                "an outer, semi or anti join (or a correlated subquery) whose condition compares the inputs other than by equality",
                "Join on equal keys and filter the result in WHERE, or use an inner join.",
            ));
        }
        let mut inputs: Vec<Segment> = Vec::new();
        for (side, input) in [join.left.as_ref(), join.right.as_ref()]
            .into_iter()
            .enumerate()
        {
            let mut segment = self.segment(input)?;
            for condition in &pushed[side] {
                segment.nodes.push(StreamNode::Filter(FilterNode {
                    predicate: self.physical(condition, input)?,
                    display: shown(condition),
                }));
            }
            inputs.push(segment);
        }
        let lookup = self.lookup(&join, kind, &inputs)?;
        // Updating inputs too, when every later change of theirs (a
        // retraction too) keeps its time above its watermark: a row then
        // meets, and is taken back against, only rows not yet forgotten.
        let bounded = kind == JoinKind::Inner
            && !lookup
            && inputs.iter().all(|s| !s.updating || s.changes_bounded);
        let bounds = match bounded {
            true => side_bounds(
                &join,
                residual.as_ref(),
                [&time_columns(&inputs[0]), &time_columns(&inputs[1])],
            ),
            false => [None, None],
        };
        let ttl = match lookup {
            true => [None, None],
            false => self.join_ttl(kind, &inputs),
        };
        if bounds.iter().any(Option::is_some) {
            for input in inputs.iter_mut().filter(|input| input.updating) {
                input.forward_change_watermarks();
            }
        }
        // An updating output has no watermark.
        let watermark = match inputs.iter().any(|input| input.updating) {
            true => None,
            false => output_watermark(&join, &bounds, &inputs),
        };
        let mut node = self.join_node(&join, kind, residual, bounds, ttl, lookup)?;
        if let Some((_, column)) = &watermark {
            node.display.push_str(&format!(" watermark={column}"));
        }
        node.output_watermark = watermark;
        let right = inputs.pop().expect("two inputs");
        let left = inputs.pop().expect("two inputs");
        Ok(Segment::joined(left, right, node))
    }

    /// Whether `plan` has a lookup join (a join whose right input is a
    /// table joined `FOR SYSTEM_TIME AS OF`).
    pub(super) fn reads_lookup(&self, plan: &LogicalPlan) -> bool {
        plan.exists(|node| {
            Ok(matches!(node, LogicalPlan::Join(join) if self.versioned(&join.right)))
        })
        .unwrap_or(false)
    }

    /// Whether `plan` scans a table joined `FOR SYSTEM_TIME AS OF`.
    fn versioned(&self, plan: &LogicalPlan) -> bool {
        scanned_table(plan).is_some_and(|table| self.lookup_tables.contains(&table))
    }

    /// Whether the join's right input is a table joined `FOR SYSTEM_TIME
    /// AS OF` the processing time (only inner and left joins of rows that
    /// are never taken back can look rows up: a retraction would meet the
    /// table as it is later, not as the row met it).
    fn lookup(&self, join: &Join, kind: JoinKind, inputs: &[Segment]) -> Result<bool> {
        if self.versioned(&join.left) {
            return Err(unsupported(
                "FOR SYSTEM_TIME AS OF on the left input of a join",
                "Put the table joined FOR SYSTEM_TIME AS OF PROCTIME() on the right: stream JOIN table FOR SYSTEM_TIME AS OF PROCTIME().",
            ));
        }
        if !self.versioned(&join.right) {
            return Ok(false);
        }
        if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(unsupported(
                &format!("a {} lookup join", kind.name().to_ascii_lowercase()),
                "A lookup join (FOR SYSTEM_TIME AS OF PROCTIME()) is an inner or left join.",
            ));
        }
        if inputs[0].updating {
            return Err(unsupported(
                "a lookup join of rows that are updated",
                "Look rows up for an append-only stream (a table with a WATERMARK or APPEND ONLY), or join without FOR SYSTEM_TIME AS OF.",
            ));
        }
        Ok(true)
    }

    /// Per side, the view's `state_ttl` when it applies: an inner join's
    /// append-only inputs (a retraction of a forgotten row could not be
    /// joined; an outer join's NULL rows depend on every row of a key).
    fn join_ttl(&mut self, kind: JoinKind, inputs: &[Segment]) -> [Option<i64>; 2] {
        let Some(ttl) = self.state_ttl.as_mut() else {
            return [None, None];
        };
        let applies = |side: usize| kind == JoinKind::Inner && !inputs[side].updating;
        let sides = [0, 1].map(|side| applies(side).then_some(ttl.ttl_ns));
        ttl.used |= sides.iter().any(Option::is_some);
        sides
    }

    fn join_node(
        &self,
        join: &Join,
        kind: JoinKind,
        residual: Option<Expr>,
        bounds: [Option<SideBound>; 2],
        ttl: [Option<i64>; 2],
        lookup: bool,
    ) -> Result<JoinNode> {
        let (left, right) = (join.left.as_ref(), join.right.as_ref());
        let mut left_keys = Vec::new();
        let mut right_keys = Vec::new();
        let mut key_types = Vec::new();
        let mut shown_keys = Vec::new();
        for (left_key, right_key) in &join.on {
            let key_type = left_key.get_type(left.schema())?;
            let right_key = match right_key.get_type(right.schema())? {
                same if same == key_type => right_key.clone(),
                _ => right_key.clone().cast_to(&key_type, right.schema())?,
            };
            left_keys.push(self.physical(left_key, left)?);
            right_keys.push(self.physical(&right_key, right)?);
            shown_keys.push(format!("{} = {}", shown(left_key), shown(&right_key)));
            key_types.push(key_type);
        }
        let filter = residual
            .as_ref()
            .map(|condition| self.physical(condition, &LogicalPlan::Join(join.clone())))
            .transpose()?;
        let side = |index: usize| {
            let mut limits: Vec<String> = bounds[index]
                .iter()
                .map(|bound| bound.display.clone())
                .collect();
            limits.extend(
                ttl[index]
                    .map(|ttl_ns| format!("{} after arrival (state_ttl)", shown_duration(ttl_ns))),
            );
            match limits.is_empty() {
                true => "unbounded".to_string(),
                false => limits.join(" or "),
            }
        };
        let state = match (&bounds, &ttl) {
            _ if lookup => "right rows (the table as it is now), no left rows".to_string(),
            ([None, None], [None, None]) => "unbounded".to_string(),
            _ => format!("left rows {}, right rows {}", side(0), side(1)),
        };
        let display = format!(
            "Join: type={} on=[{}]{}{} state={state}",
            kind.name(),
            shown_keys.join(", "),
            residual
                .as_ref()
                .map(|condition| format!(" filter={}", shown(condition)))
                .unwrap_or_default(),
            if lookup { " lookup" } else { "" }
        );
        Ok(JoinNode {
            kind,
            left_keys,
            right_keys,
            key_types,
            nulls_match: join.null_equality == NullEquality::NullEqualsNull,
            filter,
            left_schema: Arc::new(left.schema().as_arrow().clone()),
            right_schema: Arc::new(right.schema().as_arrow().clone()),
            schema: Arc::new(join.schema.as_arrow().clone()),
            expiry: bounds.map(|bound| bound.map(|bound| bound.expiry)),
            ttl_ns: ttl,
            lookup,
            output_watermark: None,
            display,
        })
    }
}

/// The watermark a time-bounded inner join puts out: on a column of one
/// input that its watermark bounds below (its watermark column, or the
/// `window_end` of a window over it), when the join's bound keeps that
/// column within a fixed lag of the other input's watermark (an interval
/// join `a.ts BETWEEN b.ts - X AND b.ts`: a row joined later has `a.ts`
/// above the left watermark, or above the right one minus X; a window join
/// on `window_end`: above both watermarks). The output names columns
/// unqualified, so the name must be the input's alone — or the other
/// input's column of that name must equal it by a join key.
fn output_watermark(
    join: &Join,
    bounds: &[Option<SideBound>; 2],
    inputs: &[Segment],
) -> Option<([i64; 2], String)> {
    let schemas = [
        join.left.schema().as_arrow(),
        join.right.schema().as_arrow(),
    ];
    (0..2).find_map(|side| {
        let bound = bounds[side].as_ref()?;
        let column = schemas[side].field(bound.expiry.column).name();
        let bounded = time_columns(&inputs[side]).contains(column);
        let unique = schemas[1 - side].index_of(column).is_err() || equal_by_key(join, column);
        let mut lags = [0, 0];
        lags[1 - side] = bound.expiry.allowance_ns;
        (bounded && unique).then(|| (lags, column.clone()))
    })
}

/// Whether the join's keys say the two inputs' columns named `name` are
/// equal.
fn equal_by_key(join: &Join, name: &str) -> bool {
    join.on.iter().any(|(left, right)| {
        matches!((left, right), (Expr::Column(l), Expr::Column(r)) if l.name == name && r.name == name)
    })
}

/// The table `plan` reads, when it is a scan (under aliases).
fn scanned_table(plan: &LogicalPlan) -> Option<String> {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => scanned_table(&alias.input),
        LogicalPlan::TableScan(scan) => Some(crate::catalog::reference_key(&scan.table_name)),
        _ => None,
    }
}

/// A TTL as EXPLAIN shows it: `90 s`, `1 h 30 min`, `250 ms`.
fn shown_duration(nanoseconds: i64) -> String {
    let milliseconds = nanoseconds / 1_000_000;
    let units = [(3_600_000, "h"), (60_000, "min"), (1_000, "s"), (1, "ms")];
    let mut left = milliseconds;
    let mut parts = Vec::new();
    for (size, unit) in units {
        if left >= size {
            parts.push(format!("{} {unit}", left / size));
            left %= size;
        }
    }
    match parts.is_empty() {
        true => format!("{nanoseconds} ns"),
        false => parts.join(" "),
    }
}

fn join_kind(join_type: JoinType) -> Result<JoinKind> {
    Ok(match join_type {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::Left,
        JoinType::Right => JoinKind::Right,
        JoinType::Full => JoinKind::Full,
        JoinType::LeftSemi => JoinKind::Semi,
        JoinType::LeftAnti => JoinKind::Anti,
        other => {
            return Err(unsupported(
                &format!("a {other} join"),
                "Use an inner, left, right or full join.",
            ))
        }
    })
}

/// The join with the equalities between its inputs moved from the ON
/// condition into its keys.
fn equijoin_keys(join: &Join) -> Result<Join> {
    let rewritten = ExtractEquijoinPredicate::new()
        .rewrite(LogicalPlan::Join(join.clone()), &OptimizerContext::new())?
        .data;
    match rewritten {
        LogicalPlan::Join(join) => Ok(join),
        _ => Err(WeirError::internal("a join rewrote into something else")),
    }
}

/// The conditions of the ON clause that are not keys: those that can
/// filter one input before the join (`[left, right]`), and the rest, on
/// the joined row. A condition on one input filters it only if that
/// input's rows are not preserved (in `a LEFT JOIN b ON … AND a.x > 0` a
/// row of `a` failing `a.x > 0` is still shown, NULL-padded).
fn split_condition(join: &Join, kind: JoinKind) -> ([Vec<Expr>; 2], Option<Expr>) {
    let mut pushed: [Vec<Expr>; 2] = [Vec::new(), Vec::new()];
    let mut rest = Vec::new();
    let conditions = join.filter.clone().map(split_conjunction_owned);
    for condition in conditions.unwrap_or_default() {
        let columns = condition.column_refs();
        let only = |plan: &LogicalPlan| {
            columns
                .iter()
                .all(|column| plan.schema().has_column(column))
        };
        let side = match (only(&join.left), only(&join.right)) {
            (true, _) if !kind.preserves(0) && !columns.is_empty() => Some(0),
            (_, true) if !kind.preserves(1) && !columns.is_empty() => Some(1),
            _ => None,
        };
        match side {
            Some(side) => pushed[side].push(condition),
            None => rest.push(condition),
        }
    }
    (pushed, conjunction(rest))
}

/// The columns of a join input that its watermark bounds below: the
/// watermark column, and the end of a window over it (in every later
/// change: an updating input's only if its changes are bounded so).
fn time_columns(segment: &Segment) -> Vec<String> {
    if segment.updating && !segment.changes_bounded {
        return Vec::new();
    }
    let mut columns: Vec<String> = segment.watermark.iter().cloned().collect();
    if let Some(window) = segment.window.as_ref().filter(|window| window.watermarked) {
        columns.extend(window.end.iter().cloned());
    }
    columns
}

impl Segment {
    /// Its aggregates that emit on update put out the watermark their
    /// changes keep to, for a join that forgets rows by it.
    fn forward_change_watermarks(&mut self) {
        for node in &mut self.nodes {
            if let StreamNode::Aggregate(aggregate) = node {
                aggregate.forwards_watermark = true;
            }
        }
    }

    /// Two chains meeting at a join.
    fn joined(left: Segment, right: Segment, node: JoinNode) -> Segment {
        if node.lookup {
            return Segment::looked_up(left, right, node);
        }
        // Outer and anti joins retract a row when its key gains a match.
        let retracts = node.kind.preserves(0) || node.kind.preserves(1);
        let updating = left.updating || right.updating || retracts;
        let watermark = node.output_watermark.as_ref().map(|(_, c)| c.clone());
        let mut segment = Segment::joined_branches(left, right, node);
        segment.updating = updating;
        segment.watermark = watermark.filter(|_| !updating);
        segment
    }

    /// Two chains meeting at `node`, with no watermark or window after it.
    fn joined_branches(left: Segment, right: Segment, node: JoinNode) -> Segment {
        let branches = [left, right].map(Segment::into_branch);
        Segment {
            input: String::new(),
            source_line: String::new(),
            nodes: Vec::new(),
            watermark: None,
            window: None,
            updating: false,
            changes_bounded: false,
            junction: Some(JunctionNode::Join(Box::new(node))),
            branches: branches.into(),
        }
    }
}

impl Segment {
    /// A lookup join: its rows are the left's, each once, in the left's
    /// time, so the left's watermark and window columns go through (when
    /// the right has no column of the same name).
    fn looked_up(left: Segment, right: Segment, node: JoinNode) -> Segment {
        let right_names: Vec<&String> = node
            .right_schema
            .fields()
            .iter()
            .map(|field| field.name())
            .collect();
        let unique = |name: &String| !right_names.contains(&name);
        let watermark = left.watermark.clone().filter(unique);
        let window = left.window.clone().filter(|window| {
            [&window.start, &window.end]
                .into_iter()
                .flatten()
                .all(unique)
                && unique(&window.time_name)
        });
        let updating = left.updating;
        let mut segment = Segment::joined_branches(left, right, node);
        segment.watermark = watermark;
        segment.window = window;
        segment.updating = updating;
        segment
    }
}
