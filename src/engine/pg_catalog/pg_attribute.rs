//! `pg_attribute` with the column types weir sends over the wire (arrow-pg's
//! mapping, the one result columns use; datafusion-pg-catalog falls back to
//! `text` for intervals and most arrays) and key columns NOT NULL.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::column_defaults::column_defaults;
use super::context::{int64_column, text_column, CatalogContext};

/// `atthasdef`: whether a `pg_attrdef` row names the column.
fn has_defaults(batch: &RecordBatch, context: &CatalogContext) -> Result<ArrayRef> {
    let defaults: HashSet<(i64, i64)> = column_defaults(context)
        .into_iter()
        .map(|(relation, column, _)| (relation, column))
        .collect();
    let relations = int64_column(batch, "attrelid")?;
    let relations = relations.as_primitive::<Int64Type>();
    let numbers = int64_column(batch, "attnum")?;
    let numbers = numbers.as_primitive::<Int64Type>();
    let flags: BooleanArray = (0..batch.num_rows())
        .map(|row| Some(defaults.contains(&(relations.value(row), numbers.value(row)))))
        .collect();
    Ok(Arc::new(flags))
}

pub fn correct(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let schema = batch.schema();
    let (Ok(types_at), Ok(not_null_at)) =
        (schema.index_of("atttypid"), schema.index_of("attnotnull"))
    else {
        return Ok(batch);
    };
    let relations = int64_column(&batch, "attrelid")?;
    let relations = relations.as_primitive::<Int64Type>();
    let names = text_column(&batch, "attname")?;
    let names = names.as_string::<i32>();
    let old_types = int64_column(&batch, "atttypid")?;
    let old_types = old_types.as_primitive::<Int64Type>();
    let old_not_null = batch.column(not_null_at).as_boolean();
    let by_oid = context.names_by_oid();
    let mut schemas: HashMap<i64, Option<SchemaRef>> = HashMap::new();
    let mut types = Vec::with_capacity(batch.num_rows());
    let mut not_null = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let relation = relations.is_valid(row).then(|| relations.value(row));
        let name = names.is_valid(row).then(|| names.value(row));
        let field_type = relation.zip(name).and_then(|(relation, name)| {
            let schema = schemas.entry(relation).or_insert_with(|| {
                let relation_name = by_oid.get(&relation)?;
                Some(context.relations.provider(relation_name)?.schema())
            });
            let field = schema.as_ref()?.field_with_name(name).ok()?;
            arrow_pg::datatypes::into_pg_type(field.data_type()).ok()
        });
        types.push(match field_type {
            Some(pg_type) => Some(i64::from(pg_type.oid())),
            None => old_types.is_valid(row).then(|| old_types.value(row)),
        });
        let keyed = context
            .keyed
            .iter()
            .find(|table| Some(table.oid) == relation);
        let in_key = keyed
            .zip(name)
            .is_some_and(|(table, name)| table.in_primary_key(name));
        not_null.push(Some(in_key || old_not_null.value(row)));
    }
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    let types: ArrayRef = Arc::new(Int64Array::from(types));
    columns[types_at] = cast(&types, schema.field(types_at).data_type())?;
    columns[not_null_at] = Arc::new(BooleanArray::from(not_null));
    if let Ok(has_default_at) = schema.index_of("atthasdef") {
        columns[has_default_at] = has_defaults(&batch, context)?;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}
