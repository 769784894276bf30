//! `has_table_privilege`, `has_any_column_privilege`,
//! `has_schema_privilege` and `has_database_privilege`, answered from
//! weir's owners and grants. datafusion-pg-catalog answers true to every
//! question, so a BI tool listing what a role may read listed everything.
//! Registered in the session's own planning state: the forms without a
//! role ask for the session's user.

use std::sync::{Arc, Weak};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::catalog::Privilege;
use crate::engine::Engine;
use crate::error::{sqlstate, WeirError};

/// What a function asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Object {
    Table,
    AnyColumn,
    Schema,
    Database,
}

impl Object {
    fn function_name(self) -> &'static str {
        match self {
            Object::Table => "has_table_privilege",
            Object::AnyColumn => "has_any_column_privilege",
            Object::Schema => "has_schema_privilege",
            Object::Database => "has_database_privilege",
        }
    }
}

pub fn functions(user: &str, engine: &Arc<Engine>) -> Vec<ScalarUDF> {
    [
        Object::Table,
        Object::AnyColumn,
        Object::Schema,
        Object::Database,
    ]
    .into_iter()
    .map(|object| {
        ScalarUDF::new_from_impl(HasPrivilege {
            object,
            user: user.to_string(),
            engine: Arc::downgrade(engine),
            signature: Signature::variadic_any(Volatility::Stable),
        })
    })
    .collect()
}

#[derive(Debug)]
struct HasPrivilege {
    object: Object,
    user: String,
    engine: Weak<Engine>,
    signature: Signature,
}

impl PartialEq for HasPrivilege {
    fn eq(&self, other: &Self) -> bool {
        self.object == other.object && self.user == other.user
    }
}

impl Eq for HasPrivilege {}

impl std::hash::Hash for HasPrivilege {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.object, &self.user).hash(state);
    }
}

/// A role, relation or schema named by text or by oid.
enum Named<'a> {
    Text(&'a str),
    Oid(i64),
}

