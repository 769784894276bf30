//! The streaming planner: turns DataFusion's (analyzed, unoptimized)
//! logical plan of a materialized view's query into a chain of stream nodes
//! from one source to the view's rows. DataFusion does the SQL work (names,
//! types, coercion); this module decides what runs incrementally and refuses
//! what does not yet, naming the construct (0A000).

pub mod nodes;
pub mod window_function;

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::ViewTable;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Aggregate, Expr, GroupingSet, LogicalPlan, Projection, TableScan};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};

use crate::catalog::table::DurableTable;
use crate::catalog::view_result::MaterializedViewTable;
use crate::error::{Result, WeirError};
use crate::stream::operators::aggregate::{AggregateCall, WindowGroup};
use crate::stream::operators::window::WindowSpec;
use crate::stream::EmitMode;
use nodes::{AggregateNode, EmitOnCloseNode, FilterNode, ProjectNode, StreamNode, WindowNode};
use window_function::WindowTable;

type PhysicalExprs = Vec<Arc<dyn PhysicalExpr>>;

/// What a view's reader needs to know about a relation's change stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamInfo {
    /// The column the stream's watermark is on.
    pub watermark: Option<String>,
    /// True when rows can be retracted (an aggregate emitting on update).
    pub updating: bool,
}

/// Looks up the change stream of a table or materialized view.
pub trait Sources {
    fn stream(&self, name: &str) -> Option<StreamInfo>;
    /// The DataFusion provider of a relation in weir's schema.
    fn provider(&self, name: &str) -> Result<Arc<dyn datafusion::catalog::TableProvider>>;
    /// Analyzes a plain view's plan so it can be inlined.
    fn analyze(&self, plan: LogicalPlan) -> Result<LogicalPlan>;
}

pub struct StreamPlan {
    pub input: String,
    /// Every catalog relation the view reads (sources and inlined views).
    pub reads: Vec<String>,
    pub nodes: Vec<StreamNode>,
    pub schema: SchemaRef,
    pub emit: EmitMode,
    pub output: StreamInfo,
    source_line: String,
}

impl StreamPlan {
    /// The operator graph, result first, as EXPLAIN prints it.
    pub fn explain(&self, name: &str) -> Vec<String> {
        let mut lines = vec![format!(
            "Materialize: {name} emit={}{}",
            self.emit.describe(),
            match &self.output.watermark {
                Some(column) if !self.output.updating => format!(" watermark={column}"),
                _ => String::new(),
            }
        )];
        for node in self.nodes.iter().rev() {
            lines.push(node.describe());
        }
        lines.push(self.source_line.clone());
        lines
            .into_iter()
            .enumerate()
            .map(|(depth, line)| format!("{}{line}", "  ".repeat(depth)))
            .collect()
    }
}

/// Plans `plan` (the view's query) as a stream.
pub fn plan(
    plan: &LogicalPlan,
    emit: EmitMode,
    sources: &dyn Sources,
    props: &ExecutionProps,
) -> Result<StreamPlan> {
    let mut planner = Planner {
        sources,
        props,
        emit,
        aggregates: count_aggregates(plan),
        reads: Vec::new(),
    };
    if planner.aggregates > 1 {
        return Err(unsupported(
            "more than one level of GROUP BY in one materialized view",
            "Put the inner query in its own materialized view and aggregate over that.",
        ));
    }
    let segment = planner.segment(plan)?;
    Ok(StreamPlan {
        input: segment.input,
        reads: planner.reads,
        nodes: segment.nodes,
        schema: Arc::new(plan.schema().as_arrow().clone()),
        emit,
        output: StreamInfo {
            watermark: segment.watermark.filter(|_| !segment.updating),
            updating: segment.updating,
        },
        source_line: segment.source_line,
    })
}

fn unsupported(what: &str, hint: &str) -> WeirError {
    WeirError::unsupported(format!("{what} is not supported in a materialized view"))
        .with_hint(hint)
}

fn count_aggregates(plan: &LogicalPlan) -> usize {
    let mut count = 0;
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::Aggregate(_)) {
            count += 1;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    count
}

