//! Names as Postgres reads them: unquoted identifiers fold to lower case,
//! quoted ones are kept as written.

use datafusion::common::TableReference;
use datafusion::sql::sqlparser::ast;

/// An identifier's name: `Foo` is `foo`, `"Foo"` is `Foo`.
pub fn identifier(ident: &ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The relation an object name refers to (`t`, `s.t`, `db.s.t`).
pub fn object_reference(name: &ast::ObjectName) -> TableReference {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| match part {
            ast::ObjectNamePart::Identifier(ident) => identifier(ident),
            other => other.to_string(),
        })
        .collect();
    match parts.as_slice() {
        [table] => TableReference::bare(table.as_str()),
        [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
        [catalog, schema, table] => {
            TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
        }
        _ => TableReference::bare(name.to_string()),
    }
}

/// The catalog key an object name spells (`catalog::relation_key`):
/// `t` and `public.t` are `t`, `s.t` is `s.t`; a database name in front
/// is dropped. Whether the schema exists is found when the key is looked
/// up (a key of a schema that does not exist names nothing).
pub fn key_text(name: &ast::ObjectName) -> String {
    crate::catalog::reference_key(&object_reference(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[ast::Ident]) -> ast::ObjectName {
        ast::ObjectName::from(parts.to_vec())
    }

    #[test]
    fn unquoted_names_fold_and_quoted_ones_stay() {
        let reference = object_reference(&name(&[
            ast::Ident::new("Sales"),
            ast::Ident::with_quote('"', "Orders"),
        ]));
        assert_eq!(reference, TableReference::partial("sales", "Orders"));
        assert_eq!(
            object_reference(&name(&[ast::Ident::new("T")])),
            TableReference::bare("t")
        );
        let public = name(&[ast::Ident::new("public"), ast::Ident::new("T")]);
        assert_eq!(key_text(&public), "t");
        let own = name(&[ast::Ident::new("S"), ast::Ident::new("t")]);
        assert_eq!(key_text(&own), "s.t");
    }
}
