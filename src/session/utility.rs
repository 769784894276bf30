//! Statements a session answers itself instead of handing them to
//! DataFusion: transactions, SET / SHOW, SHOW TABLES, COPY FROM STDIN.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    self, CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Expr, Set,
    Value,
};

use crate::connectors::pg_copy::{CopyFormat, CopyOptions};
use crate::error::{Result, WeirError};

#[derive(Debug, Clone, PartialEq)]
pub enum Utility {
    Begin,
    Commit,
    Rollback,
    Savepoint {
        name: String,
    },
    ReleaseSavepoint {
        name: String,
    },
    RollbackTo {
        name: String,
    },
    /// `value` None means DEFAULT.
    Set {
        name: String,
        value: Option<String>,
    },
    /// `SET [SESSION CHARACTERISTICS AS] TRANSACTION …`: with SESSION, the
    /// isolation level later transactions get (None: nothing to keep).
    SetTransaction {
        default_isolation: Option<String>,
    },
    /// `RESET name` (Some) or `RESET ALL` (None).
    Reset {
        name: Option<String>,
    },
    Flush,
    Show {
        name: String,
    },
    ShowAll,
    ShowTables,
    ShowSources,
    ShowMaterializedViews,
    ShowSinks,
    /// CREATE SINK, DROP SINK, SHOW CREATE SINK.
    Sink(crate::sql::sink_ddl::SinkStatement),
    /// CREATE/ALTER/DROP ROLE or USER.
    Role(crate::sql::role_ddl::RoleStatement),
    /// GRANT or REVOKE.
    Privilege(crate::sql::privilege_ddl::PrivilegeStatement),
    AlterRetention(crate::sql::alter_table::AlterRetention),
    /// `value` None is RESET.
    AlterSystem {
        name: String,
        value: Option<String>,
    },
    DropMaterializedView {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `DROP INDEX [IF EXISTS] name, ...`: names as catalog keys.
    DropIndex {
        names: Vec<String>,
        if_exists: bool,
    },
    DropSource {
        names: Vec<String>,
        if_exists: bool,
    },
    ShowCreate {
        name: String,
    },
    Discard,
    /// `PREPARE name AS statement`: the statement, prepared.
    Prepare {
        name: String,
        statement: super::named_statements::Statement,
    },
    /// `EXECUTE name (values)`.
    Execute {
        name: String,
        values: Vec<ast::Expr>,
    },
    /// `DEALLOCATE [PREPARE] name | ALL`: `name` None is ALL.
    Deallocate {
        name: Option<String>,
    },
    CopyFrom {
        table: String,
        columns: Vec<String>,
        options: CopyOptions,
    },
    /// `COPY table [(columns)] | (query) TO STDOUT`: the query to run.
    CopyTo {
        query: String,
        options: CopyOptions,
    },
}

impl Utility {
    /// The columns the statement returns (none for commands).
    pub fn result_schema(&self) -> SchemaRef {
        let text = |name: &str| Field::new(name, DataType::Utf8, false);
        let fields = match self {
            Utility::Show { name } => vec![text(name)],
            Utility::ShowAll => vec![text("name"), text("setting")],
            Utility::ShowTables
            | Utility::ShowSources
            | Utility::ShowMaterializedViews
            | Utility::ShowSinks => vec![text("Name")],
            Utility::ShowCreate { .. }
            | Utility::Sink(crate::sql::sink_ddl::SinkStatement::ShowCreate { .. }) => {
                vec![text("Name"), text("Create Sql")]
            }
            _ => vec![],
        };
        Arc::new(Schema::new(fields))
    }
}

/// Recognises a utility statement; `None` means "plan it with DataFusion".
pub fn classify(statement: &ast::Statement) -> Result<Option<Utility>> {
    let utility = match statement {
        ast::Statement::StartTransaction { modes, .. } => {
            if let Some(level) = isolation_level(modes) {
                super::settings::check_isolation_level(&level)?;
            }
            Utility::Begin
        }
        ast::Statement::Rollback { chain: true, .. }
        | ast::Statement::Commit { chain: true, .. } => {
            return Err(WeirError::unsupported("AND CHAIN is not supported")
                .with_hint("End the block, then BEGIN a new one."))
        }
        ast::Statement::Commit { .. } => Utility::Commit,
        ast::Statement::Rollback {
            savepoint: None, ..
        } => Utility::Rollback,
        ast::Statement::Rollback {
            savepoint: Some(name),
            ..
        } => Utility::RollbackTo {
            name: normalize_identifier(&name.to_string()),
        },
        ast::Statement::Savepoint { name } => Utility::Savepoint {
            name: normalize_identifier(&name.to_string()),
        },
        ast::Statement::ReleaseSavepoint { name } => Utility::ReleaseSavepoint {
            name: normalize_identifier(&name.to_string()),
        },
        ast::Statement::Set(set) => classify_set(set)?,
        ast::Statement::Reset(reset) => Utility::Reset {
            name: match &reset.reset {
                ast::Reset::ALL => None,
                ast::Reset::ConfigurationParameter(name) => {
                    Some(name.to_string().to_ascii_lowercase())
                }
            },
        },
        ast::Statement::ShowVariable { variable } => classify_show(variable),
        ast::Statement::ShowTables { .. } => Utility::ShowTables,
        ast::Statement::ShowViews {
            materialized: true, ..
        } => Utility::ShowMaterializedViews,
        ast::Statement::Drop {
            object_type: ast::ObjectType::Index,
            if_exists,
            names,
            ..
        } => Utility::DropIndex {
            names: names.iter().map(crate::sql::names::key_text).collect(),
            if_exists: *if_exists,
        },
        ast::Statement::Drop {
            object_type: ast::ObjectType::MaterializedView,
            if_exists,
            names,
            cascade,
            ..
        } => {
            if *cascade {
                return Err(WeirError::unsupported("DROP ... CASCADE is not supported")
                    .with_hint("Drop the views that depend on it first."));
            }
            Utility::DropMaterializedView {
                names: names.iter().map(crate::sql::names::key_text).collect(),
                if_exists: *if_exists,
            }
        }
        ast::Statement::ShowCreate { obj_name, .. } => Utility::ShowCreate {
            name: crate::sql::names::key_text(obj_name),
        },
        ast::Statement::Discard { .. } => Utility::Discard,
        // psycopg sends DEALLOCATE ALL after a DROP or ALTER once it has
        // prepared statements.
        ast::Statement::Deallocate { name, .. } => Utility::Deallocate {
            name: (name.quote_style.is_some() || !name.value.eq_ignore_ascii_case("all"))
                .then(|| name.value.clone()),
        },
        ast::Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        } => classify_copy(source, *to, target, options, legacy_options)?,
        _ => return Ok(None),
    };
    Ok(Some(utility))
}

