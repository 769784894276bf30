//! DataFusion checks a table's NOT NULL columns before rows reach its sink
//! but names the column by its position; this says which, as Postgres does.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::execution_plan::check_not_null_constraints;

use super::TableLog;
use crate::error::{sqlstate, WeirError};

impl TableLog {
    /// `rows` if no NOT NULL column of the table holds a null in them, as
    /// DataFusion's INSERT checks, with the column named.
    pub fn check_not_null(&self, rows: RecordBatch) -> crate::error::Result<RecordBatch> {
        self.check_columns_not_null(rows, &self.not_null_columns())
    }

    /// The same for the columns `required` (`not_null_columns()`, computed
    /// once by a caller checking many batches). A `Vec` because that is what
    /// DataFusion's check takes.
    #[allow(clippy::ptr_arg)]
    pub fn check_columns_not_null(
        &self,
        rows: RecordBatch,
        required: &Vec<usize>,
    ) -> crate::error::Result<RecordBatch> {
        check_not_null_constraints(rows, required)
            .map_err(|error| name_the_column(error, self).into())
    }
}

/// `error`, naming the column when it is DataFusion's not-null check.
pub fn name_the_column(error: DataFusionError, log: &TableLog) -> DataFusionError {
    let text = error.to_string();
    let index = text
        .split("Invalid batch column at '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .and_then(|index| index.parse::<usize>().ok());
    let Some(field) = index.and_then(|index| log.schema.fields().get(index)) else {
        return error;
    };
    DataFusionError::External(Box::new(
        WeirError::new(
            sqlstate::NOT_NULL_VIOLATION,
            format!(
                "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                field.name(),
                log.name
            ),
        )
        .with_hint("The column is NOT NULL: give it a value."),
    ))
}
