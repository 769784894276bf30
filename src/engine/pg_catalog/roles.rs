//! The roles (`crate::engine::roles`) as Postgres' catalogs show them:
//! `pg_roles` and `pg_user` list them (psql's `\du`, pgAdmin, DBeaver),
//! `pg_authid` names oid 10 after the bootstrap superuser, and
//! `pg_get_userbyid` names a role by oid (the Owner column of `\l`, `\dn`,
//! `\dt`). The bootstrap superuser has oid 10, as in Postgres, and owns
//! every object; the crate named every owner `postgres`.

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
use crate::catalog::{RoleDefinition, BOOTSTRAP_SUPERUSER};

/// The bootstrap superuser's oid.
pub const ROLE_OID: i64 = 10;

/// The roles, put into a session's planning state; read at each scan, so
/// a role created after the session planned its catalog queries shows.
pub struct SessionRole {
    pub roles: Arc<crate::engine::roles::Roles>,
}

fn roles(state: &dyn DataFusionSession) -> Vec<RoleDefinition> {
    match state.config().get_extension::<SessionRole>() {
        Some(role) => role.roles.all(),
        None => Vec::new(),
    }
}

/// `pg_roles`: a row per role.
pub fn role_rows(batch: RecordBatch, state: &dyn DataFusionSession) -> Result<RecordBatch> {
    let empty = RecordBatch::new_empty(batch.schema());
    let rows: Vec<Row> = roles(state)
        .into_iter()
        .map(|role| {
            let mut row: Row = [
                "rolcreaterole",
                "rolcreatedb",
                "rolreplication",
                "rolbypassrls",
            ]
            .map(|name| (name, flag(false)))
            .to_vec();
            row.extend([
                ("rolsuper", flag(role.superuser)),
                ("rolinherit", flag(true)),
                ("rolcanlogin", flag(role.login)),
                ("rolname", text(role.name)),
                ("rolconnlimit", number(-1)),
                ("rolpassword", text("********")),
                ("oid", number(role.oid)),
            ]);
            row
        })
        .collect();
    append(empty, &rows)
}

/// `pg_authid` with the role at oid 10 named as the bootstrap superuser.
pub fn named_authid(batch: RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let Ok(names_at) = schema.index_of("rolname") else {
        return Ok(batch);
    };
    let oids = int64_column(&batch, "oid")?;
    let oids = oids.as_primitive::<Int64Type>();
    let names = batch.column(names_at).as_string::<i32>();
    let renamed: StringArray = (0..batch.num_rows())
        .map(
            |row| match oids.is_valid(row) && oids.value(row) == ROLE_OID {
                true => Some(BOOTSTRAP_SUPERUSER),
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
        let rows: Vec<Row> = roles(state)
            .into_iter()
            .filter(|role| role.login)
            .map(|role| {
                let mut row: Row = ["usecreatedb", "userepl", "usebypassrls"]
                    .map(|name| (name, flag(false)))
                    .to_vec();
                row.extend([
                    ("usesuper", flag(role.superuser)),
                    ("usename", text(role.name)),
                    ("usesysid", number(role.oid)),
                    ("passwd", text("********")),
                ]);
                row
            })
            .collect();
        let batch = append(RecordBatch::new_empty(self.schema.clone()), &rows)?;
        let exec = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// `pg_get_userbyid(oid)`: the role's name, or Postgres' `unknown
/// (OID=n)` for an oid no role has.
pub fn user_by_id_function(roles: Arc<crate::engine::roles::Roles>) -> ScalarUDF {
    create_udf(
        "pg_get_userbyid",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |arguments: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(arguments)?;
            let oids = cast(&arrays[0], &DataType::Int64)?;
            let oids = oids.as_primitive::<Int64Type>();
            let known = roles.all();
            let names: StringArray = (0..oids.len())
                .map(|row| {
                    let oid = oids.is_valid(row).then(|| oids.value(row))?;
                    Some(match known.iter().find(|role| role.oid == oid) {
                        Some(role) => role.name.clone(),
                        None => format!("unknown (OID={oid})"),
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
    use crate::engine::roles::{Actor, Roles};
    use crate::state::{SledStore, StateStore};
    use datafusion::arrow::array::Int64Array;
    use datafusion::execution::SessionStateBuilder;

    fn roles_with_alice() -> (tempfile::TempDir, Arc<Roles>) {
        let directory = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
        let roles = Arc::new(Roles::open(store).unwrap());
        let statement = crate::sql::parse("CREATE USER alice").unwrap().remove(0);
        let crate::sql::Statement::Role(statement) = statement else {
            panic!("a role statement")
        };
        let actor = Actor {
            name: BOOTSTRAP_SUPERUSER.into(),
            superuser: true,
            password_encryption: crate::auth::PasswordEncryption::Scram,
        };
        roles.execute(&statement, &actor).unwrap();
        (directory, roles)
    }

    fn state_with(roles: Arc<Roles>) -> datafusion::execution::SessionState {
        let mut state = SessionStateBuilder::new().build();
        state
            .config_mut()
            .set_extension(Arc::new(SessionRole { roles }));
        state
    }

    #[test]
    fn every_role_is_a_row() {
        let (_directory, roles) = roles_with_alice();
        let schema = Arc::new(Schema::new(vec![
            Field::new("rolname", DataType::Utf8, true),
            Field::new("rolsuper", DataType::Boolean, true),
            Field::new("oid", DataType::Int32, true),
        ]));
        let rows = role_rows(RecordBatch::new_empty(schema), &state_with(roles)).unwrap();
        let names = rows.column(0).as_string::<i32>();
        let superusers = rows.column(1).as_boolean();
        assert_eq!((names.value(0), superusers.value(0)), ("alice", false));
        assert_eq!((names.value(1), superusers.value(1)), ("weir", true));
    }

    #[test]
    fn authid_names_oid_ten_after_the_bootstrap_superuser() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("oid", DataType::Int64, true),
            Field::new("rolname", DataType::Utf8, true),
        ]));
        let oids = Int64Array::from(vec![3373, 10]);
        let names = StringArray::from(vec!["pg_monitor", "postgres"]);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(oids), Arc::new(names)]).unwrap();
        let named = named_authid(batch).unwrap();
        let names = named.column(1).as_string::<i32>();
        assert_eq!((names.value(0), names.value(1)), ("pg_monitor", "weir"));
    }

    #[test]
    fn oids_name_their_roles_and_others_are_unknown() {
        let (_directory, roles) = roles_with_alice();
        let alice = roles.get("alice").unwrap().oid;
        let function = user_by_id_function(roles);
        let oids: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(10),
            Some(alice),
            Some(77),
            None,
        ]));
        let result = function
            .inner()
            .invoke_with_args(datafusion::logical_expr::ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(oids)],
                arg_fields: vec![Arc::new(Field::new("o", DataType::Int64, true))],
                number_rows: 4,
                return_field: Arc::new(Field::new("r", DataType::Utf8, true)),
                config_options: Default::default(),
            })
            .unwrap();
        let ColumnarValue::Array(names) = result else {
            panic!("an array")
        };
        let names = names.as_string::<i32>();
        assert_eq!(
            (names.value(0), names.value(1), names.value(2)),
            ("weir", "alice", "unknown (OID=77)")
        );
        assert!(names.is_null(3));
    }
}
