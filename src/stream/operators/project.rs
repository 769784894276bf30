//! Computes the output columns of each row with DataFusion expressions.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::Result;
use crate::stream::message::{Chunk, Message};
use crate::stream::operator::{Context, Operator, Output};

pub struct ProjectOperator {
    expressions: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    /// False when the watermark column is not among the outputs.
    forwards_watermark: bool,
}

impl ProjectOperator {
    pub fn new(
        expressions: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
        forwards_watermark: bool,
    ) -> Self {
        ProjectOperator {
            expressions,
            schema,
            forwards_watermark,
        }
    }
}

impl Operator for ProjectOperator {
    fn name(&self) -> &'static str {
        "Project"
    }

    /// Nothing to undo: it keeps no state.
    fn rollback(&mut self) -> Result<bool> {
        Ok(true)
    }

    fn on_batch(&mut self, chunk: Chunk, _: Context, output: &mut Output) -> Result<()> {
        let rows = chunk.num_rows();
        let columns = self
            .expressions
            .iter()
            .map(|expression| expression.evaluate(&chunk.rows)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let projected = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        output.push(Message::batch(chunk.with_rows(projected)));
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ns: i64, _: Context, output: &mut Output) -> Result<()> {
        if self.forwards_watermark {
            output.push(Message::Watermark(watermark_ns));
        }
        Ok(())
    }
}
