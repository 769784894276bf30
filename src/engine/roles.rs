//! Roles: who may log in and with what rights. Each is stored under
//! `catalog/role/<name>` and kept in memory, since every login reads it.
//! The bootstrap superuser `weir` always exists.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::auth::{PasswordEncryption, PasswordSecret};
use crate::catalog::{RoleDefinition, BOOTSTRAP_SUPERUSER};
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::role_ddl::{RoleOptions, RoleStatement};
use crate::state::{key, StateStore, WriteBatch};

use super::{CommandDone, Notice};

/// Who runs a statement, for the checks of what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub name: String,
    pub superuser: bool,
    /// How the session stores new passwords (`password_encryption`).
    pub password_encryption: PasswordEncryption,
}

pub struct Roles {
    store: Arc<dyn StateStore>,
    roles: RwLock<BTreeMap<String, RoleDefinition>>,
}

fn role_key(name: &str) -> Vec<u8> {
    key(&[b"catalog", b"role", name.as_bytes()])
}

impl Roles {
    /// Reads the stored roles; a new database gets its bootstrap superuser.
    pub fn open(store: Arc<dyn StateStore>) -> Result<Roles> {
        let mut roles = BTreeMap::new();
        for (stored_key, value) in store.scan_prefix(&key(&[b"catalog", b"role", b""]))? {
            let role: RoleDefinition = super::relations::decode_catalog_entry(&stored_key, &value)?;
            roles.insert(role.name.clone(), role);
        }
        let roles = Roles {
            store,
            roles: RwLock::new(roles),
        };
        if roles.get(BOOTSTRAP_SUPERUSER).is_none() {
            roles.save(bootstrap_superuser(None))?;
        }
        Ok(roles)
    }

    pub fn get(&self, name: &str) -> Option<RoleDefinition> {
        self.read().get(name).cloned()
    }

    /// Every role, by name.
    pub fn all(&self) -> Vec<RoleDefinition> {
        self.read().values().cloned().collect()
    }

    /// Whether any role can log in with a password.
    pub fn any_password(&self) -> bool {
        self.read()
            .values()
            .any(|role| role.login && role.password.is_some())
    }

    /// Sets the bootstrap superuser's password (`--superuser-password`),
    /// unless it is already that password.
    pub fn set_superuser_password(&self, password: &str) -> Result<()> {
        let current = self.get(BOOTSTRAP_SUPERUSER);
        let unchanged = current
            .as_ref()
            .and_then(|role| role.password.as_deref())
            .and_then(PasswordSecret::parse)
            .is_some_and(|secret| secret.matches_password(BOOTSTRAP_SUPERUSER, password));
        if unchanged {
            return Ok(());
        }
        let secret = stored_secret(BOOTSTRAP_SUPERUSER, password, PasswordEncryption::Scram)?;
        self.save(bootstrap_superuser(Some(secret)))
    }

