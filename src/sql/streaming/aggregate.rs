//! Planning GROUP BY: which group column is the window, the emit mode's
//! requirements, and DataFusion's aggregate expressions for the accumulators.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::row::SortField;
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::expr_fn::last_value;
use datafusion::logical_expr::builder::add_group_by_exprs_from_dependencies;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, Expr, GroupingSet, LogicalPlan};
use datafusion::physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::PhysicalExpr;

use super::errors::{has_subquery, no_watermark, shown, unsupported};
use super::nodes::{AggregateNode, SessionAggregateNode, StreamNode};
use super::{PhysicalExprs, Planner, Segment, WindowColumns};
use crate::error::{Result, WeirError};
use crate::stream::operators::aggregate::calls::AggregateCall;
use crate::stream::operators::aggregate::late::SideOutputShape;
use crate::stream::operators::aggregate::retraction::{MultisetKind, MultisetShape, Retraction};
use crate::stream::operators::aggregate::session_aggregate::SessionColumns;
use crate::stream::operators::aggregate::WindowGroup;
use crate::stream::operators::window::WindowKind;
use crate::stream::{EmitMode, LatePolicy};

impl Planner<'_> {
    /// `SELECT DISTINCT` (and `UNION` without `ALL`): a GROUP BY over every
    /// column with no aggregate, so a row shows once while any copy of it
    /// is present.
    pub(super) fn distinct(&mut self, input: &Arc<LogicalPlan>) -> Result<Segment> {
        let columns = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let aggregate = Aggregate::try_new(Arc::clone(input), columns, Vec::new())?;
        self.aggregate(&aggregate)
    }

    pub(super) fn aggregate(&mut self, aggregate: &Aggregate) -> Result<Segment> {
        if self.reads_lookup(&aggregate.input) {
            if let Some(rewritten) = without_dependent_groups(aggregate)? {
                return self.aggregate(&rewritten);
            }
        }
        let mut segment = self.segment(&aggregate.input)?;
        let window_group = self.window_group(aggregate, segment.window.as_ref())?;
        let retracting = segment.updating;
        if retracting && window_group.is_some() {
            return Err(unsupported(
                "a windowed GROUP BY over rows that are updated (a view that emits on update, or an outer join)",
                "Make the inner materialized view EMIT ON WINDOW CLOSE, or group without a window.",
            ));
        }
        let (groups, display_groups) = self.groups(aggregate)?;
        let (mut calls, display_calls) = self.calls(aggregate, retracting)?;
        if retracting {
            calls.push(self.row_count_call(aggregate)?);
        }
        let watermark = match (&segment.window, &window_group) {
            (Some(window), Some(_)) if window.watermarked => Some(window.time_name.clone()),
            _ => None,
        };
        let change_bound = self.change_bound(aggregate, &segment, &window_group, &watermark);
        if self.emit == EmitMode::OnWindowClose {
            match (&segment.window, &window_group) {
                (Some(window), Some(_)) if !window.watermarked => {
                    return Err(no_watermark(&segment.input, Some(&window.time_name)))
                }
                (_, None) => {
                    return Err(WeirError::unsupported(
                        "EMIT ON WINDOW CLOSE needs a GROUP BY on window_start or window_end",
                    )
                    .with_hint(
                        "Group by the window columns of TUMBLE(...) or HOP(...), or drop EMIT ON WINDOW CLOSE to see rows update.",
                    ))
                }
                _ => {}
            }
        }
        let schema: SchemaRef = Arc::new(aggregate.schema.as_arrow().clone());
        let late = match &window_group {
            Some(group) => {
                self.windowed = true;
                if self.late == LatePolicy::SideOutput {
                    let time = schema.field(group.column).data_type().clone();
                    self.side_output = Some(side_output_shape(aggregate, time));
                }
                self.late
            }
            None => LatePolicy::Drop,
        };
        let session = match (&segment.window, &window_group) {
            (Some(window), Some(group)) if group.spec.kind == WindowKind::Session => {
                Some(session_columns(aggregate, window, group.spec.size_ns))
            }
            _ => None,
        };
        if self.fires && session.is_some() {
            return Err(unsupported(
                "EMIT EVERY over SESSION windows",
                "Use TUMBLE or HOP windows with EMIT EVERY, or leave out EMIT EVERY to see sessions update as rows arrive.",
            ));
        }
        // The output's watermark column: the window column the result is
        // final on (for sessions only their end: starts can be early).
        let output_column = match (&window_group, &session) {
            (_, Some(columns)) => columns.end,
            (Some(group), None) => Some(group.column),
            _ => None,
        };
        // Under EMIT EVERY a window's row shows before it closes: the
        // result is corrected, and final on no column.
        segment.watermark = output_column
            .filter(|_| self.emit == EmitMode::OnWindowClose && !self.fires)
            .map(|column| schema.field(column).name().clone());
        // Under `update` a closed window can still be corrected.
        segment.updating = self.emit == EmitMode::OnUpdate
            || self.fires
            || matches!(late, LatePolicy::Update { .. });
        segment.window = None;
        segment.changes_bounded = false;
        if session.is_none() && segment.updating && segment.watermark.is_none() {
            if let Some(column) = change_bound {
                segment.watermark = Some(schema.field(column).name().clone());
                segment.changes_bounded = true;
            }
        }
        if let Some(columns) = session {
            segment
                .nodes
                .push(StreamNode::SessionAggregate(SessionAggregateNode {
                    groups,
                    columns,
                    calls,
                    display_groups,
                    display_calls,
                    emit: self.emit,
                    schema,
                    watermark,
                    late,
                    side_output: self.side_output.clone(),
                }));
            return Ok(segment);
        }
        segment.nodes.push(StreamNode::Aggregate(AggregateNode {
            groups,
            calls,
            display_groups,
            display_calls,
            window: window_group,
            emit: self.emit,
            schema,
            watermark,
            late,
            side_output: self.side_output.clone(),
            retracting,
            fires: self.fires,
            forwards_watermark: false,
        }));
        Ok(segment)
    }

    /// The output column every later change of an aggregate emitting on
    /// update keeps at or above the watermark it can put out: a window
    /// column (a window changes only while it is open), or a group column
    /// that is its input's watermark column when its input's changes are
    /// bounded so.
    fn change_bound(
        &self,
        aggregate: &Aggregate,
        input: &Segment,
        window_group: &Option<WindowGroup>,
        window_watermark: &Option<String>,
    ) -> Option<usize> {
        if self.fires {
            return None;
        }
        if let Some(group) = window_group {
            return window_watermark.as_ref().map(|_| group.column);
        }
        let column = input
            .watermark
            .clone()
            .filter(|_| !input.updating || input.changes_bounded);
        group_position(aggregate, &column)
    }

    /// The group column that names the window, preferring window_start.
    fn window_group(
        &self,
        aggregate: &Aggregate,
        window: Option<&WindowColumns>,
    ) -> Result<Option<WindowGroup>> {
        let Some(window) = window else {
            return Ok(None);
        };
        let position = |name: &Option<String>| group_position(aggregate, name);
        if window.spec.kind == WindowKind::Cumulate {
            // CUMULATE windows share their start: only the end names one.
            return match (position(&window.start), position(&window.end)) {
                (start, Some(column)) => Ok(Some(WindowGroup {
                    column,
                    is_end: true,
                    spec: window.spec,
                    other: start,
                })),
                (Some(_), None) => Err(WeirError::new(
                    "42803",
                    "CUMULATE windows share their window_start, so GROUP BY window_start alone merges them",
                )
                .with_hint("GROUP BY window_start, window_end (or window_end).")),
                (None, None) => Ok(None),
            };
        }
        Ok(match (position(&window.start), position(&window.end)) {
            (Some(column), end) => Some(WindowGroup {
                column,
                is_end: false,
                spec: window.spec,
                other: end,
            }),
            (None, Some(column)) => Some(WindowGroup {
                column,
                is_end: true,
                spec: window.spec,
                other: None,
            }),
            (None, None) => None,
        })
    }

    fn groups(&self, aggregate: &Aggregate) -> Result<(PhysicalExprs, Vec<String>)> {
        let mut groups = Vec::new();
        let mut display = Vec::new();
        for expr in &aggregate.group_expr {
            if matches!(
                expr,
                Expr::GroupingSet(
                    GroupingSet::Rollup(_) | GroupingSet::Cube(_) | GroupingSet::GroupingSets(_)
                )
            ) {
                return Err(unsupported(
                    "GROUPING SETS, ROLLUP or CUBE",
                    "Create one materialized view per grouping.",
                ));
            }
            groups.push(self.physical(expr, &aggregate.input)?);
            display.push(shown(expr));
        }
        Ok((groups, display))
    }

    fn calls(
        &self,
        aggregate: &Aggregate,
        retracting: bool,
    ) -> Result<(Vec<AggregateCall>, Vec<String>)> {
        let input_schema = aggregate.input.schema();
        let mut calls = Vec::new();
        let mut display = Vec::new();
        for expr in &aggregate.aggr_expr {
            if has_subquery(expr) {
                return Err(unsupported(
                    "a subquery",
                    "Rewrite the subquery as a separate materialized view.",
                ));
            }
            let context = PhysicalPlanningContext::default();
            let mut builder = LoweredAggregateBuilder::new(
                expr,
                input_schema,
                input_schema.as_arrow(),
                self.props,
                &context,
            )
            .with_human_display(expr.human_display().to_string());
            if let Expr::AggregateFunction(_) = expr {
                builder = builder.with_name(expr.schema_name().to_string());
            }
            let lowered = builder.build()?;
            let (function, filter) = (lowered.aggregate, lowered.filter);
            // Accumulators are made per group as rows arrive; one that
            // cannot be made must fail here, not on every later INSERT.
            function.create_accumulator()?;
            display.push(expr.human_display().to_string());
            let mut call = AggregateCall::new(function, filter);
            if retracting {
                call.retraction = retraction(&call, input_schema.as_arrow())?;
            }
            calls.push(call);
        }
        Ok((calls, display))
    }

    /// The hidden last call of an aggregate over retracting input: its
    /// group's rows, so a group whose rows are all gone leaves the view.
    fn row_count_call(&self, aggregate: &Aggregate) -> Result<AggregateCall> {
        let input_schema = aggregate.input.schema();
        let rows =
            datafusion::functions_aggregate::expr_fn::count(datafusion::logical_expr::lit(1i64));
        let context = PhysicalPlanningContext::default();
        let lowered = LoweredAggregateBuilder::new(
            &rows,
            input_schema,
            input_schema.as_arrow(),
            self.props,
            &context,
        )
        .with_name("__weir_group_rows")
        .build()?;
        let mut call = AggregateCall::new(lowered.aggregate, None);
        call.retraction = Retraction::Sliding;
        Ok(call)
    }
}

