//! UNION ALL in a view: each input is planned as its own branch (a chain
//! from one source), and the branches meet at a union, where the runtime
//! forwards the minimum of their watermarks and aligns their barriers; the
//! nodes planned above the union run once, on the merged stream.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Union;

use super::errors::unsupported;
use super::{JunctionNode, Planner, Segment};
use crate::error::Result;
use crate::sql::streaming::nodes::StreamNode;

/// A chain of nodes from one source.
pub struct Branch {
    pub input: String,
    pub nodes: Vec<StreamNode>,
    pub(super) source_line: String,
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
            if segment.junction.is_some() {
                return Err(unsupported(
                    "a UNION ALL whose input is computed from another UNION ALL or a join",
                    "Make the inner UNION ALL or join a materialized view of its own.",
                ));
            }
            let position = segment
                .watermark
                .as_ref()
                .and_then(|column| input.schema().as_arrow().index_of(column).ok());
            watermark_positions.push(position);
            updating |= segment.updating;
            branches.push(Branch {
                input: segment.input,
                nodes: segment.nodes,
                source_line: segment.source_line,
            });
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
            junction: Some(JunctionNode::Union(UnionNode {
                inputs: branches.len(),
                schema,
                watermark,
            })),
            branches,
        })
    }
}
