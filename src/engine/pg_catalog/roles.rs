//! Roles as weir has them until it has users (issue 16): exactly one, the
//! name the session logged in as, a superuser owning every object. It has
//! oid 10, the bootstrap superuser's oid in Postgres and the owner the
//! crate's catalogs give their objects. `pg_roles` and `pg_user` list it
//! (psql's `\du`, pgAdmin, DBeaver), `pg_authid` names it, and
//! `pg_get_userbyid(10)` returns it (the Owner column of `\l`, `\dn`,
//! `\dt`); the crate listed no role and named every owner `postgres`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session as DataFusionSession, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::{create_udf, ColumnarValue, Expr, ScalarUDF, Volatility};
use datafusion::physical_plan::ExecutionPlan;

use super::context::int64_column;
use super::rows::{append, flag, number, text, Row};

/// The one role's oid.
pub const ROLE_OID: i64 = 10;

/// The name a session without a login (in-process) acts as.
const UNNAMED_ROLE: &str = "weir";

/// The role a session acts as, put into its planning state.
pub struct SessionRole(pub String);

fn role_name(state: &dyn DataFusionSession) -> String {
    match state.config().get_extension::<SessionRole>() {
        Some(role) => role.0.clone(),
        None => UNNAMED_ROLE.to_string(),
    }
}

/// `pg_roles` with the session's role as its only row.
pub fn role_rows(batch: RecordBatch, state: &dyn DataFusionSession) -> Result<RecordBatch> {
    let empty = RecordBatch::new_empty(batch.schema());
    let privileges = [
        "rolsuper",
        "rolinherit",
        "rolcreaterole",
        "rolcreatedb",
        "rolcanlogin",
        "rolreplication",
        "rolbypassrls",
    ];
    let mut row: Row = privileges.map(|name| (name, flag(true))).to_vec();
    row.extend([
        ("rolname", text(role_name(state))),
        ("rolconnlimit", number(-1)),
        ("rolpassword", text("********")),
        ("oid", number(ROLE_OID)),
    ]);
    append(empty, &[row])
}

/// `pg_authid` with the role at oid 10 named as the session's.
pub fn named_authid(batch: RecordBatch, state: &dyn DataFusionSession) -> Result<RecordBatch> {
    let schema = batch.schema();
    let Ok(names_at) = schema.index_of("rolname") else {
        return Ok(batch);
    };
    let oids = int64_column(&batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let names = batch.column(names_at).as_string::<i32>();
    let role = role_name(state);
    let renamed: StringArray = (0..batch.num_rows())
        .map(
            |row| match oids.is_valid(row) && oids.value(row) == ROLE_OID {
                true => Some(role.as_str()),
                false => names.is_valid(row).then(|| names.value(row)),
            },
        )
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[names_at] = cast(&renamed, schema.field(names_at).data_type())?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `pg_user`, the login roles as Postgres' older view shows them (the
/// crate has no such relation).
#[derive(Debug)]
pub struct UserTable {
    schema: SchemaRef,
}

pub const USER_TABLE_NAME: &str = "pg_user";

impl UserTable {
    pub fn new() -> Self {
        let text_list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        let time = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let fields = vec![
            Field::new("usename", DataType::Utf8, false),
            Field::new("usesysid", DataType::Int32, false),
            Field::new("usecreatedb", DataType::Boolean, false),
            Field::new("usesuper", DataType::Boolean, false),
            Field::new("userepl", DataType::Boolean, false),
            Field::new("usebypassrls", DataType::Boolean, false),
            Field::new("passwd", DataType::Utf8, true),
            Field::new("valuntil", time, true),
            Field::new("useconfig", text_list, true),
        ];
        UserTable {
            schema: Arc::new(Schema::new(fields)),
        }
    }
}

#[async_trait]
impl TableProvider for UserTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn DataFusionSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let privileges = ["usecreatedb", "usesuper", "userepl", "usebypassrls"];
        let mut row: Row = privileges.map(|name| (name, flag(true))).to_vec();
        row.extend([
            ("usename", text(role_name(state))),
            ("usesysid", number(ROLE_OID)),
            ("passwd", text("********")),
        ]);
        let batch = append(RecordBatch::new_empty(self.schema.clone()), &[row])?;
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// `pg_get_userbyid(oid)` for a session logged in as `role`: its name for
/// oid 10, Postgres' `unknown (OID=n)` for any other.
pub fn user_by_id_function(role: &str) -> ScalarUDF {
    let role = role.to_string();
    create_udf(
        "pg_get_userbyid",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let oids = cast(&arrays[0], &DataType::Int64)?;
            let oids = oids.as_primitive::<Int64Type>();
            let names: StringArray = (0..oids.len())
                .map(|row| {
                    let oid = oids.is_valid(row).then(|| oids.value(row))?;
                    Some(match oid == ROLE_OID {
                        true => role.clone(),
                        false => format!("unknown (OID={oid})"),
                    })
                })
                .collect();
            let array: ArrayRef = Arc::new(names);
            Ok(ColumnarValue::Array(array))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::execution::SessionStateBuilder;

    fn state_as(role: &str) -> datafusion::execution::SessionState {
        let mut state = SessionStateBuilder::new().build();
        let role = SessionRole(role.to_string());
        state.config_mut().set_extension(Arc::new(role));
        state
    }

    #[test]
    fn the_session_role_is_the_one_row() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("rolname", DataType::Utf8, true),
            Field::new("rolsuper", DataType::Boolean, true),
            Field::new("oid", DataType::Int32, true),
        ]));
        let rows = role_rows(RecordBatch::new_empty(schema), &state_as("alice")).unwrap();
        assert_eq!(rows.num_rows(), 1);
        assert_eq!(rows.column(0).as_string::<i32>().value(0), "alice");
        assert!(rows.column(1).as_boolean().value(0));
    }

    #[test]
    fn authid_names_oid_ten_after_the_session() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("oid", DataType::Int64, true),
            Field::new("rolname", DataType::Utf8, true),
        ]));
        let oids = Int64Array::from(vec![3373, 10]);
        let names = StringArray::from(vec!["pg_monitor", "postgres"]);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(oids), Arc::new(names)]).unwrap();
        let named = named_authid(batch, &state_as("bob")).unwrap();
        let names = named.column(1).as_string::<i32>();
        assert_eq!((names.value(0), names.value(1)), ("pg_monitor", "bob"));
    }

    #[test]
    fn other_oids_are_unknown_users() {
        let function = user_by_id_function("carol");
        let oids: ArrayRef = Arc::new(Int64Array::from(vec![Some(10), Some(77), None]));
        let result = function
            .inner()
            .invoke_with_args(datafusion::logical_expr::ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(oids)],
                arg_fields: vec![Arc::new(Field::new("o", DataType::Int64, true))],
                number_rows: 3,
                return_field: Arc::new(Field::new("r", DataType::Utf8, true)),
                config_options: Default::default(),
            })
            .unwrap();
        let ColumnarValue::Array(names) = result else {
            panic!("an array")
        };
        let names = names.as_string::<i32>();
        assert_eq!(
            (names.value(0), names.value(1)),
            ("carol", "unknown (OID=77)")
        );
        assert!(names.is_null(2));
    }
}