fn error(error: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

impl HasPrivilege {
    /// Whether `role` has any of `privileges` (a comma-separated list) on
    /// `object`; None for an oid that names nothing (as Postgres).
    fn answer(
        &self,
        engine: &Engine,
        role: Named,
        object: Named,
        privileges: &str,
    ) -> Result<Option<bool>> {
        let role = match role {
            Named::Text(name) => engine.roles().get(name).map(|role| role.name),
            Named::Oid(oid) => {
                let roles = engine.roles().all();
                roles
                    .into_iter()
                    .find(|role| role.oid == oid)
                    .map(|r| r.name)
            }
        };
        let Some(role) = role else {
            return Ok(None);
        };
        let superuser = engine.roles().get(&role).is_some_and(|r| r.superuser);
        let wanted = privilege_list(privileges, self.object)?;
        match self.object {
            Object::Table | Object::AnyColumn => {
                let Some(relation) = relation(engine, object)? else {
                    return Ok(None);
                };
                Ok(Some(wanted.iter().any(|wanted| {
                    superuser || table_allows(engine, relation, &role, *wanted)
                })))
            }
            Object::Schema => {
                let schema = schema(object);
                Ok(Some(wanted.iter().any(|wanted| match wanted {
                    Wanted::Usage => true,
                    Wanted::Create => {
                        superuser || (schema == "public" && engine.privileges().may_create(&role))
                    }
                    _ => false,
                })))
            }
            Object::Database => Ok(Some(true)),
        }
    }
}

/// A relation by name or oid: Some(Some(id)) for one of weir's,
/// Some(None) for a system relation, None for an oid nobody has.
fn relation(engine: &Engine, object: Named) -> Result<Option<Option<u64>>> {
    let name = match object {
        Named::Text(text) => match qualified_name(text).as_slice() {
            [name] => name.clone(),
            [schema, name] if schema == "public" => name.clone(),
            [schema, name] => format!("{schema}.{name}"),
            _ => return Err(error(WeirError::undefined_table(text))),
        },
        Named::Oid(oid) => {
            let names = engine.oid_names().lock().unwrap_or_else(|p| p.into_inner());
            match names.get(&oid) {
                Some(name) => name.clone(),
                None => return Ok(None),
            }
        }
    };
    if let Some(definition) = engine.relations().get(&name) {
        return Ok(Some(Some(definition.id)));
    }
    let system = ["pg_catalog.", "information_schema.", "weir_catalog."];
    // An unqualified pg_ name is found in pg_catalog, as on the search path.
    let catalog = !name.contains('.') && name.starts_with("pg_");
    if catalog || system.iter().any(|schema| name.starts_with(schema)) {
        return Ok(Some(None));
    }
    Err(error(WeirError::undefined_table(&name)))
}

/// A schema's name. By oid (pg_namespace's oids are the crate's) it is
/// taken for a system schema: every schema weir shows is readable, and
/// only `public` takes CREATE.
fn schema(object: Named) -> String {
    match object {
        Named::Text(text) => unquoted(text),
        Named::Oid(_) => "pg_catalog".to_string(),
    }
}

/// `schema."Table"` as its identifiers, `["schema", "Table"]`.
fn qualified_name(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut quoted = false;
    let mut characters = text.trim().chars().peekable();
    while let Some(character) = characters.next() {
        match (character, quoted) {
            ('"', true) if characters.peek() == Some(&'"') => {
                characters.next();
                part.push('"');
            }
            ('"', _) => quoted = !quoted,
            ('.', false) => parts.push(std::mem::take(&mut part)),
            (character, true) => part.push(character),
            (character, false) => part.push(character.to_ascii_lowercase()),
        }
    }
    parts.push(part);
    parts
}

/// `"Name"` as `Name`, `Name` as `name` (Postgres's identifier rules).
fn unquoted(text: &str) -> String {
    let text = text.trim();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => text.to_ascii_lowercase(),
    }
}

/// A privilege asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Granted(Privilege),
    /// TRUNCATE, REFERENCES, TRIGGER, MAINTAIN, or anything WITH GRANT
    /// OPTION: weir grants none of them, so only an owner has them.
    OwnerOnly,
    Usage,
    Create,
}

fn table_allows(engine: &Engine, relation: Option<u64>, role: &str, wanted: Wanted) -> bool {
    let privileges = engine.privileges();
    match (relation, wanted) {
        // The system catalogs: readable by everyone.
        (None, Wanted::Granted(Privilege::Select)) => true,
        (None, _) => false,
        (Some(id), Wanted::Granted(privilege)) => privileges.allows(id, role, privilege),
        (Some(id), Wanted::OwnerOnly) => privileges.owner(id) == role,
        (Some(_), _) => false,
    }
}

/// `'SELECT, insert WITH GRANT OPTION'` as what it asks for; 22023 for a
/// privilege the object does not have.
fn privilege_list(text: &str, object: Object) -> Result<Vec<Wanted>> {
    text.split(',')
        .map(|item| {
            let item = item.trim().to_ascii_uppercase();
            let (name, grant_option) = match item.strip_suffix("WITH GRANT OPTION") {
                Some(name) => (name.trim_end(), true),
                None => (item.as_str(), false),
            };
            let table = matches!(object, Object::Table | Object::AnyColumn);
            let wanted = match name {
                "SELECT" if table => Wanted::Granted(Privilege::Select),
                "INSERT" if table => Wanted::Granted(Privilege::Insert),
                "UPDATE" if table => Wanted::Granted(Privilege::Update),
                "DELETE" if object == Object::Table => Wanted::Granted(Privilege::Delete),
                "TRUNCATE" | "TRIGGER" | "MAINTAIN" if object == Object::Table => {
                    Wanted::OwnerOnly
                }
                "REFERENCES" if table => Wanted::OwnerOnly,
                "USAGE" if object == Object::Schema => Wanted::Usage,
                "CREATE" if object == Object::Schema => Wanted::Create,
                "CREATE" | "CONNECT" | "TEMPORARY" | "TEMP" if object == Object::Database => {
                    Wanted::Usage
                }
                _ => {
                    return Err(error(
                        WeirError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("unrecognized privilege type: \"{}\"", item.trim()),
                        )
                        .with_hint("Ask about SELECT, INSERT, UPDATE or DELETE of a table, USAGE or CREATE of a schema."),
                    ))
                }
            };
            Ok(match (wanted, grant_option) {
                (Wanted::Granted(_), true) => Wanted::OwnerOnly,
                (wanted, _) => wanted,
            })
        })
        .collect()
}