fn classify_set(set: &Set) -> Result<Utility> {
    match set {
        Set::SingleAssignment {
            variable, values, ..
        } => Ok(Utility::Set {
            name: variable.to_string().to_ascii_lowercase(),
            value: setting_value(values),
        }),
        Set::SetTimeZone { value, .. } => Ok(Utility::Set {
            name: "timezone".to_string(),
            value: setting_value(std::slice::from_ref(value)),
        }),
        Set::SetTransaction { modes, session, .. } => {
            let level = isolation_level(modes);
            if let Some(level) = &level {
                super::settings::check_isolation_level(level)?;
            }
            Ok(Utility::SetTransaction {
                default_isolation: level.filter(|_| *session),
            })
        }
        other => Err(WeirError::unsupported(format!("{other} is not supported"))),
    }
}

/// The isolation level named among transaction modes, lower case as
/// Postgres shows it (`read committed`).
fn isolation_level(modes: &[ast::TransactionMode]) -> Option<String> {
    modes.iter().rev().find_map(|mode| match mode {
        ast::TransactionMode::IsolationLevel(level) => Some(level.to_string().to_ascii_lowercase()),
        ast::TransactionMode::AccessMode(_) => None,
    })
}

/// Renders SET's value list the way Postgres stores it; DEFAULT is None.
fn setting_value(values: &[Expr]) -> Option<String> {
    let parts: Vec<String> = values
        .iter()
        .map(|value| match value {
            Expr::Value(value) => match &value.value {
                Value::SingleQuotedString(text) | Value::DoubleQuotedString(text) => text.clone(),
                other => other.to_string(),
            },
            Expr::Identifier(identifier) => identifier.value.clone(),
            other => other.to_string(),
        })
        .collect();
    if parts.len() == 1 && parts[0].eq_ignore_ascii_case("default") {
        return None;
    }
    Some(parts.join(", "))
}

