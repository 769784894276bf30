//! The streaming plan of a materialized view: a chain of nodes from its
//! source to its result, each planning the operator of the same stem.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::{OverWindowNode, TopNNode};
use crate::error::Result;
use crate::stream::operators::aggregate::calls::AggregateCall;
use crate::stream::operators::aggregate::late::SideOutputShape;
use crate::stream::operators::aggregate::session_aggregate::SessionColumns;
use crate::stream::operators::aggregate::{
    has_typed_states, LateHandling, UpdatingAggregateOperator, WindowGroup,
};
use crate::stream::operators::window::{describe_duration, WindowSpec};
use crate::stream::operators::{
    AggregateOperator, EmitOnCloseOperator, FilterOperator, OverWindowOperator, ProjectOperator,
    SessionAggregateOperator, TemporalFilterOperator, TopNOperator, WindowAggregateOperator,
    WindowOperator,
};
use crate::stream::{EmitMode, LatePolicy, LateRows, Operator};

pub enum StreamNode {
    EmitOnClose(EmitOnCloseNode),
    Project(ProjectNode),
    Filter(FilterNode),
    TemporalFilter(TemporalFilterNode),
    Window(WindowNode),
    Aggregate(AggregateNode),
    SessionAggregate(SessionAggregateNode),
    TopN(TopNNode),
    OverWindow(OverWindowNode),
}

pub struct EmitOnCloseNode {
    pub time_column: usize,
    pub time_name: String,
}

pub struct ProjectNode {
    pub expressions: Vec<Arc<dyn PhysicalExpr>>,
    pub display: Vec<String>,
    pub schema: SchemaRef,
    pub watermark: Option<String>,
}

pub struct FilterNode {
    pub predicate: Arc<dyn PhysicalExpr>,
    pub display: String,
}

pub struct TemporalFilterNode {
    pub bounds: Vec<crate::stream::operators::temporal_filter::TimeBound>,
    pub schema: SchemaRef,
    pub display: String,
}

pub struct WindowNode {
    pub spec: WindowSpec,
    pub time_column: usize,
    pub time_name: String,
    pub schema: SchemaRef,
    pub watermark: Option<String>,
}

pub struct AggregateNode {
    pub groups: Vec<Arc<dyn PhysicalExpr>>,
    pub calls: Vec<AggregateCall>,
    pub display_groups: Vec<String>,
    pub display_calls: Vec<String>,
    pub window: Option<WindowGroup>,
    pub emit: EmitMode,
    pub schema: SchemaRef,
    /// The time column whose watermark closes windows, if any.
    pub watermark: Option<String>,
    pub late: LatePolicy,
    pub side_output: Option<SideOutputShape>,
    /// Its input retracts rows (the last call, hidden, counts a group's rows).
    pub retracting: bool,
    /// `EMIT EVERY`: changes wait for the view's firings.
    pub fires: bool,
    /// Emitting on update, it puts out a watermark on its changes' bounded
    /// column (`Segment::changes_bounded`) for a join that forgets rows.
    pub forwards_watermark: bool,
}

impl AggregateNode {
    /// Windows emitted once, final, and never corrected: every group's
    /// state is read once, at close, so it can be vectorised
    /// (`WindowAggregateOperator`): the window if so.
    fn vectorised_window(&self) -> Option<WindowGroup> {
        let closes_once = self.emit == EmitMode::OnWindowClose
            && self.late.allowed_lateness_ns() == 0
            && !self.fires;
        self.window.filter(|_| closes_once)
    }

    /// Groups shown as they change, every call with typed state: the
    /// vectorised `UpdatingAggregateOperator`.
    fn updates_vectorised(&self) -> Result<bool> {
        let shown_on_update = self.emit == EmitMode::OnUpdate && !self.fires;
        Ok(shown_on_update && !self.groups.is_empty() && has_typed_states(&self.calls)?)
    }
}

/// GROUP BY over SESSION windows: merges each key's sessions.
pub struct SessionAggregateNode {
    pub groups: Vec<Arc<dyn PhysicalExpr>>,
    pub columns: SessionColumns,
    pub calls: Vec<AggregateCall>,
    pub display_groups: Vec<String>,
    pub display_calls: Vec<String>,
    pub emit: EmitMode,
    pub schema: SchemaRef,
    pub watermark: Option<String>,
    pub late: LatePolicy,
    pub side_output: Option<SideOutputShape>,
}

