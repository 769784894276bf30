//! `search_path`: which schemas a bare relation name is looked up in, and
//! where a bare name is created. With the default path (`public`) nothing
//! changes. With another, each statement's bare relation names are
//! qualified before it is planned: a name refers to the first schema on
//! the path that has it, a created relation goes to the first schema on
//! the path that exists. The statement is stored qualified (a view's text
//! in the catalog), so a view means after a restart what it meant when it
//! was made, whatever the path is then — as Postgres binds names at
//! CREATE VIEW.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, Visit, Visitor};
use datafusion::sql::sqlparser::tokenizer::Location;

use super::Session;
use crate::catalog::{relation_key, SCHEMA_NAME};
use crate::engine::relations::Relations;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql;

impl Session {
    /// `statement` with its bare relation names qualified by the session's
    /// search path (unchanged on the default path).
    pub(super) fn on_search_path(&self, statement: sql::Statement) -> Result<sql::Statement> {
        let setting = self.settings().get("search_path")?;
        let path = schemas(&setting, &self.actor().name, self.engine.relations());
        if path == [SCHEMA_NAME] {
            return Ok(statement);
        }
        let (text, explain) = match &statement {
            sql::Statement::Standard(standard) => (standard.to_string(), false),
            sql::Statement::CreateTable { text, .. } => (text.clone(), false),
            sql::Statement::CreateMaterializedView(view) => (view.text.clone(), view.explain),
            _ => return Ok(statement),
        };
        let Some(qualified) = qualify(&text, &path, self.engine.relations())? else {
            return Ok(statement);
        };
        let mut reparsed = sql::parse(&qualified)?;
        match (reparsed.pop(), reparsed.is_empty()) {
            (Some(sql::Statement::CreateMaterializedView(mut view)), true) => {
                view.explain = explain;
                Ok(sql::Statement::CreateMaterializedView(view))
            }
            (Some(statement), true) => Ok(statement),
            _ => Err(WeirError::internal(format!(
                "qualifying names on the search path changed the statement: {qualified}"
            ))),
        }
    }
}

/// The schemas on a `search_path` setting that exist, in order; `$user`
/// is the session's role.
pub fn schemas(setting: &str, role: &str, relations: &Relations) -> Vec<String> {
    setting
        .split(',')
        .map(|item| {
            let item = item.trim();
            match item.strip_prefix('"').and_then(|i| i.strip_suffix('"')) {
                Some(quoted) => quoted.replace("\"\"", "\""),
                None => item.to_lowercase(),
            }
        })
        .map(|name| {
            if name == "$user" {
                role.to_string()
            } else {
                name
            }
        })
        .filter(|name| relations.schema_exists(name))
        .collect()
}

/// `text` (one statement) with each bare relation name qualified by the
/// schema of `path` it resolves to; None when no name needs it.
pub fn qualify(text: &str, path: &[String], relations: &Relations) -> Result<Option<String>> {
    let Some(statement) = sql::parse(text)?.pop() else {
        return Ok(None);
    };
    let Some(syntax) = syntax_of(&statement) else {
        return Ok(None);
    };
    let mut edits: Vec<(Location, String)> = Vec::new();
    let created = created_name(syntax);
    if let Some(name) = created.and_then(bare) {
        let schema = path.first().ok_or_else(no_schema_selected)?;
        if schema != SCHEMA_NAME {
            edits.push((name.span.start, schema.clone()));
        }
    }
    let common_tables = common_table_names(syntax);
    let mut references = Vec::new();
    let _ = ast::visit_relations(syntax, |name| {
        references.push(name.clone());
        ControlFlow::<()>::Continue(())
    });
    references.extend(dropped_names(syntax));
    for name in &references {
        let Some(ident) = bare(name) else { continue };
        let skip = created.and_then(bare).is_some_and(|c| c.span == ident.span);
        let local = sql::names::identifier(ident);
        if skip || common_tables.contains(&local) {
            continue;
        }
        let found = path.iter().find(|schema| exists(relations, schema, &local));
        if let Some(schema) = found.filter(|schema| *schema != SCHEMA_NAME) {
            edits.push((ident.span.start, schema.clone()));
        }
    }
    Ok(apply(text, edits))
}

