//! View definitions as Postgres shows them: `pg_views` and `pg_matviews`
//! list weir's views and materialized views (datafusion-pg-catalog lists
//! none), and `pg_get_viewdef(oid)` gives a view's query. The function sees
//! oids only, so it reads them from the last pg_catalog scan (`OidNames`,
//! filled whenever a corrected table is scanned — a query calling it on
//! `c.oid` scans pg_class first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::sql::dialect::WeirDialect;
use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::context::{oid_argument, CatalogContext};
use super::rows::{append, flag, text, Row};
use crate::catalog::{RelationDefinition, RelationKind};
use crate::engine::relations::Relations;

/// The names of relation oids seen in the last pg_catalog scan: public's
/// relations by name, pg_catalog's under one marker name.
pub type OidNames = Arc<Mutex<HashMap<i64, String>>>;

/// The query of a CREATE [MATERIALIZED] VIEW statement: what follows its
/// first top-level AS.
pub fn query_text(create: &str) -> Option<String> {
    let tokens = Tokenizer::new(&WeirDialect::new(), create)
        .tokenize()
        .ok()?;
    let mut depth = 0i32;
    let start = tokens.iter().position(|token| {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        depth == 0 && matches!(token, Token::Word(word) if word.keyword == Keyword::AS)
    })?;
    let query: String = tokens[start + 1..].iter().map(Token::to_string).collect();
    Some(format!(" {};", query.trim()))
}

fn views_of(context: &CatalogContext, kind: RelationKind) -> Vec<RelationDefinition> {
    let mut views: Vec<_> = context
        .relations
        .definitions()
        .into_iter()
        .filter(|definition| definition.kind == kind)
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

pub fn add_views(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows: Vec<Row> = views_of(context, RelationKind::View)
        .into_iter()
        .map(|view| {
            vec![
                ("schemaname", text("public")),
                ("viewname", text(&view.name)),
                ("viewowner", text("weir")),
                (
                    "definition",
                    text(query_text(&view.sql).unwrap_or_default()),
                ),
            ]
        })
        .collect();
    append(batch, &rows)
}

pub fn add_materialized_views(batch: RecordBatch, context: &CatalogContext) -> Result<RecordBatch> {
    let rows: Vec<Row> = views_of(context, RelationKind::MaterializedView)
        .into_iter()
        .map(|view| {
            vec![
                ("schemaname", text("public")),
                ("matviewname", text(&view.name)),
                ("matviewowner", text("weir")),
                ("hasindexes", flag(false)),
                ("ispopulated", flag(true)),
                (
                    "definition",
                    text(query_text(&view.sql).unwrap_or_default()),
                ),
            ]
        })
        .collect();
    append(batch, &rows)
}

pub fn view_definition_function(relations: &Arc<Relations>, names: &OidNames) -> ScalarUDF {
    ScalarUDF::new_from_impl(ViewDefinition {
        relations: Arc::downgrade(relations),
        names: names.clone(),
        signature: Signature::variadic_any(Volatility::Stable),
    })
}

#[derive(Debug)]
struct ViewDefinition {
    relations: Weak<Relations>,
    names: OidNames,
    signature: Signature,
}

impl PartialEq for ViewDefinition {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ViewDefinition {}

impl std::hash::Hash for ViewDefinition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl ScalarUDFImpl for ViewDefinition {
    fn name(&self) -> &str {
        "pg_get_viewdef"
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
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let relations = self.relations.upgrade();
        let definitions: StringArray = (0..rows)
            .map(|row| {
                let oid = oids.is_valid(row).then(|| oids.value(row))?;
                let definition = relations.as_ref()?.get(names.get(&oid)?)?;
                let is_view = definition.kind != RelationKind::Table;
                is_view.then(|| query_text(&definition.sql)).flatten()
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(definitions) as ArrayRef))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_follows_the_first_top_level_as() {
        assert_eq!(
            query_text("CREATE VIEW v (a) AS SELECT x AS a FROM t").as_deref(),
            Some(" SELECT x AS a FROM t;")
        );
        assert_eq!(query_text("CREATE TABLE t (a INT)"), None);
    }
}
