//! The Prometheus endpoint (`--metrics-listen`, off by default): the
//! figures `weir_catalog`'s system tables hold — rows in per table, changes
//! out per view, watermarks and lags, state size, checkpoints, recovery —
//! plus connections and resident memory, in Prometheus' text format. Each
//! family is a query over those tables run at scrape time, so `/metrics`
//! and `SELECT … FROM weir_catalog.…` never disagree. Served by a small
//! HTTP/1.1 responder (`http`): one read-only GET, not worth a web
//! framework's build time (docs/decisions.md, "Metrics").

mod http;

use std::fmt::Write;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

use crate::engine::Engine;
use crate::error::Result;

pub use http::{bind, serve};

/// One metric family: a query whose `value` column is the sample and
/// whose other columns are its labels.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    sql: &'static str,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "weir_source_rows_total",
        kind: "counter",
        help: "Rows a source's connector committed.",
        sql: "SELECT source_name AS source, connector, rows AS value FROM weir_catalog.sources",
    },
    Family {
        name: "weir_source_lag_records",
        kind: "gauge",
        help: "Records the outside holds that a source has not read yet (Kafka).",
        sql: "SELECT source_name AS source, lag AS value FROM weir_catalog.sources \
              WHERE lag IS NOT NULL",
    },
    Family {
        name: "weir_source_rejected_total",
        kind: "counter",
        help: "Records a source's connector could not decode (in <source>_errors).",
        sql: "SELECT source_name AS source, rejected AS value FROM weir_catalog.sources",
    },
    Family {
        name: "weir_source_errors_total",
        kind: "counter",
        help: "Failed commits and connector failures of a source.",
        sql: "SELECT source_name AS source, errors AS value FROM weir_catalog.sources",
    },
    Family {
        name: "weir_sink_records_total",
        kind: "counter",
        help: "Records a sink wrote to its destination since the server started.",
        sql: "SELECT sink_name AS sink, connector, records AS value FROM weir_catalog.sinks",
    },
    Family {
        name: "weir_sink_lag_commits",
        kind: "gauge",
        help: "View commits a sink holds that its destination does not have yet.",
        sql: "SELECT sink_name AS sink, committed - shipped AS value FROM weir_catalog.sinks",
    },
    Family {
        name: "weir_sink_errors_total",
        kind: "counter",
        help: "Failed writes to a sink's destination (each is retried).",
        sql: "SELECT sink_name AS sink, errors AS value FROM weir_catalog.sinks",
    },
    Family {
        name: "weir_table_rows_committed_total",
        kind: "counter",
        help: "Rows committed to a table (events in).",
        sql: "SELECT table_name AS \"table\", rows_committed AS value FROM weir_catalog.tables",
    },
    Family {
        name: "weir_table_copies_detached_total",
        kind: "counter",
        help: "COPYs into a table that ran through the views as they came until their client paused, since start.",
        sql: "SELECT table_name AS \"table\", copies_detached AS value FROM weir_catalog.tables",
    },
    Family {
        name: "weir_table_rows",
        kind: "gauge",
        help: "Rows a table keeps (after retention).",
        sql: "SELECT table_name AS \"table\", rows_kept AS value FROM weir_catalog.tables",
    },
    Family {
        name: "weir_table_disk_bytes",
        kind: "gauge",
        help: "Bytes of a table's log on disk.",
        sql: "SELECT table_name AS \"table\", disk_bytes AS value FROM weir_catalog.tables",
    },
    Family {
        name: "weir_stream_watermark_seconds",
        kind: "gauge",
        help: "A watermarked table's watermark, in Unix seconds.",
        sql: "SELECT table_name AS \"table\", date_part('epoch', watermark) AS value \
              FROM weir_catalog.watermarks WHERE watermark IS NOT NULL",
    },
    Family {
        name: "weir_view_changes_committed_total",
        kind: "counter",
        help: "Row changes a materialized view committed since the server started \
               (events out; an update is a retraction and an insertion).",
        sql: "SELECT view_name AS view, changes_committed AS value \
              FROM weir_catalog.materialized_views",
    },
    Family {
        name: "weir_view_rows",
        kind: "gauge",
        help: "Rows a materialized view holds.",
        sql: "SELECT view_name AS view, row_count AS value FROM weir_catalog.materialized_views",
    },
    Family {
        name: "weir_view_late_rows_total",
        kind: "counter",
        help: "Rows a view's windows dropped or set aside as late since the server started.",
        sql: "SELECT view_name AS view, late_rows AS value FROM weir_catalog.materialized_views",
    },
    Family {
        name: "weir_view_watermark_seconds",
        kind: "gauge",
        help: "A view's output watermark (its results are final up to it), in Unix seconds.",
        sql: "SELECT view_name AS view, date_part('epoch', watermark) AS value \
              FROM weir_catalog.materialized_views WHERE watermark IS NOT NULL",
    },
    Family {
        name: "weir_view_event_time_lag_seconds",
        kind: "gauge",
        help: "Event time by which a view's output watermark trails its source table's \
               watermark (windows still open).",
        sql: "SELECT v.view_name AS view, \
              date_part('epoch', w.watermark) - date_part('epoch', v.watermark) AS value \
              FROM weir_catalog.materialized_views v \
              JOIN weir_catalog.watermarks w ON w.table_name = v.source_name \
              WHERE v.watermark IS NOT NULL AND w.watermark IS NOT NULL",
    },
    Family {
        name: "weir_view_wall_time_lag_seconds",
        kind: "gauge",
        help: "Wall-clock time minus a view's output watermark.",
        sql: "SELECT view_name AS view, \
              date_part('epoch', now()) - date_part('epoch', watermark) AS value \
              FROM weir_catalog.materialized_views WHERE watermark IS NOT NULL",
    },
    Family {
        name: "weir_view_state_bytes",
        kind: "gauge",
        help: "Bytes of a view's operator state in its last checkpoint.",
        sql: "SELECT view_name AS view, state_bytes AS value FROM weir_catalog.materialized_views",
    },
    Family {
        name: "weir_view_state_memory_bytes",
        kind: "gauge",
        help: "Bytes of memory a view's operator state held at the last checkpoint.",
        sql: "SELECT view_name AS view, state_memory_bytes AS value \
              FROM weir_catalog.materialized_views",
    },
    Family {
        name: "weir_checkpoint_epoch",
        kind: "gauge",
        help: "The epoch of the last checkpoint taken since the server started.",
        sql: "SELECT epoch AS value FROM weir_catalog.checkpoints ORDER BY epoch DESC LIMIT 1",
    },
    Family {
        name: "weir_checkpoint_duration_seconds",
        kind: "gauge",
        help: "How long the last checkpoint took until durable.",
        sql: "SELECT duration_us / 1000000.0 AS value \
              FROM weir_catalog.checkpoints ORDER BY epoch DESC LIMIT 1",
    },
    Family {
        name: "weir_checkpoint_writers_blocked_seconds",
        kind: "gauge",
        help: "How long the last checkpoint held writers back (its snapshot).",
        sql: "SELECT writers_blocked_us / 1000000.0 AS value \
              FROM weir_catalog.checkpoints ORDER BY epoch DESC LIMIT 1",
    },
    Family {
        name: "weir_checkpoint_bytes",
        kind: "gauge",
        help: "Bytes the last checkpoint wrote.",
        sql: "SELECT bytes AS value \
              FROM weir_catalog.checkpoints ORDER BY epoch DESC LIMIT 1",
    },
    Family {
        name: "weir_recovery_duration_seconds",
        kind: "gauge",
        help: "How long the last start took to recover the views.",
        sql: "SELECT duration_us / 1000000.0 AS value FROM weir_catalog.recovery",
    },
    Family {
        name: "weir_recovery_rows_replayed",
        kind: "gauge",
        help: "Table rows the last start replayed through the views.",
        sql: "SELECT rows_replayed AS value FROM weir_catalog.recovery",
    },
    Family {
        name: "weir_views_rebuilt_total",
        kind: "counter",
        help:
            "Times since start the views were rebuilt because a failed write could not be undone.",
        sql: "SELECT views_rebuilt AS value FROM weir_catalog.recovery",
    },
];

