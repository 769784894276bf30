//! `pg_aggregate.aggfnoid` as the aggregate's `pg_proc` oid. The crate's
//! export holds the regproc's text (`pg_catalog.avg`, once per overload),
//! so Grafana's aggregate list, `pg_aggregate JOIN pg_proc ON aggfnoid =
//! pg_proc.oid`, compared a name with a number and failed. Both exports
//! come from one Postgres in oid order, so the n-th `avg` row here is the
//! n-th aggregate named `avg` in `pg_proc` by oid. weir sends the oid
//! (Postgres prints a regproc as its name; `aggfnoid::oid` is the same
//! number there).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int32Array};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;

pub const FUNCTION_COLUMN: &str = "aggfnoid";

/// The crate's `pg_aggregate` columns with `aggfnoid` an oid.
pub fn schema_with_oids(schema: &SchemaRef) -> SchemaRef {
    let fields = schema
        .fields()
        .iter()
        .map(|field| match field.name() == FUNCTION_COLUMN {
            true => Field::new(FUNCTION_COLUMN, DataType::Int32, true),
            false => field.as_ref().clone(),
        });
    Arc::new(Schema::new(fields.collect::<Vec<_>>()))
}

/// `aggregates` (the crate's rows) with each `aggfnoid` name replaced by
/// the oid of the matching overload in `procedures` (`pg_proc` rows).
pub fn with_function_oids(
    aggregates: RecordBatch,
    procedures: &RecordBatch,
    schema: SchemaRef,
) -> Result<RecordBatch> {
    let mut overloads = aggregate_oids_by_name(procedures);
    let Some(names) = aggregates
        .column_by_name(FUNCTION_COLUMN)
        .and_then(|column| column.as_string_opt::<i32>())
    else {
        return Ok(aggregates);
    };
    let oids: Int32Array = names
        .iter()
        .map(|name| {
            let name = name?;
            let unqualified = name.strip_prefix("pg_catalog.").unwrap_or(name);
            let remaining = overloads.get_mut(unqualified)?;
            (!remaining.is_empty()).then(|| remaining.remove(0))
        })
        .collect();
    let columns = schema
        .fields()
        .iter()
        .zip(aggregates.columns())
        .map(|(field, column)| match field.name() == FUNCTION_COLUMN {
            true => Arc::new(oids.clone()) as _,
            false => column.clone(),
        })
        .collect();
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Oids of `pg_proc`'s aggregates (`prokind = 'a'`) per name, ascending.
fn aggregate_oids_by_name(procedures: &RecordBatch) -> HashMap<String, Vec<i32>> {
    let mut by_name: HashMap<String, Vec<i32>> = HashMap::new();
    let columns = (
        procedures.column_by_name("oid"),
        procedures.column_by_name("proname"),
        procedures.column_by_name("prokind"),
    );
    let (Some(oids), Some(names), Some(kinds)) = columns else {
        return by_name;
    };
    let (Some(oids), Some(names), Some(kinds)) = (
        oids.as_primitive_opt::<Int32Type>(),
        names.as_string_opt::<i32>(),
        kinds.as_string_opt::<i32>(),
    ) else {
        return by_name;
    };
    for row in 0..procedures.num_rows() {
        if kinds.is_valid(row) && kinds.value(row) == "a" && oids.is_valid(row) {
            let name = names.value(row).to_string();
            by_name.entry(name).or_default().push(oids.value(row));
        }
    }
    for oids in by_name.values_mut() {
        oids.sort_unstable();
    }
    by_name
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;

    fn procedures() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("oid", DataType::Int32, false),
            Field::new("proname", DataType::Utf8, false),
            Field::new("prokind", DataType::Utf8, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![2101, 2100, 2147, 1000])),
                Arc::new(StringArray::from(vec!["avg", "avg", "count", "avg"])),
                Arc::new(StringArray::from(vec!["a", "a", "a", "f"])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn overloads_take_oids_in_order() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("aggfnoid", DataType::Utf8, false),
            Field::new("aggkind", DataType::Utf8, false),
        ]));
        let aggregates = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![
                    "pg_catalog.avg",
                    "pg_catalog.avg",
                    "pg_catalog.count",
                    "pg_catalog.nosuch",
                ])),
                Arc::new(StringArray::from(vec!["n"; 4])),
            ],
        )
        .unwrap();
        let retyped = schema_with_oids(&schema);
        let batch = with_function_oids(aggregates, &procedures(), retyped).unwrap();
        let oids = batch.column(0).as_primitive::<Int32Type>();
        let values: Vec<Option<i32>> = oids.iter().collect();
        assert_eq!(values, vec![Some(2100), Some(2101), Some(2147), None]);
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "n");
    }
}
