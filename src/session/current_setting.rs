//! `current_setting(name [, missing_ok])`: a setting's value in this
//! session, as SHOW gives it (drivers and BI tools read `search_path`,
//! `server_version_num`, … this way). Registered in the session's own
//! planning state, over the session's live settings.

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::Settings;
use crate::engine::Engine;

pub fn function(settings: &Arc<Mutex<Settings>>, engine: &Arc<Engine>) -> ScalarUDF {
    ScalarUDF::new_from_impl(CurrentSetting {
        settings: settings.clone(),
        engine: Arc::downgrade(engine),
        signature: Signature::variadic_any(Volatility::Stable),
    })
}

#[derive(Debug)]
struct CurrentSetting {
    settings: Arc<Mutex<Settings>>,
    engine: std::sync::Weak<Engine>,
    signature: Signature,
}

impl PartialEq for CurrentSetting {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.settings, &other.settings)
    }
}

impl Eq for CurrentSetting {}

impl std::hash::Hash for CurrentSetting {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "current_setting".hash(state);
    }
}

impl CurrentSetting {
    /// The value of `name`; None when unknown and `missing_ok`.
    fn value(&self, name: &str, missing_ok: bool) -> Result<Option<String>> {
        let name = name.to_ascii_lowercase();
        if let Some(value) = self.engine.upgrade().and_then(|e| e.system_setting(&name)) {
            return Ok(Some(value));
        }
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        match settings.get(&name) {
            Ok(value) => Ok(Some(value)),
            Err(_) if missing_ok => Ok(None),
            Err(error) => Err(DataFusionError::External(Box::new(error))),
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (Some(names), 1..=2) = (arrays.first(), arrays.len()) else {
            return Err(DataFusionError::Plan(
                "current_setting takes a setting's name (and missing_ok)".to_string(),
            ));
        };
        let names = cast(names, &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let missing_ok = match arrays.get(1) {
            Some(flags) => Some(cast(flags, &DataType::Boolean)?),
            None => None,
        };
        let values = (0..args.number_rows)
            .map(|row| {
                let name = names.is_valid(row).then(|| names.value(row));
                let ok = missing_ok.as_ref().is_some_and(|flags| {
                    let flags = flags.as_boolean();
                    flags.is_valid(row) && flags.value(row)
                });
                match name {
                    Some(name) => self.value(name, ok),
                    None => Ok(None),
                }
            })
            .collect::<Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(values) as ArrayRef))
    }
}

/// The session's settings and the server-wide ones, as `SHOW ALL` and
/// `pg_settings` list them.
pub fn all_settings(settings: &Settings, engine: &Engine) -> Vec<(String, String)> {
    let mut all = settings.all();
    all.extend(engine.system_settings());
    all.sort();
    all
}

/// `pg_settings` reads the live settings through this.
pub struct LiveSettings {
    pub settings: Arc<Mutex<Settings>>,
    pub engine: std::sync::Weak<Engine>,
}

impl crate::engine::pg_catalog::SettingsSource for LiveSettings {
    fn boot_value(&self, name: &str) -> Option<String> {
        Settings::default_of(name).map(str::to_string)
    }

    fn rows(&self) -> Vec<(String, String)> {
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        match self.engine.upgrade() {
            Some(engine) => all_settings(&settings, &engine),
            None => settings.all(),
        }
    }
}