/// Every family, in the text exposition format.
pub async fn render(engine: &Engine) -> Result<String> {
    let context = SessionContext::new_with_state(engine.state());
    let mut text = String::new();
    for family in FAMILIES {
        let batches = context.sql(family.sql).await?.collect().await?;
        write_header(&mut text, family.name, family.kind, family.help);
        for batch in &batches {
            write_samples(&mut text, family.name, batch)?;
        }
    }
    let connections = engine.connections();
    let process = [
        (
            "weir_connections",
            "gauge",
            "Client connections open now.",
            connections.open() as f64,
        ),
        (
            "weir_connections_opened_total",
            "counter",
            "Client connections accepted since the server started.",
            connections.total() as f64,
        ),
        (
            "weir_resident_memory_bytes",
            "gauge",
            "The server process's resident memory.",
            resident_memory_bytes() as f64,
        ),
    ];
    for (name, kind, help, value) in process {
        write_header(&mut text, name, kind, help);
        let _ = writeln!(text, "{name} {}", sample_value(value));
    }
    Ok(text)
}

fn write_header(text: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} {kind}");
}

/// One line per row: the labels from the text columns, the `value` column.
fn write_samples(text: &mut String, name: &str, batch: &RecordBatch) -> Result<()> {
    let schema = batch.schema();
    let Ok(value_index) = schema.index_of("value") else {
        return Ok(());
    };
    let values = cast(batch.column(value_index), &DataType::Float64)?;
    let values = values.as_primitive::<Float64Type>();
    let mut labels = Vec::new();
    for (index, field) in schema.fields().iter().enumerate() {
        if index != value_index {
            labels.push((field.name(), cast(batch.column(index), &DataType::Utf8)?));
        }
    }
    for row in 0..batch.num_rows() {
        if values.is_null(row) {
            continue;
        }
        text.push_str(name);
        let mut separator = '{';
        for (label, column) in &labels {
            let column = column.as_string::<i32>();
            let value = if column.is_null(row) {
                ""
            } else {
                column.value(row)
            };
            let _ = write!(text, "{separator}{label}=\"{}\"", escape_label(value));
            separator = ',';
        }
        if !labels.is_empty() {
            text.push('}');
        }
        let _ = writeln!(text, " {}", sample_value(values.value(row)));
    }
    Ok(())
}

