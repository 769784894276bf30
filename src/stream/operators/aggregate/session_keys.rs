//! The session aggregate's keys. Each distinct key (row-format bytes) gets
//! a small id while it has sessions, so the per-row work indexes a vector
//! and compares integers instead of hashing and comparing owned bytes; an
//! id is reused once its key's sessions are all gone. Also which keys'
//! checkpoint entries must be rewritten or deleted, and which keys a batch
//! changed, both as flags by id so no row hashes a key twice.

use datafusion::common::HashMap;

use super::calls::AggregateCall;
use super::session_aggregate::Sessions;
use super::session_state::encode_sessions;
use crate::error::{Result, WeirError};
use crate::stream::checkpoint::StateWriter;

pub type KeyId = u32;

#[derive(Default)]
pub struct SessionKeys {
    ids: HashMap<Vec<u8>, KeyId>,
    /// By id: the key's bytes and its sessions (both empty for a free id).
    keys: Vec<Vec<u8>>,
    sessions: Vec<Sessions>,
    free: Vec<KeyId>,
    /// Keys whose sessions changed since the last checkpoint: the ids (an
    /// id may repeat after a release) and a flag by id.
    changed: Vec<KeyId>,
    is_changed: Vec<bool>,
    /// By id: whether the key's sessions changed in the current batch.
    in_batch: Vec<bool>,
    /// By id: whether the key has an entry in the last checkpoint. A key
    /// whose sessions came and went between two checkpoints (most of them,
    /// when one COPY holds checkpoints off) needs no delete.
    stored: Vec<bool>,
    /// Stored keys whose sessions all went since the last checkpoint.
    deleted: Vec<Vec<u8>>,
}

impl SessionKeys {
    pub fn find(&self, key: &[u8]) -> Option<KeyId> {
        self.ids.get(key).copied()
    }

    /// The key's id, given one if it has none.
    pub fn intern(&mut self, key: &[u8]) -> Result<KeyId> {
        if let Some(id) = self.find(key) {
            return Ok(id);
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = key.to_vec();
                id
            }
            None => {
                let id = KeyId::try_from(self.keys.len())
                    .map_err(|_| WeirError::internal("more than 2^32 session keys"))?;
                self.keys.push(key.to_vec());
                self.sessions.push(Sessions::new());
                self.is_changed.push(false);
                self.in_batch.push(false);
                self.stored.push(false);
                id
            }
        };
        self.ids.insert(key.to_vec(), id);
        Ok(id)
    }

    pub fn sessions(&self, id: KeyId) -> &Sessions {
        &self.sessions[id as usize]
    }

    /// The key's bytes and its sessions, borrowed together.
    pub fn entry_mut(&mut self, id: KeyId) -> (&[u8], &mut Sessions) {
        (&self.keys[id as usize], &mut self.sessions[id as usize])
    }

    pub fn mark_changed(&mut self, id: KeyId) {
        let flag = &mut self.is_changed[id as usize];
        if !*flag {
            *flag = true;
            self.changed.push(id);
        }
    }

    /// Marks the key changed by the current batch (and since the last
    /// checkpoint); true the first time in the batch.
    pub fn join_batch(&mut self, id: KeyId) -> bool {
        self.mark_changed(id);
        !std::mem::replace(&mut self.in_batch[id as usize], true)
    }

    /// The batch that changed these keys is done.
    pub fn leave_batch(&mut self, ids: &[KeyId]) {
        for &id in ids {
            self.in_batch[id as usize] = false;
        }
    }

    /// The key's sessions are all gone: its id is free for another key,
    /// and its checkpoint entry (if any) goes at the next checkpoint.
    pub fn release(&mut self, id: KeyId) {
        let key = std::mem::take(&mut self.keys[id as usize]);
        self.ids.remove(&key);
        let index = id as usize;
        self.is_changed[index] = false;
        self.in_batch[index] = false;
        if std::mem::replace(&mut self.stored[index], false) {
            self.deleted.push(key);
        }
        self.free.push(id);
    }

    /// Every key with sessions.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Sessions)> {
        self.ids.values().map(|id| {
            (
                self.keys[*id as usize].as_slice(),
                &self.sessions[*id as usize],
            )
        })
    }

    /// Entries the next checkpoint writes or deletes.
    #[cfg(test)]
    pub fn pending_writes(&self) -> usize {
        self.is_changed.iter().filter(|flag| **flag).count() + self.deleted.len()
    }

    /// A key's sessions from a checkpoint.
    pub fn restore(&mut self, key: Vec<u8>, sessions: Sessions) -> Result<KeyId> {
        let id = self.intern(&key)?;
        self.sessions[id as usize] = sessions;
        self.stored[id as usize] = true;
        Ok(id)
    }

    /// Rewrites the entries of changed keys and deletes those of keys gone;
    /// `name` is a key's entry name.
    pub fn checkpoint(
        &mut self,
        calls: &[AggregateCall],
        name: impl Fn(&[u8]) -> Vec<u8>,
        state: &mut StateWriter,
    ) -> Result<()> {
        for key in std::mem::take(&mut self.deleted) {
            state.delete(&name(&key));
        }
        for id in std::mem::take(&mut self.changed) {
            let index = id as usize;
            if !std::mem::replace(&mut self.is_changed[index], false) {
                continue;
            }
            let (key, sessions) = (&self.keys[index], &mut self.sessions[index]);
            state.put(&name(key), encode_sessions(sessions, calls)?);
            self.stored[index] = true;
        }
        Ok(())
    }
}
