//! Runs every `sql-tests/*.slt` file over pgwire against a live server, once
//! with the simple query protocol and once with the extended protocol.

mod common;

use std::path::PathBuf;

use async_trait::async_trait;
use sqllogictest::{DBOutput, DefaultColumnType};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Simple,
    Extended,
}

struct Weir {
    client: Client,
    protocol: Protocol,
}

#[derive(Debug)]
struct WeirError(tokio_postgres::Error);

impl std::fmt::Display for WeirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            // The SQLSTATE first, so an expected-error regex can check both.
            Some(db) => write!(f, "{}: {}", db.code().code(), db.message()),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for WeirError {}

#[async_trait]
impl sqllogictest::AsyncDB for Weir {
    type Error = WeirError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, WeirError> {
        match self.protocol {
            Protocol::Simple => run_simple(&self.client, sql).await,
            Protocol::Extended => run_extended(&self.client, sql).await,
        }
        .map_err(WeirError)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }

    fn error_sql_state(error: &WeirError) -> Option<String> {
        error.0.code().map(|code| code.code().to_string())
    }
}

fn text_cell(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_string(),
        Some("") => "(empty)".to_string(),
        Some(text) => text.to_string(),
    }
}

async fn run_simple(
    client: &Client,
    sql: &str,
) -> Result<DBOutput<DefaultColumnType>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    let mut rows = Vec::new();
    let mut is_query = false;
    let mut count = 0;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => {
                is_query = true;
                rows.push(
                    (0..row.len())
                        .map(|index| text_cell(row.get(index)))
                        .collect(),
                );
            }
            SimpleQueryMessage::RowDescription(_) => is_query = true,
            SimpleQueryMessage::CommandComplete(rows_affected) => count = rows_affected,
            _ => {}
        }
    }
    if is_query {
        let width = rows.first().map_or(0, |row: &Vec<String>| row.len());
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    } else {
        Ok(DBOutput::StatementComplete(count))
    }
}

async fn run_extended(
    client: &Client,
    sql: &str,
) -> Result<DBOutput<DefaultColumnType>, tokio_postgres::Error> {
    let statement = client.prepare(sql).await?;
    if statement.columns().is_empty() {
        let count = client.execute(&statement, &[]).await?;
        return Ok(DBOutput::StatementComplete(count));
    }
    let rows = client.query(&statement, &[]).await?;
    let rendered = rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|index| render_binary(row, index, row.columns()[index].type_()))
                .collect()
        })
        .collect();
    Ok(DBOutput::Rows {
        types: vec![DefaultColumnType::Any; statement.columns().len()],
        rows: rendered,
    })
}

/// Renders a binary-format value the way Postgres prints it as text, so the
/// same expected results hold for both protocols.
fn render_binary(row: &tokio_postgres::Row, index: usize, column_type: &Type) -> String {
    fn cell<T: ToString>(value: Option<T>) -> String {
        value.map_or("NULL".to_string(), |value| value.to_string())
    }
    match *column_type {
        Type::BOOL => row
            .get::<_, Option<bool>>(index)
            .map_or("NULL".to_string(), |value| {
                if value { "t" } else { "f" }.to_string()
            }),
        Type::INT2 => cell(row.get::<_, Option<i16>>(index)),
        Type::INT4 => cell(row.get::<_, Option<i32>>(index)),
        Type::INT8 => cell(row.get::<_, Option<i64>>(index)),
        Type::FLOAT4 => cell(row.get::<_, Option<f32>>(index)),
        Type::FLOAT8 => cell(row.get::<_, Option<f64>>(index)),
        // Unconstrained NUMERIC travels with scale 10 in binary; its text
        // form drops the trailing zeros (server::text_format), and so here.
        Type::NUMERIC => cell(row.get::<_, Option<Numeric>>(index)),
        Type::DATE => cell(row.get::<_, Option<chrono::NaiveDate>>(index)),
        Type::TIMESTAMP => row
            .get::<_, Option<chrono::NaiveDateTime>>(index)
            .map_or("NULL".to_string(), |value| postgres_timestamp(value, "")),
        Type::TIMESTAMPTZ => row
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>(index)
            .map_or("NULL".to_string(), |value| {
                postgres_timestamp(value.naive_utc(), "+00")
            }),
        Type::INTERVAL => cell(row.get::<_, Option<Interval>>(index)),
        Type::BYTEA => row
            .get::<_, Option<Vec<u8>>>(index)
            .map_or("NULL".to_string(), |bytes| {
                let digits: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
                format!("\\x{digits}")
            }),
        // int2vector and oidvector print their elements separated by spaces.
        Type::INT2_VECTOR => vector(row.get::<_, Option<Vec<i16>>>(index)),
        Type::OID_VECTOR => vector(row.get::<_, Option<Vec<u32>>>(index)),
        _ => match row.try_get::<_, Option<&str>>(index) {
            Ok(value) => text_cell(value),
            Err(_) => format!("<binary {column_type}: not rendered by the test harness>"),
        },
    }
}

fn vector<T: ToString>(elements: Option<Vec<T>>) -> String {
    elements.map_or("NULL".to_string(), |elements| {
        let texts: Vec<String> = elements.iter().map(T::to_string).collect();
        texts.join(" ")
    })
}