/// A label value as the text format quotes it.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn sample_value(value: f64) -> String {
    match value {
        v if v.is_nan() => "NaN".to_string(),
        v if v == f64::INFINITY => "+Inf".to_string(),
        v if v == f64::NEG_INFINITY => "-Inf".to_string(),
        v => v.to_string(),
    }
}

/// The process's resident set (0 where /proc is not there).
fn resident_memory_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.saturating_mul(u64::try_from(page_size).unwrap_or(4096))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn rows_become_labelled_samples_and_nulls_are_left_out() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("value", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a\"b", "c\\d", "e"])),
                Arc::new(Int64Array::from(vec![Some(3), Some(-1), None])),
            ],
        )
        .unwrap();
        let mut text = String::new();
        write_samples(&mut text, "weir_x", &batch).unwrap();
        assert_eq!(
            text,
            "weir_x{view=\"a\\\"b\"} 3\nweir_x{view=\"c\\\\d\"} -1\n"
        );
    }

    #[test]
    fn a_sample_without_labels_and_special_values() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "value",
            DataType::Float64,
            false,
        )]));
        let values = Float64Array::from(vec![0.25, f64::INFINITY, f64::NAN]);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(values)]).unwrap();
        let mut text = String::new();
        write_samples(&mut text, "weir_y", &batch).unwrap();
        assert_eq!(text, "weir_y 0.25\nweir_y +Inf\nweir_y NaN\n");
    }

    #[test]
    fn family_names_are_unique() {
        let mut names: Vec<&str> = FAMILIES.iter().map(|family| family.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
        assert!(resident_memory_bytes() > 0);
    }
}
