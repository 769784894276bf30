//! Every SQL example in the README and docs/ pastes and runs as written:
//! the ```sql blocks of each file are run in order, through psql (some use
//! its backslash commands), against a fresh server. A block whose info
//! string says `sql synopsis` is grammar, not an example, and is skipped;
//! so is docs/bi-tool-queries.md, whose queries `tests/drivers.rs` runs.
//! A statement meant to fail says so in a trailing comment that contains
//! the word "error"; any other ERROR fails the test.

mod common;

use std::path::Path;

use common::TestServer;

/// The runnable blocks of a markdown text, in order.
fn sql_examples(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match &mut current {
            None if fence.starts_with("```sql") => {
                let info: Vec<&str> = fence.trim_start_matches("```").split_whitespace().collect();
                if info == ["sql"] {
                    current = Some(String::new());
                } else {
                    // A synopsis: skip to its closing fence.
                    current = Some("\u{0}".to_string());
                }
            }
            Some(block) if fence.starts_with("```") => {
                if !block.starts_with('\u{0}') {
                    blocks.push(std::mem::take(block));
                }
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Statements that say they fail: a trailing comment naming an error.
fn expected_errors(script: &str) -> usize {
    script
        .lines()
        .filter_map(|line| line.split_once("--").map(|(_, comment)| comment))
        .filter(|comment| {
            comment
                .to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .any(|word| word == "error")
        })
        .count()
}

fn check_file(relative: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let markdown = std::fs::read_to_string(&path).unwrap();
    let script = sql_examples(&markdown).concat();
    if script.is_empty() {
        return;
    }
    let server = TestServer::start();
    let output = common::psql_script(&server, "weir", &script);
    let errors: Vec<&str> = output
        .lines()
        .filter(|line| line.contains("ERROR:"))
        .collect();
    assert_eq!(
        errors.len(),
        expected_errors(&script),
        "{relative}: the examples give these errors: {errors:#?}\n\nscript:\n{script}\n\noutput:\n{output}"
    );
}

#[test]
fn readme_examples_run() {
    check_file("README.md");
}

#[test]
fn every_docs_example_runs() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut files: Vec<String> = std::fs::read_dir(docs)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && name != "bi-tool-queries.md")
        .collect();
    files.sort();
    for name in files {
        check_file(&format!("docs/{name}"));
    }
}

#[test]
fn blocks_synopses_and_expected_errors_are_told_apart() {
    let markdown = "text\n```sql\nSELECT 1;\n```\n```sql synopsis\nDROP [IF EXISTS] t;\n```\n```\nnot sql\n```\n```sql\nSELEC 1; -- a typo: an error\n```\n";
    let blocks = sql_examples(markdown);
    assert_eq!(
        blocks,
        vec!["SELECT 1;\n", "SELEC 1; -- a typo: an error\n"]
    );
    assert_eq!(expected_errors(&blocks.concat()), 1);
}
