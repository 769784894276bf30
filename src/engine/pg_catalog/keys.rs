//! A PRIMARY KEY or UNIQUE constraint as Postgres catalogs it: a
//! `pg_constraint` row, a unique index (`pg_index`, and its `pg_class` row
//! of kind `'i'`) named like the constraint, as Postgres names both.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

use super::context::{CatalogContext, Key, KeyedTable};
use datafusion::arrow::datatypes::DataType;

use super::rows::{append, flag, int_list, number, text, Row};

/// Postgres's btree access method.
const BTREE: i64 = 403;

/// 1-based column numbers, as catalogs count them.
fn column_numbers(key: &Key) -> Vec<i64> {
    key.constraint
        .columns
        .iter()
        .map(|&column| column as i64 + 1)
        .collect()
}

fn each_key(context: &CatalogContext) -> impl Iterator<Item = (&KeyedTable, &Key)> {
    context
        .keyed
        .iter()
        .flat_map(|table| table.keys.iter().map(move |key| (table, key)))
}

pub fn add_constraints(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows = each_key(context)
        .map(|(table, key)| {
            Ok(vec![
                ("oid", number(key.constraint_oid)),
                ("conname", text(&key.constraint.name)),
                ("connamespace", number(table.namespace)),
                (
                    "contype",
                    text(if key.constraint.primary { "p" } else { "u" }),
                ),
                ("condeferrable", flag(false)),
                ("condeferred", flag(false)),
                ("convalidated", flag(true)),
                ("conrelid", number(table.oid)),
                ("contypid", number(0)),
                ("conindid", number(key.index_oid)),
                ("conparentid", number(0)),
                ("confrelid", number(0)),
                ("confupdtype", text(" ")),
                ("confdeltype", text(" ")),
                ("confmatchtype", text(" ")),
                ("conislocal", flag(true)),
                ("coninhcount", number(0)),
                ("connoinherit", flag(true)),
                ("conkey", int_list(&column_numbers(key), &DataType::Int16)?),
            ])
        })
        .collect::<Result<Vec<Row>>>()?;
    append(batch, &rows)
}

pub fn add_indexes(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows = each_key(context)
        .map(|(table, key)| {
            let numbers = column_numbers(key);
            let zeros = vec![0; numbers.len()];
            Ok(vec![
                ("indexrelid", number(key.index_oid)),
                ("indrelid", number(table.oid)),
                ("indnatts", number(numbers.len() as i64)),
                ("indnkeyatts", number(numbers.len() as i64)),
                ("indisunique", flag(true)),
                ("indnullsnotdistinct", flag(false)),
                ("indisprimary", flag(key.constraint.primary)),
                ("indisexclusion", flag(false)),
                ("indimmediate", flag(true)),
                ("indisclustered", flag(false)),
                ("indisvalid", flag(true)),
                ("indcheckxmin", flag(false)),
                ("indisready", flag(true)),
                ("indislive", flag(true)),
                ("indisreplident", flag(false)),
                ("indkey", int_list(&numbers, &DataType::Int16)?),
                ("indcollation", int_list(&zeros, &DataType::Int32)?),
                ("indclass", int_list(&zeros, &DataType::Int32)?),
                ("indoption", int_list(&zeros, &DataType::Int16)?),
            ])
        })
        .collect::<Result<Vec<Row>>>()?;
    append(batch, &rows)
}

/// The indexes' own `pg_class` rows (kind `'i'`).
pub fn index_classes(context: &CatalogContext) -> Vec<Row> {
    each_key(context)
        .map(|(table, key)| {
            vec![
                ("oid", number(key.index_oid)),
                ("relname", text(&key.constraint.name)),
                ("relnamespace", number(table.namespace)),
                ("reltype", number(0)),
                ("relowner", number(10)),
                ("relam", number(BTREE)),
                ("relkind", text("i")),
                ("relpersistence", text("p")),
                ("relnatts", number(key.constraint.columns.len() as i64)),
                ("relhasindex", flag(false)),
                ("relisshared", flag(false)),
                ("relispartition", flag(false)),
            ]
        })
        .collect()
}
