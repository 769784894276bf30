//! The columns that identify a view's rows, when it has them in a form the
//! keyed layout of its stored rows relies on: the view's last stateful
//! operator is a GROUP BY (each group one row, its change one retraction
//! and one insertion in one chunk) — over SESSION windows too, each
//! session's row keyed with its bounds — and every group column reaches
//! the output unchanged through the projections and filters after it.

use datafusion::physical_expr::expressions::Column;

use super::nodes::StreamNode;

/// The output positions of the view's group columns, or None.
pub fn output_key(nodes: &[StreamNode]) -> Option<Vec<usize>> {
    let last = nodes
        .iter()
        .rposition(|node| !matches!(node, StreamNode::Project(_) | StreamNode::Filter(_)))?;
    let groups = match &nodes[last] {
        // A global aggregate has one row and nothing to key it by.
        StreamNode::Aggregate(aggregate) if !aggregate.groups.is_empty() => aggregate.groups.len(),
        // A key's sessions are told apart by their bounds: a session's
        // row is keyed by its group columns with its start or end (a
        // session that grows or merges is retracted and inserted anew).
        StreamNode::SessionAggregate(session)
            if session.columns.start.is_some() || session.columns.end.is_some() =>
        {
            session.groups.len()
        }
        _ => return None,
    };
    let mut positions: Vec<usize> = (0..groups).collect();
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
