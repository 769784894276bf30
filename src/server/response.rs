//! Session outcomes and errors as pgwire responses.

use std::sync::Arc;

use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::SendableRecordBatchStream;
use futures::{stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, QueryResponse, Tag};
use pgwire::api::ConnectionHandle;
use pgwire::api::Type;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;

use super::cancel::cancellable;
use super::text_format::{encoding_fields, render_text_columns};
use crate::engine::pg_catalog::PG_TYPE_METADATA;
use crate::engine::CommandDone;
use crate::error::WeirError;

pub fn error_info(error: &WeirError) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        "ERROR".to_string(),
        error.code.to_string(),
        error.message.clone(),
    );
    info.hint = error.hint.clone();
    info
}

pub fn to_pgwire(error: WeirError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&error)))
}

pub fn tag(done: &CommandDone) -> Tag {
    let tag = Tag::new(&done.tag);
    let tag = if done.tag == "INSERT" {
        tag.with_oid(0)
    } else {
        tag
    };
    match done.rows {
        Some(rows) => tag.with_rows(rows as usize),
        None => tag,
    }
}

pub fn fields(
    schema: &Schema,
    format: &Format,
    options: Option<Arc<FormatOptions>>,
) -> PgWireResult<Vec<FieldInfo>> {
    let fields = arrow_schema_to_pg_fields(&with_flat_arrays(schema), format, options)?;
    Ok(fields
        .into_iter()
        .zip(schema.fields())
        .map(|(info, field)| match vector_type(field) {
            Some(vector) => FieldInfo::new(
                info.name().to_string(),
                info.table_id(),
                info.column_id(),
                vector,
                info.format(),
            )
            .with_format_options(info.format_options().clone()),
            None => info,
        })
        .collect())
}

/// `schema` with each array of arrays described as an array of its
/// innermost elements: Postgres has one array type for any number of
/// dimensions (`int8[]`), which pgwire's type mapping does not know.
fn with_flat_arrays(schema: &Schema) -> Schema {
    let fields = schema.fields().iter().map(|field| {
        let mut element = match field.data_type() {
            DataType::List(element) => element.clone(),
            _ => return field.clone(),
        };
        while let DataType::List(inner) = element.data_type() {
            element = inner.clone();
        }
        Arc::new(
            field
                .as_ref()
                .clone()
                .with_data_type(DataType::List(element)),
        )
    });
    Schema::new_with_metadata(fields.collect::<Vec<_>>(), schema.metadata().clone())
}

/// The vector type a catalog list column is sent as (`pg_index.indkey`);
/// none once it is no longer a list (the tag survives `indkey::text`).
fn vector_type(field: &Field) -> Option<Type> {
    if !matches!(field.data_type(), DataType::List(_)) {
        return None;
    }
    match field.metadata().get(PG_TYPE_METADATA)?.as_str() {
        "int2vector" => Some(Type::INT2_VECTOR),
        "oidvector" => Some(Type::OID_VECTOR),
        _ => None,
    }
}

/// Streams record batches as data rows; nothing is collected in memory.
pub fn query_response(
    batches: SendableRecordBatchStream,
    format: &Format,
    options: Arc<FormatOptions>,
    cancel: Option<Arc<ConnectionHandle>>,
) -> PgWireResult<QueryResponse> {
    let fields = Arc::new(fields(&batches.schema(), format, Some(options))?);
    let described = fields.clone();
    let row_fields = Arc::new(encoding_fields(&batches.schema(), &fields));
    let rows = batches
        .map(move |batch| {
            let rows: Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> = match batch {
                Ok(batch) => {
                    let batch = render_text_columns(batch, &described);
                    encode_recordbatch(row_fields.clone(), batch)
                }
                Err(error) => Box::new(std::iter::once(Err(to_pgwire(WeirError::from(error))))),
            };
            stream::iter(rows)
        })
        .flatten();
    Ok(QueryResponse::new(fields, cancellable(rows, cancel)))
}
