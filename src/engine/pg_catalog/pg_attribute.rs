//! `pg_attribute` with the column types weir sends over the wire (arrow-pg's
//! mapping, the one result columns use; datafusion-pg-catalog falls back to
//! `text` for intervals and most arrays), the modifiers of VARCHAR(n),
//! CHAR(n) and NUMERIC(p, s), key columns NOT NULL, and view columns
//! never NOT NULL (as in Postgres).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::column_defaults::column_defaults;
use super::context::{int64_column, text_column, CatalogContext};
use crate::catalog::{BLANK_PADDED_METADATA, MAX_CHARACTERS_METADATA};

/// Postgres' varchar, bpchar and numeric.
const VARCHAR_OID: i64 = 1043;
const BPCHAR_OID: i64 = 1042;
const NUMERIC_OID: i64 = 1700;

/// How weir stores an unconstrained NUMERIC (no modifier in Postgres).
const UNCONSTRAINED_NUMERIC: DataType = DataType::Decimal128(38, 10);

/// A column's type oid and `atttypmod` where the type has a modifier:
/// VARCHAR(n) / CHAR(n) and NUMERIC(p, s) (`format_type` and SQLAlchemy
/// read the length, precision and scale from it).
fn declared_type(field: &Field) -> Option<(i64, i64)> {
    match field.data_type() {
        DataType::Decimal128(precision, scale) if field.data_type() != &UNCONSTRAINED_NUMERIC => {
            let modifier = (i64::from(*precision) << 16 | i64::from(*scale)) + 4;
            Some((NUMERIC_OID, modifier))
        }
        _ => declared_character_type(field),
    }
}

/// A `VARCHAR(n)` / `CHAR(n)` column's type oid and `atttypmod` (n + 4, as
/// Postgres stores it).
fn declared_character_type(field: &Field) -> Option<(i64, i64)> {
    let characters: i64 = field
        .metadata()
        .get(MAX_CHARACTERS_METADATA)?
        .parse()
        .ok()?;
    let oid = match field.metadata().contains_key(BLANK_PADDED_METADATA) {
        true => BPCHAR_OID,
        false => VARCHAR_OID,
    };
    Some((oid, characters + 4))
}

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
    let mut views: HashMap<i64, bool> = HashMap::new();
    let mut types = Vec::with_capacity(batch.num_rows());
    let mut type_modifiers = Vec::with_capacity(batch.num_rows());
    let modifiers_at = schema.index_of("atttypmod").ok();
    let old_modifiers = match modifiers_at {
        Some(_) => Some(int64_column(&batch, "atttypmod")?),
        None => None,
    };
    let old_modifiers = old_modifiers
        .as_ref()
        .map(|m| m.as_primitive::<Int64Type>());
    let mut not_null = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let relation = relations.is_valid(row).then(|| relations.value(row));
        let name = names.is_valid(row).then(|| names.value(row));
        let field = relation.zip(name).and_then(|(relation, name)| {
            let schema = schemas.entry(relation).or_insert_with(|| {
                let relation_name = by_oid.get(&relation)?;
                Some(context.relations.provider(relation_name)?.schema())
            });
            schema.as_ref()?.field_with_name(name).ok().cloned()
        });
        let declared = field.as_ref().and_then(declared_type);
        let field_type = field
            .as_ref()
            .and_then(|field| arrow_pg::datatypes::into_pg_type(field.data_type()).ok());
        types.push(match (declared, field_type) {
            (Some((oid, _)), _) => Some(oid),
            (None, Some(pg_type)) => Some(i64::from(pg_type.oid())),
            (None, None) => old_types.is_valid(row).then(|| old_types.value(row)),
        });
        type_modifiers.push(match declared {
            Some((_, modifier)) => Some(modifier),
            None => old_modifiers.and_then(|m| m.is_valid(row).then(|| m.value(row))),
        });
        let keyed = context
            .keyed
            .iter()
            .find(|table| Some(table.oid) == relation);
        let in_key = keyed
            .zip(name)
            .is_some_and(|(table, name)| table.in_primary_key(name));
        // A view's columns are never NOT NULL in Postgres (a view has no
        // constraints), whatever the plan says of them: psql's `\d+`.
        let view = relation.is_some_and(|relation| {
            *views.entry(relation).or_insert_with(|| {
                by_oid
                    .get(&relation)
                    .and_then(|name| context.relations.get(name))
                    .is_some_and(|definition| {
                        definition.kind != crate::catalog::RelationKind::Table
                    })
            })
        });
        not_null.push(Some(in_key || (old_not_null.value(row) && !view)));
    }
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    let types: ArrayRef = Arc::new(Int64Array::from(types));
    columns[types_at] = cast(&types, schema.field(types_at).data_type())?;
    columns[not_null_at] = Arc::new(BooleanArray::from(not_null));
    if let Some(modifiers_at) = modifiers_at {
        let modifiers: ArrayRef = Arc::new(Int64Array::from(type_modifiers));
        columns[modifiers_at] = cast(&modifiers, schema.field(modifiers_at).data_type())?;
    }
    if let Ok(has_default_at) = schema.index_of("atthasdef") {
        columns[has_default_at] = has_defaults(&batch, context)?;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}
