//! Top-N in a view, three spellings of one `TopNNode`: a ranking window
//! function (`ROW_NUMBER()`, `RANK()`, `DENSE_RANK()` OVER (PARTITION BY …
//! ORDER BY …)) whose result a WHERE above it bounds (`rn <= 3`, `rn < 4`,
//! `rn = 1`; the WHERE stays in the plan, true for every row the node
//! emits); `ORDER BY … LIMIT n` (the top n overall, no rank column); and
//! `DISTINCT ON (keys) … ORDER BY …` (the first row per key). A ranking
//! without a bound, several in one OVER, and other window functions are
//! OVER windows (over_window.rs).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, DistinctOn, Expr, FetchType, Filter, Limit, LogicalPlan, Operator, SkipType,
    SortExpr, Window,
};
use datafusion::physical_expr::create_physical_sort_exprs;

use super::errors::{shown, unsupported};
use super::nodes::{ProjectNode, StreamNode};
use super::{Planner, Segment};
use crate::error::{Result, WeirError};
use crate::stream::operators::top_n::{PartitionWindow, RankKind, TopNSpec};
use crate::stream::operators::window_spec::WindowKind;
use crate::stream::EmitMode;

/// A top-N: the operator's spec, and its EXPLAIN line.
pub struct TopNNode {
    pub spec: TopNSpec,
    display: String,
}

impl TopNNode {
    pub fn describe(&self) -> String {
        self.display.clone()
    }
}

/// The bounds WHEREs put on ranking columns: the window expression's
/// name -> the largest rank kept.
pub(super) type RankLimits = HashMap<String, u64>;

