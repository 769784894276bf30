//! UNION ALL in a view: each input is planned as its own branch (a chain
//! from one source), and the branches meet at a union, where the runtime
//! forwards the minimum of their watermarks and aligns their barriers; the
//! nodes planned above the union run once, on the merged stream.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Union;

use super::{JunctionNode, Meeting, Planner, Segment};
use crate::error::Result;
use crate::sql::streaming::nodes::StreamNode;

/// A chain of nodes from one source (`input`), or from where other
/// branches meet (`meeting`; `input` is then empty).
pub struct Branch {
    pub input: String,
    pub meeting: Option<Box<Meeting>>,
    pub nodes: Vec<StreamNode>,
    pub(super) source_line: String,
}

impl Branch {
    /// The relations it reads, each once, added to `inputs`.
    pub fn inputs(&self, inputs: &mut Vec<String>) {
        match &self.meeting {
            Some(meeting) => meeting
                .branches
                .iter()
                .for_each(|branch| branch.inputs(inputs)),
            None => {
                if !inputs.contains(&self.input) {
                    inputs.push(self.input.clone());
                }
            }
        }
    }

    /// Its EXPLAIN lines, result first, indented from `depth`.
    pub fn explain(&self, depth: usize, lines: &mut Vec<String>) {
        let indent = |depth: usize, line: String| format!("{}{line}", "  ".repeat(depth));
        let mut depth = depth;
        for node in self.nodes.iter().rev() {
            lines.push(indent(depth, node.describe()));
            depth += 1;
        }
        match &self.meeting {
            Some(meeting) => {
                lines.push(indent(depth, meeting.junction.describe()));
                for branch in &meeting.branches {
                    branch.explain(depth + 1, lines);
                }
            }
            None => lines.push(indent(depth, self.source_line.clone())),
        }
    }
}

/// Where branches meet.
pub struct UnionNode {
    pub inputs: usize,
    /// The union's columns (the first input's names).
    pub schema: SchemaRef,
    /// The column the merged watermark is on: one every branch has its
    /// watermark on, at the same position.
    pub watermark: Option<String>,
}

impl UnionNode {
    pub fn describe(&self) -> String {
        format!(
            "Union: inputs={}{}",
            self.inputs,
            self.watermark
                .as_ref()
                .map(|column| format!(" watermark={column}"))
                .unwrap_or_default()
        )
    }
}

impl Planner<'_> {
    pub(super) fn union(&mut self, union: &Union) -> Result<Segment> {
        let schema: SchemaRef = Arc::new(union.schema.as_arrow().clone());
        let mut branches = Vec::new();
        let mut watermark_positions = Vec::new();
        let mut updating = false;
        for input in &union.inputs {
            let segment = self.segment(input)?;
            let position = segment
                .watermark
                .as_ref()
                .and_then(|column| input.schema().as_arrow().index_of(column).ok());
            watermark_positions.push(position);
            updating |= segment.updating;
            branches.push(segment.into_branch());
        }
        let first = watermark_positions.first().copied().flatten();
        let watermark = first
            .filter(|_| watermark_positions.iter().all(|p| *p == first))
            .map(|position| schema.field(position).name().clone());
        Ok(Segment {
            input: String::new(),
            source_line: String::new(),
            nodes: Vec::new(),
            watermark: watermark.clone(),
            window: None,
            updating,
            changes_bounded: false,
            junction: Some(JunctionNode::Union(UnionNode {
                inputs: branches.len(),
                schema,
                watermark,
            })),
            branches,
        })
    }
}
