//! A connector produces its own columns; a source declares which of them
//! it keeps, in its own order and types. `Fit` maps one onto the other:
//! columns by name, cast where the declared type differs.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::{can_cast_types, cast};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{sqlstate, Result, WeirError};

pub struct Fit {
    schema: SchemaRef,
    /// For each declared column, the position of the connector's column.
    positions: Vec<usize>,
}

impl Fit {
    /// Checks every declared column is one the connector produces, in a
    /// type it can be cast to. `produced` names the connector's columns.
    pub fn new(schema: &SchemaRef, produced: &[(&str, DataType)], what: &str) -> Result<Self> {
        let mut positions = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let Some(position) = produced.iter().position(|(name, _)| name == field.name()) else {
                let names: Vec<&str> = produced.iter().map(|(name, _)| *name).collect();
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("{what} has no column \"{}\"", field.name()),
                )
                .with_hint(format!("Its columns are {}.", names.join(", "))));
            };
            let from = &produced[position].1;
            if !can_cast_types(from, field.data_type()) {
                return Err(WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!(
                        "column \"{}\" of {what} is {from}, which cannot become {}",
                        field.name(),
                        field.data_type()
                    ),
                ));
            }
            positions.push(position);
        }
        Ok(Fit {
            schema: schema.clone(),
            positions,
        })
    }

    /// Which of the connector's columns are wanted, by position.
    pub fn wanted(&self, produced: usize) -> Vec<bool> {
        let mut wanted = vec![false; produced];
        self.positions.iter().for_each(|&p| wanted[p] = true);
        wanted
    }

    /// The declared columns out of the connector's (`None` where unwanted).
    pub fn apply(&self, columns: &[Option<ArrayRef>], rows: usize) -> Result<RecordBatch> {
        let mut fitted = Vec::with_capacity(self.positions.len());
        for (field, &position) in self.schema.fields().iter().zip(&self.positions) {
            let column = columns[position]
                .as_ref()
                .ok_or_else(|| WeirError::internal("a wanted column was not produced"))?;
            fitted.push(match column.data_type() == field.data_type() {
                true => column.clone(),
                false => cast(column, field.data_type()).map_err(|error| {
                    WeirError::new(
                        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!("column \"{}\": {error}", field.name()),
                    )
                })?,
            });
        }
        let options =
            datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), fitted, &options)
            .map_err(|error| WeirError::internal(format!("a source batch: {error}")))
    }
}
