//! What a user sees when starting the server: plain log text when its
//! output is not a terminal, and a data directory another server holds
//! refused with a hint.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn logs_are_plain_text_off_a_terminal_and_a_held_data_directory_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut first = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env("WEIR_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut ready = String::new();
    for line in BufReader::new(first.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        assert!(
            !line.contains('\u{1b}'),
            "colour codes in a piped log: {line:?}"
        );
        if line.contains("weir is ready") {
            ready = line;
            break;
        }
    }
    assert!(!ready.is_empty(), "no ready line");

    let second = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env_remove("NO_COLOR")
        .output()
        .expect("run a second weir");
    first.kill().unwrap();
    first.wait().unwrap();
    let log = String::from_utf8_lossy(&second.stdout);
    assert!(!second.status.success());
    assert!(log.contains("is in use by another process"), "{log}");
    assert!(log.contains("another --data-dir"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}