/// DataFusion adds to a GROUP BY the columns its keys decide (a table's
/// other columns when the GROUP BY has its primary key). Over a lookup
/// join that does not hold: each row met the table as it was then, so
/// grouping by them would split a group by the values its rows met. They
/// become `last_value` calls instead, in the same output positions (they
/// are the last group columns, and calls come right after the groups).
fn without_dependent_groups(aggregate: &Aggregate) -> Result<Option<Aggregate>> {
    let groups = &aggregate.group_expr;
    if matches!(groups.as_slice(), [Expr::GroupingSet(_)]) {
        return Ok(None);
    }
    let schema = aggregate.input.schema();
    let written = (0..groups.len()).find(|&count| {
        add_group_by_exprs_from_dependencies(groups[..count].to_vec(), schema)
            .is_ok_and(|expanded| &expanded == groups)
    });
    let Some(written) = written else {
        return Ok(None);
    };
    let decided = groups[written..]
        .iter()
        .map(|group| last_value(group.clone(), Vec::new()));
    let calls = decided.chain(aggregate.aggr_expr.iter().cloned()).collect();
    Ok(Some(Aggregate::try_new_with_schema(
        Arc::clone(&aggregate.input),
        groups[..written].to_vec(),
        calls,
        Arc::clone(&aggregate.schema),
    )?))
}

