//! Who may read, write and drop each relation: its owner (the role that
//! created it; the bootstrap superuser for anything older, or created by
//! a name that is not a role) and what was granted on it, to roles or to
//! PUBLIC; and who may create relations (`GRANT CREATE ON SCHEMA public`).
//! Superusers pass every check. Stored under `catalog/acl/<relation id>`
//! (ids are never reused, so a new relation of a dropped one's name starts
//! with no grants) and `catalog/create/<role>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

pub use crate::catalog::Privilege;
use crate::catalog::BOOTSTRAP_SUPERUSER;
use crate::error::Result;
use crate::state::{key, StateStore, WriteBatch};

/// The grantee name that stands for every role.
pub const PUBLIC: &str = "public";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Acl {
    owner: String,
    #[serde(default)]
    grants: BTreeMap<String, BTreeSet<Privilege>>,
}

pub struct Privileges {
    store: Arc<dyn StateStore>,
    acls: RwLock<HashMap<u64, Acl>>,
    creators: RwLock<BTreeSet<String>>,
}

fn acl_key(id: u64) -> Vec<u8> {
    key(&[b"catalog", b"acl", &id.to_be_bytes()])
}

/// The letters of `aclitem`, in Postgres's order (`arwd`: INSERT,
/// SELECT, UPDATE, DELETE).
fn acl_letters(privileges: &BTreeSet<Privilege>) -> String {
    [
        (Privilege::Insert, 'a'),
        (Privilege::Select, 'r'),
        (Privilege::Update, 'w'),
        (Privilege::Delete, 'd'),
    ]
    .iter()
    .filter(|(privilege, _)| privileges.contains(privilege))
    .map(|(_, letter)| *letter)
    .collect()
}

/// A role name in an `aclitem`: double-quoted unless plain.
fn acl_name(role: &str) -> String {
    let plain = !role.is_empty()
        && role
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match plain {
        true => role.to_string(),
        false => format!("\"{}\"", role.replace('"', "\"\"")),
    }
}

fn creator_key(role: &str) -> Vec<u8> {
    key(&[b"catalog", b"create", role.as_bytes()])
}

impl Privileges {
    pub fn open(store: Arc<dyn StateStore>) -> Result<Privileges> {
        let mut acls = HashMap::new();
        for (stored_key, value) in store.scan_prefix(&key(&[b"catalog", b"acl", b""]))? {
            let Some(id) = stored_key
                .rchunks(8)
                .next()
                .and_then(|tail| tail.try_into().ok())
            else {
                continue;
            };
            let acl: Acl = super::relations::decode_catalog_entry(&stored_key, &value)?;
            acls.insert(u64::from_be_bytes(id), acl);
        }
        let prefix = key(&[b"catalog", b"create", b""]);
        let creators = store
            .scan_prefix(&prefix)?
            .into_iter()
            .map(|(stored_key, _)| {
                String::from_utf8_lossy(&stored_key[prefix.len()..]).into_owned()
            })
            .collect();
        Ok(Privileges {
            store,
            acls: RwLock::new(acls),
            creators: RwLock::new(creators),
        })
    }

    /// The owner of relation `id`.
    pub fn owner(&self, id: u64) -> String {
        self.read()
            .get(&id)
            .map_or(BOOTSTRAP_SUPERUSER.to_string(), |acl| acl.owner.clone())
    }

    /// Whether `role` (not a superuser) has `privilege` on relation `id`:
    /// it owns it, or it or PUBLIC was granted it.
    pub fn allows(&self, id: u64, role: &str, privilege: Privilege) -> bool {
        let acls = self.read();
        let Some(acl) = acls.get(&id) else {
            return role == BOOTSTRAP_SUPERUSER;
        };
        acl.owner == role
            || [role, PUBLIC].iter().any(|grantee| {
                acl.grants
                    .get(*grantee)
                    .is_some_and(|granted| granted.contains(&privilege))
            })
    }

    /// Relation `id`'s privileges as Postgres writes `relacl` items: the
    /// owner's (`alice=arwd/alice`), the roles' by name, PUBLIC's last
    /// (`=r/alice`), each granted by the owner; None while nothing is
    /// granted on it — Postgres's NULL, the owner's default privileges.
    pub fn acl_items(&self, id: u64) -> Option<Vec<String>> {
        let acls = self.read();
        let acl = acls.get(&id).filter(|acl| !acl.grants.is_empty())?;
        let owner = acl_name(&acl.owner);
        let all: BTreeSet<Privilege> = Privilege::ALL.into_iter().collect();
        let mut items = vec![format!("{owner}={}/{owner}", acl_letters(&all))];
        // Roles by name, then PUBLIC (weir does not keep the grants' order).
        let roles = acl.grants.iter().filter(|(grantee, _)| *grantee != PUBLIC);
        for (grantee, privileges) in roles {
            let grantee = acl_name(grantee);
            items.push(format!("{grantee}={}/{owner}", acl_letters(privileges)));
        }
        if let Some(privileges) = acl.grants.get(PUBLIC) {
            items.push(format!("={}/{owner}", acl_letters(privileges)));
        }
        Some(items)
    }

    /// Records `owner` as the owner of each of `ids`, durably.
    pub fn set_owner(&self, ids: &[u64], owner: &str) -> Result<()> {
        self.change(ids, |acl| acl.owner = owner.to_string())
    }

    /// Adds (`grant`) or removes `privileges` of `grantee` on each of `ids`.
    pub fn change_grants(
        &self,
        ids: &[u64],
        grantee: &str,
        privileges: &[Privilege],
        grant: bool,
    ) -> Result<()> {
        self.change(ids, |acl| {
            let held = acl.grants.entry(grantee.to_string()).or_default();
            for privilege in privileges {
                match grant {
                    true => held.insert(*privilege),
                    false => held.remove(privilege),
                };
            }
            if held.is_empty() {
                acl.grants.remove(grantee);
            }
        })
    }

