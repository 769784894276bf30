//! `pg_table_is_visible(oid)`: whether a relation is on the search path,
//! which is `public` then `pg_catalog` (datafusion-pg-catalog answers true
//! for every relation, so clients listing "their" tables and views also got
//! information_schema's and weir_catalog's). The oids of `public` and
//! pg_catalog come from the last pg_catalog scan, as for `pg_get_viewdef`.

use std::sync::Arc;

use crate::engine::relations::Relations;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use super::context::decode_key_oid;
use super::views::OidNames;

/// Oids below this are Postgres's own objects (pg_catalog).
const FIRST_NORMAL_OID: i64 = 16384;

pub fn table_is_visible_function(names: &OidNames, relations: &Arc<Relations>) -> ScalarUDF {
    let names = names.clone();
    let relations = Arc::downgrade(relations);
    create_udf(
        "pg_table_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let oids = cast(&arrays[0], &DataType::Int64)?;
            let oids = oids.as_primitive::<Int64Type>();
            let known = names.lock().unwrap_or_else(|p| p.into_inner());
            let relations = relations.upgrade();
            // A relation in a user schema is not on the search path
            // (`public`): psql lists it only when asked for `s.*`.
            let in_public = |key: &String| {
                relations
                    .as_ref()
                    .is_none_or(|relations| relations.reference_of(key).schema().is_none())
            };
            let visible: BooleanArray = (0..oids.len())
                .map(|row| {
                    let oid = oids.is_valid(row).then(|| oids.value(row))?;
                    Some(
                        oid < FIRST_NORMAL_OID
                            || known.get(&oid).is_some_and(in_public)
                            || decode_key_oid(oid).is_some(),
                    )
                })
                .collect();
            let array: ArrayRef = Arc::new(visible);
            Ok(ColumnarValue::Array(array))
        }),
    )
}

/// `pg_collation_is_visible`, `pg_type_is_visible`,
/// `pg_function_is_visible` and the conversion / operator class / family
/// ones (psql's `\dc`, `\dd`): true — weir's collations, types and functions
/// are all pg_catalog's, which is on every search path.
pub fn always_visible_functions() -> Vec<ScalarUDF> {
    [
        "pg_collation_is_visible",
        "pg_type_is_visible",
        "pg_function_is_visible",
        "pg_conversion_is_visible",
        "pg_opclass_is_visible",
        "pg_opfamily_is_visible",
    ]
    .into_iter()
    .map(always_visible)
    .chain([tablespace_location()])
    .collect()
}

/// `pg_tablespace_location(oid)` (psql's `\db`): '' — Postgres's answer
/// for its built-in tablespaces, the only ones weir has.
fn tablespace_location() -> ScalarUDF {
    create_udf(
        "pg_tablespace_location",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|arguments: &[ColumnarValue]| {
            let rows = ColumnarValue::values_to_arrays(arguments)?[0].len();
            let locations: ArrayRef =
                Arc::new(datafusion::arrow::array::StringArray::from(vec![""; rows]));
            Ok(ColumnarValue::Array(locations))
        }),
    )
}

fn always_visible(name: &str) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|arguments: &[ColumnarValue]| {
            let rows = ColumnarValue::values_to_arrays(arguments)?[0].len();
            let visible: ArrayRef = Arc::new(BooleanArray::from(vec![true; rows]));
            Ok(ColumnarValue::Array(visible))
        }),
    )
}
