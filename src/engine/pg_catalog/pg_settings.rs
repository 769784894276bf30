//! `pg_settings`: one row per setting with this session's value, as `SHOW
//! ALL` lists them (the crate has one fixed row). pgjdbc reads
//! `max_index_keys` here before it lists foreign keys, and fails without
//! it. The session puts its settings into the planning state as a
//! `SessionSettingRows` extension; the catalog reads them from there.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session as DataFusionSession;
use datafusion::error::Result;

/// Where a session's settings are read, name and value, when a query
/// scans `pg_settings` (live: the planning state outlives a SET).
pub trait SettingsSource: Send + Sync {
    fn rows(&self) -> Vec<(String, String)>;

    /// The value a parameter has before anything sets it (`boot_val`).
    fn boot_value(&self, _name: &str) -> Option<String> {
        None
    }
}

pub struct SessionSettingRows(pub Arc<dyn SettingsSource>);

/// `pg_settings` rows for the session planning the scan (the crate's one
/// row when no session set them).
pub fn session_rows(
    batch: RecordBatch,
    schema: &SchemaRef,
    state: &dyn DataFusionSession,
) -> Result<RecordBatch> {
    let Some(source) = state.config().get_extension::<SessionSettingRows>() else {
        return Ok(batch);
    };
    let settings = source.0.rows();
    let column = |values: Vec<&str>| Arc::new(StringArray::from(values)) as ArrayRef;
    let names: Vec<&str> = settings.iter().map(|(name, _)| name.as_str()).collect();
    let values: Vec<&str> = settings.iter().map(|(_, value)| value.as_str()).collect();
    let boots: Vec<Option<String>> = settings
        .iter()
        .map(|(name, _)| source.0.boot_value(name))
        .collect();
    // Postgres says where a value came from; weir: its built-in value or
    // set (by SET, the connection or ALTER SYSTEM).
    let sources: Vec<&str> = settings
        .iter()
        .zip(&boots)
        .map(|((_, value), boot)| match boot {
            Some(boot) if boot != value => "session",
            _ => "default",
        })
        .collect();
    let rows = settings.len();
    let columns = schema
        .fields()
        .iter()
        .map(|field| match field.name().as_str() {
            "name" => column(Vec::clone(&names)),
            "setting" | "reset_val" => column(Vec::clone(&values)),
            "source" => column(Vec::clone(&sources)),
            "boot_val" => Arc::new(StringArray::from(boots.clone())) as ArrayRef,
            _ => new_null_array(field.data_type(), rows),
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::SessionStateBuilder;

    #[test]
    fn rows_come_from_the_session() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("setting", DataType::Utf8, true),
            Field::new("unit", DataType::Utf8, true),
        ]));
        let empty = RecordBatch::new_empty(schema.clone());
        let mut state = SessionStateBuilder::new().build();
        struct Fixed;
        impl SettingsSource for Fixed {
            fn rows(&self) -> Vec<(String, String)> {
                vec![("max_index_keys".into(), "32".into())]
            }
        }
        let rows = SessionSettingRows(Arc::new(Fixed));
        state.config_mut().set_extension(Arc::new(rows));
        let batch = session_rows(empty, &schema, &state).unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "32");
        assert!(batch.column(2).is_null(0));
    }
}
