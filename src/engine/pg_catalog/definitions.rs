//! `pg_get_indexdef` and `pg_get_constraintdef` for the indexes and
//! constraints of weir's keys (psql's `\d` prints them): the definitions
//! Postgres would print. Other oids give NULL (indexes) or an empty string
//! (constraints, as datafusion-pg-catalog answered before).

use std::sync::{Arc, Weak};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::context::{decode_key_oid, oid_argument, KeyPart};
use crate::connectors::table::{KeyConstraint, TableLog};
use crate::engine::relations::Relations;
use crate::sql::format_function::quote_identifier as quote;

pub fn functions(relations: &Arc<Relations>) -> Vec<ScalarUDF> {
    [KeyPart::Index, KeyPart::Constraint]
        .into_iter()
        .map(|part| {
            ScalarUDF::new_from_impl(KeyDefinition {
                part,
                relations: Arc::downgrade(relations),
                signature: Signature::variadic_any(Volatility::Stable),
            })
        })
        .collect()
}

#[derive(Debug)]
struct KeyDefinition {
    part: KeyPart,
    relations: Weak<Relations>,
    signature: Signature,
}

impl PartialEq for KeyDefinition {
    fn eq(&self, other: &Self) -> bool {
        self.part == other.part
    }
}

impl Eq for KeyDefinition {}

impl std::hash::Hash for KeyDefinition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl ScalarUDFImpl for KeyDefinition {
    fn name(&self) -> &str {
        match self.part {
            KeyPart::Index => "pg_get_indexdef",
            KeyPart::Constraint => "pg_get_constraintdef",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let oids = oid_argument(&arrays, self.name())?;
        // pg_get_indexdef(oid, column, pretty): column 0 is the whole index.
        let columns = match (self.part, arrays.get(1)) {
            (KeyPart::Index, Some(columns)) => Some(cast(columns, &DataType::Int64)?),
            _ => None,
        };
        let columns = columns.as_ref().map(|c| c.as_primitive::<Int64Type>());
        let logs = self
            .relations
            .upgrade()
            .map_or_else(Vec::new, |relations| relations.table_logs());
        let definitions: StringArray = (0..rows)
            .map(|row| {
                let oid = oids.is_valid(row).then(|| oids.value(row))?;
                let column = columns
                    .filter(|c| c.is_valid(row))
                    .map_or(0, |c| c.value(row));
                let definition = self.define(&logs, oid, column);
                match self.part {
                    KeyPart::Constraint => Some(definition.unwrap_or_default()),
                    KeyPart::Index => definition,
                }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(definitions) as ArrayRef))
    }
}

impl KeyDefinition {
    fn define(&self, logs: &[Arc<TableLog>], oid: i64, column: i64) -> Option<String> {
        let (owner_id, index, part) = decode_key_oid(oid)?;
        if part != self.part {
            return None;
        }
        let relations = self.relations.upgrade()?;
        let Some(log) = logs.iter().find(|log| log.id() == owner_id) else {
            // An index made with CREATE INDEX has its own id.
            let declared = relations.indexes().into_iter().find(|i| i.id == owner_id)?;
            let names: Vec<String> = declared.columns.iter().map(|c| quote(c)).collect();
            return Some(match column {
                0 => format!(
                    "CREATE INDEX {} ON {} USING {} ({})",
                    quote(relations.reference_of(&declared.name).table()),
                    qualified(&relations, &declared.table),
                    declared.method,
                    names.join(", ")
                ),
                column => names.get(column as usize - 1)?.clone(),
            });
        };
        let key = log.key_constraints().into_iter().nth(index)?;
        let schema = log.schema();
        let names: Vec<String> = key
            .columns
            .iter()
            .map(|&c| quote(schema.field(c).name()))
            .collect();
        Some(match part {
            KeyPart::Index if column > 0 => names.get(column as usize - 1)?.clone(),
            KeyPart::Index => format!(
                "CREATE UNIQUE INDEX {} ON {} USING btree ({})",
                quote(&key.name),
                qualified(&relations, log.name()),
                names.join(", ")
            ),
            KeyPart::Constraint => format!("{} ({})", kind(&key), names.join(", ")),
        })
    }
}

/// `schema.table` as Postgres prints it in a definition.
fn qualified(relations: &Relations, key: &str) -> String {
    let reference = relations.reference_of(key);
    let schema = reference.schema().unwrap_or(crate::catalog::SCHEMA_NAME);
    format!("{}.{}", quote(schema), quote(reference.table()))
}

fn kind(key: &KeyConstraint) -> &'static str {
    if key.primary {
        "PRIMARY KEY"
    } else {
        "UNIQUE"
    }
}

/// `pg_get_expr(expression, relation [, pretty])`: weir's catalog keeps an
/// expression as its SQL text (`pg_attrdef.adbin`), so this returns that
/// text — and NULL for NULL, as Postgres does (the crate's version answers
/// '' for everything, so pgjdbc saw a default on every column).
pub fn expression_text_function() -> ScalarUDF {
    use datafusion::logical_expr::{ScalarFunctionArgs, ScalarUDFImpl, Signature};
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct ExpressionText {
        signature: Signature,
    }
    impl ScalarUDFImpl for ExpressionText {
        fn name(&self) -> &str {
            "pg_get_expr"
        }
        fn signature(&self) -> &Signature {
            &self.signature
        }
        fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
            Ok(DataType::Utf8)
        }
        fn invoke_with_args(
            &self,
            args: ScalarFunctionArgs,
        ) -> datafusion::error::Result<ColumnarValue> {
            let Some(expression) = args.args.first() else {
                return Err(datafusion::error::DataFusionError::Plan(
                    "pg_get_expr takes an expression and a relation".to_string(),
                ));
            };
            let texts = expression.to_array(args.number_rows)?;
            let texts = datafusion::arrow::compute::cast(&texts, &DataType::Utf8)?;
            Ok(ColumnarValue::Array(texts))
        }
    }
    ScalarUDF::new_from_impl(ExpressionText {
        signature: Signature::variadic_any(Volatility::Stable),
    })
}

/// Functions whose answer is always NULL in weir:
/// `pg_get_serial_sequence(table, column)` (weir has no sequences;
/// SQLAlchemy asks for every column) and `col_description(table, column)`
/// (no comments).
pub fn null_functions() -> Vec<ScalarUDF> {
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::create_udf;
    let null = |name: &str, arguments: Vec<DataType>| {
        create_udf(
            name,
            arguments,
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(|_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
        )
    };
    vec![
        null(
            "pg_get_serial_sequence",
            vec![DataType::Utf8, DataType::Utf8],
        ),
        null("col_description", vec![DataType::Int64, DataType::Int64]),
        // weir has no COMMENT ON: every object's description is NULL.
        null("obj_description", vec![DataType::Int64, DataType::Utf8]),
        null("shobj_description", vec![DataType::Int64, DataType::Utf8]),
        // pg_proc lists only built-in functions, which psql's `\df` leaves
        // out; their signatures are not kept in the catalog.
        null("pg_get_function_result", vec![DataType::Int64]),
        null("pg_get_function_arguments", vec![DataType::Int64]),
        // psql's `\sf`: weir has no functions defined in SQL to show.
        null("pg_get_functiondef", vec![DataType::Int64]),
    ]
}
