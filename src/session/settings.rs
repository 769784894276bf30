//! Per-session settings for `SET` / `SHOW`: the Postgres parameters clients
//! and drivers set or read, plus DataFusion's own `datafusion.*` options.

use std::collections::BTreeMap;

use datafusion::arrow::array::timezone::Tz;
use datafusion::execution::SessionState;

use crate::error::{sqlstate, Result, WeirError};
use crate::sql::units::parse_milliseconds;
pub use crate::sql::version::SERVER_VERSION;
use crate::sql::version::SERVER_VERSION_NUMBER;

/// (name, default, reported to the client with ParameterStatus)
const KNOWN: &[(&str, &str, bool)] = &[
    ("application_name", "", true),
    ("client_encoding", "UTF8", true),
    ("datestyle", "ISO, MDY", true),
    ("default_transaction_isolation", "read committed", false),
    ("extra_float_digits", "1", false),
    ("integer_datetimes", "on", true),
    ("intervalstyle", "postgres", true),
    ("lc_messages", "C", false),
    ("max_identifier_length", "63", false),
    // Read-only in Postgres too; pgjdbc reads it before listing keys.
    ("max_index_keys", "32", false),
    // How CREATE/ALTER ROLE … PASSWORD stores a password (psql's
    // \password reads it to hash on the client).
    ("password_encryption", "scram-sha-256", false),
    // The most memory one session's queries may hold in the operators
    // DataFusion tracks (hash joins, aggregates, sorts; sorts spill to
    // disk past it, the others fail with 53200). 0: no limit.
    ("query_memory_limit", "2GB", false),
    ("search_path", "public", false),
    ("server_encoding", "UTF8", true),
    ("server_version", SERVER_VERSION, true),
    ("server_version_num", SERVER_VERSION_NUMBER, false),
    ("standard_conforming_strings", "on", true),
    ("statement_timeout", "0", false),
    // What a subscription (SUBSCRIBE) may have waiting before it is cut off.
    ("subscribe_queue_limit", "64MB", false),
    ("timezone", "UTC", true),
    ("transaction_isolation", "read committed", false),
    ("transaction_read_only", "off", false),
];

/// Postgres spells some reported names in mixed case.
fn reported_name(name: &str) -> &str {
    match name {
        "datestyle" => "DateStyle",
        "intervalstyle" => "IntervalStyle",
        "timezone" => "TimeZone",
        other => other,
    }
}

#[derive(Debug, Default, Clone)]
pub struct Settings {
    values: BTreeMap<String, String>,
    datafusion: BTreeMap<String, String>,
}

/// What a successful SET changed, for the client's ParameterStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub name: String,
    pub value: String,
}

impl Settings {
    /// Sets a parameter; `value` None means `DEFAULT`.
    pub fn set(&mut self, name: &str, value: Option<String>) -> Result<Option<Reported>> {
        let name = name.to_ascii_lowercase();
        if let Some(option) = name.strip_prefix("datafusion.") {
            return self.set_datafusion(option, value).map(|_| None);
        }
        let Some(&(_, default, reported)) = KNOWN.iter().find(|(known, _, _)| *known == name)
        else {
            if name.contains('.') {
                // Postgres accepts any dotted (extension or application) name.
                self.store(name, value);
                return Ok(None);
            }
            return Err(unknown_parameter(&name));
        };
        let value = value.unwrap_or_else(|| default.to_string());
        validate(&name, &value)?;
        self.values.insert(name.clone(), value.clone());
        Ok(reported.then(|| Reported {
            name: reported_name(&name).to_string(),
            value,
        }))
    }

    fn store(&mut self, name: String, value: Option<String>) {
        match value {
            Some(value) => self.values.insert(name, value),
            None => self.values.remove(&name),
        };
    }

