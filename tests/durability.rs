//! Acknowledged writes survive SIGKILL; definitions and rows come back after
//! a restart.

mod common;

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_survive_kill_9() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE events (id BIGINT NOT NULL, note TEXT, at TIMESTAMP)")
        .await
        .unwrap();
    client
        .batch_execute("CREATE VIEW event_count AS SELECT count(*) AS n FROM events")
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO events VALUES ($1, $2, '2026-01-01 00:00:00')")
        .await
        .unwrap();
    let mut acknowledged = 0i64;
    for id in 0..200i64 {
        let note = format!("note {id}");
        assert_eq!(client.execute(&insert, &[&id, &note]).await.unwrap(), 1);
        acknowledged += 1;
    }
    // A bulk load through COPY, acknowledged by its CommandComplete.
    let sink = client
        .copy_in("COPY events (id, note) FROM STDIN")
        .await
        .unwrap();
    let data: String = (1000..1500).map(|id| format!("{id}\tcopied\n")).collect();
    futures::pin_mut!(sink);
    use futures::SinkExt;
    sink.send(bytes::Bytes::from(data)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 500);
    acknowledged += 500;

    // Crash right after the last acknowledgement.
    server.kill();

    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM events",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), acknowledged);
    assert_eq!(row.get::<_, i64>(1), acknowledged);
    assert_eq!(row.get::<_, i64>(2), 0);
    assert_eq!(row.get::<_, i64>(3), 1499);
    let view = client
        .query_one("SELECT n FROM event_count", &[])
        .await
        .unwrap();
    assert_eq!(view.get::<_, i64>(0), acknowledged);
    // The restarted table keeps accepting writes after the recovered ones.
    client
        .batch_execute("INSERT INTO events VALUES (5000, 'after restart', NULL)")
        .await
        .unwrap();
    let row = client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), acknowledged + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_cleanly_and_drops_are_durable() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kept (id INT PRIMARY KEY); CREATE TABLE dropped (id INT);
             INSERT INTO kept VALUES (1); INSERT INTO dropped VALUES (2);
             DROP TABLE dropped;
             CREATE TABLE copied AS SELECT id * 10 AS id FROM kept;
             CREATE TABLE clicks (at TIMESTAMP, code VARCHAR(2), WATERMARK FOR at AS at - INTERVAL '5' SECOND) APPEND ONLY;",
        )
        .await
        .unwrap();
    drop(client);
    let status = server.terminate();
    assert!(status.success(), "weir exited with {status}");

    let server = TestServer::start_on(&data_dir);
    let client = server.connect().await;
    let names: Vec<String> = client
        .simple_query("SHOW TABLES")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec![
            "clicks".to_string(),
            "copied".to_string(),
            "kept".to_string()
        ]
    );
    let create = client
        .simple_query("SHOW CREATE TABLE clicks")
        .await
        .unwrap();
    let text = create.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(1).map(str::to_string),
        _ => None,
    });
    assert!(
        text.as_deref()
            .is_some_and(|sql| sql.contains("WATERMARK FOR at AS at - INTERVAL '5' SECOND")),
        "{text:?}"
    );
    let row = client
        .query_one("SELECT id FROM copied", &[])
        .await
        .unwrap();
    // integer * integer is an integer, as in Postgres.
    assert_eq!(row.get::<_, i32>(0), 10);
    // Declared lengths are kept across the restart (22001 past them).
    let too_long = client
        .batch_execute("INSERT INTO clicks VALUES (TIMESTAMP '2026-01-01 00:00:00', 'abc')")
        .await
        .unwrap_err();
    assert_eq!(too_long.code().unwrap().code(), "22001");
    // Keys written before the restart still count.
    let duplicate = client
        .batch_execute("INSERT INTO kept VALUES (1)")
        .await
        .unwrap_err();
    assert_eq!(duplicate.code().unwrap().code(), "23505");
    // The dropped name is free again and the new table starts empty.
    client
        .batch_execute("CREATE TABLE dropped (id INT)")
        .await
        .unwrap();
    let row = client
        .query_one("SELECT count(*) FROM dropped", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0);
}