/// An argument as names or oids, row by row.
enum Argument {
    Text(ArrayRef),
    Oid(ArrayRef),
}

impl Argument {
    fn of(array: &ArrayRef) -> Result<Argument> {
        Ok(match array.data_type() {
            data_type if data_type.is_integer() => Argument::Oid(cast(array, &DataType::Int64)?),
            _ => Argument::Text(cast(array, &DataType::Utf8)?),
        })
    }

    fn at(&self, row: usize) -> Option<Named<'_>> {
        match self {
            Argument::Text(array) => {
                let texts = array.as_string::<i32>();
                texts.is_valid(row).then(|| Named::Text(texts.value(row)))
            }
            Argument::Oid(array) => {
                let oids = array.as_primitive::<Int64Type>();
                oids.is_valid(row).then(|| Named::Oid(oids.value(row)))
            }
        }
    }
}

impl ScalarUDFImpl for HasPrivilege {
    fn name(&self) -> &str {
        self.object.function_name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let engine = self
            .engine
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the server is stopping".to_string()))?;
        let (role, object, privileges) = match arrays.as_slice() {
            [object, privileges] => (None, object, privileges),
            [role, object, privileges] => (Some(Argument::of(role)?), object, privileges),
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "{} takes [a role,] an object and a privilege",
                    self.name()
                )))
            }
        };
        let object = Argument::of(object)?;
        let privileges = cast(privileges, &DataType::Utf8)?;
        let privileges = privileges.as_string::<i32>();
        let answers = (0..args.number_rows)
            .map(|row| {
                let role = match &role {
                    Some(role) => role.at(row),
                    None => Some(Named::Text(&self.user)),
                };
                let (Some(role), Some(object)) = (role, object.at(row)) else {
                    return Ok(None);
                };
                if privileges.is_null(row) {
                    return Ok(None);
                }
                self.answer(&engine, role, object, privileges.value(row))
            })
            .collect::<Result<BooleanArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(answers) as ArrayRef))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privilege_lists_read_like_postgres() {
        let wanted = privilege_list("select, INSERT with grant option", Object::Table).unwrap();
        assert_eq!(
            wanted,
            vec![Wanted::Granted(Privilege::Select), Wanted::OwnerOnly]
        );
        assert_eq!(
            privilege_list("usage", Object::Schema).unwrap(),
            vec![Wanted::Usage]
        );
        for (bad, object) in [("FLY", Object::Table), ("SELECT", Object::Schema)] {
            let DataFusionError::External(error) = privilege_list(bad, object).unwrap_err() else {
                panic!("not weir's error");
            };
            assert!(error.to_string().contains("unrecognized privilege type"));
        }
        assert_eq!(unquoted("\"Mixed\"\"Case\""), "Mixed\"Case");
        assert_eq!(
            qualified_name("\"public\".\"Odd.\"\"Name\"\"\""),
            vec!["public", "Odd.\"Name\""]
        );
        assert_eq!(qualified_name("Public.T"), vec!["public", "t"]);
        assert_eq!(unquoted(" Plain "), "plain");
    }
}
