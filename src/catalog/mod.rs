//! Durable definitions of tables, views and sinks: what is stored for each
//! relation (its CREATE statement, kind, stream options, ids). A definition
//! is the statement's SQL text; on start the engine re-plans each one in
//! creation order. The live relations (table logs, view results, their
//! DataFusion providers) are the engine's `Relations`.

use std::collections::HashMap;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Constraints;
use datafusion::logical_expr::Expr;
use serde::{Deserialize, Serialize};

/// The database name clients connect to and the one schema it has.
pub const DATABASE_NAME: &str = "weir";
pub const SCHEMA_NAME: &str = "public";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelationKind {
    Table,
    View,
    MaterializedView,
}

impl RelationKind {
    pub fn noun(self) -> &'static str {
        match self {
            RelationKind::Table => "table",
            RelationKind::View => "view",
            RelationKind::MaterializedView => "materialized view",
        }
    }
}

/// What is stored for each relation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationDefinition {
    pub id: u64,
    pub name: String,
    pub kind: RelationKind,
    /// The CREATE statement, re-planned on start.
    pub sql: String,
    /// Relations this one reads (views only).
    pub depends_on: Vec<String>,
    /// For a table declared as a stream: its watermark and APPEND ONLY.
    #[serde(default)]
    pub stream: Option<StreamDefinition>,
    /// For a materialized view that keeps late rows: the id of their
    /// relation, `<name>_late`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_output_id: Option<u64>,
    /// The edition of weir's SQL the relation was planned with (see
    /// `SQL_EDITION`): a materialized view is re-planned the same way on
    /// start, since its stored rows and state have that plan's types.
    #[serde(default)]
    pub sql_edition: u32,
}

/// Editions of weir's SQL whose plans differ in types: 0, before issue 10;
/// 1, `sum(bigint)` is numeric (it was bigint); 2, literals typed as
/// Postgres types them (`1` integer, `0.1` numeric; they were bigint and
/// double) and a double with a numeric a double (issue 49); 3, EXCEPT ALL
/// and INTERSECT ALL count copies (they were anti / semi joins), a view's
/// query gets the Postgres rewrites a query gets (sql::postgres_rewrites:
/// to_char templates, interval texts, EXISTS as a value, ...), and a table
/// without a primary key takes UPDATE and DELETE; 4, a numeric or double
/// cast to an integer rounds (it truncated: sql::integer_casts),
/// `timestamp - timestamp` is an interval (it was a duration:
/// sql::timestamp_difference), `- INTERVAL '…'` negates every part,
/// NULLIF compares intervals on one line of time, and EXTRACT is a
/// numeric and date_part a double with the seconds' fraction
/// (sql::extract_types); 5, a USING or NATURAL join merges its join
/// columns as Postgres does (`*` lists them first, a FULL join's is the
/// COALESCE of both sides, a RIGHT join's the right side's:
/// sql::using_joins), `to_char` reads a template that is not a literal
/// row by row (sql::to_char_pattern), and a correlated subquery of a
/// plain value is one row's value (sql::single_row_subquery).
pub const SQL_EDITION: u32 = 5;

/// The relation that keeps the records a source's connector rejected.
pub fn rejected_name(source: &str) -> String {
    // `s.src` keeps its rejected records in `s.src_errors`.
    format!("{source}_errors")
}

/// The connector name of a `<source>_errors` relation: written by its
/// source's runner, never run itself.
pub const REJECTED_CONNECTOR: &str = "rejected";

/// The columns of a `<source>_errors` relation.
pub const REJECTED_COLUMNS: &str = "record TEXT, reason TEXT, position TEXT";

/// The name of a view's side output relation.
pub fn side_output_name(view: &str) -> String {
    // `s.v` keeps its late rows in `s.v_late`, in the same schema.
    format!("{view}_late")
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamDefinition {
    pub watermark: Option<WatermarkDefinition>,
    pub append_only: bool,
    /// The column stamped with each row's arrival time (PROCTIME()).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proctime: Option<String>,
    /// Rows whose event time is this far behind the watermark are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
    /// A source (`CREATE SOURCE`): the connector that writes its rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceDefinition>,
}

/// A source's connector and its options, as `CREATE SOURCE` gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceDefinition {
    pub connector: String,
    /// Every `WITH` option but the table options, names lower case.
    pub options: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode: Option<String>,
}

impl SourceDefinition {
    /// The connector reads partitions and merges their watermarks itself
    /// (each partition's largest event time less the delay, the least of
    /// them): the rows' times alone do not move the source's watermark.
    pub fn watermark_from_connector(&self) -> bool {
        self.connector.eq_ignore_ascii_case("kafka")
    }
}

