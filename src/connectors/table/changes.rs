//! A table's rows as changes. An append-only table logs inserts only; a
//! table with a primary key (and no watermark) also logs retractions: an
//! UPDATE is the old row retracted and the new one inserted, a DELETE the
//! old row retracted. A retraction names the log offset of the row it
//! takes back, so scans skip that row and the commit can check that it
//! was still the key's live row.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt64Array};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

/// The stored column of a log entry with retractions.
pub const RETRACTS_COLUMN: &str = "__weir_retracts";

/// Rows and, when some are retractions, per row the offset of the row it
/// retracts (NULL: an insert).
#[derive(Debug, Clone)]
pub struct TableChanges {
    pub rows: RecordBatch,
    pub retracts: Option<UInt64Array>,
}

impl TableChanges {
    pub fn inserts(rows: RecordBatch) -> Self {
        TableChanges {
            rows,
            retracts: None,
        }
    }

    pub fn num_rows(&self) -> usize {
        self.rows.num_rows()
    }

    pub fn slice(&self, offset: usize, length: usize) -> Self {
        TableChanges {
            rows: self.rows.slice(offset, length),
            retracts: self.retracts.as_ref().map(|r| r.slice(offset, length)),
        }
    }

    /// The offset of the row that row `row` retracts; None for an insert.
    pub fn retracted(&self, row: usize) -> Option<u64> {
        let retracts = self.retracts.as_ref()?;
        retracts.is_valid(row).then(|| retracts.value(row))
    }

    /// +1 per insert and -1 per retraction; None when all are inserts.
    pub fn diffs(&self) -> Option<Int64Array> {
        let retracts = self.retracts.as_ref()?;
        Some(
            (0..retracts.len())
                .map(|row| if retracts.is_valid(row) { -1 } else { 1 })
                .collect(),
        )
    }

    /// `parts` one after the other (all with `schema`'s columns).
    pub fn concat(schema: &SchemaRef, parts: &[TableChanges]) -> Result<Self> {
        let batches: Vec<&RecordBatch> = parts.iter().map(|part| &part.rows).collect();
        let rows = datafusion::arrow::compute::concat_batches(schema, batches)?;
        if parts.iter().all(|part| part.retracts.is_none()) {
            return Ok(TableChanges::inserts(rows));
        }
        let columns: Vec<ArrayRef> = parts
            .iter()
            .map(|part| match &part.retracts {
                Some(retracts) => Arc::new(retracts.clone()) as ArrayRef,
                None => Arc::new(UInt64Array::new_null(part.num_rows())),
            })
            .collect();
        let columns: Vec<&dyn Array> = columns.iter().map(|column| column.as_ref()).collect();
        let retracts = concat(&columns)?;
        let retracts = retracts
            .as_any()
            .downcast_ref::<UInt64Array>()
            .cloned()
            .ok_or_else(|| WeirError::internal("retractions are not offsets"))?;
        Ok(TableChanges {
            rows,
            retracts: Some(retracts),
        })
    }

    /// The batch a log entry stores: the rows, then the retractions column
    /// when there is one.
    pub fn stored(&self) -> Result<RecordBatch> {
        let Some(retracts) = &self.retracts else {
            return Ok(self.rows.clone());
        };
        let schema = self.rows.schema();
        let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            RETRACTS_COLUMN,
            DataType::UInt64,
            true,
        )));
        let mut columns = self.rows.columns().to_vec();
        columns.push(Arc::new(retracts.clone()));
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?)
    }

    /// Splits a stored batch whose last column is the retractions.
    pub fn from_stored(stored: RecordBatch, schema: &SchemaRef) -> Result<Self> {
        let width = stored.num_columns();
        let retracts = stored
            .column(width - 1)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .cloned()
            .ok_or_else(|| WeirError::internal("a stored retractions column is not offsets"))?;
        let rows = stored.project(&(0..width - 1).collect::<Vec<_>>())?;
        let options = datafusion::arrow::record_batch::RecordBatchOptions::new()
            .with_row_count(Some(rows.num_rows()));
        let rows =
            RecordBatch::try_new_with_options(schema.clone(), rows.columns().to_vec(), &options)?;
        Ok(TableChanges {
            rows,
            retracts: Some(retracts),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(values: &[i64], retracts: Option<Vec<Option<u64>>>) -> TableChanges {
        let rows = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(values.to_vec())) as ArrayRef,
        )])
        .unwrap();
        TableChanges {
            rows,
            retracts: retracts.map(UInt64Array::from),
        }
    }

    #[test]
    fn inserts_and_retractions_concatenate_and_store() {
        let schema = changes(&[], None).rows.schema();
        let parts = [
            changes(&[1, 2], None),
            changes(&[1, 3], Some(vec![Some(0), None])),
        ];
        let all = TableChanges::concat(&schema, &parts).unwrap();
        assert_eq!(all.retracted(0), None);
        assert_eq!(all.retracted(2), Some(0));
        let diffs: Vec<i64> = all.diffs().unwrap().values().to_vec();
        assert_eq!(diffs, vec![1, 1, -1, 1]);
        let back = TableChanges::from_stored(all.stored().unwrap(), &schema).unwrap();
        assert_eq!(back.rows, all.rows);
        assert_eq!(back.retracts, all.retracts);
        let only_inserts = TableChanges::concat(&schema, &parts[..1]).unwrap();
        assert!(only_inserts.retracts.is_none() && only_inserts.diffs().is_none());
    }
}
