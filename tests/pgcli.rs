//! pgcli (from PyPI, tests/drivers/requirements.txt) against weir: at
//! startup it loads its completions with catalog queries in a background
//! thread, whose failures it prints as tracebacks; a clean start runs them
//! all. pgcli needs a terminal, which `script` (util-linux) provides.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::TestServer;

#[test]
fn pgcli_starts_clean_and_runs_statements() {
    let server = TestServer::start();
    let home = tempfile::tempdir().unwrap();
    let command = format!("pgcli -h 127.0.0.1 -p {} -U weir weir", server.port);
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("HOME", home.path())
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) and pgcli (pip) must be installed");
    let input = "CREATE TABLE pgcli_t (id BIGINT PRIMARY KEY, label TEXT);\n\
                 INSERT INTO pgcli_t VALUES (1, 'first');\n\
                 SELECT label AS shown FROM pgcli_t;\n";
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    // The completion refresh runs in the background: give it time to
    // finish (or fail) before quitting.
    std::thread::sleep(std::time::Duration::from_secs(3));
    stdin.write_all(b"\\q\n").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("first") && text.contains("shown"),
        "no query result in:\n{text}"
    );
    for failure in ["Traceback", "Exception", "ERROR"] {
        assert!(!text.contains(failure), "{failure} in:\n{text}");
    }
}
