//! Server-wide settings changed with `ALTER SYSTEM` and kept in the state
//! store, so they survive restarts (like Postgres's postgresql.auto.conf, a
//! stored value wins over the server flag). Today: `checkpoint_interval`
//! and `emit_clock_offset`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{CommandDone, Engine};
use crate::error::{sqlstate, Result, WeirError};
use crate::state::{key, WriteBatch};

pub const CHECKPOINT_INTERVAL: &str = "checkpoint_interval";
/// How far ahead of the wall clock the `EMIT EVERY` schedules run.
pub const EMIT_CLOCK_OFFSET: &str = "emit_clock_offset";
/// Shown by SHOW; set by the `--memory-limit` flag only.
pub const MEMORY_LIMIT: &str = "memory_limit";

#[derive(Debug, Default)]
pub struct SystemSettings {
    /// The flag's value, used while no ALTER SYSTEM value is stored.
    default_checkpoint_interval_ms: AtomicU64,
    /// An ALTER SYSTEM value; u64::MAX means none.
    stored_checkpoint_interval_ms: AtomicU64,
}

fn setting_key(name: &str) -> Vec<u8> {
    key(&[b"system", b"setting", name.as_bytes()])
}

fn unknown(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_PARAMETER,
        format!("unrecognized configuration parameter \"{name}\""),
    )
    .with_hint("ALTER SYSTEM knows checkpoint_interval (e.g. '1s', '500ms'; 0 turns periodic checkpoints off) and emit_clock_offset (e.g. '1h').")
}

impl Engine {
    /// Loads stored ALTER SYSTEM values (on open).
    pub(super) fn load_system_settings(&self) -> Result<()> {
        let stored = match self
            .catalog
            .store()
            .get(&setting_key(CHECKPOINT_INTERVAL))?
        {
            Some(value) => crate::stream::checkpoint::decode_i64(&value)
                .map(|ms| ms as u64)
                .ok_or_else(|| {
                    WeirError::new(sqlstate::DATA_CORRUPTED, "a stored setting is malformed")
                })?,
            None => u64::MAX,
        };
        self.system_settings
            .stored_checkpoint_interval_ms
            .store(stored, Ordering::Relaxed);
        let offset_ms = self.stored_milliseconds(EMIT_CLOCK_OFFSET)?.unwrap_or(0);
        self.set_emit_clock_offset_ms(offset_ms);
        Ok(())
    }

    fn stored_milliseconds(&self, name: &str) -> Result<Option<u64>> {
        let Some(value) = self.catalog.store().get(&setting_key(name))? else {
            return Ok(None);
        };
        crate::stream::checkpoint::decode_i64(&value)
            .map(|ms| Some(ms as u64))
            .ok_or_else(|| {
                WeirError::new(sqlstate::DATA_CORRUPTED, "a stored setting is malformed")
            })
    }

    fn set_emit_clock_offset_ms(&self, milliseconds: u64) {
        let milliseconds = milliseconds.min(i64::MAX as u64 / 1_000_000) as i64;
        let nanoseconds = milliseconds * 1_000_000;
        self.firings
            .clock_offset_ns
            .store(nanoseconds, Ordering::Relaxed);
    }

    pub fn set_default_checkpoint_interval_ms(&self, milliseconds: u64) {
        self.system_settings
            .default_checkpoint_interval_ms
            .store(milliseconds, Ordering::Relaxed);
    }

    /// The checkpoint interval in effect (0: no periodic checkpoints).
    pub fn checkpoint_interval_ms(&self) -> u64 {
        let settings = &self.system_settings;
        match settings
            .stored_checkpoint_interval_ms
            .load(Ordering::Relaxed)
        {
            u64::MAX => settings
                .default_checkpoint_interval_ms
                .load(Ordering::Relaxed),
            stored => stored,
        }
    }

    /// Every server-wide setting with its value (for `SHOW ALL`).
    pub fn system_settings(&self) -> Vec<(String, String)> {
        [CHECKPOINT_INTERVAL, EMIT_CLOCK_OFFSET, MEMORY_LIMIT]
            .into_iter()
            .filter_map(|name| Some((name.to_string(), self.system_setting(name)?)))
            .collect()
    }

    /// `SHOW name` for a server-wide setting, if `name` is one.
    pub fn system_setting(&self, name: &str) -> Option<String> {
        match name {
            CHECKPOINT_INTERVAL => Some(format!("{}ms", self.checkpoint_interval_ms())),
            EMIT_CLOCK_OFFSET => {
                let offset_ns = self.firings.clock_offset_ns.load(Ordering::Relaxed);
                Some(format!("{}ms", offset_ns / 1_000_000))
            }
            MEMORY_LIMIT => Some(match self.memory_limit_bytes() {
                Some(bytes) => crate::stream::dataflow::format_bytes(bytes),
                None => "unlimited".to_string(),
            }),
            _ => None,
        }
    }

    /// Caps the memory the views' operator state may hold together; a
    /// statement that would pass it fails (53200) and is undone.
    pub fn set_memory_limit_bytes(&self, limit: Option<u64>) {
        let limit = limit.map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX));
        self.dataflow.lock().set_memory_limit_bytes(limit);
    }

    /// The memory each stateful operator may keep of its state before it
    /// spills to disk (`--operator-cache-size`).
    pub fn set_operator_cache_bytes(&self, bytes: u64) {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.dataflow.lock().set_operator_cache_bytes(bytes);
    }

    pub fn memory_limit_bytes(&self) -> Option<usize> {
        self.dataflow.lock().memory_limit_bytes()
    }

    /// `ALTER SYSTEM SET name = value`, or RESET when `value` is None. A
    /// new `emit_clock_offset` fires the views it makes due before the
    /// statement completes.
    pub async fn alter_system(&self, name: &str, value: Option<&str>) -> Result<CommandDone> {
        if name == MEMORY_LIMIT {
            return Err(WeirError::new(
                sqlstate::CANT_CHANGE_RUNTIME_PARAM,
                "parameter \"memory_limit\" cannot be changed now",
            )
            .with_hint(
                "Restart weir with --memory-limit (or WEIR_MEMORY_LIMIT), e.g. --memory-limit 2GB.",
            ));
        }
        if name != CHECKPOINT_INTERVAL && name != EMIT_CLOCK_OFFSET {
            return Err(unknown(name));
        }
        let mut batch = WriteBatch::new();
        let stored = match value {
            Some(text) => {
                let milliseconds =
                    crate::sql::units::parse_milliseconds(text).ok_or_else(|| {
                        WeirError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("invalid value for parameter \"{name}\": \"{text}\""),
                        )
                        .with_hint("Use a duration such as '1s' or '500ms'.")
                    })?;
                let encoded = crate::stream::checkpoint::encode_i64(milliseconds as i64);
                batch.put(setting_key(name), encoded);
                milliseconds
            }
            None => {
                batch.delete(setting_key(name));
                u64::MAX
            }
        };
        self.catalog.store().commit(batch)?;
        if name == EMIT_CLOCK_OFFSET {
            self.set_emit_clock_offset_ms(if stored == u64::MAX { 0 } else { stored });
            // Asked for: waits for writes in progress longer than a tick.
            self.fire_due_views(std::time::Duration::from_secs(10))
                .await;
        } else {
            self.system_settings
                .stored_checkpoint_interval_ms
                .store(stored, Ordering::Relaxed);
        }
        Ok(CommandDone::new("ALTER SYSTEM"))
    }
}