fn classify_show(variable: &[ast::Ident]) -> Utility {
    let words: Vec<String> = variable
        .iter()
        .map(|ident| ident.value.to_ascii_lowercase())
        .collect();
    let name = match words.join(" ").as_str() {
        "all" => return Utility::ShowAll,
        "tables" => return Utility::ShowTables,
        "sources" => return Utility::ShowSources,
        "materialized views" => return Utility::ShowMaterializedViews,
        "sinks" => return Utility::ShowSinks,
        "time zone" => "timezone".to_string(),
        "transaction isolation level" => "transaction_isolation".to_string(),
        _ => words.join("."),
    };
    Utility::Show { name }
}

/// The options of `COPY (query) TO STDOUT …` written out as `copy`.
pub fn copy_to_options(copy: &str) -> Result<CopyOptions> {
    let statement = match crate::sql::parse(copy)?.pop() {
        Some(crate::sql::Statement::Standard(statement)) => statement,
        _ => return Err(WeirError::syntax("COPY ( SUBSCRIBE … ) TO STDOUT expected")),
    };
    match classify(&statement)? {
        Some(Utility::CopyTo { options, .. }) => Ok(options),
        _ => Err(WeirError::syntax("COPY ( SUBSCRIBE … ) goes TO STDOUT")
            .with_hint("Write COPY (SUBSCRIBE view) TO STDOUT.")),
    }
}

fn classify_copy(
    source: &CopySource,
    to: bool,
    target: &CopyTarget,
    options: &[CopyOption],
    legacy_options: &[CopyLegacyOption],
) -> Result<Utility> {
    let copy_options = copy_options(options, legacy_options)?;
    if to {
        let query = match (source, target) {
            (_, target) if !matches!(target, CopyTarget::Stdout) => {
                return Err(
                    WeirError::unsupported("COPY … TO a file is not supported").with_hint(
                        "COPY … TO STDOUT, or psql's \\copy … TO 'file', writes on the client.",
                    ),
                )
            }
            (CopySource::Query(query), _) => query.to_string(),
            (
                CopySource::Table {
                    table_name,
                    columns,
                },
                _,
            ) => {
                let list: Vec<String> = columns.iter().map(ToString::to_string).collect();
                let list = if list.is_empty() {
                    "*".to_string()
                } else {
                    list.join(", ")
                };
                format!("SELECT {list} FROM {table_name}")
            }
        };
        return Ok(Utility::CopyTo {
            query,
            options: copy_options,
        });
    }
    let (
        CopySource::Table {
            table_name,
            columns,
        },
        CopyTarget::Stdin,
    ) = (source, target)
    else {
        return Err(
            WeirError::unsupported("COPY … FROM a file is not supported")
                .with_hint("Use COPY … FROM STDIN; psql's \\copy reads local files through STDIN."),
        );
    };
    Ok(Utility::CopyFrom {
        table: crate::sql::names::key_text(table_name),
        columns: columns.iter().map(column_name).collect(),
        options: copy_options,
    })
}

fn column_name(ident: &ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// Unquoted names fold to lower case, as DataFusion and Postgres do.
fn normalize_identifier(name: &str) -> String {
    match name
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => name.to_ascii_lowercase(),
    }
}

