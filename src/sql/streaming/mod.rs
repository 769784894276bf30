//! The streaming planner: turns DataFusion's (analyzed, unoptimized)
//! logical plan of a materialized view's query into a chain of stream nodes
//! from one source to the view's rows. DataFusion does the SQL work (names,
//! types, coercion); this module decides what runs incrementally and refuses
//! what does not yet, naming the construct (0A000).

mod aggregate;
mod determinism;
mod errors;
mod join;
mod join_bounds;
mod junction;
pub mod nodes;
mod output_key;
mod over_window;
mod temporal_filter;
mod top_n;
mod union;
pub mod window_function;

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::ViewTable;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Distinct, Expr, LogicalPlan, Projection, TableScan};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};

use crate::connectors::table::DurableTable;
use crate::connectors::view_result::MaterializedViewTable;
use crate::error::{Result, WeirError};
use crate::stream::operators::aggregate::late::SideOutputShape;
use crate::stream::operators::window::{describe_duration, WindowSpec};
use crate::stream::{EmitMode, LatePolicy};
use errors::{has_subquery, no_watermark, refused, shown, unsupported};
pub use join::JoinNode;
pub use junction::{JunctionNode, Meeting};
use nodes::{EmitOnCloseNode, FilterNode, ProjectNode, StreamNode, WindowNode};
pub use over_window::OverWindowNode;
pub use top_n::TopNNode;
pub use union::{Branch, UnionNode};
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
    /// The chain to the result: from a source, or from where branches meet
    /// (a tree of them: a join of a join).
    pub root: Branch,
    pub late: LatePolicy,
    /// The columns of `<view>_late` when the view keeps late rows.
    pub side_output: Option<SchemaRef>,
    /// Every catalog relation the view reads (sources and inlined views).
    pub reads: Vec<String>,
    pub schema: SchemaRef,
    pub emit: EmitMode,
    /// `EMIT EVERY`: how often the view's changes are published.
    pub firing_interval_ns: Option<i64>,
    pub output: StreamInfo,
    /// The output columns that identify a row, when the view's rows are
    /// updated by key (`output_key`).
    pub key: Option<Vec<usize>>,
    /// A function in the query whose result changes between calls (now(),
    /// random(), ...): such a view cannot be maintained.
    pub non_deterministic: Option<String>,
}

impl StreamPlan {
    /// The relations the branches read, each once, in branch order.
    pub fn inputs(&self) -> Vec<String> {
        let mut inputs: Vec<String> = Vec::new();
        self.root.inputs(&mut inputs);
        inputs
    }

    /// 0A000 if the query calls a non-deterministic function. Checked when
    /// a view is created, not when one is restored: a view stored by an
    /// older weir must not keep the database from opening.
    pub fn check_deterministic(&self) -> Result<()> {
        match &self.non_deterministic {
            Some(function) => Err(determinism::non_deterministic(function)),
            None => Ok(()),
        }
    }

    /// The operator graph, result first, as EXPLAIN prints it.
    pub fn explain(&self, name: &str) -> Vec<String> {
        let every = self
            .firing_interval_ns
            .map(|interval_ns| format!(" every={}", describe_duration(interval_ns)))
            .unwrap_or_default();
        let mut lines = vec![format!(
            "Materialize: {name} emit={}{every}{}",
            self.emit.describe(),
            match &self.output.watermark {
                Some(column) if !self.output.updating => format!(" watermark={column}"),
                _ => String::new(),
            }
        )];
        self.root.explain(1, &mut lines);
        lines
    }
}

