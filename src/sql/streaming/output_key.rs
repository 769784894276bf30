//! The columns that identify a view's rows, when it has them in a form the
//! keyed layout of its stored rows relies on: the view's last stateful
//! operator is a GROUP BY (each group one row, its change one retraction
//! and one insertion in one chunk) — over SESSION windows too, each
//! session's row keyed with its bounds — or a top-N by ROW_NUMBER (each
//! partition's one shown row, or each partition's row at a shown rank:
//! a change retracts the row a position held and inserts the next in one
//! chunk), and every key column reaches the output unchanged through the
//! projections and filters after it.

use datafusion::physical_expr::expressions::Column;

use super::nodes::StreamNode;
use crate::stream::operators::top_n::{RankKind, TopNSpec};

/// The output positions of the view's group columns, or None.
pub fn output_key(nodes: &[StreamNode]) -> Option<Vec<usize>> {
    let last = nodes
        .iter()
        .rposition(|node| !matches!(node, StreamNode::Project(_) | StreamNode::Filter(_)))?;
    let mut positions: Vec<usize> = match &nodes[last] {
        // A global aggregate has one row and nothing to key it by.
        StreamNode::Aggregate(aggregate) if !aggregate.groups.is_empty() => {
            (0..aggregate.groups.len()).collect()
        }
        // A key's sessions are told apart by their bounds: a session's
        // row is keyed by its group columns with its start or end (a
        // session that grows or merges is retracted and inserted anew).
        StreamNode::SessionAggregate(session)
            if session.columns.start.is_some() || session.columns.end.is_some() =>
        {
            (0..session.groups.len()).collect()
        }
        StreamNode::TopN(top_n) => top_n_key(&top_n.spec)?,
        _ => return None,
    };
    for node in &nodes[last + 1..] {
        let StreamNode::Project(project) = node else {
            continue;
        };
        positions = positions
            .iter()
            .map(|&position| {
                project.expressions.iter().position(|expression| {
                    expression
                        .downcast_ref::<Column>()
                        .is_some_and(|column| column.index() == position)
                })
            })
            .collect::<Option<_>>()?;
    }
    Some(positions)
}

/// A top-N's output columns that hold at most one row: with ROW_NUMBER,
/// its partition columns when a partition shows one row, else those and
/// the rank when the rank is shown. RANK and DENSE_RANK give ties the
/// same rank, and a partition computed from an expression is not in the
/// output: no key.
fn top_n_key(spec: &TopNSpec) -> Option<Vec<usize>> {
    if spec.kind != RankKind::RowNumber || spec.partition.is_empty() {
        return None;
    }
    let mut positions: Vec<usize> = spec
        .partition
        .iter()
        .map(|expression| {
            let column = expression.downcast_ref::<Column>()?;
            Some(column.index())
        })
        .collect::<Option<_>>()?;
    match (spec.limit == spec.offset + 1, spec.rank_column) {
        (true, _) => {}
        (false, true) => positions.push(spec.schema.fields().len() - 1),
        (false, false) => return None,
    }
    Some(positions)
}
