//! `pg_class` with relkind `'m'` for materialized views (datafusion-pg-catalog
//! derives relkind from DataFusion's `TableType`, which has no such kind),
//! so psql's `\dm` lists them and `\dt` does not; and a row of kind `'i'`
//! for each key constraint's index; every relation owned by weir's one role.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::context::{int64_column, text_column, CatalogContext};
use super::keys::index_classes;
use super::roles::ROLE_OID;
use super::rows::append;

pub fn correct(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let schema = batch.schema();
    let (Ok(_), Ok(kinds_at)) = (schema.index_of("relname"), schema.index_of("relkind")) else {
        return Ok(batch);
    };
    let names = text_column(&batch, "relname")?;
    let names = names.as_string::<i32>();
    let kinds = batch.column(kinds_at).as_string::<i32>();
    let relabeled: StringArray = (0..batch.num_rows())
        .map(|row| {
            if kinds.is_null(row) {
                return None;
            }
            let kind = kinds.value(row);
            let materialized = kind == "r" && context.is_materialized_view(names.value(row));
            Some(if materialized { "m" } else { kind })
        })
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns[kinds_at] = Arc::new(relabeled);
    if let Ok(has_index_at) = schema.index_of("relhasindex") {
        columns[has_index_at] = Arc::new(has_index(&batch, has_index_at, context)?);
    }
    if let Ok(owners_at) = schema.index_of("relowner") {
        columns[owners_at] = owned_by_the_role(&batch, owners_at)?;
    }
    let relabeled = RecordBatch::try_new(schema, columns)?;
    append(relabeled, &index_classes(context))
}

/// `relowner` with the crate's 0 (no owner) as the one role's oid.
fn owned_by_the_role(batch: &RecordBatch, at: usize) -> Result<ArrayRef> {
    let owners = int64_column(batch, "relowner")?;
    let owners = owners.as_primitive::<Int64Type>();
    let owned: Int64Array = owners.unary(|owner| if owner == 0 { ROLE_OID } else { owner });
    Ok(cast(&owned, batch.schema().field(at).data_type())?)
}

/// `relhasindex`, true for tables with keys (psql reads their indexes only
/// then).
fn has_index(batch: &RecordBatch, at: usize, context: &CatalogContext) -> Result<BooleanArray> {
    let oids = int64_column(batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let old = batch.column(at).as_boolean();
    Ok((0..batch.num_rows())
        .map(|row| {
            let keyed = oids.is_valid(row)
                && context
                    .keyed
                    .iter()
                    .any(|table| table.oid == oids.value(row));
            Some(keyed || (old.is_valid(row) && old.value(row)))
        })
        .collect())
}