/// The window columns as they are named at some point of the chain.
#[derive(Debug, Clone)]
struct WindowColumns {
    spec: WindowSpec,
    /// True when the window's time column carries the watermark.
    watermarked: bool,
    time_name: String,
    start: Option<String>,
    end: Option<String>,
}

/// A chain from a source up to some node of the logical plan.
struct Segment {
    input: String,
    source_line: String,
    nodes: Vec<StreamNode>,
    /// Which output column the watermark is on, if any.
    watermark: Option<String>,
    window: Option<WindowColumns>,
    updating: bool,
}

struct Planner<'a> {
    sources: &'a dyn Sources,
    props: &'a ExecutionProps,
    emit: EmitMode,
    aggregates: usize,
    reads: Vec<String>,
}

impl Planner<'_> {
    fn segment(&mut self, plan: &LogicalPlan) -> Result<Segment> {
        match plan {
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Projection(projection) => self.projection(projection),
            LogicalPlan::Filter(filter) => {
                let mut segment = self.segment(&filter.input)?;
                let predicate = self.physical(&filter.predicate, &filter.input)?;
                segment.nodes.push(StreamNode::Filter(FilterNode {
                    predicate,
                    display: shown(&filter.predicate),
                }));
                Ok(segment)
            }
            LogicalPlan::SubqueryAlias(alias) => self.segment(&alias.input),
            // A view has no order; ORDER BY only matters when it is queried.
            LogicalPlan::Sort(sort) if sort.fetch.is_none() => self.segment(&sort.input),
            LogicalPlan::Aggregate(aggregate) => self.aggregate(aggregate),
            other => Err(refused(other)),
        }
    }

    fn physical(&self, expr: &Expr, input: &LogicalPlan) -> Result<Arc<dyn PhysicalExpr>> {
        if expr.contains_outer() || has_subquery(expr) {
            return Err(unsupported(
                "a subquery",
                "Rewrite the subquery as a separate materialized view.",
            ));
        }
        Ok(create_physical_expr(
            expr,
            input.schema(),
            self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    fn scan(&mut self, scan: &TableScan) -> Result<Segment> {
        if !scan.filters.is_empty() || scan.fetch.is_some() {
            return Err(WeirError::internal("unexpected pushed-down scan options"));
        }
        let provider = source_as_provider(&scan.source)?;
        let mut segment = if let Some(window) = provider.downcast_ref::<WindowTable>() {
            self.window(window)?
        } else {
            self.relation(scan.table_name.table(), provider.as_ref())?
        };
        if let Some(projection) = &scan.projection {
            let schema = source_as_provider(&scan.source)?.schema();
            let expressions = projection
                .iter()
                .map(|&index| {
                    datafusion::physical_expr::expressions::col(schema.field(index).name(), &schema)
                })
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let fields: Vec<_> = projection
                .iter()
                .map(|&i| schema.field(i).clone())
                .collect();
            let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
            segment.watermark = segment.watermark.filter(|w| names.contains(w));
            segment.nodes.push(StreamNode::Project(ProjectNode {
                expressions,
                display: names,
                schema: Arc::new(Schema::new(fields)),
                watermark: segment.watermark.clone(),
            }));
        }
        Ok(segment)
    }

    /// A table or materialized view (a leaf), or a plain view (inlined).
    fn relation(
        &mut self,
        name: &str,
        provider: &dyn datafusion::catalog::TableProvider,
    ) -> Result<Segment> {
        if let Some(view) = provider.downcast_ref::<ViewTable>() {
            self.reads.push(name.to_string());
            let plan = self.sources.analyze(view.logical_plan().clone())?;
            return self.segment(&plan);
        }
        let is_stream = provider.downcast_ref::<DurableTable>().is_some()
            || provider.downcast_ref::<MaterializedViewTable>().is_some();
        let info = self
            .sources
            .stream(name)
            .filter(|_| is_stream)
            .ok_or_else(|| {
                unsupported(
                    &format!("reading \"{name}\""),
                    "A materialized view can read tables, views and materialized views.",
                )
            })?;
        self.reads.push(name.to_string());
        let mut segment = Segment {
            input: name.to_string(),
            source_line: format!(
                "Source: {name}{}{}",
                info.watermark
                    .as_ref()
                    .map(|column| format!(" watermark={column}"))
                    .unwrap_or_default(),
                if info.updating { " updating" } else { "" }
            ),
            nodes: Vec::new(),
            watermark: info.watermark.clone(),
            window: None,
            updating: info.updating,
        };
        if self.emit == EmitMode::OnWindowClose && self.aggregates == 0 {
            let Some(column) = &info.watermark else {
                return Err(no_watermark(name, None));
            };
            if info.updating {
                return Err(unsupported(
                    "EMIT ON WINDOW CLOSE over a view whose rows are updated",
                    "Make the inner view EMIT ON WINDOW CLOSE too.",
                ));
            }
            segment.nodes.push(StreamNode::EmitOnClose(EmitOnCloseNode {
                time_column: provider.schema().index_of(column)?,
                time_name: column.clone(),
            }));
        }
        Ok(segment)
    }

    fn window(&mut self, window: &WindowTable) -> Result<Segment> {
        let provider = self.sources.provider(&window.input)?;
        let mut segment = self.relation(&window.input, provider.as_ref())?;
        let watermarked = segment.watermark.as_deref() == Some(window.time_column.as_str());
        let input_fields = window.schema.fields().len() - 2;
        let time_column = window.schema.index_of(&window.time_column)?;
        if time_column >= input_fields {
            return Err(WeirError::internal("window time column out of range"));
        }
        segment.nodes.push(StreamNode::Window(WindowNode {
            spec: window.spec,
            time_column,
            time_name: window.time_column.clone(),
            schema: window.schema.clone(),
            watermark: segment.watermark.clone(),
        }));
        segment.window = Some(WindowColumns {
            spec: window.spec,
            watermarked,
            time_name: window.time_column.clone(),
            start: Some("window_start".to_string()),
            end: Some("window_end".to_string()),
        });
        Ok(segment)
    }

    fn projection(&mut self, projection: &Projection) -> Result<Segment> {
        let mut segment = self.segment(&projection.input)?;
        let schema = Arc::new(projection.schema.as_arrow().clone());
        let mut expressions = Vec::new();
        let mut display = Vec::new();
        let rename = |old: &Option<String>| -> Option<String> {
            let old = old.as_ref()?;
            projection
                .expr
                .iter()
                .enumerate()
                .find_map(|(index, expr)| {
                    let column = match expr {
                        Expr::Alias(alias) => alias.expr.as_ref(),
                        other => other,
                    };
                    match column {
                        Expr::Column(column) if &column.name == old => {
                            Some(schema.field(index).name().clone())
                        }
                        _ => None,
                    }
                })
        };
        for (index, expr) in projection.expr.iter().enumerate() {
            expressions.push(self.physical(expr, &projection.input)?);
            let name = schema.field(index).name();
            let text = shown(expr);
            display.push(if &text == name {
                text
            } else {
                format!("{text} AS {name}")
            });
        }
        segment.watermark = rename(&segment.watermark);
        if let Some(window) = segment.window.as_mut() {
            window.start = rename(&window.start);
            window.end = rename(&window.end);
        }
        segment.nodes.push(StreamNode::Project(ProjectNode {
            expressions,
            display,
            schema,
            watermark: segment.watermark.clone(),
        }));
        Ok(segment)
    }

    fn aggregate(&mut self, aggregate: &Aggregate) -> Result<Segment> {
        let mut segment = self.segment(&aggregate.input)?;
        if segment.updating {
            return Err(unsupported(
                "aggregating over a materialized view whose rows are updated (it emits on update)",
                "Make the inner materialized view EMIT ON WINDOW CLOSE.",
            ));
        }
        let window_group = self.window_group(aggregate, segment.window.as_ref())?;
        let (groups, display_groups) = self.groups(aggregate)?;
        let (calls, display_calls) = self.calls(aggregate)?;
        let watermark = match (&segment.window, &window_group) {
            (Some(window), Some(_)) if window.watermarked => Some(window.time_name.clone()),
            _ => None,
        };
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
        segment.watermark = match (&window_group, self.emit) {
            (Some(group), EmitMode::OnWindowClose) => {
                Some(schema.field(group.column).name().clone())
            }
            _ => None,
        };
        segment.updating = self.emit == EmitMode::OnUpdate;
        segment.window = None;
        segment.nodes.push(StreamNode::Aggregate(AggregateNode {
            groups,
            calls,
            display_groups,
            display_calls,
            window: window_group,
            emit: self.emit,
            schema,
            watermark,
        }));
        Ok(segment)
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
        let position = |name: &Option<String>| {
            let name = name.as_ref()?;
            aggregate
                .group_expr
                .iter()
                .position(|expr| matches!(expr, Expr::Column(column) if &column.name == name))
        };
        Ok(match (position(&window.start), position(&window.end)) {
            (Some(column), _) => Some(WindowGroup {
                column,
                is_end: false,
                spec: window.spec,
            }),
            (None, Some(column)) => Some(WindowGroup {
                column,
                is_end: true,
                spec: window.spec,
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

    fn calls(&self, aggregate: &Aggregate) -> Result<(Vec<AggregateCall>, Vec<String>)> {
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
            if !lowered.order_bys.is_empty() {
                return Err(unsupported(
                    "ORDER BY inside an aggregate call",
                    "Leave out the ORDER BY in the aggregate's arguments.",
                ));
            }
            display.push(expr.human_display().to_string());
            calls.push(AggregateCall { function, filter });
        }
        Ok((calls, display))
    }
}

/// An expression as SQL for EXPLAIN (DataFusion's text where it has none).
fn shown(expr: &Expr) -> String {
    let expr = match expr {
        Expr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    match expr {
        Expr::Column(column) => column.to_string(),
        other => datafusion::sql::unparser::expr_to_sql(other)
            .map(|sql| sql.to_string())
            .unwrap_or_else(|_| other.schema_name().to_string()),
    }
}

fn has_subquery(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|node| {
        if matches!(
            node,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ) {
            found = true;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

fn no_watermark(relation: &str, column: Option<&str>) -> WeirError {
    let column = column.unwrap_or("its time column");
    WeirError::unsupported(format!(
        "EMIT ON WINDOW CLOSE needs a watermark on {column} of \"{relation}\""
    ))
    .with_hint(format!(
        "Declare one: CREATE TABLE {relation} (..., WATERMARK FOR {column} AS {column} - INTERVAL '5' SECOND), or drop EMIT ON WINDOW CLOSE."
    ))
}

/// 0A000 naming the construct a materialized view cannot run yet.
fn refused(plan: &LogicalPlan) -> WeirError {
    let (what, hint) = match plan {
        LogicalPlan::Join(_) => (
            "a join",
            "Joins in materialized views are planned; query the tables directly for now.",
        ),
        LogicalPlan::Union(_) => ("UNION", "Create one materialized view per branch."),
        LogicalPlan::Distinct(_) => ("SELECT DISTINCT", "Use GROUP BY over the columns instead."),
        LogicalPlan::Limit(_) | LogicalPlan::Sort(_) => {
            ("LIMIT / OFFSET", "Apply LIMIT when querying the view.")
        }
        LogicalPlan::Window(_) => (
            "a window function (OVER ...)",
            "Use TUMBLE or HOP windows with GROUP BY.",
        ),
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => (
            "a query that reads no table",
            "A materialized view reads a table or another materialized view.",
        ),
        LogicalPlan::Unnest(_) => ("unnest", "Unnest when querying the view."),
        LogicalPlan::RecursiveQuery(_) => ("WITH RECURSIVE", "Query the tables directly."),
        other => {
            return unsupported(
                &other.display().to_string(),
                "Simplify the query to projections, filters, windows and GROUP BY.",
            )
        }
    };
    unsupported(what, hint)
}