impl StreamNode {
    pub fn operator(self, late_rows: &LateRows) -> Result<Box<dyn Operator>> {
        Ok(match self {
            StreamNode::EmitOnClose(node) => Box::new(EmitOnCloseOperator::new(
                node.time_column,
                late_rows.clone(),
            )),
            StreamNode::Project(node) => Box::new(ProjectOperator::new(
                node.expressions,
                node.schema,
                node.watermark.is_some(),
            )),
            StreamNode::Filter(node) => Box::new(FilterOperator::new(node.predicate)),
            StreamNode::TemporalFilter(node) => {
                Box::new(TemporalFilterOperator::new(node.schema, node.bounds)?)
            }
            StreamNode::TopN(node) => Box::new(TopNOperator::new(node.spec)?),
            StreamNode::OverWindow(node) => Box::new(OverWindowOperator::new(node.spec)?),
            StreamNode::Window(node) => Box::new(WindowOperator::new(
                node.spec,
                node.time_column,
                node.schema,
            )),
            StreamNode::SessionAggregate(node) => Box::new(SessionAggregateOperator::new(
                node.groups,
                node.columns,
                node.calls,
                node.emit,
                node.schema,
                late_handling(node.late, late_rows, node.side_output),
                crate::stream::parallelism::session_partitions(),
            )?),
            StreamNode::Aggregate(node) => match node.vectorised_window() {
                Some(window) => Box::new(WindowAggregateOperator::new(
                    node.groups,
                    node.calls,
                    window,
                    node.schema,
                    late_handling(node.late, late_rows, node.side_output),
                    crate::stream::parallelism::window_partitions(),
                )?),
                None if node.updates_vectorised()? => Box::new(
                    UpdatingAggregateOperator::new(
                        node.groups,
                        node.calls,
                        node.window,
                        node.schema,
                        late_handling(node.late, late_rows, node.side_output),
                        node.retracting,
                    )?
                    .forwarding_watermark(node.forwards_watermark),
                ),
                None => {
                    let mut operator = AggregateOperator::new(
                        node.groups,
                        node.calls,
                        node.window,
                        node.emit,
                        node.schema,
                        late_handling(node.late, late_rows, node.side_output),
                        node.retracting,
                    )?
                    .forwarding_watermark(node.forwards_watermark);
                    if node.fires {
                        operator.publish_at_firings();
                    }
                    Box::new(operator)
                }
            },
        })
    }

    /// One EXPLAIN line.
    pub fn describe(&self) -> String {
        match self {
            StreamNode::EmitOnClose(node) => format!(
                "EmitOnClose: rows in event-time order once watermark > {}",
                node.time_name
            ),
            StreamNode::Project(node) => format!(
                "Project: {}{}",
                node.display.join(", "),
                watermark_suffix(&node.watermark)
            ),
            StreamNode::Filter(node) => format!("Filter: {}", node.display),
            StreamNode::TemporalFilter(node) => format!("TemporalFilter: {}", node.display),
            StreamNode::Window(node) => {
                let mut line = format!("Window: {} on {}", node.spec.describe(), node.time_name);
                if node.spec.offset_ns != 0 {
                    let _ = write!(line, " offset={}", describe_duration(node.spec.offset_ns));
                }
                line + &watermark_suffix(&node.watermark)
            }
            StreamNode::SessionAggregate(node) => format!(
                "SessionAggregate: group=[{}] aggregates=[{}] gap={} emit={} late={} closes_on={}{}",
                node.display_groups.join(", "),
                node.display_calls.join(", "),
                describe_duration(node.columns.gap_ns),
                node.emit.describe(),
                node.late.describe(),
                node.watermark.as_deref().unwrap_or("never (no watermark)"),
                unbounded_suffix(node.late)
            ),
            StreamNode::TopN(node) => node.describe(),
            StreamNode::OverWindow(node) => node.describe(),
            StreamNode::Aggregate(node) => {
                let mut line = format!(
                    "{}: group=[{}] aggregates=[{}] emit={}",
                    if node.window.is_some() {
                        "WindowAggregate"
                    } else {
                        "Aggregate"
                    },
                    node.display_groups.join(", "),
                    node.display_calls.join(", "),
                    node.emit.describe()
                );
                if node.fires {
                    line.push_str(" at_firings");
                }
                if node.retracting {
                    line.push_str(" retracts");
                }
                // Which operator runs it: vectorised, or row by row.
                if node.vectorised_window().is_some() || node.updates_vectorised().unwrap_or(false)
                {
                    line.push_str(" vectorised");
                }
                if node.window.is_some() {
                    let _ = write!(
                        line,
                        " late={} closes_on={}",
                        node.late.describe(),
                        node.watermark.as_deref().unwrap_or("never (no watermark)")
                    );
                    line.push_str(unbounded_suffix(node.late));
                } else {
                    // Without a window nothing ever closes a group.
                    line.push_str(" state=unbounded");
                }
                line
            }
        }
    }
}

/// Windows that never close keep all their state: EXPLAIN says so.
fn unbounded_suffix(late: LatePolicy) -> &'static str {
    if late.is_unbounded() {
        " state=unbounded"
    } else {
        ""
    }
}

fn late_handling(
    policy: LatePolicy,
    rows: &LateRows,
    side_output: Option<SideOutputShape>,
) -> LateHandling {
    LateHandling {
        policy,
        rows: rows.clone(),
        side_output,
    }
}

fn watermark_suffix(watermark: &Option<String>) -> String {
    match watermark {
        Some(column) => format!(" watermark={column}"),
        None => String::new(),
    }
}
