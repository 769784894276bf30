//! What one statement does on one server, through both protocols: the
//! column types the extended protocol describes, the rows in binary (raw
//! bytes, as a driver receives them) and in text (the simple protocol), or
//! the SQLSTATE of the first error.

use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Rows {
        types: Vec<String>,
        text: Vec<Vec<Option<String>>>,
        binary: Vec<Vec<Option<Vec<u8>>>>,
    },
    Error {
        sqlstate: String,
        message: String,
    },
}

/// A column value as the bytes the server sent, whatever its type.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn error(error: tokio_postgres::Error) -> Outcome {
    match error.as_db_error() {
        Some(db) => Outcome::Error {
            sqlstate: db.code().code().to_string(),
            message: db.message().to_string(),
        },
        // No SQLSTATE: the connection broke (a server panic, a protocol
        // error). Never equal to a server's answer.
        None => Outcome::Error {
            sqlstate: "connection".to_string(),
            message: error.to_string(),
        },
    }
}

/// Runs `sql` through the extended protocol, then the simple one. Rows are
/// sorted unless `ordered` (the statement's ORDER BY fixes their order).
pub async fn run(client: &Client, sql: &str, ordered: bool) -> Outcome {
    let statement = match client.prepare(sql).await {
        Ok(statement) => statement,
        Err(failure) => return error(failure),
    };
    let types = statement
        .columns()
        .iter()
        .map(|column| column.type_().name().to_string())
        .collect();
    let mut binary: Vec<Vec<Option<Vec<u8>>>> = match client.query(&statement, &[]).await {
        Ok(rows) => rows
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|index| row.get::<_, Option<Raw>>(index).map(|raw| raw.0))
                    .collect()
            })
            .collect(),
        Err(failure) => return error(failure),
    };
    let mut text = match client.simple_query(sql).await {
        Ok(messages) => text_rows(messages),
        Err(failure) => return error(failure),
    };
    if !ordered {
        binary.sort();
        text.sort();
    }
    Outcome::Rows {
        types,
        text,
        binary,
    }
}

/// Runs a statement that returns no rows (DDL, DML) in the simple protocol.
pub async fn execute(client: &Client, sql: &str) -> Result<(), Outcome> {
    client.batch_execute(sql).await.map_err(error)
}

fn text_rows(messages: Vec<SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|index| row.get(index).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// How two outcomes differ, in the allow-list's words: `error` (one
/// failed, or they failed with different SQLSTATEs), `type` (column
/// types), `text` (text rows), `binary` (binary rows only).
pub struct Difference {
    pub kind: &'static str,
    /// For `error`: PostgreSQL's SQLSTATE and weir's, `ok` where it worked.
    pub states: (String, String),
}

fn state(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Error { sqlstate, .. } => sqlstate.clone(),
        Outcome::Rows { .. } => "ok".to_string(),
    }
}

/// None when the two agree.
pub fn difference(postgres: &Outcome, weir: &Outcome) -> Option<Difference> {
    let kind = match (postgres, weir) {
        (Outcome::Error { sqlstate: a, .. }, Outcome::Error { sqlstate: b, .. }) if a == b => {
            return None
        }
        (Outcome::Error { .. }, _) | (_, Outcome::Error { .. }) => "error",
        (
            Outcome::Rows {
                types: postgres_types,
                text: postgres_text,
                binary: postgres_binary,
            },
            Outcome::Rows {
                types,
                text,
                binary,
            },
        ) => {
            if postgres_text != text {
                "text"
            } else if postgres_types != types {
                "type"
            } else if postgres_binary != binary {
                "binary"
            } else {
                return None;
            }
        }
    };
    Some(Difference {
        kind,
        states: (state(postgres), state(weir)),
    })
}

/// A short rendering for a report.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Error { sqlstate, message } => format!("ERROR {sqlstate}: {message}"),
        Outcome::Rows {
            types,
            text,
            binary,
        } => {
            let rows: Vec<String> = text
                .iter()
                .take(6)
                .map(|row| {
                    let cells: Vec<&str> = row
                        .iter()
                        .map(|cell| cell.as_deref().unwrap_or("NULL"))
                        .collect();
                    format!("({})", cells.join(", "))
                })
                .collect();
            let first_binary: Vec<String> = binary
                .first()
                .map(|row| {
                    row.iter()
                        .map(|cell| match cell {
                            None => "NULL".to_string(),
                            Some(bytes) => hex(bytes),
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "[{}] {} rows: {}{} binary[0]: {}",
                types.join(", "),
                text.len(),
                rows.join(" "),
                if text.len() > 6 { " …" } else { "" },
                first_binary.join(" ")
            )
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(32)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
