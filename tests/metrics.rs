//! The Prometheus endpoint (`--metrics-listen`), scraped over real HTTP
//! while rows arrive: its values move with the tables and views, and
//! every line is in the text exposition format.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use serde_json::Value;

use common::{execute_all, TestServer};

/// The status line and body of one HTTP request.
fn request(port: u16, request_line: &str) -> (String, String) {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    let request = format!("{request_line}\r\nHost: localhost\r\n\r\n");
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.lines().next().unwrap_or("").to_string();
    (status, body.to_string())
}

/// Every sample by its name and labels, checking each line's format.
fn scrape(port: u16) -> HashMap<String, f64> {
    let (status, body) = request(port, "GET /metrics HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let mut typed = Vec::new();
    let mut samples = HashMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(kind == "counter" || kind == "gauge", "{line}");
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        let name = series.split('{').next().unwrap();
        assert!(typed.iter().any(|t| t == name), "{name} has no # TYPE");
        if let Some(labels) = series.strip_prefix(name) {
            assert!(labels.is_empty() || labels.starts_with('{') && labels.ends_with('}'));
        }
        samples.insert(series.to_string(), value);
    }
    samples
}

#[tokio::test]
async fn metrics_move_when_rows_arrive() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &temp.path().join("data"),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let port = server
        .metrics_port
        .expect("the server names its metrics port");
    let client = server.connect().await;
    execute_all(
        &client,
        &[
            "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)"
                .to_string(),
            "CREATE MATERIALIZED VIEW per_window AS \
             SELECT window_start, window_end, COUNT(*) AS bids \
             FROM TUMBLE(bids, ts, INTERVAL '10' SECOND) \
             GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
                .to_string(),
            "INSERT INTO bids VALUES (1, 10, '2024-01-01 00:00:01'), \
             (2, 20, '2024-01-01 00:00:02'), (1, 30, '2024-01-01 00:00:03')"
                .to_string(),
        ],
    )
    .await;
    client
        .batch_execute(
            "CREATE SOURCE numbers (id BIGINT) WITH (connector = 'datagen', \
             number-of-rows = '5', rows-per-second = '0', fields.id.kind = 'sequence')",
        )
        .await
        .unwrap();
    let finished = "SELECT count(*) FROM weir_catalog.sources WHERE state = 'finished'";
    for _ in 0..100 {
        let done: i64 = client.query_one(finished, &[]).await.unwrap().get(0);
        if done == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let before = scrape(port);
    assert_eq!(
        before["weir_table_rows_committed_total{table=\"bids\"}"],
        3.0
    );
    assert_eq!(
        before["weir_source_rows_total{source=\"numbers\",connector=\"datagen\"}"],
        5.0
    );
    assert_eq!(
        before["weir_source_rejected_total{source=\"numbers\"}"],
        0.0
    );
    assert_eq!(before["weir_view_rows{view=\"per_window\"}"], 0.0);
    assert_eq!(
        before["weir_view_changes_committed_total{view=\"per_window\"}"],
        0.0
    );
    // Watermark 00:00:02, as Unix seconds.
    assert_eq!(
        before["weir_stream_watermark_seconds{table=\"bids\"}"],
        1_704_067_202.0
    );
    assert!(before["weir_connections"] >= 1.0);
    assert!(before["weir_resident_memory_bytes"] > 0.0);

    let out = tempfile::tempdir().unwrap();
    client
        .batch_execute(&format!(
            "CREATE SINK windows_out FROM per_window WITH (connector = 'file', path = '{}')",
            out.path().join("windows.jsonl").display()
        ))
        .await
        .unwrap();
    // Closes the first window: the view gets its row and a watermark.
    client
        .batch_execute("INSERT INTO bids VALUES (3, 40, '2024-01-01 00:00:15'), (3, 50, '2024-01-01 00:00:16')")
        .await
        .unwrap();
    let shipped = "SELECT count(*) FROM weir_catalog.sinks WHERE shipped = 1";
    for _ in 0..100 {
        let done: i64 = client.query_one(shipped, &[]).await.unwrap().get(0);
        if done == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let after = scrape(port);
    assert_eq!(
        after["weir_sink_records_total{sink=\"windows_out\",connector=\"file\"}"],
        1.0
    );
    assert_eq!(after["weir_sink_lag_commits{sink=\"windows_out\"}"], 0.0);
    assert_eq!(after["weir_sink_errors_total{sink=\"windows_out\"}"], 0.0);
    assert_eq!(
        after["weir_table_rows_committed_total{table=\"bids\"}"],
        5.0
    );
    assert_eq!(after["weir_view_rows{view=\"per_window\"}"], 1.0);
    assert_eq!(
        after["weir_view_changes_committed_total{view=\"per_window\"}"],
        1.0
    );
    assert_eq!(
        after["weir_stream_watermark_seconds{table=\"bids\"}"],
        1_704_067_215.0
    );
    assert_eq!(
        after["weir_view_watermark_seconds{view=\"per_window\"}"],
        1_704_067_210.0
    );
    assert_eq!(
        after["weir_view_event_time_lag_seconds{view=\"per_window\"}"],
        5.0
    );
    assert!(after["weir_view_wall_time_lag_seconds{view=\"per_window\"}"] > 0.0);
    assert!(after["weir_connections_opened_total"] >= 1.0);

    let (status, _) = request(port, "GET /other HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = request(port, "POST /metrics HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    // A scraper that sends an endless head is refused, and the server
    // still answers the next one.
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}", "a".repeat(20_000));
    let (status, _) = request(port, &huge);
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert_eq!(scrape(port)["weir_view_rows{view=\"per_window\"}"], 1.0);
}

/// The Grafana dashboard in docker/ queries only families weir exports,
/// through the datasource provisioned beside it: a renamed metric or
/// datasource would otherwise leave its panels silently empty.
#[tokio::test]
async fn the_grafana_dashboard_queries_only_exported_metrics() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        &temp.path().join("data"),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--checkpoint-interval-ms",
            "100",
        ],
    );
    let client = server.connect().await;
    // Closing a window gives the view a watermark, without which its lag
    // families have no samples; the last row arrives late for that window.
    execute_all(
        &client,
        &[
            "CREATE TABLE bids (price BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)"
                .to_string(),
            "CREATE MATERIALIZED VIEW per_window AS \
             SELECT window_start, window_end, COUNT(*) AS bids \
             FROM TUMBLE(bids, ts, INTERVAL '10' SECOND) \
             GROUP BY window_start, window_end EMIT ON WINDOW CLOSE"
                .to_string(),
            "INSERT INTO bids VALUES (10, '2024-01-01 00:00:01'), (20, '2024-01-01 00:00:15')"
                .to_string(),
            "INSERT INTO bids VALUES (30, '2024-01-01 00:00:02')".to_string(),
        ],
    )
    .await;
    let port = server
        .metrics_port
        .expect("the server names its metrics port");
    // The checkpoint families have samples only once a periodic checkpoint
    // has been taken.
    let mut exported = HashSet::new();
    for _ in 0..100 {
        exported = scrape(port)
            .keys()
            .map(|series| series.split('{').next().unwrap().to_string())
            .collect();
        if exported.contains("weir_checkpoint_epoch") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let grafana = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/grafana");
    let dashboard = std::fs::read_to_string(grafana.join("dashboards/weir.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let datasources =
        std::fs::read_to_string(grafana.join("provisioning/datasources/prometheus.yaml")).unwrap();
    let uid = datasources
        .lines()
        .find_map(|line| line.trim().strip_prefix("uid:"))
        .expect("the provisioned datasource has a uid")
        .trim()
        .trim_matches(['"', '\'']);

    let panels = query_panels(&dashboard);
    assert!(panels.len() >= 10, "only {} panels", panels.len());
    for panel in panels {
        let title = &panel["title"];
        assert_eq!(panel["datasource"]["uid"], uid, "panel {title}");
        let targets = panel["targets"].as_array().expect("a panel has targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], uid, "panel {title}");
            let expression = target["expr"].as_str().expect("a target has an expr");
            for name in metric_names(expression) {
                assert!(
                    exported.contains(name),
                    "panel {title} queries {name}, which weir does not export: {expression}"
                );
            }
        }
    }
}

/// Every panel but the rows, which only group others (a collapsed row
/// holds its panels inside it).
fn query_panels(dashboard: &Value) -> Vec<&Value> {
    let mut panels = Vec::new();
    for panel in dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
    {
        if panel["type"] == "row" {
            panels.extend(panel["panels"].as_array().into_iter().flatten());
        } else {
            panels.push(panel);
        }
    }
    panels
}

/// The `weir_…` metric names in a PromQL expression.
fn metric_names(expression: &str) -> Vec<&str> {
    let in_name = |character: char| character.is_ascii_alphanumeric() || character == '_';
    expression
        .match_indices("weir_")
        .filter(|(start, _)| !expression[..*start].ends_with(in_name))
        .map(|(start, _)| {
            let rest = &expression[start..];
            let end = rest
                .find(|character: char| !(character.is_ascii_lowercase() || character == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}
