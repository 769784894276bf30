//! `pg_namespace` with each user schema's owner (`nspowner`, psql's `\dn`)
//! and `nspacl` as an array (NULL: the owner's default privileges), which
//! psql's `\dn+` passes to array_to_string.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::context::{text_column, CatalogContext};
use super::roles::ROLE_OID;

pub fn correct(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let schema = batch.schema();
    let (Ok(owners_at), Ok(_)) = (schema.index_of("nspowner"), schema.index_of("nspname")) else {
        return Ok(batch);
    };
    let names = text_column(&batch, "nspname")?;
    let names = names.as_string::<i32>();
    let schemas = context.relations.schemas();
    let roles = &context.access.roles;
    let owners: Int64Array = (0..batch.num_rows())
        .map(|row| {
            let owner = names
                .is_valid(row)
                .then(|| schemas.iter().find(|s| s.name == names.value(row)))
                .flatten()
                .and_then(|schema| roles.get(&schema.owner))
                .map(|role| role.oid);
            Some(owner.unwrap_or(ROLE_OID))
        })
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns[owners_at] = cast(&owners, schema.field(owners_at).data_type())?;
    Ok(RecordBatch::try_new(schema, columns)?)
}
