//! Relation sizes as psql's `\dt+` and `\dm+` show them:
//! `pg_table_size`, `pg_relation_size`, `pg_total_relation_size` and
//! `pg_indexes_size` of a relation's oid, and `pg_size_pretty`. A table's
//! size is what its log takes in the store; a materialized view's, its
//! operator state as of the last checkpoint; a view, an index (weir's key
//! indexes live in memory) or a system relation takes 0 bytes; an oid that
//! names no relation gives NULL, as in Postgres.

use std::sync::{Arc, Weak};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::DataFusionError;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use super::context::decode_key_oid;
use super::views::OidNames;
use crate::engine::relations::Relations;
use crate::stream::checkpoint::stored_view_state;

/// Oids below this are pg_catalog's own (Postgres' FirstNormalObjectId).
const FIRST_NORMAL_OID: i64 = 16_384;

pub fn size_functions(catalog: &Arc<Relations>, names: &OidNames) -> Vec<ScalarUDF> {
    let mut functions: Vec<ScalarUDF> = [
        "pg_table_size",
        "pg_relation_size",
        "pg_total_relation_size",
    ]
    .into_iter()
    .map(|name| relation_size(name, catalog, names, false))
    .collect();
    functions.push(relation_size("pg_indexes_size", catalog, names, true));
    functions.push(size_pretty());
    functions.push(database_size(catalog));
    functions
}

/// `pg_database_size(name)` (psql's `\l+`): what every relation of the
/// one database takes in the store, as `pg_table_size` counts it.
fn database_size(catalog: &Arc<Relations>) -> ScalarUDF {
    let catalog = Arc::downgrade(catalog);
    create_udf(
        "pg_database_size",
        vec![DataType::Utf8],
        DataType::Int64,
        Volatility::Volatile,
        Arc::new(move |arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let names = cast(&arrays[0], &DataType::Utf8)?;
            let names = names.as_string::<i32>();
            let total = match catalog.upgrade() {
                Some(relations) => relations
                    .definitions()
                    .iter()
                    .map(|definition| stored_bytes(&catalog, &definition.name))
                    .sum::<datafusion::error::Result<i64>>()?,
                None => 0,
            };
            let sizes: Int64Array = (0..names.len())
                .map(|row| {
                    let name = names.is_valid(row).then(|| names.value(row))?;
                    (name == crate::catalog::DATABASE_NAME).then_some(total)
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(sizes) as ArrayRef))
        }),
    )
}

fn relation_size(
    name: &str,
    catalog: &Arc<Relations>,
    names: &OidNames,
    indexes: bool,
) -> ScalarUDF {
    let (catalog, names) = (Arc::downgrade(catalog), names.clone());
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Volatile,
        Arc::new(move |arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let oids = cast(&arrays[0], &DataType::Int64)?;
            let oids = oids.as_primitive::<Int64Type>();
            let known = names.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let sizes = (0..oids.len())
                .map(|row| {
                    let oid = oids.is_valid(row).then(|| oids.value(row));
                    match oid {
                        Some(oid) if oid < FIRST_NORMAL_OID || decode_key_oid(oid).is_some() => {
                            Ok(Some(0))
                        }
                        Some(_) if indexes => Ok(oid.and_then(|oid| known.get(&oid)).map(|_| 0)),
                        Some(oid) => match known.get(&oid) {
                            Some(relation) => stored_bytes(&catalog, relation).map(Some),
                            None => Ok(None),
                        },
                        None => Ok(None),
                    }
                })
                .collect::<datafusion::error::Result<Int64Array>>()?;
            Ok(ColumnarValue::Array(Arc::new(sizes) as ArrayRef))
        }),
    )
}

/// The bytes a relation takes in the store.
fn stored_bytes(catalog: &Weak<Relations>, name: &str) -> datafusion::error::Result<i64> {
    let Some(catalog) = catalog.upgrade() else {
        return Ok(0);
    };
    let external = |error: crate::error::WeirError| DataFusionError::External(Box::new(error));
    if let Some(log) = catalog.table(name) {
        return Ok(log.storage().map_err(external)?.disk_bytes as i64);
    }
    match catalog.get(name) {
        Some(definition) if catalog.view_result(name).is_some() => {
            let state =
                stored_view_state(catalog.store().as_ref(), definition.id).map_err(external)?;
            Ok(state.bytes as i64)
        }
        _ => Ok(0),
    }
}

/// `pg_size_pretty(bytes)`: Postgres' rounding and units (bytes below
/// 10 kB, then kB, MB, GB, TB, PB, each below 20 × 1024 of its unit, half
/// rounded).
fn size_pretty() -> ScalarUDF {
    create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let sizes = cast(&arrays[0], &DataType::Int64)?;
            let sizes = sizes.as_primitive::<Int64Type>();
            let texts: StringArray = sizes.iter().map(|size| size.map(pretty)).collect();
            Ok(ColumnarValue::Array(Arc::new(texts) as ArrayRef))
        }),
    )
}

fn pretty(bytes: i64) -> String {
    if bytes.unsigned_abs() < 10 * 1024 {
        return format!("{bytes} bytes");
    }
    // Keep one bit more than the unit needs, for the final half rounding.
    let mut size = bytes / 512;
    for unit in ["kB", "MB", "GB", "TB"] {
        if size.unsigned_abs() < 20 * 1024 - 1 {
            return format!("{} {unit}", half_rounded(size));
        }
        size /= 1024;
    }
    format!("{} PB", half_rounded(size))
}

fn half_rounded(value: i64) -> i64 {
    (value + if value < 0 { -1 } else { 1 }) / 2
}

#[cfg(test)]
mod tests {
    use super::pretty;

    #[test]
    fn sizes_print_as_postgres_prints_them() {
        // Expected values from Postgres 15's pg_size_pretty.
        assert_eq!(pretty(0), "0 bytes");
        assert_eq!(pretty(10_239), "10239 bytes");
        assert_eq!(pretty(10_240), "10 kB");
        assert_eq!(pretty(8_192 * 3), "24 kB");
        assert_eq!(pretty(1_000_000), "977 kB");
        assert_eq!(pretty(20_970_000), "20 MB");
        assert_eq!(pretty(123_456_789_012), "115 GB");
        assert_eq!(pretty(-10_240), "-10 kB");
        assert_eq!(pretty(i64::MAX), "8192 PB");
    }
}
