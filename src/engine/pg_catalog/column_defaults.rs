//! Column defaults as Postgres catalogs them: a `pg_attrdef` row per column
//! with a DEFAULT (its `adbin` holds the expression's SQL, which weir's
//! `pg_get_expr` returns), and `pg_attribute.atthasdef`. psql's `\d`,
//! SQLAlchemy's `get_columns` and pgjdbc's `getColumns` (COLUMN_DEF) read
//! them; the crate's `pg_attrdef` is empty.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use datafusion::sql::unparser::expr_to_sql;

use super::context::CatalogContext;
use super::rows::{append, number, text, Row};

/// Oids of `pg_attrdef` rows: apart from relations' (from 16384) and keys'
/// (from 1e9), fixed per table id and column so they stay the same between
/// queries. Postgres's are arbitrary too.
const DEFAULT_OID_BASE: i64 = 1_600_000_000;
const DEFAULT_OIDS_PER_TABLE: i64 = 2_048;

/// Each table column with a default: the table's oid, its 1-based column
/// number and the default's SQL text.
pub fn column_defaults(context: &CatalogContext) -> Vec<(i64, i64, String)> {
    let mut defaults = Vec::new();
    for log in context.relations.table_logs() {
        let (Some(oid), Some(provider)) = (
            context.oids.get(log.name()),
            context.relations.provider(log.name()),
        ) else {
            continue;
        };
        for (position, field) in provider.schema().fields().iter().enumerate() {
            let Some(default) = provider.get_column_default(field.name()) else {
                continue;
            };
            let sql = match expr_to_sql(default) {
                Ok(sql) => sql.to_string(),
                Err(_) => default.to_string(),
            };
            defaults.push((*oid, position as i64 + 1, sql));
        }
    }
    defaults
}

pub fn add_defaults(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows: Vec<Row> = column_defaults(context)
        .into_iter()
        .map(|(relation, column, sql)| {
            let table_slot = relation.rem_euclid(200_000) * DEFAULT_OIDS_PER_TABLE;
            vec![
                ("oid", number(DEFAULT_OID_BASE + table_slot + column)),
                ("adrelid", number(relation)),
                ("adnum", number(column)),
                ("adbin", text(sql)),
            ]
        })
        .collect();
    append(batch, &rows)
}
