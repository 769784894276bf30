//! `pg_class` with relkind `'m'` for materialized views (datafusion-pg-catalog
//! derives relkind from DataFusion's `TableType`, which has no such kind),
//! so psql's `\dm` lists them and `\dt` does not; and a row of kind `'i'`
//! for each key constraint's index; each relation owned by its owner's role
//! (`relowner`), with what was granted on it (`relacl`, psql's `\dp`).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, ListBuilder, StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::context::{int64_column, CatalogContext};
use super::keys::index_classes;
use super::roles::ROLE_OID;
use super::rows::append;

pub fn correct(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let schema = batch.schema();
    let (Ok(_), Ok(kinds_at)) = (schema.index_of("relname"), schema.index_of("relkind")) else {
        return Ok(batch);
    };
    let oids = int64_column(&batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let keys = context.names_by_oid();
    let kinds = batch.column(kinds_at).as_string::<i32>();
    let relabeled: StringArray = (0..batch.num_rows())
        .map(|row| {
            if kinds.is_null(row) {
                return None;
            }
            let kind = kinds.value(row);
            let key = oids
                .is_valid(row)
                .then(|| keys.get(&oids.value(row)))
                .flatten();
            let materialized =
                kind == "r" && key.is_some_and(|key| context.is_materialized_view(key));
            Some(if materialized { "m" } else { kind })
        })
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns[kinds_at] = Arc::new(relabeled);
    if let Ok(has_index_at) = schema.index_of("relhasindex") {
        columns[has_index_at] = Arc::new(has_index(&batch, has_index_at, context)?);
    }
    let ids = relation_ids(&batch, context)?;
    if let Ok(owners_at) = schema.index_of("relowner") {
        columns[owners_at] = owners(&batch, owners_at, &ids, context)?;
    }
    if let Ok(acl_at) = schema.index_of("relacl") {
        columns[acl_at] = access_lists(&batch, acl_at, &ids, context)?;
    }
    let relabeled = RecordBatch::try_new(schema, columns)?;
    append(relabeled, &index_classes(context))
}

/// weir's id of each row's relation (None for pg_catalog's own).
fn relation_ids(batch: &RecordBatch, context: &CatalogContext) -> Result<Vec<Option<u64>>> {
    let oids = int64_column(batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let names = context.names_by_oid();
    Ok((0..batch.num_rows())
        .map(|row| {
            let name = names.get(&oids.value(row))?;
            context.relations.get(name).map(|definition| definition.id)
        })
        .collect())
}

/// `relowner`: the oid of the relation's owner (the bootstrap superuser's
/// for pg_catalog's relations and anything older than owners).
fn owners(
    batch: &RecordBatch,
    at: usize,
    ids: &[Option<u64>],
    context: &CatalogContext,
) -> Result<ArrayRef> {
    let access = &context.access;
    let owners: Int64Array = ids
        .iter()
        .map(|id| {
            let owner = id.map(|id| access.privileges.owner(id));
            let oid = owner
                .and_then(|owner| access.roles.get(&owner))
                .map(|role| role.oid);
            Some(oid.unwrap_or(ROLE_OID))
        })
        .collect();
    Ok(cast(&owners, batch.schema().field(at).data_type())?)
}

/// `relacl`: NULL (the owner's default privileges) until something is
/// granted, then the owner's item and one per grantee.
fn access_lists(
    batch: &RecordBatch,
    at: usize,
    ids: &[Option<u64>],
    context: &CatalogContext,
) -> Result<ArrayRef> {
    let mut lists = ListBuilder::new(StringBuilder::new());
    for &id in ids {
        match id.and_then(|id| context.access.privileges.acl_items(id)) {
            Some(items) => {
                for item in items {
                    lists.values().append_value(item);
                }
                lists.append(true);
            }
            None => lists.append(false),
        }
    }
    let lists: ArrayRef = Arc::new(lists.finish());
    Ok(cast(&lists, batch.schema().field(at).data_type())?)
}

/// `relhasindex`, true for tables with keys or indexes (psql reads their
/// indexes only then).
fn has_index(batch: &RecordBatch, at: usize, context: &CatalogContext) -> Result<BooleanArray> {
    let oids = int64_column(batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let old = batch.column(at).as_boolean();
    Ok((0..batch.num_rows())
        .map(|row| {
            let keyed = oids.is_valid(row)
                && (context
                    .keyed
                    .iter()
                    .any(|table| table.oid == oids.value(row))
                    || context
                        .declared
                        .iter()
                        .any(|index| index.table_oid == oids.value(row)));
            Some(keyed || (old.is_valid(row) && old.value(row)))
        })
        .collect())
}