/// A NUMERIC in the binary format, decoded exactly (rust_decimal holds 28
/// digits; a numeric(38, 10) can have more). Unconstrained NUMERIC
/// travels with scale 10 in binary; its text form drops the trailing zeros
/// (server::text_format), and so here.
struct Numeric(String);

impl<'a> tokio_postgres::types::FromSql<'a> for Numeric {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let field = |at: usize| i16::from_be_bytes([raw[at], raw[at + 1]]);
        let (count, weight, sign, scale) = (field(0), field(2), field(4) as u16, field(6) as usize);
        let groups: Vec<i16> = (0..count as usize)
            .map(|index| field(8 + 2 * index))
            .collect();
        let group = |position: i32| -> i16 {
            let index = weight as i32 - position;
            usize::try_from(index)
                .ok()
                .and_then(|index| groups.get(index))
                .copied()
                .unwrap_or(0)
        };
        let whole: String = (0..=weight.max(0) as i32)
            .rev()
            .map(|position| format!("{:04}", group(position)))
            .collect();
        let whole = whole.trim_start_matches('0');
        let fraction: String = (1..=scale.div_ceil(4) as i32)
            .map(|position| format!("{:04}", group(-position)))
            .collect();
        let mut text = format!(
            "{}{}",
            if sign == 0x4000 { "-" } else { "" },
            if whole.is_empty() { "0" } else { whole }
        );
        if scale > 0 {
            text = format!("{text}.{}", &fraction[..scale]);
        }
        if scale == 10 {
            text = text.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        Ok(Numeric(text))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

impl std::fmt::Display for Numeric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Postgres prints fractions of a second without trailing zeros.
/// An interval in the binary format: microseconds, days, months.
struct Interval {
    microseconds: i64,
    days: i32,
    months: i32,
}

impl<'a> tokio_postgres::types::FromSql<'a> for Interval {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 16] = raw.try_into()?;
        let (microseconds, rest) = bytes.split_at(8);
        let (days, months) = rest.split_at(4);
        Ok(Interval {
            microseconds: i64::from_be_bytes(microseconds.try_into()?),
            days: i32::from_be_bytes(days.try_into()?),
            months: i32::from_be_bytes(months.try_into()?),
        })
    }

    fn accepts(column_type: &Type) -> bool {
        *column_type == Type::INTERVAL
    }
}

/// Postgres' interval text (IntervalStyle postgres): `1 year 2 mons 3 days
/// 04:05:06.5`.
/// As Postgres prints it: a field is plural unless exactly 1, and a
/// positive field after a negative one gets a `+`.
impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let mut after_negative = false;
        let (years, months) = (self.months / 12, self.months % 12);
        for (n, unit) in [(years, "year"), (months, "mon"), (self.days, "day")] {
            if n != 0 {
                let plus = if after_negative && n > 0 { "+" } else { "" };
                parts.push(format!("{plus}{n} {unit}{}", if n == 1 { "" } else { "s" }));
                after_negative = n < 0;
            }
        }
        if self.microseconds != 0 || parts.is_empty() {
            let sign = match (self.microseconds < 0, after_negative) {
                (true, _) => "-",
                (false, true) => "+",
                _ => "",
            };
            let total = self.microseconds.unsigned_abs();
            let seconds = total / 1_000_000;
            let fraction = total % 1_000_000;
            let mut time = format!(
                "{sign}{:02}:{:02}:{:02}",
                seconds / 3600,
                seconds / 60 % 60,
                seconds % 60
            );
            if fraction != 0 {
                time.push_str(format!(".{fraction:06}").trim_end_matches('0'));
            }
            parts.push(time);
        }
        write!(f, "{}", parts.join(" "))
    }
}

fn postgres_timestamp(value: chrono::NaiveDateTime, zone: &str) -> String {
    let text = value.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{zone}")
}

fn slt_files() -> Vec<PathBuf> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("sql-tests directory")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "slt"))
        // WEIR_SLT=name runs only the files whose path contains it.
        .filter(|path| {
            std::env::var("WEIR_SLT").map_or(true, |only| path.to_string_lossy().contains(&only))
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no .slt files in {}",
        directory.display()
    );
    files
}

async fn run_all(protocol: Protocol) {
    let server = common::TestServer::start();
    let mut failures = Vec::new();
    for file in slt_files() {
        let connection_string = server.connection_string();
        let mut runner = sqllogictest::Runner::new(move || {
            let connection_string = connection_string.clone();
            async move {
                let (client, connection) =
                    tokio_postgres::connect(&connection_string, tokio_postgres::NoTls)
                        .await
                        .map_err(WeirError)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok(Weir { client, protocol })
            }
        });
        runner.with_column_validator(sqllogictest::default_column_validator);
        runner.add_label(match protocol {
            Protocol::Simple => "simple",
            Protocol::Extended => "extended",
        });
        if let Err(error) = runner.run_file_async(&file).await {
            failures.push(format!("{} ({protocol:?}): {error}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "sqllogictest failures:\n{}",
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_simple_protocol() {
    run_all(Protocol::Simple).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_extended_protocol() {
    run_all(Protocol::Extended).await;
}
