//! Shaping what statements return: Postgres column names, statement
//! timeouts on row streams, INSERT counts, and rows the session makes itself.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast;
use futures::StreamExt;

use super::Outcome;
use crate::error::{Result, WeirError};
use crate::sql;

/// The result schema with Postgres's names for unaliased columns.
pub(super) fn postgres_column_names(schema: &Schema, statement: &ast::Statement) -> SchemaRef {
    let Some(names) =
        sql::output_names(statement).filter(|names| names.len() == schema.fields().len())
    else {
        return Arc::new(schema.clone());
    };
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(field, name)| match name {
            Some(name) => field.as_ref().clone().with_name(name),
            None => field.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Gives a stream's columns the names clients see (types stay as executed).
pub(super) fn with_schema(
    batches: SendableRecordBatchStream,
    names: SchemaRef,
) -> SendableRecordBatchStream {
    let actual = batches.schema();
    if actual.fields().len() != names.fields().len() {
        return batches;
    }
    let fields: Vec<_> = actual
        .fields()
        .iter()
        .zip(names.fields())
        .map(|(field, named)| field.as_ref().clone().with_name(named.name()))
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, actual.metadata().clone()));
    let relabel = schema.clone();
    let stream = batches.map(move |batch| {
        batch.and_then(|batch| {
            RecordBatch::try_new(relabel.clone(), batch.columns().to_vec()).map_err(Into::into)
        })
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// Ends a result stream with 57014 once `limit` has passed since now.
pub(super) fn with_deadline(
    batches: SendableRecordBatchStream,
    limit: Duration,
) -> SendableRecordBatchStream {
    let schema = batches.schema();
    let deadline = tokio::time::Instant::now() + limit;
    let stream = futures::stream::unfold(Some(batches), move |batches| async move {
        let mut batches = batches?;
        match tokio::time::timeout_at(deadline, batches.next()).await {
            Ok(next) => next.map(|batch| (batch, Some(batches))),
            Err(_) => {
                let timeout = WeirError::new(
                    crate::error::sqlstate::QUERY_CANCELED,
                    "canceling statement due to statement timeout",
                )
                .with_hint("SET statement_timeout = 0 turns the limit off.");
                Some((Err(DataFusionError::External(Box::new(timeout))), None))
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

pub(super) fn count_of(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|batch| batch.column_by_name("count"))
        .filter_map(|column| column.as_any().downcast_ref::<UInt64Array>())
        .map(|counts| counts.iter().flatten().sum::<u64>())
        .sum()
}

pub(super) fn rows(schema: SchemaRef, values: Vec<Vec<String>>) -> Result<Outcome> {
    let columns = (0..schema.fields().len())
        .map(|column| {
            let array: StringArray = values
                .iter()
                .map(|row| Some(row[column].as_str()))
                .collect();
            Arc::new(array) as _
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns)
        .map_err(|error| WeirError::internal(error.to_string()))?;
    let stream = futures::stream::iter(vec![Ok(batch)]);
    Ok(Outcome::Rows(Box::pin(RecordBatchStreamAdapter::new(
        schema, stream,
    ))))
}