/// What is stored for each sink (`CREATE SINK`): the view it ships, where
/// to, and how its changes are written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkDefinition {
    pub id: u64,
    pub name: String,
    /// The materialized view whose changes it ships.
    pub view: String,
    /// The CREATE SINK statement as written.
    pub sql: String,
    pub connector: String,
    /// Every option but `connector`, names lower case.
    pub options: std::collections::BTreeMap<String, String>,
    pub format: SinkFormat,
    /// The view's columns that key an UPSERT sink's records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_columns: Vec<String>,
    /// A PLAIN sink of a view that retracts rows writes its insertions only.
    #[serde(default)]
    pub force_append_only: bool,
}

/// How a sink writes a view's changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// Each inserted row as one record.
    Plain,
    /// Per key, the row it now has, or a deletion (the key, no value).
    Upsert,
}

/// A source's watermark after row i is max(column over rows 1..i) - delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkDefinition {
    pub column: String,
    pub delay_ms: i64,
    /// After this long without rows the watermark follows the wall clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<i64>,
    /// The column is a PROCTIME() column: the watermark is the wall clock.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub processing_time: bool,
}

/// Field metadata of a `VARCHAR(n)` / `CHAR(n)` table column: its length
/// limit in characters, and (for `CHAR(n)`) that it is blank-padded.
pub const MAX_CHARACTERS_METADATA: &str = "weir.max_characters";
pub const BLANK_PADDED_METADATA: &str = "weir.blank_padded";

/// The field metadata key naming the Postgres type a list column is sent
/// as when it is not an array: `int2vector` or `oidvector`. Clients read
/// those as space-separated text (SQLAlchemy splits `pg_index.indkey` on
/// spaces), while SQL here still subscripts and unnests them as arrays.
pub const PG_TYPE_METADATA: &str = "weir.pg_type";

/// What DataFusion's CREATE TABLE planning tells us about a new table.
pub struct TableParts {
    pub schema: SchemaRef,
    pub constraints: Constraints,
    pub column_defaults: HashMap<String, Expr>,
}

/// A schema made with CREATE SCHEMA (`public` and the system schemas are
/// built in). Its relations are known in the catalog as `schema.name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaDefinition {
    pub name: String,
    /// The role that created it (or the one AUTHORIZATION named).
    pub owner: String,
}

/// An index made with CREATE INDEX: recorded and listed (pg_index,
/// pg_indexes, psql's `\d`) so schemas written for Postgres load; queries
/// do not use it (docs/sql-reference.md, "Indexes").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDefinition {
    pub id: u64,
    /// Its catalog key: in its table's schema, like a relation's.
    pub name: String,
    /// The key of the table it indexes.
    pub table: String,
    /// The indexed columns, in order.
    pub columns: Vec<String>,
    /// The access method as written (`btree` unless USING said otherwise).
    pub method: String,
}

/// The catalog key of relation `name` in `schema`: bare in `public` (so
/// catalogs stored before schemas existed keep their keys), `schema.name`
/// elsewhere. Schema names never contain a dot, so the first dot of a key
/// whose prefix is a schema ends the schema.
pub fn relation_key(schema: &str, name: &str) -> String {
    if schema == SCHEMA_NAME {
        name.to_string()
    } else {
        format!("{schema}.{name}")
    }
}

/// The catalog key a DataFusion reference spells (the database part
/// dropped). Whether its schema exists is found when the key is looked
/// up: a key of a schema that does not exist names nothing.
pub fn reference_key(reference: &datafusion::common::TableReference) -> String {
    match reference.schema() {
        Some(schema) => relation_key(schema, reference.table()),
        None => reference.table().to_string(),
    }
}

/// The superuser every database has; `--superuser-password` sets its
/// password, and clients connect as it by default (`-U weir`).
pub const BOOTSTRAP_SUPERUSER: &str = "weir";

/// A role: who may log in, how, and with what rights. Roles live beside
/// the relations, not in the one schema, as in Postgres.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleDefinition {
    pub name: String,
    /// As `pg_roles.oid`: 10 for the bootstrap superuser, as in Postgres.
    pub oid: i64,
    pub superuser: bool,
    /// Whether the role may log in (CREATE USER: yes; CREATE ROLE: no).
    pub login: bool,
    /// The stored secret of its password (`SCRAM-SHA-256$…` or `md5…`,
    /// never the password); none, the role cannot log in with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// What may be granted on a relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
}

impl Privilege {
    pub const ALL: [Privilege; 4] = [
        Privilege::Select,
        Privilege::Insert,
        Privilege::Update,
        Privilege::Delete,
    ];

    pub fn keyword(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
        }
    }
}