/// Plans `plan` (the view's query) as a stream.
pub fn plan(
    plan: &LogicalPlan,
    emit: EmitMode,
    options: crate::sql::ViewOptions,
    sources: &dyn Sources,
    props: &ExecutionProps,
) -> Result<StreamPlan> {
    let late = options.late;
    let options_firing = options.firing_interval_ns;
    let fires = options_firing.is_some();
    let mut planner = Planner {
        fires,
        sources,
        props,
        emit,
        late,
        state_ttl: options.state_ttl_ns.map(|ttl_ns| StateTtl {
            ttl_ns,
            used: false,
        }),
        lookup_tables: options.lookup_tables,
        side_output: None,
        windowed: false,
        aggregates: count_aggregates(plan),
        joins: count_joins(plan),
        reads: Vec::new(),
        non_deterministic: None,
        rank_limits: Default::default(),
        depth: 0,
    };
    // EMIT ON WINDOW CLOSE and late_data name one aggregate: the view's.
    // Without them every aggregate emits on update, each over the changes
    // of what it reads (nested GROUP BYs, aggregates in join inputs).
    if fires && planner.aggregates != 1 {
        return Err(unsupported(
            "EMIT EVERY without exactly one GROUP BY",
            "EMIT EVERY publishes an aggregate's changes on a schedule: group the rows (by a TUMBLE or HOP window, or by keys), with any inner aggregate in its own materialized view.",
        ));
    }
    if planner.aggregates > 1 && (emit != EmitMode::OnUpdate || late != LatePolicy::Drop) {
        return Err(unsupported(
            "more than one GROUP BY in a materialized view with EMIT ON WINDOW CLOSE or late_data",
            "Put the inner query in its own materialized view with those options and aggregate over that.",
        ));
    }
    let mut segment = planner.segment(plan)?;
    if emit == EmitMode::OnWindowClose && planner.aggregates == 0 && planner.joins > 0 {
        hold_joined_rows(&mut segment, plan)?;
    }
    if late != LatePolicy::Drop && !planner.windowed {
        return Err(unsupported(
            "late_data other than 'drop' without a windowed GROUP BY",
            "Group by window_start or window_end of TUMBLE(...) or HOP(...), or leave out late_data.",
        ));
    }
    if planner.state_ttl.as_ref().is_some_and(|ttl| !ttl.used) {
        return Err(unsupported(
            "state_ttl on a view without an inner join of append-only inputs",
            "state_ttl bounds the rows an inner join keeps from a stream; leave it out here (windows and interval joins are bounded by watermarks).",
        ));
    }
    let output = StreamInfo {
        watermark: segment.watermark.clone().filter(|_| !segment.updating),
        updating: segment.updating,
    };
    let key = output_key::output_key(&segment.nodes).filter(|_| segment.updating);
    Ok(StreamPlan {
        key,
        root: segment.into_branch(),
        late,
        side_output: planner.side_output.map(|shape| shape.schema),
        reads: planner.reads,
        schema: Arc::new(plan.schema().as_arrow().clone()),
        emit,
        firing_interval_ns: options_firing,
        output,
        non_deterministic: planner.non_deterministic,
    })
}

/// EMIT ON WINDOW CLOSE over joins without an aggregate (a window join):
/// each joined row is held until the join's watermark passes its time, so
/// a window's rows appear once, when it closes.
fn hold_joined_rows(segment: &mut Segment, plan: &LogicalPlan) -> Result<()> {
    let Some(column) = segment.watermark.clone().filter(|_| !segment.updating) else {
        return Err(unsupported(
            "EMIT ON WINDOW CLOSE over a join that puts out no watermark",
            "Join windows on window_end (a window join) or bound the join by time (an interval join) over append-only inputs, or leave out EMIT ON WINDOW CLOSE.",
        ));
    };
    segment.nodes.push(StreamNode::EmitOnClose(EmitOnCloseNode {
        time_column: plan.schema().as_arrow().index_of(&column)?,
        time_name: column,
    }));
    Ok(())
}

