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

/// One index as pg_index and pg_class show it: a key constraint's or
/// one made with CREATE INDEX.
struct IndexRow<'a> {
    oid: i64,
    table_oid: i64,
    namespace: i64,
    name: &'a str,
    numbers: Vec<i64>,
    unique: bool,
    primary: bool,
    method: i64,
}

fn index_rows(context: &CatalogContext) -> Vec<IndexRow<'_>> {
    let keys = each_key(context).map(|(table, key)| IndexRow {
        oid: key.index_oid,
        table_oid: table.oid,
        namespace: table.namespace,
        name: &key.constraint.name,
        numbers: column_numbers(key),
        unique: true,
        primary: key.constraint.primary,
        method: BTREE,
    });
    let declared = context.declared.iter().map(|index| IndexRow {
        oid: index.oid,
        table_oid: index.table_oid,
        namespace: index.namespace,
        name: &index.name,
        numbers: index.numbers.clone(),
        unique: false,
        primary: false,
        method: method_oid(&index.method),
    });
    keys.chain(declared).collect()
}

/// Postgres's oids of its access methods (pg_am).
fn method_oid(method: &str) -> i64 {
    match method {
        "hash" => 405,
        "gist" => 783,
        "gin" => 2742,
        "spgist" => 4000,
        "brin" => 3580,
        _ => BTREE,
    }
}

pub fn add_indexes(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows = index_rows(context)
        .into_iter()
        .map(|index| {
            let numbers = &index.numbers;
            let zeros = vec![0; numbers.len()];
            Ok(vec![
                ("indexrelid", number(index.oid)),
                ("indrelid", number(index.table_oid)),
                ("indnatts", number(numbers.len() as i64)),
                ("indnkeyatts", number(numbers.len() as i64)),
                ("indisunique", flag(index.unique)),
                ("indnullsnotdistinct", flag(false)),
                ("indisprimary", flag(index.primary)),
                ("indisexclusion", flag(false)),
                ("indimmediate", flag(true)),
                ("indisclustered", flag(false)),
                ("indisvalid", flag(true)),
                ("indcheckxmin", flag(false)),
                ("indisready", flag(true)),
                ("indislive", flag(true)),
                ("indisreplident", flag(false)),
                ("indkey", int_list(numbers, &DataType::Int16)?),
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
    index_rows(context)
        .into_iter()
        .map(|index| {
            vec![
                ("oid", number(index.oid)),
                ("relname", text(index.name)),
                ("relnamespace", number(index.namespace)),
                ("reltype", number(0)),
                ("relowner", number(10)),
                ("relam", number(index.method)),
                ("relkind", text("i")),
                ("relpersistence", text("p")),
                ("relnatts", number(index.numbers.len() as i64)),
                ("relhasindex", flag(false)),
                ("relisshared", flag(false)),
                ("relispartition", flag(false)),
            ]
        })
        .collect()
}