/// How `call` takes back a retracted row: DataFusion's sliding
/// accumulator where it is exact (COUNT, SUM, AVG), every value with its
/// multiplicity for MIN, MAX, COUNT(DISTINCT) and the ordered aggregates;
/// other functions are refused over retracting input.
fn retraction(call: &AggregateCall, input: &Schema) -> Result<Retraction> {
    let function = &call.function;
    let name = function.fun().name().to_ascii_lowercase();
    let retraction = match (name.as_str(), function.is_distinct()) {
        ("count" | "sum" | "avg", false) => function
            .create_sliding_accumulator()?
            .supports_retract_batch()
            .then_some(Retraction::Sliding),
        _ => multiset_shape(function, &name, input)?
            .map(|shape| Retraction::Multiset(Box::new(shape))),
    };
    retraction.ok_or_else(|| {
        unsupported(
            &format!(
                "{}{} over rows that are updated (a view that emits on update, or an outer join)",
                function.fun().name(),
                if function.is_distinct() {
                    "(DISTINCT ...)"
                } else {
                    ""
                }
            ),
            "Over updating rows a view can use COUNT, SUM, AVG, MIN, MAX, COUNT(DISTINCT), array_agg, string_agg, first_value and last_value.",
        )
    })
}

/// The multiset a call over retracting rows keeps, if its function is one
/// that a sorted multiset computes.
fn multiset_shape(
    function: &AggregateFunctionExpr,
    name: &str,
    input: &Schema,
) -> Result<Option<MultisetShape>> {
    let arguments = function.expressions();
    let Some(value) = arguments.first() else {
        return Ok(None);
    };
    let value_type = value.data_type(input)?;
    let by_value = |kind| Some(MultisetShape::by_value(kind, value_type.clone()));
    let ordered = |kind, skip_nulls| -> Result<Option<MultisetShape>> {
        let order = function
            .order_bys()
            .iter()
            .map(|order| {
                Ok(SortField::new_with_options(
                    order.expr.data_type(input)?,
                    order.options,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(MultisetShape {
            kind,
            value_type: value_type.clone(),
            order,
            arguments: arguments.len(),
            skip_nulls: skip_nulls || function.ignore_nulls(),
            distinct: function.is_distinct(),
        }))
    };
    Ok(match (name, function.is_distinct(), arguments.len()) {
        ("min", _, 1) => by_value(MultisetKind::First),
        ("max", _, 1) => by_value(MultisetKind::Last),
        ("count", true, 1) => by_value(MultisetKind::DistinctCount),
        ("array_agg", _, 1) => ordered(MultisetKind::Array, false)?,
        ("first_value", false, 1) => ordered(MultisetKind::First, false)?,
        ("last_value", false, 1) => ordered(MultisetKind::Last, false)?,
        ("string_agg", _, 2) => match literal_text(&arguments[1]) {
            Some(delimiter) => ordered(MultisetKind::Text { delimiter }, true)?,
            None => None,
        },
        _ => None,
    })
}

/// The text of a constant argument (string_agg's delimiter; NULL joins
/// with nothing, as DataFusion does).
fn literal_text(argument: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let literal = argument.downcast_ref::<Literal>()?;
    match literal.value() {
        ScalarValue::Utf8(text) | ScalarValue::LargeUtf8(text) | ScalarValue::Utf8View(text) => {
            Some(text.clone().unwrap_or_default())
        }
        ScalarValue::Null => Some(String::new()),
        _ => None,
    }
}

/// Where the window column `name` (if any) is among the GROUP BY columns.
fn group_position(aggregate: &Aggregate, name: &Option<String>) -> Option<usize> {
    let name = name.as_ref()?;
    aggregate
        .group_expr
        .iter()
        .position(|expr| matches!(expr, Expr::Column(column) if &column.name == name))
}

/// Where window_start and window_end are in a SESSION aggregate's GROUP BY.
fn session_columns(aggregate: &Aggregate, window: &WindowColumns, gap_ns: i64) -> SessionColumns {
    let position = |name: &Option<String>| group_position(aggregate, name);
    SessionColumns {
        start: position(&window.start),
        end: position(&window.end),
        gap_ns,
    }
}

/// `<view>_late`: the aggregate's input columns, then the window the row
/// missed and the watermark it arrived under.
fn side_output_shape(aggregate: &Aggregate, time: DataType) -> SideOutputShape {
    const ADDED: [&str; 3] = ["window_start", "window_end", "watermark"];
    let input = aggregate.input.schema().as_arrow().clone();
    let columns: Vec<usize> = (0..input.fields().len())
        .filter(|&index| !ADDED.contains(&input.field(index).name().as_str()))
        .collect();
    let mut fields: Vec<Field> = columns
        .iter()
        .map(|&index| input.field(index).clone().with_nullable(true))
        .collect();
    fields.extend(ADDED.map(|name| Field::new(name, time.clone(), true)));
    SideOutputShape {
        columns,
        schema: Arc::new(Schema::new(fields)),
    }
}