fn count_joins(plan: &LogicalPlan) -> usize {
    let mut count = 0;
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::Join(_)) {
            count += 1;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    count
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

/// A chain from a source (or chains meeting at a junction) up to some node of the
/// logical plan.
struct Segment {
    /// The source, without a junction.
    input: String,
    source_line: String,
    nodes: Vec<StreamNode>,
    /// Which output column the watermark is on, if any.
    watermark: Option<String>,
    window: Option<WindowColumns>,
    updating: bool,
    /// Whether, although `updating`, every later change (retractions too)
    /// has its `watermark` column at or above the watermark: the output of
    /// a windowed aggregate that emits on update (a window changes only
    /// while open), or of a GROUP BY on such a column. An inner join can
    /// then forget rows as over append-only inputs (`join_bounds.rs`).
    changes_bounded: bool,
    /// With a junction: the chains that meet there (`nodes` come after it).
    junction: Option<JunctionNode>,
    branches: Vec<Branch>,
}

impl Segment {
    /// The segment as a branch of a junction (or the view's root).
    fn into_branch(self) -> Branch {
        let meeting = self.junction.map(|junction| {
            Box::new(Meeting {
                junction,
                branches: self.branches,
            })
        });
        Branch {
            input: self.input,
            meeting,
            nodes: self.nodes,
            source_line: self.source_line,
        }
    }
}

struct Planner<'a> {
    /// `EMIT EVERY`: the view's aggregate publishes at firings.
    fires: bool,
    sources: &'a dyn Sources,
    props: &'a ExecutionProps,
    emit: EmitMode,
    late: LatePolicy,
    /// `state_ttl`, and whether a join took it.
    state_ttl: Option<StateTtl>,
    /// Tables joined `FOR SYSTEM_TIME AS OF` the processing time.
    lookup_tables: Vec<String>,
    side_output: Option<SideOutputShape>,
    /// Whether a windowed GROUP BY was planned (late data applies to it).
    windowed: bool,
    aggregates: usize,
    /// Joins in the query (lookup joins too; not subqueries).
    joins: usize,
    reads: Vec<String>,
    non_deterministic: Option<String>,
    /// Bounds WHEREs put on ranking window functions below them (top-N).
    rank_limits: top_n::RankLimits,
    /// How deep `segment` is in the plan now.
    depth: usize,
}

/// The deepest plan a view may have: a statement's nesting is bounded when
/// it is parsed, so only a bug could recurse past it, and that must be an
/// error (54001), never a stack overflow.
const MAX_PLAN_DEPTH: usize = 1000;

struct StateTtl {
    ttl_ns: i64,
    used: bool,
}

impl Planner<'_> {
    #[recursive::recursive]
    fn segment(&mut self, plan: &LogicalPlan) -> Result<Segment> {
        if self.depth >= MAX_PLAN_DEPTH {
            return Err(WeirError::new(
                "54001",
                "the view's query plan is too deep to plan as a stream",
            )
            .with_hint("Split the query into materialized views over each other."));
        }
        self.depth += 1;
        let segment = self.plan_segment(plan);
        self.depth -= 1;
        segment
    }

    fn plan_segment(&mut self, plan: &LogicalPlan) -> Result<Segment> {
        // A temporal filter's now() is planned, not refused (the rest of
        // its WHERE is checked there).
        let temporal = matches!(plan, LogicalPlan::Filter(filter) if temporal_filter::split(&filter.predicate).is_some());
        if self.non_deterministic.is_none() && !temporal {
            self.non_deterministic = determinism::non_deterministic_function(plan);
        }
        match plan {
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Projection(projection) if projection.expr.iter().any(has_subquery) => {
                self.decorrelated(plan)
            }
            LogicalPlan::Projection(projection) => self.projection(projection),
            LogicalPlan::Filter(filter) if has_subquery(&filter.predicate) => {
                self.decorrelated(plan)
            }
            LogicalPlan::Filter(filter) if temporal => self
                .temporal_filter(filter)?
                .ok_or_else(|| WeirError::internal("a temporal filter vanished")),
            LogicalPlan::Filter(filter) => {
                if let LogicalPlan::Join(join) = filter.input.as_ref() {
                    if join.join_type == datafusion::logical_expr::JoinType::Inner {
                        return self.filtered_join(&filter.predicate, join);
                    }
                }
                self.note_rank_limits(filter);
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
            LogicalPlan::Limit(limit) => self.limit(limit),
            LogicalPlan::Distinct(Distinct::On(distinct)) => self.distinct_on(distinct),
            LogicalPlan::Aggregate(aggregate) => self.aggregate(aggregate),
            LogicalPlan::Distinct(Distinct::All(input)) => self.distinct(input),
            LogicalPlan::Union(union) => self.union(union),
            LogicalPlan::Join(join) => self.join(join),
            LogicalPlan::Window(window) if self.is_top_n(window) => self.ranking(window),
            LogicalPlan::Window(window) => self.over_window(window),
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
            self.relation(
                &crate::catalog::reference_key(&scan.table_name),
                provider.as_ref(),
            )?
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
            changes_bounded: false,
            junction: None,
            branches: Vec::new(),
        };
        if self.emit == EmitMode::OnWindowClose && self.aggregates == 0 && self.joins == 0 {
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
}