fn copy_options(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyOptions> {
    let mut format = CopyFormat::Text;
    for option in options {
        if let CopyOption::Format(name) = option {
            format = match name.value.to_ascii_lowercase().as_str() {
                "text" => CopyFormat::Text,
                "csv" => CopyFormat::Csv,
                other => {
                    return Err(WeirError::unsupported(format!(
                        "COPY format {other} is not supported"
                    ))
                    .with_hint("Use FORMAT text or FORMAT csv."))
                }
            };
        }
    }
    if legacy
        .iter()
        .any(|option| matches!(option, CopyLegacyOption::Csv(_)))
    {
        format = CopyFormat::Csv;
    }
    let mut result = CopyOptions::new(format);
    for option in options {
        match option {
            CopyOption::Format(_) | CopyOption::Freeze(_) => {}
            CopyOption::Delimiter(delimiter) => result.delimiter = *delimiter,
            CopyOption::Null(null) => result.null = null.clone(),
            CopyOption::Header(header) => result.header = *header,
            CopyOption::Quote(quote) => result.quote = *quote,
            CopyOption::Escape(escape) => result.escape = *escape,
            CopyOption::Encoding(encoding) if encoding.eq_ignore_ascii_case("utf8") => {}
            other => {
                return Err(WeirError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Delimiter(delimiter) => result.delimiter = *delimiter,
            CopyLegacyOption::Null(null) => result.null = null.clone(),
            CopyLegacyOption::Csv(csv_options) => {
                for csv_option in csv_options {
                    match csv_option {
                        CopyLegacyCsvOption::Header => result.header = true,
                        CopyLegacyCsvOption::Quote(quote) => result.quote = *quote,
                        CopyLegacyCsvOption::Escape(escape) => result.escape = *escape,
                        other => {
                            return Err(WeirError::unsupported(format!(
                                "COPY option {other} is not supported"
                            )))
                        }
                    }
                }
            }
            other => {
                return Err(WeirError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    for (name, value) in [
        ("delimiter", result.delimiter),
        ("quote", result.quote),
        ("escape", result.escape),
    ] {
        if !value.is_ascii() {
            // Postgres's rule; the data is scanned byte by byte.
            return Err(WeirError::unsupported(format!(
                "COPY {name} must be a single one-byte character"
            ))
            .with_hint("Use an ASCII character."));
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{parse, Statement};

    fn classify_sql(sql: &str) -> Option<Utility> {
        let Statement::Standard(statement) = parse(sql).unwrap().remove(0) else {
            panic!("not a standard statement");
        };
        classify(&statement).unwrap()
    }

    #[test]
    fn transactions_and_settings() {
        assert_eq!(classify_sql("BEGIN"), Some(Utility::Begin));
        assert_eq!(classify_sql("START TRANSACTION"), Some(Utility::Begin));
        assert_eq!(classify_sql("COMMIT"), Some(Utility::Commit));
        assert_eq!(
            classify_sql("SET DateStyle = 'ISO', 'MDY'"),
            Some(Utility::Set {
                name: "datestyle".into(),
                value: Some("ISO, MDY".into())
            })
        );
        assert_eq!(
            classify_sql("SET TIME ZONE 'UTC'"),
            Some(Utility::Set {
                name: "timezone".into(),
                value: Some("UTC".into())
            })
        );
        assert_eq!(
            classify_sql("SET application_name TO DEFAULT"),
            Some(Utility::Set {
                name: "application_name".into(),
                value: None
            })
        );
        assert_eq!(
            classify_sql("SHOW TRANSACTION ISOLATION LEVEL"),
            Some(Utility::Show {
                name: "transaction_isolation".into()
            })
        );
        assert_eq!(classify_sql("SHOW ALL"), Some(Utility::ShowAll));
        assert_eq!(classify_sql("SHOW TABLES"), Some(Utility::ShowTables));
        assert_eq!(classify_sql("SELECT 1"), None);
    }

    #[test]
    fn copy_options_both_spellings() {
        let Some(Utility::CopyFrom {
            table,
            columns,
            options,
        }) = classify_sql(
            "COPY Orders (id, \"Name\") FROM STDIN WITH (FORMAT csv, HEADER true, DELIMITER ';')",
        )
        else {
            panic!("not a copy");
        };
        assert_eq!(table, "orders");
        assert_eq!(columns, vec!["id".to_string(), "Name".to_string()]);
        assert_eq!(options.format, CopyFormat::Csv);
        assert!(options.header);
        assert_eq!(options.delimiter, ';');

        let Some(Utility::CopyFrom { options, .. }) = classify_sql("COPY t FROM STDIN CSV HEADER")
        else {
            panic!("not a copy");
        };
        assert_eq!(options.format, CopyFormat::Csv);
        assert!(options.header);
    }

    #[test]
    fn copy_to_stdout_is_a_query_and_copy_to_a_file_is_refused() {
        let classify_one = |sql: &str| {
            let Statement::Standard(statement) = parse(sql).unwrap().remove(0) else {
                panic!("not a standard statement");
            };
            classify(&statement)
        };
        let Ok(Some(Utility::CopyTo { query, options })) =
            classify_one("COPY t (a, b) TO STDOUT WITH (FORMAT csv)")
        else {
            panic!("COPY TO STDOUT");
        };
        assert_eq!(query, "SELECT a, b FROM t");
        assert_eq!(options.format, CopyFormat::Csv);
        let Ok(Some(Utility::CopyTo { query, .. })) = classify_one("COPY (SELECT 1) TO STDOUT")
        else {
            panic!("COPY (query) TO STDOUT");
        };
        assert_eq!(query, "SELECT 1");
        assert_eq!(
            classify_one("COPY t TO '/tmp/f'").unwrap_err().code,
            "0A000"
        );
        assert_eq!(
            classify_one("COPY t FROM '/tmp/f'").unwrap_err().code,
            "0A000"
        );
    }
}
