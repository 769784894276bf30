//! Unit tests of the relations' durable definitions.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::common::Constraints;

use super::*;
use crate::state::SledStore;

fn parts() -> TableParts {
    TableParts {
        schema: Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)])),
        constraints: Constraints::default(),
        column_defaults: HashMap::new(),
    }
}

fn open(store: &Arc<dyn StateStore>) -> Relations {
    let database = Arc::new(MemoryCatalogProvider::new());
    database
        .register_schema(SCHEMA_NAME, Arc::new(MemorySchemaProvider::new()))
        .unwrap();
    Relations::open(store.clone(), database, None).unwrap()
}

#[test]
fn relation_ids_are_never_reused_even_after_a_drop_and_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let catalog = open(&store);
    let first = catalog.create_table("a", "", parts(), None).unwrap().id();
    let second = catalog.create_table("b", "", parts(), None).unwrap().id();
    assert!(second > first);
    catalog.drop_relation("b", RelationKind::Table).unwrap();
    let reopened = open(&store);
    let third = reopened.create_table("c", "", parts(), None).unwrap().id();
    assert!(third > second, "id {third} reuses a dropped relation's");
}

#[test]
fn concurrent_creates_get_distinct_ids() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let catalog = Arc::new(open(&store));
    let threads: Vec<_> = (0..8)
        .map(|index| {
            let catalog = catalog.clone();
            std::thread::spawn(move || {
                let name = format!("t{index}");
                catalog.create_table(&name, "", parts(), None).unwrap().id()
            })
        })
        .collect();
    let mut ids: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8);
}

#[test]
fn tables_created_together_are_all_there_or_none() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let catalog = open(&store);
    catalog.create_table("taken", "", parts(), None).unwrap();
    let table = |name: &str| NewTable {
        name: name.to_string(),
        sql: String::new(),
        parts: parts(),
        stream: None,
    };
    assert!(catalog
        .create_tables(vec![table("source"), table("taken")])
        .is_err());
    assert!(
        catalog.table("source").is_none(),
        "nothing of a failed pair"
    );
    let created = catalog
        .create_tables(vec![table("s"), table("s_errors")])
        .unwrap();
    assert_eq!(created.len(), 2);
    let reopened = open(&store);
    let names: Vec<String> = reopened.definitions().into_iter().map(|d| d.name).collect();
    assert!(names.contains(&"s".to_string()) && names.contains(&"s_errors".to_string()));
}
