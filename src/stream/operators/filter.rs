//! Keeps the rows a DataFusion predicate holds for (WHERE, HAVING).

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};

pub struct FilterOperator {
    predicate: Arc<dyn PhysicalExpr>,
}

impl FilterOperator {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        FilterOperator { predicate }
    }
}

impl Operator for FilterOperator {
    fn name(&self) -> &'static str {
        "Filter"
    }

    /// Nothing to undo: it keeps no state.
    fn rollback(&mut self) -> Result<bool> {
        Ok(true)
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        let mask = self
            .predicate
            .evaluate(&chunk.rows)?
            .into_array(chunk.num_rows())?;
        let mask = mask
            .as_boolean_opt()
            .ok_or_else(|| WeirError::internal("a filter predicate is not boolean"))?;
        let kept = chunk.filter(mask)?;
        if kept.num_rows() > 0 {
            output.push(Message::batch(kept));
        }
        Ok(())
    }
}