    fn set_datafusion(&mut self, option: &str, value: Option<String>) -> Result<()> {
        let key = format!("datafusion.{option}");
        match value {
            Some(value) => {
                // Validate against DataFusion's option table before keeping it.
                let mut options = datafusion::config::ConfigOptions::new();
                options.set(&key, &value).map_err(|error| {
                    WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, error.to_string())
                })?;
                self.datafusion.insert(key, value);
            }
            None => {
                self.datafusion.remove(&key);
            }
        }
        Ok(())
    }

    /// A Postgres parameter's built-in value (pg_settings.boot_val).
    pub fn default_of(name: &str) -> Option<&'static str> {
        KNOWN
            .iter()
            .find(|(known, _, _)| *known == name)
            .map(|(_, default, _)| *default)
    }

    pub fn get(&self, name: &str) -> Result<String> {
        let name = name.to_ascii_lowercase();
        if let Some(value) = self.values.get(&name) {
            return Ok(value.clone());
        }
        if let Some(value) = self.datafusion.get(&name) {
            return Ok(value.clone());
        }
        if let Some((_, default, _)) = KNOWN.iter().find(|(known, _, _)| *known == name) {
            return Ok(default.to_string());
        }
        Err(unknown_parameter(&name))
    }

    /// `statement_timeout` as a duration; None when it is 0 (no limit).
    pub fn statement_timeout(&self) -> Result<Option<std::time::Duration>> {
        let value = self.get("statement_timeout")?;
        let milliseconds = parse_milliseconds(&value).ok_or_else(|| {
            WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"statement_timeout\": \"{value}\""),
            )
        })?;
        Ok((milliseconds > 0).then(|| std::time::Duration::from_millis(milliseconds)))
    }

    /// How a new password is stored (`password_encryption`).
    pub fn password_encryption(&self) -> crate::auth::PasswordEncryption {
        self.get("password_encryption")
            .ok()
            .and_then(|value| crate::auth::PasswordEncryption::parse(&value))
            .unwrap_or(crate::auth::PasswordEncryption::Scram)
    }

    /// `subscribe_queue_limit` in bytes.
    pub fn subscribe_queue_limit_bytes(&self) -> Result<usize> {
        let value = self.get("subscribe_queue_limit")?;
        crate::sql::units::parse_memory_size(&value)
            .map(|bytes| bytes as usize)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"subscribe_queue_limit\": \"{value}\""),
                )
            })
    }

    /// `query_memory_limit` in bytes; None for 0 (no limit).
    pub fn query_memory_limit_bytes(&self) -> Result<Option<usize>> {
        let value = self.get("query_memory_limit")?;
        if value.trim() == "0" {
            return Ok(None);
        }
        crate::sql::units::parse_memory_size(&value)
            .map(|bytes| Some(usize::try_from(bytes).unwrap_or(usize::MAX)))
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"query_memory_limit\": \"{value}\""),
                )
            })
    }

    /// Every known parameter with its current value, for `SHOW ALL`.
    pub fn all(&self) -> Vec<(String, String)> {
        let mut all: BTreeMap<String, String> = KNOWN
            .iter()
            .map(|(name, default, _)| (name.to_string(), default.to_string()))
            .collect();
        all.extend(self.values.clone());
        all.extend(self.datafusion.clone());
        all.into_iter().collect()
    }

    /// The `datafusion.*` options set in this session.
    pub fn datafusion_options(&self) -> &BTreeMap<String, String> {
        &self.datafusion
    }

    pub fn time_zone(&self) -> Option<&str> {
        self.values.get("timezone").map(String::as_str)
    }

    /// Applies the session's settings to a planning state.
    pub fn apply(&self, state: &mut SessionState) -> Result<()> {
        let options = state.config_mut().options_mut();
        for (key, value) in &self.datafusion {
            options.set(key, value)?;
        }
        if let Some(zone) = self.time_zone() {
            options.execution.time_zone = Some(datafusion_time_zone(zone));
        }
        Ok(())
    }
}

/// DataFusion wants an offset or an IANA name; Postgres also says UTC/GMT.
fn datafusion_time_zone(zone: &str) -> String {
    match zone.to_ascii_uppercase().as_str() {
        "UTC" | "GMT" | "Z" | "ZULU" => "+00:00".to_string(),
        _ => zone.to_string(),
    }
}

fn validate(name: &str, value: &str) -> Result<()> {
    let invalid = |hint: &str| {
        Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{name}\": \"{value}\""),
        )
        .with_hint(hint.to_string()))
    };
    match name {
        "client_encoding"
            if !matches!(
                value.to_ascii_uppercase().as_str(),
                "UTF8" | "UTF-8" | "UNICODE"
            ) =>
        {
            invalid("weir speaks UTF8 only.")
        }
        "timezone" if datafusion_time_zone(value).parse::<Tz>().is_err() => {
            invalid("Use UTC, an offset such as +02:00, or an IANA name such as Europe/Paris.")
        }
        "default_transaction_isolation" | "transaction_isolation" => check_isolation_level(value),
        "statement_timeout" if parse_milliseconds(value).is_none() => {
            invalid("Give milliseconds, or a number with a unit: 500ms, 30s, 5min.")
        }
        "password_encryption" if crate::auth::PasswordEncryption::parse(value).is_none() => {
            invalid("Use scram-sha-256 (the default) or md5.")
        }
        "query_memory_limit"
            if value.trim() != "0" && crate::sql::units::parse_memory_size(value).is_none() =>
        {
            invalid("Give a memory size such as 512MB or 4GB, or 0 for no limit.")
        }
        "subscribe_queue_limit" if crate::sql::units::parse_memory_size(value).is_none() => {
            invalid("Give a memory size such as 64MB or 1GB.")
        }
        "server_version"
        | "server_version_num"
        | "server_encoding"
        | "integer_datetimes"
        | "max_identifier_length"
        | "max_index_keys" => Err(WeirError::new(
            "55P02",
            format!("parameter \"{name}\" cannot be changed"),
        )),
        _ => Ok(()),
    }
}