impl Planner<'_> {
    /// Notes the bound `filter` puts on a ranking column computed below it.
    pub(super) fn note_rank_limits(&mut self, filter: &Filter) {
        for condition in split_conjunction(&filter.predicate) {
            let Some((column, limit)) = rank_bound(condition) else {
                continue;
            };
            if let Some(name) = window_column(&filter.input, &column) {
                let noted = self.rank_limits.entry(name).or_insert(limit);
                *noted = (*noted).min(limit);
            }
        }
    }

    /// Whether `window` is one ranking function a WHERE above bounds.
    pub(super) fn is_top_n(&self, window: &Window) -> bool {
        let [expr] = window.window_expr.as_slice() else {
            return false;
        };
        let Expr::WindowFunction(function) = strip_alias(expr) else {
            return false;
        };
        matches!(function.fun.name(), "row_number" | "rank" | "dense_rank")
            && self
                .rank_limits
                .contains_key(&expr.schema_name().to_string())
    }

    pub(super) fn ranking(&mut self, window: &Window) -> Result<Segment> {
        let [expr] = window.window_expr.as_slice() else {
            return Err(not_top_n());
        };
        let Expr::WindowFunction(function) = strip_alias(expr) else {
            return Err(not_top_n());
        };
        let kind = match function.fun.name() {
            "row_number" => RankKind::RowNumber,
            "rank" => RankKind::Rank,
            "dense_rank" => RankKind::DenseRank,
            _ => return Err(not_top_n()),
        };
        let name = expr.schema_name().to_string();
        let limit = *self.rank_limits.get(&name).ok_or_else(not_top_n)?;
        let mut segment = self.segment(&window.input)?;
        let shape = TopNShape {
            input: &window.input,
            partition: &function.params.partition_by,
            order: &function.params.order_by,
            kind,
            limit,
            offset: 0,
            rank_column: true,
            schema: Arc::new(window.schema.as_arrow().clone()),
        };
        let rank_type = shape
            .schema
            .field(shape.schema.fields().len() - 1)
            .data_type();
        if rank_type != &DataType::UInt64 {
            return Err(WeirError::internal("a rank that is not UInt64"));
        }
        self.push_top_n(&mut segment, shape)?;
        Ok(segment)
    }

    /// `[ORDER BY …] LIMIT n [OFFSET k]` (a `Limit`, over a `Sort` or
    /// not): the rows ranked k+1 ..= k+n overall, without a rank column.
    /// Without ORDER BY the rows are ordered by all their columns, so the
    /// view shows the same rows however they arrived (Postgres shows any
    /// n rows); without LIMIT every row past the offset is kept.
    pub(super) fn limit(&mut self, limit: &Limit) -> Result<Segment> {
        let SkipType::Literal(skip) = limit.get_skip_type()? else {
            return Err(limit_refused());
        };
        let fetch = match limit.get_fetch_type()? {
            FetchType::Literal(fetch) => fetch,
            FetchType::UnsupportedExpr => return Err(limit_refused()),
        };
        // ORDER BY by a column the SELECT leaves out: a projection over
        // the sort, applied after the top-N.
        let (sorted, projection) = match limit.input.as_ref() {
            LogicalPlan::Projection(projection)
                if matches!(projection.input.as_ref(), LogicalPlan::Sort(_)) =>
            {
                (projection.input.as_ref(), Some(projection))
            }
            other => (other, None),
        };
        let (input, order) = match sorted {
            LogicalPlan::Sort(sort) if sort.fetch.is_none() => (&sort.input, sort.expr.clone()),
            LogicalPlan::Sort(_) => return Err(limit_refused()),
            _ => (&limit.input, every_column(&limit.input)),
        };
        let mut segment = self.segment(input)?;
        let skip = skip as u64;
        let shape = TopNShape {
            input,
            partition: &[],
            order: &order,
            kind: RankKind::RowNumber,
            limit: fetch.map_or(u64::MAX, |fetch| skip.saturating_add(fetch as u64)),
            offset: skip,
            rank_column: false,
            schema: Arc::new(input.schema().as_arrow().clone()),
        };
        self.push_top_n(&mut segment, shape)?;
        if let Some(projection) = projection {
            self.push_projection(&mut segment, &projection.expr, input, &projection.schema)?;
        }
        Ok(segment)
    }

    /// `DISTINCT ON (keys) … ORDER BY …`: the first row per key, then the
    /// selected columns.
    pub(super) fn distinct_on(&mut self, distinct: &DistinctOn) -> Result<Segment> {
        let mut segment = self.segment(&distinct.input)?;
        let input = distinct.input.as_ref();
        let shape = TopNShape {
            input,
            partition: &distinct.on_expr,
            order: distinct.sort_expr.as_deref().unwrap_or_default(),
            kind: RankKind::RowNumber,
            limit: 1,
            offset: 0,
            rank_column: false,
            schema: Arc::new(input.schema().as_arrow().clone()),
        };
        self.push_top_n(&mut segment, shape)?;
        self.push_projection(&mut segment, &distinct.select_expr, input, &distinct.schema)?;
        Ok(segment)
    }

    /// The columns selected over a top-N's input, after it.
    fn push_projection(
        &self,
        segment: &mut Segment,
        exprs: &[Expr],
        input: &LogicalPlan,
        schema: &datafusion::common::DFSchemaRef,
    ) -> Result<()> {
        let expressions = exprs
            .iter()
            .map(|expr| self.physical(expr, input))
            .collect::<Result<Vec<_>>>()?;
        segment.nodes.push(StreamNode::Project(ProjectNode {
            expressions,
            display: exprs.iter().map(shown).collect(),
            schema: Arc::new(schema.as_arrow().clone()),
            watermark: None,
        }));
        Ok(())
    }

    fn push_top_n(&self, segment: &mut Segment, shape: TopNShape) -> Result<()> {
        let window = self.partition_window(segment, &shape)?;
        let emit_on_close = self.emit == EmitMode::OnWindowClose;
        if emit_on_close && window.is_none() {
            return Err(unsupported(
                "EMIT ON WINDOW CLOSE with a top-N not partitioned by a window (ORDER BY ... LIMIT, DISTINCT ON, ranking)",
                "Partition the ranking by window_start or window_end of a TUMBLE or HOP on a watermarked column, or leave out EMIT ON WINDOW CLOSE: the top rows are shown as they change.",
            ));
        }
        let partition = shape
            .partition
            .iter()
            .map(|expr| self.physical(expr, shape.input))
            .collect::<Result<Vec<_>>>()?;
        let order = create_physical_sort_exprs(
            shape.order,
            shape.input.schema(),
            self.props,
            &PhysicalPlanningContext::default(),
        )?;
        let keeps_all = segment.updating;
        let display = format!(
            "TopN: partition=[{}] order=[{}]{} {} state={}",
            shape
                .partition
                .iter()
                .map(shown)
                .collect::<Vec<_>>()
                .join(", "),
            shape
                .order
                .iter()
                .map(|sort| sort.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if shape.rank_column {
                format!(" rank={}", shape.kind.name())
            } else {
                String::new()
            },
            shown_bounds(shape.limit, shape.offset),
            match (keeps_all, &window) {
                (true, _) => "unbounded (its input retracts: every row is kept)".to_string(),
                (false, _) if shape.limit == u64::MAX => "unbounded (no LIMIT)".to_string(),
                (false, None) => format!("top {} per partition", shape.limit),
                (false, Some(_)) => format!(
                    "top {} per partition until the watermark passes its window's end{}",
                    shape.limit,
                    if emit_on_close {
                        " emit=on window close"
                    } else {
                        ""
                    }
                ),
            }
        );
        let spec = TopNSpec {
            partition,
            order,
            kind: shape.kind,
            limit: shape.limit,
            offset: shape.offset,
            keeps_all,
            rank_column: shape.rank_column,
            schema: shape.schema,
            window,
            emit_on_close,
        };
        segment
            .nodes
            .push(StreamNode::TopN(TopNNode { spec, display }));
        segment.updating = !emit_on_close;
        segment.watermark = None;
        segment.window = None;
        Ok(())
    }
}

