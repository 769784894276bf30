//! A connector's `WITH (...)` options: each taken by name (with the
//! spellings RisingWave and Flink use), typed, and whatever is left over
//! refused, so a misspelt option fails at CREATE SOURCE instead of being
//! ignored.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::error::{sqlstate, Result, WeirError};

/// The options not taken yet.
pub struct Options {
    connector: String,
    remaining: BTreeMap<String, String>,
}

impl Options {
    pub fn new(connector: &str, options: &BTreeMap<String, String>) -> Self {
        let mut remaining = options.clone();
        remaining.remove("connector");
        Options {
            connector: connector.to_string(),
            remaining,
        }
    }

    /// The text of the first of `names` given.
    pub fn text(&mut self, names: &[&str]) -> Option<(String, String)> {
        names.iter().find_map(|name| {
            self.remaining
                .remove(*name)
                .map(|value| (name.to_string(), value))
        })
    }

    /// The first of `names` given, parsed as `T`.
    pub fn parse<T: FromStr>(&mut self, names: &[&str]) -> Result<Option<T>> {
        let Some((name, value)) = self.text(names) else {
            return Ok(None);
        };
        value.trim().parse().map(Some).map_err(|_| {
            WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("{name} = '{value}' is not a valid value"),
            )
            .with_hint(format!("Give {name} a number in range."))
        })
    }

    /// Every remaining option whose name starts with `prefix`, taken.
    pub fn take_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let names: Vec<String> = self
            .remaining
            .keys()
            .filter(|name| name.starts_with(prefix))
            .cloned()
            .collect();
        names
            .into_iter()
            .filter_map(|name| self.remaining.remove_entry(&name))
            .collect()
    }

    /// Fails on the first option nobody took; `known` is the hint.
    pub fn finish(self, known: &str) -> Result<()> {
        match self.remaining.into_iter().next() {
            None => Ok(()),
            Some((name, _)) => Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unknown option {name} for connector {}", self.connector),
            )
            .with_hint(format!("The {} options are {known}.", self.connector))),
        }
    }
}

/// A required option that was not given.
pub fn missing(name: &str, hint: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("option {name} is required"),
    )
    .with_hint(hint.to_string())
}

/// An out-of-range or malformed option value.
pub fn invalid(name: &str, value: &str, hint: &str) -> WeirError {
    WeirError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("{name} = '{value}' is not valid"),
    )
    .with_hint(hint.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Options {
        let map = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Options::new("test", &map)
    }

    #[test]
    fn options_are_taken_by_any_spelling_and_leftovers_refused() {
        let mut given = options(&[("connector", "test"), ("rows-per-second", "5"), ("x", "1")]);
        let rate: Option<u64> = given
            .parse(&["datagen.rows.per.second", "rows-per-second"])
            .unwrap();
        assert_eq!(rate, Some(5));
        let error = given.finish("rows-per-second").unwrap_err();
        assert_eq!(error.code, sqlstate::INVALID_PARAMETER_VALUE);
        assert!(error.message.contains("unknown option x"));
    }

    #[test]
    fn malformed_numbers_are_refused() {
        let mut given = options(&[("n", "ten")]);
        assert!(given.parse::<u64>(&["n"]).is_err());
    }
}