    /// Whether `role` may create relations (superusers always may).
    pub fn may_create(&self, role: &str) -> bool {
        self.creators
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|creator| creator == role || creator == PUBLIC)
    }

    pub fn set_may_create(&self, role: &str, allowed: bool) -> Result<()> {
        let mut batch = WriteBatch::new();
        match allowed {
            true => batch.put(creator_key(role), Vec::new()),
            false => batch.delete(creator_key(role)),
        }
        self.store.commit(batch)?;
        let mut creators = self.creators.write().unwrap_or_else(|p| p.into_inner());
        match allowed {
            true => creators.insert(role.to_string()),
            false => creators.remove(role),
        };
        Ok(())
    }

    /// Whether any of the relations `live` is owned by, or grants
    /// something to, `role` (which then cannot be dropped). Entries of
    /// dropped relations stay behind, unread: ids are never reused.
    pub fn mentions(&self, role: &str, live: &[u64]) -> bool {
        let acls = self.read();
        live.iter()
            .filter_map(|id| acls.get(id))
            .any(|acl| acl.owner == role || acl.grants.contains_key(role))
    }

    fn change(&self, ids: &[u64], edit: impl Fn(&mut Acl)) -> Result<()> {
        let mut acls = self.write();
        let mut batch = WriteBatch::new();
        let mut changed = Vec::with_capacity(ids.len());
        for id in ids {
            let mut acl = acls.get(id).cloned().unwrap_or_else(|| Acl {
                owner: BOOTSTRAP_SUPERUSER.to_string(),
                grants: BTreeMap::new(),
            });
            edit(&mut acl);
            let encoded = serde_json::to_vec(&acl).map_err(|error| {
                crate::error::WeirError::internal(format!("cannot encode privileges: {error}"))
            })?;
            batch.put(acl_key(*id), encoded);
            changed.push((*id, acl));
        }
        self.store.commit(batch)?;
        acls.extend(changed);
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, Acl>> {
        self.acls.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Acl>> {
        self.acls.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SledStore;

    fn open(directory: &std::path::Path) -> Privileges {
        // Reopened right after a drop: sled's lock may still be held.
        let store: Arc<dyn StateStore> =
            Arc::new(SledStore::open_when_released(directory).unwrap());
        Privileges::open(store).unwrap()
    }

    #[test]
    fn access_lists_read_like_postgres_relacl() {
        let directory = tempfile::tempdir().unwrap();
        let privileges = open(directory.path());
        privileges.set_owner(&[3], "Ann Lee").unwrap();
        assert_eq!(privileges.acl_items(3), None, "nothing granted: NULL");
        let all = Privilege::ALL;
        privileges
            .change_grants(&[3], PUBLIC, &all[..1], true)
            .unwrap();
        privileges
            .change_grants(&[3], "zed", &all[1..], true)
            .unwrap();
        privileges.change_grants(&[3], "bob", &all, true).unwrap();
        assert_eq!(
            privileges.acl_items(3).unwrap(),
            vec![
                "\"Ann Lee\"=arwd/\"Ann Lee\"",
                "bob=arwd/\"Ann Lee\"",
                "zed=awd/\"Ann Lee\"",
                "=r/\"Ann Lee\"",
            ]
        );
    }

    #[test]
    fn owners_have_everything_and_others_what_they_were_granted() {
        let directory = tempfile::tempdir().unwrap();
        let privileges = open(directory.path());
        assert!(privileges.allows(7, BOOTSTRAP_SUPERUSER, Privilege::Delete));
        assert!(!privileges.allows(7, "alice", Privilege::Select));
        privileges.set_owner(&[7], "alice").unwrap();
        assert!(privileges.allows(7, "alice", Privilege::Delete));
        assert!(!privileges.allows(7, "bob", Privilege::Select));
        privileges
            .change_grants(&[7], "bob", &[Privilege::Select], true)
            .unwrap();
        assert!(privileges.allows(7, "bob", Privilege::Select));
        assert!(!privileges.allows(7, "bob", Privilege::Insert));
        privileges
            .change_grants(&[7], PUBLIC, &[Privilege::Insert], true)
            .unwrap();
        assert!(privileges.allows(7, "carol", Privilege::Insert));
        assert!(privileges.mentions("bob", &[7]) && privileges.mentions("alice", &[7]));
        assert!(!privileges.mentions("bob", &[8]));
        privileges
            .change_grants(&[7], "bob", &Privilege::ALL, false)
            .unwrap();
        assert!(!privileges.allows(7, "bob", Privilege::Select));
        assert!(!privileges.mentions("bob", &[7]));
    }

    #[test]
    fn privileges_survive_a_reopen() {
        let directory = tempfile::tempdir().unwrap();
        {
            let privileges = open(directory.path());
            privileges.set_owner(&[3, 4], "alice").unwrap();
            privileges
                .change_grants(&[3], "bob", &[Privilege::Select], true)
                .unwrap();
            privileges.set_may_create("bob", true).unwrap();
        }
        let privileges = open(directory.path());
        assert_eq!(privileges.owner(3), "alice");
        assert!(privileges.allows(3, "bob", Privilege::Select));
        assert_eq!(privileges.owner(4), "alice");
        assert_eq!(privileges.owner(5), BOOTSTRAP_SUPERUSER);
        assert!(privileges.may_create("bob") && !privileges.may_create("carol"));
    }
}
