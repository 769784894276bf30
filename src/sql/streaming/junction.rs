//! Where a view's branches meet: a UNION ALL of any number, or a join of
//! two. Plans the runtime's `Junction`. A branch may itself start where
//! others meet (`Meeting`), so a view is a tree: a join of a join, a
//! UNION ALL of joins.

use super::join::JoinNode;
use super::union::{Branch, UnionNode};
use crate::error::Result;
use crate::stream::junction::Junction;
use crate::stream::operators::{JoinOperator, UnionOperator};

/// Branches and the junction where they meet.
pub struct Meeting {
    pub junction: JunctionNode,
    pub branches: Vec<Branch>,
}

pub enum JunctionNode {
    Union(UnionNode),
    Join(Box<JoinNode>),
}

impl JunctionNode {
    pub fn describe(&self) -> String {
        match self {
            JunctionNode::Union(union) => union.describe(),
            JunctionNode::Join(join) => join.describe(),
        }
    }

    pub fn operator(self) -> Result<Junction> {
        Ok(match self {
            JunctionNode::Union(union) => Junction::Union(Box::new(UnionOperator::new(
                union.schema,
                union.inputs,
                union.watermark.is_some(),
            ))),
            JunctionNode::Join(join) => {
                Junction::Join(Box::new(JoinOperator::new((*join).spec())?))
            }
        })
    }
}