/// An isolation level weir gives: READ COMMITTED, and READ UNCOMMITTED,
/// which Postgres also runs as READ COMMITTED. The stronger levels would
/// be a promise weir does not keep (each statement reads what was
/// committed before it started), so they are refused, not ignored.
pub fn check_isolation_level(level: &str) -> Result<()> {
    match level.to_ascii_lowercase().as_str() {
        "read committed" | "read uncommitted" => Ok(()),
        "repeatable read" | "serializable" | "snapshot" => Err(WeirError::unsupported(format!(
            "isolation level {} is not supported",
            level.to_ascii_uppercase()
        ))
        .with_hint(
            "weir runs every transaction at READ COMMITTED: each statement sees the rows committed before it started.",
        )),
        _ => Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"transaction_isolation\": \"{level}\""),
        )
        .with_hint("Use 'read committed' or 'read uncommitted'.")),
    }
}

fn unknown_parameter(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_PARAMETER,
        format!("unrecognized configuration parameter \"{name}\""),
    )
    .with_hint("SHOW ALL lists the parameters weir knows.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_levels_weir_cannot_give_are_refused() {
        let mut settings = Settings::default();
        settings
            .set(
                "default_transaction_isolation",
                Some("read uncommitted".into()),
            )
            .unwrap();
        assert_eq!(
            settings.get("default_transaction_isolation").unwrap(),
            "read uncommitted"
        );
        let refused = settings
            .set("transaction_isolation", Some("serializable".into()))
            .unwrap_err();
        assert_eq!(refused.code, "0A000");
        let invalid = settings
            .set("transaction_isolation", Some("sloppy".into()))
            .unwrap_err();
        assert_eq!(invalid.code, sqlstate::INVALID_PARAMETER_VALUE);
    }

    #[test]
    fn set_and_show_round_trip() {
        let mut settings = Settings::default();
        let reported = settings
            .set("application_name", Some("psql".into()))
            .unwrap();
        assert_eq!(reported.unwrap().value, "psql");
        assert_eq!(settings.get("APPLICATION_NAME").unwrap(), "psql");
        settings.set("application_name", None).unwrap();
        assert_eq!(settings.get("application_name").unwrap(), "");
    }

    #[test]
    fn unknown_names_are_42704_but_dotted_names_are_kept() {
        let mut settings = Settings::default();
        assert_eq!(
            settings.set("nonsense", Some("1".into())).unwrap_err().code,
            "42704"
        );
        settings.set("myapp.tenant", Some("7".into())).unwrap();
        assert_eq!(settings.get("myapp.tenant").unwrap(), "7");
    }

    #[test]
    fn time_zone_is_validated_and_reported_in_postgres_case() {
        let mut settings = Settings::default();
        assert!(settings
            .set("timezone", Some("Mars/Olympus".into()))
            .is_err());
        let reported = settings
            .set("TimeZone", Some("Europe/Paris".into()))
            .unwrap()
            .unwrap();
        assert_eq!(reported.name, "TimeZone");
    }

    #[test]
    fn statement_timeout_units() {
        let mut settings = Settings::default();
        assert_eq!(settings.statement_timeout().unwrap(), None);
        settings
            .set("statement_timeout", Some("1500".into()))
            .unwrap();
        assert_eq!(
            settings.statement_timeout().unwrap().unwrap().as_millis(),
            1500
        );
        settings
            .set("statement_timeout", Some("2s".into()))
            .unwrap();
        assert_eq!(
            settings.statement_timeout().unwrap().unwrap().as_millis(),
            2000
        );
        assert!(settings
            .set("statement_timeout", Some("soon".into()))
            .is_err());
    }

    #[test]
    fn datafusion_options_are_validated() {
        let mut settings = Settings::default();
        settings
            .set("datafusion.execution.batch_size", Some("1024".into()))
            .unwrap();
        assert!(settings
            .set("datafusion.execution.batch_size", Some("many".into()))
            .is_err());
        assert!(settings
            .set("datafusion.no_such_option", Some("1".into()))
            .is_err());
    }
}