    /// Runs CREATE, ALTER or DROP ROLE for `actor`.
    pub fn execute(&self, statement: &RoleStatement, actor: &Actor) -> Result<CommandDone> {
        let done = CommandDone::new(statement.tag());
        match statement {
            RoleStatement::Create {
                name,
                if_not_exists,
                options,
            } => {
                require_superuser(actor, "create roles")?;
                if self.get(name).is_some() {
                    if *if_not_exists {
                        let notice = format!("role \"{name}\" already exists, skipping");
                        return Ok(done.with_notice(Notice::info(&notice)));
                    }
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_OBJECT,
                        format!("role \"{name}\" already exists"),
                    ));
                }
                check_name(name)?;
                let mut role = RoleDefinition {
                    name: name.clone(),
                    oid: self.next_oid(),
                    superuser: false,
                    login: false,
                    password: None,
                };
                let notice = apply(&mut role, options, actor.password_encryption)?;
                self.save(role)?;
                Ok(with_optional_notice(done, notice))
            }
            RoleStatement::Alter { name, options } => {
                let mut role = self.get(name).ok_or_else(|| undefined_role(name))?;
                check_alter_allowed(&role, options, actor)?;
                let notice = apply(&mut role, options, actor.password_encryption)?;
                self.save(role)?;
                Ok(with_optional_notice(done, notice))
            }
            RoleStatement::Drop { names, if_exists } => {
                require_superuser(actor, "drop roles")?;
                let mut done = done;
                for name in names {
                    done = self.drop_one(name, *if_exists, actor, done)?;
                }
                Ok(done)
            }
        }
    }

    fn drop_one(
        &self,
        name: &str,
        if_exists: bool,
        actor: &Actor,
        done: CommandDone,
    ) -> Result<CommandDone> {
        if self.get(name).is_none() {
            if if_exists {
                let notice = format!("role \"{name}\" does not exist, skipping");
                return Ok(done.with_notice(Notice::info(&notice)));
            }
            return Err(undefined_role(name));
        }
        if name == BOOTSTRAP_SUPERUSER {
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot drop role {name} because it is required by the database system"),
            ));
        }
        if name == actor.name {
            return Err(
                WeirError::new(sqlstate::OBJECT_IN_USE, "current user cannot be dropped")
                    .with_hint("Connect as another superuser to drop this role."),
            );
        }
        let mut batch = WriteBatch::new();
        batch.delete(role_key(name));
        self.store.commit(batch)?;
        self.write().remove(name);
        Ok(done)
    }

    /// Stores `role` durably, then shows it to logins.
    fn save(&self, role: RoleDefinition) -> Result<()> {
        let encoded = serde_json::to_vec(&role)
            .map_err(|error| WeirError::internal(format!("cannot encode a role: {error}")))?;
        let mut batch = WriteBatch::new();
        batch.put(role_key(&role.name), encoded);
        self.store.commit(batch)?;
        self.write().insert(role.name.clone(), role);
        Ok(())
    }

    /// A new role's oid: past every role's, from FIRST_ROLE_OID on.
    fn next_oid(&self) -> i64 {
        let largest = self.read().values().map(|role| role.oid).max();
        largest.unwrap_or(0).max(FIRST_ROLE_OID - 1) + 1
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, RoleDefinition>> {
        self.roles.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, RoleDefinition>> {
        self.roles.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Far above relations' oids (from 16384, one per relation) and below
/// keys' (`pg_catalog::context`).
const FIRST_ROLE_OID: i64 = 900_000_000;

fn bootstrap_superuser(password: Option<String>) -> RoleDefinition {
    RoleDefinition {
        name: BOOTSTRAP_SUPERUSER.to_string(),
        oid: crate::engine::pg_catalog::ROLE_OID,
        superuser: true,
        login: true,
        password,
    }
}

/// Applies `options` to `role`; returns a notice for an empty password,
/// which Postgres also treats as none.
fn apply(
    role: &mut RoleDefinition,
    options: &RoleOptions,
    encryption: PasswordEncryption,
) -> Result<Option<String>> {
    if let Some(superuser) = options.superuser {
        role.superuser = superuser;
    }
    if let Some(login) = options.login {
        role.login = login;
    }
    match &options.password {
        None => Ok(None),
        Some(Some(password)) if !password.is_empty() => {
            role.password = Some(stored_secret(&role.name, password, encryption)?);
            Ok(None)
        }
        Some(_) => {
            let emptied = matches!(&options.password, Some(Some(_)));
            role.password = None;
            Ok(emptied
                .then(|| "empty string is not a valid password, clearing password".to_string()))
        }
    }
}

fn stored_secret(user: &str, password: &str, encryption: PasswordEncryption) -> Result<String> {
    PasswordSecret::from_statement(user, password, encryption)
        .map(|secret| secret.to_stored())
        .ok_or_else(|| WeirError::internal("the system has no random source for a password salt"))
}

/// A superuser may change anything but the bootstrap superuser's rights;
/// any role may change its own password, as in Postgres.
fn check_alter_allowed(role: &RoleDefinition, options: &RoleOptions, actor: &Actor) -> Result<()> {
    let own_password_only =
        role.name == actor.name && options.superuser.is_none() && options.login.is_none();
    if !actor.superuser && !own_password_only {
        return Err(permission_denied("alter role", &role.name));
    }
    let demoted = options.superuser == Some(false) || options.login == Some(false);
    if role.name == BOOTSTRAP_SUPERUSER && demoted {
        return Err(WeirError::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("role {BOOTSTRAP_SUPERUSER} must stay a superuser that can log in"),
        ));
    }
    Ok(())
}

fn require_superuser(actor: &Actor, what: &str) -> Result<()> {
    if actor.superuser {
        return Ok(());
    }
    Err(WeirError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!("permission denied to {what}"),
    )
    .with_hint("Only superusers may do this; connect as one (e.g. weir)."))
}

fn permission_denied(what: &str, name: &str) -> WeirError {
    WeirError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!("permission denied to {what} \"{name}\""),
    )
    .with_hint("A role may change its own password; anything else needs a superuser.")
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "public" || name.starts_with("pg_") || name.starts_with("weir_") {
        return Err(WeirError::new(
            sqlstate::RESERVED_NAME,
            format!("role name \"{name}\" is reserved"),
        )
        .with_hint("Names public, pg_… and weir_… are reserved; pick another."));
    }
    Ok(())
}

fn undefined_role(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("role \"{name}\" does not exist"),
    )
    .with_hint("SELECT rolname FROM pg_roles lists the roles.")
}

fn with_optional_notice(done: CommandDone, notice: Option<String>) -> CommandDone {
    match notice {
        Some(notice) => done.with_notice(Notice::warning(&notice)),
        None => done,
    }
}
