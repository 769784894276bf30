//! `information_schema` as Postgres defines it: views over pg_catalog, so
//! `columns.data_type` says `bigint` and `timestamp without time zone`
//! (DataFusion's own information_schema says `Int64` and `Utf8View`),
//! `udt_name` exists, and materialized views are left out of `tables` and
//! `columns` as Postgres leaves them out (they are in `pg_matviews`). Each
//! view is planned once at start; pg_catalog's tables compute their rows
//! when scanned, so the views follow the catalog.

use std::sync::Arc;

use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use datafusion::datasource::ViewTable;
use datafusion::execution::context::SessionContext;

use crate::error::{Result, WeirError};

pub const SCHEMA_NAME: &str = "information_schema";

/// Relation kinds information_schema shows: tables, views, foreign and
/// partitioned tables (not materialized views, indexes or sequences).
const LISTED_KINDS: &str = "('r', 'v', 'f', 'p')";

fn relations() -> String {
    "FROM pg_catalog.pg_class c \
     JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid"
        .to_string()
}

fn schemata() -> String {
    "SELECT current_database() AS catalog_name, nspname AS schema_name, \
     'weir' AS schema_owner, CAST(NULL AS TEXT) AS default_character_set_catalog, \
     CAST(NULL AS TEXT) AS default_character_set_schema, \
     CAST(NULL AS TEXT) AS default_character_set_name, CAST(NULL AS TEXT) AS sql_path \
     FROM pg_catalog.pg_namespace"
        .to_string()
}

fn tables() -> String {
    format!(
        "SELECT current_database() AS table_catalog, n.nspname AS table_schema, \
         c.relname AS table_name, \
         CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN' ELSE 'BASE TABLE' END \
           AS table_type, \
         CAST(NULL AS TEXT) AS self_referencing_column_name, \
         CAST(NULL AS TEXT) AS reference_generation, \
         CAST(NULL AS TEXT) AS user_defined_type_catalog, \
         CAST(NULL AS TEXT) AS user_defined_type_schema, \
         CAST(NULL AS TEXT) AS user_defined_type_name, \
         CASE WHEN c.relkind = 'r' THEN 'YES' ELSE 'NO' END AS is_insertable_into, \
         'NO' AS is_typed, CAST(NULL AS TEXT) AS commit_action \
         {} WHERE c.relkind IN {LISTED_KINDS}",
        relations()
    )
}

fn views() -> String {
    format!(
        "SELECT current_database() AS table_catalog, n.nspname AS table_schema, \
         c.relname AS table_name, CAST(NULL AS TEXT) AS view_definition, \
         'NONE' AS check_option, 'NO' AS is_updatable, 'NO' AS is_insertable_into, \
         'NO' AS is_trigger_updatable, 'NO' AS is_trigger_deletable, \
         'NO' AS is_trigger_insertable_into \
         {} WHERE c.relkind = 'v'",
        relations()
    )
}

/// Precision of the numeric types Postgres reports one for.
const NUMERIC_PRECISION: &str = "CASE t.typname WHEN 'int2' THEN 16 WHEN 'int4' THEN 32 \
     WHEN 'int8' THEN 64 WHEN 'float4' THEN 24 WHEN 'float8' THEN 53 \
     WHEN 'numeric' THEN CASE WHEN a.atttypmod >= 4 THEN ((a.atttypmod - 4) / 65536) % 65536 END END";

fn columns() -> String {
    format!(
        "SELECT current_database() AS table_catalog, n.nspname AS table_schema, \
         c.relname AS table_name, a.attname AS column_name, \
         CAST(a.attnum AS INT) AS ordinal_position, \
         pg_get_expr(d.adbin, d.adrelid) AS column_default, \
         CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END AS is_nullable, \
         CASE WHEN t.typname LIKE '\\_%' ESCAPE '\\' THEN 'ARRAY' \
           ELSE format_type(a.atttypid, NULL) END AS data_type, \
         CAST(CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 \
           THEN a.atttypmod - 4 END AS INT) AS character_maximum_length, \
         CAST(CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 \
           THEN 4 * (a.atttypmod - 4) WHEN t.typname = 'text' THEN 1073741824 END AS INT) \
           AS character_octet_length, \
         CAST({NUMERIC_PRECISION} AS INT) AS numeric_precision, \
         CAST(CASE WHEN t.typname IN ('int2', 'int4', 'int8', 'float4', 'float8') THEN 2 \
           WHEN t.typname = 'numeric' THEN 10 END AS INT) AS numeric_precision_radix, \
         CAST(CASE WHEN t.typname IN ('int2', 'int4', 'int8') THEN 0 \
           WHEN t.typname = 'numeric' AND a.atttypmod >= 4 THEN (a.atttypmod - 4) % 65536 END AS INT) \
           AS numeric_scale, \
         CAST(CASE WHEN t.typname = 'date' THEN 0 \
           WHEN t.typname IN ('time', 'timetz', 'timestamp', 'timestamptz', 'interval') \
           THEN 6 END AS INT) AS datetime_precision, \
         CAST(NULL AS TEXT) AS interval_type, \
         current_database() AS udt_catalog, 'pg_catalog' AS udt_schema, \
         t.typname AS udt_name, 'NO' AS is_identity, 'NEVER' AS is_generated, \
         CASE WHEN c.relkind = 'r' THEN 'YES' ELSE 'NO' END AS is_updatable \
         FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_class c ON a.attrelid = c.oid \
         JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
         JOIN pg_catalog.pg_type t ON a.atttypid = t.oid \
         LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE a.attnum > 0 AND c.relkind IN {LISTED_KINDS}"
    )
}