fn syntax_of(statement: &sql::Statement) -> Option<&ast::Statement> {
    match statement {
        sql::Statement::Standard(statement) => Some(statement),
        sql::Statement::CreateTable { statement, .. } => Some(statement),
        sql::Statement::CreateMaterializedView(view) => Some(&view.statement),
        _ => None,
    }
}

/// The one identifier of an unqualified name with a known place.
fn bare(name: &ast::ObjectName) -> Option<&ast::Ident> {
    match name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(ident)] if ident.span.start.line > 0 => Some(ident),
        _ => None,
    }
}

fn exists(relations: &Relations, schema: &str, name: &str) -> bool {
    let key = relation_key(schema, name);
    relations.get(&key).is_some()
        || relations.provider(&key).is_some()
        || relations.index(&key).is_some()
}

fn created_name(statement: &ast::Statement) -> Option<&ast::ObjectName> {
    match statement {
        ast::Statement::CreateTable(create) => Some(&create.name),
        ast::Statement::CreateView(create) => Some(&create.name),
        _ => None,
    }
}

fn dropped_names(statement: &ast::Statement) -> Vec<ast::ObjectName> {
    match statement {
        ast::Statement::Drop { names, .. } => names.clone(),
        _ => Vec::new(),
    }
}

/// Names of the statement's WITH queries: they are not relations.
fn common_table_names(statement: &ast::Statement) -> HashSet<String> {
    struct Names(HashSet<String>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_query(&mut self, query: &ast::Query) -> ControlFlow<()> {
            for table in query.with.iter().flat_map(|with| &with.cte_tables) {
                self.0.insert(sql::names::identifier(&table.alias.name));
            }
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(HashSet::new());
    let _ = statement.visit(&mut names);
    names.0
}

/// Inserts `"schema".` at each location (line and column, from 1).
fn apply(text: &str, mut edits: Vec<(Location, String)>) -> Option<String> {
    if edits.is_empty() {
        return None;
    }
    edits.sort_by_key(|(at, _)| std::cmp::Reverse((at.line, at.column)));
    edits.dedup_by_key(|(at, _)| (at.line, at.column));
    let mut result = text.to_string();
    for (at, schema) in edits {
        let offset = byte_offset(text, at)?;
        let quoted = format!("\"{}\".", schema.replace('"', "\"\""));
        result.insert_str(offset, &quoted);
    }
    Some(result)
}

fn byte_offset(text: &str, at: Location) -> Option<usize> {
    let mut line_start = 0;
    for _ in 1..at.line {
        line_start += text[line_start..].find('\n')? + 1;
    }
    let column = usize::try_from(at.column).ok()?.checked_sub(1)?;
    let offset = text[line_start..]
        .char_indices()
        .nth(column)
        .map_or(text.len(), |(offset, _)| line_start + offset);
    Some(offset)
}

fn no_schema_selected() -> WeirError {
    WeirError::new(
        sqlstate::INVALID_SCHEMA_NAME,
        "no schema has been selected to create in",
    )
    .with_hint("SET search_path to a schema that exists, or name the schema.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_go_before_the_names_they_qualify() {
        let text = "SELECT *\nFROM orders o JOIN \"Shops\" s ON true";
        let edits = vec![
            (Location::new(2, 6), "sales".to_string()),
            (Location::new(2, 20), "my \"x\"".to_string()),
        ];
        assert_eq!(
            apply(text, edits).unwrap(),
            "SELECT *\nFROM \"sales\".orders o JOIN \"my \"\"x\"\"\".\"Shops\" s ON true"
        );
    }

    #[test]
    fn no_edit_leaves_the_text() {
        assert_eq!(apply("SELECT 1", Vec::new()), None);
    }
}
