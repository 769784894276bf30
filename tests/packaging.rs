//! docker/Dockerfile builds weir with `cargo build --locked` from what it
//! copies; a path Cargo.toml needs that it does not copy (the vendored
//! crates of `[patch.crates-io]` were missing) breaks the image. No image
//! builder runs here, so this checks the copy list against the manifest.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The sources of the build stage's COPY lines (before the second FROM).
fn copied() -> Vec<String> {
    let dockerfile = std::fs::read_to_string(root().join("docker/Dockerfile")).unwrap();
    dockerfile
        .lines()
        .skip_while(|line| !line.starts_with("FROM"))
        .skip(1)
        .take_while(|line| !line.starts_with("FROM"))
        .filter_map(|line| line.strip_prefix("COPY "))
        .filter(|line| !line.starts_with("--from"))
        .flat_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(|word| word.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every path the manifest names (`path = "…"`), plus the manifest and
/// the lock file.
fn needed() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut paths = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for line in manifest
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
    {
        if let Some((_, rest)) = line.split_once("path = \"") {
            if let Some((path, _)) = rest.split_once('"') {
                paths.push(path.to_string());
            }
        }
    }
    paths
}

#[test]
fn the_image_copies_everything_cargo_needs() {
    let copied = copied();
    for path in needed() {
        let covered = copied
            .iter()
            .any(|source| path == *source || path.starts_with(&format!("{source}/")));
        assert!(
            covered,
            "docker/Dockerfile's build stage does not COPY {path}, which Cargo.toml needs (copied: {copied:?})"
        );
        assert!(root().join(&path).exists(), "{path} does not exist");
    }
}

#[test]
fn the_build_context_leaves_out_build_output() {
    let ignored = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    assert!(ignored.lines().any(|line| line.trim() == "target"));
}