fn constraint_kind() -> &'static str {
    "CASE con.contype WHEN 'p' THEN 'PRIMARY KEY' WHEN 'u' THEN 'UNIQUE' \
     WHEN 'f' THEN 'FOREIGN KEY' ELSE 'CHECK' END"
}

fn table_constraints() -> String {
    format!(
        "SELECT current_database() AS constraint_catalog, n.nspname AS constraint_schema, \
         con.conname AS constraint_name, current_database() AS table_catalog, \
         n.nspname AS table_schema, c.relname AS table_name, \
         {} AS constraint_type, 'NO' AS is_deferrable, 'NO' AS initially_deferred, \
         'YES' AS enforced, \
         CASE WHEN con.contype IN ('p', 'u') THEN 'YES' END AS nulls_distinct \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class c ON con.conrelid = c.oid \
         JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
         WHERE con.contype IN ('p', 'u', 'f', 'c') AND c.relkind IN ('r', 'p')",
        constraint_kind()
    )
}

/// Each key column with its position in the key.
fn key_column_usage() -> String {
    "SELECT current_database() AS constraint_catalog, n.nspname AS constraint_schema, \
     k.conname AS constraint_name, current_database() AS table_catalog, \
     n.nspname AS table_schema, c.relname AS table_name, a.attname AS column_name, \
     CAST(k.ordinal AS INT) AS ordinal_position, \
     CAST(NULL AS INT) AS position_in_unique_constraint \
     FROM (SELECT con.conname, con.conrelid, unnest(con.conkey) AS attnum, \
       unnest(range(1, CAST(array_length(con.conkey, 1) AS BIGINT) + 1)) AS ordinal \
       FROM pg_catalog.pg_constraint con WHERE con.contype IN ('p', 'u', 'f')) k \
     JOIN pg_catalog.pg_class c ON k.conrelid = c.oid \
     JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.attnum \
     WHERE c.relkind IN ('r', 'p')"
        .to_string()
}

/// Registers the schema in `context`'s database `database`.
pub async fn register(context: &SessionContext, database: &str) -> Result<()> {
    let catalog = context
        .catalog(database)
        .ok_or_else(|| WeirError::internal("the database catalog is missing"))?;
    let schema = Arc::new(MemorySchemaProvider::new());
    // Registered first, so pg_namespace (read when planning) lists it.
    catalog.register_schema(SCHEMA_NAME, schema.clone())?;
    let state = context.state();
    let definitions = [
        ("schemata", schemata()),
        ("tables", tables()),
        ("views", views()),
        ("columns", columns()),
        ("table_constraints", table_constraints()),
        ("key_column_usage", key_column_usage()),
    ];
    for (name, sql) in definitions {
        let plan = state.create_logical_plan(&sql).await.map_err(|error| {
            WeirError::internal(format!("cannot plan information_schema.{name}: {error}"))
        })?;
        let view = ViewTable::new(plan, Some(sql));
        schema.register_table(name.to_string(), Arc::new(view))?;
    }
    // pg_catalog.pg_indexes, which the crate does not have (pgAdmin,
    // DBeaver and ORMs' schema readers list indexes with it).
    let sql = indexes();
    let plan = state
        .create_logical_plan(&sql)
        .await
        .map_err(|error| WeirError::internal(format!("cannot plan pg_indexes: {error}")))?;
    let pg_catalog = catalog
        .schema("pg_catalog")
        .ok_or_else(|| WeirError::internal("pg_catalog is missing"))?;
    pg_catalog.register_table(
        "pg_indexes".to_string(),
        Arc::new(ViewTable::new(plan, Some(sql))),
    )?;
    Ok(())
}

fn indexes() -> String {
    "SELECT n.nspname AS schemaname, c.relname AS tablename, i.relname AS indexname, \
     CAST(NULL AS TEXT) AS tablespace, pg_get_indexdef(i.oid) AS indexdef \
     FROM pg_catalog.pg_index x \
     JOIN pg_catalog.pg_class c ON c.oid = x.indrelid \
     JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relkind IN ('r', 'm', 'p') AND i.relkind IN ('i', 'I')"
        .to_string()
}