impl Planner<'_> {
    /// When a top-N's partitions are windows that a watermark ends: one of
    /// its PARTITION BY columns is the `window_end` (or, of TUMBLE and HOP,
    /// the `window_start`) of a watermarked window over append-only rows.
    fn partition_window(
        &self,
        segment: &Segment,
        shape: &TopNShape,
    ) -> Result<Option<PartitionWindow>> {
        let Some(window) = segment.window.as_ref().filter(|w| w.watermarked) else {
            return Ok(None);
        };
        if segment.updating {
            return Ok(None);
        }
        let fixed_start = matches!(window.spec.kind, WindowKind::Tumble | WindowKind::Hop);
        for expr in shape.partition {
            let Expr::Column(column) = strip_cast(expr) else {
                continue;
            };
            let plus_ns = if window.end.as_ref() == Some(&column.name) {
                0
            } else if fixed_start && window.start.as_ref() == Some(&column.name) {
                window.spec.size_ns
            } else {
                continue;
            };
            return Ok(Some(PartitionWindow {
                column: self.physical(expr, shape.input)?,
                plus_ns,
            }));
        }
        Ok(None)
    }
}

/// What a top-N keeps: the input it reads, its PARTITION BY and ORDER BY
/// over that input, how it ranks and how many, and its output columns.
struct TopNShape<'a> {
    input: &'a LogicalPlan,
    partition: &'a [Expr],
    order: &'a [SortExpr],
    kind: RankKind,
    limit: u64,
    /// Ranks up to this one are kept but not shown (OFFSET).
    offset: u64,
    rank_column: bool,
    schema: SchemaRef,
}

fn limit_refused() -> WeirError {
    unsupported(
        "LIMIT or OFFSET with a computed count",
        "Write the count as a constant: ORDER BY ... LIMIT n OFFSET k.",
    )
}

/// `limit=n`, with the offset when there is one (n counts the rows shown).
fn shown_bounds(limit: u64, offset: u64) -> String {
    let shown = match limit {
        u64::MAX => "all".to_string(),
        limit => (limit - offset).to_string(),
    };
    match offset {
        0 => format!("limit={shown}"),
        offset => format!("limit={shown} offset={offset}"),
    }
}

/// Every column of `plan`, ascending: an order for rows LIMIT picks
/// without an ORDER BY.
fn every_column(plan: &LogicalPlan) -> Vec<SortExpr> {
    plan.schema()
        .columns()
        .into_iter()
        .map(|column| SortExpr::new(Expr::Column(column), true, false))
        .collect()
}

fn not_top_n() -> WeirError {
    unsupported(
        "a window function (OVER ...) other than a top-N",
        "Keep the top rows per key: ROW_NUMBER(), RANK() or DENSE_RANK() OVER (PARTITION BY ... ORDER BY ...) AS rn in a subquery, and WHERE rn <= N outside it.",
    )
}

fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip_alias(&alias.expr),
        other => other,
    }
}

fn strip_cast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(cast) => strip_cast(&cast.expr),
        Expr::TryCast(cast) => strip_cast(&cast.expr),
        other => other,
    }
}

/// `rn <= N`, `rn < N`, `rn = 1` (either way round): the column and the
/// largest rank it keeps.
fn rank_bound(condition: &Expr) -> Option<(Column, u64)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = condition else {
        return None;
    };
    let (column, op, value) = match (strip_cast(left), strip_cast(right)) {
        (Expr::Column(column), Expr::Literal(value, _)) => (column, *op, value),
        (Expr::Literal(value, _), Expr::Column(column)) => (column, op.swap()?, value),
        _ => return None,
    };
    let ScalarValue::Int64(Some(value)) = value.cast_to(&DataType::Int64).ok()? else {
        return None;
    };
    let limit = match op {
        Operator::LtEq => value,
        Operator::Lt => value - 1,
        Operator::Eq if value == 1 => 1,
        _ => return None,
    };
    Some((column.clone(), limit.max(0) as u64))
}

/// The name of the window expression `column` is, below `plan` (through
/// aliases, projections that pass it on, and filters).
fn window_column(plan: &LogicalPlan, column: &Column) -> Option<String> {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => {
            window_column(&alias.input, &Column::new_unqualified(&column.name))
        }
        LogicalPlan::Filter(filter) => window_column(&filter.input, column),
        LogicalPlan::Projection(projection) => {
            let index = projection
                .schema
                .index_of_column_by_name(column.relation.as_ref(), &column.name)?;
            match strip_alias(&projection.expr[index]) {
                Expr::Column(inner) => window_column(&projection.input, inner),
                _ => None,
            }
        }
        LogicalPlan::Window(window) => window
            .window_expr
            .iter()
            .map(|expr| expr.schema_name().to_string())
            .find(|name| name == &column.name),
        _ => None,
    }
}
