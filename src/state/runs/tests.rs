use super::*;
use crate::state::SledStore;
use std::collections::BTreeMap;

const SPACE: &[u8] = b"runs/1/";

fn entries(pairs: &[(&str, Option<&str>)]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    pairs
        .iter()
        .map(|(key, row)| (key.as_bytes().to_vec(), row.map(|r| r.as_bytes().to_vec())))
        .collect()
}

fn text(entry: Result<Entry>) -> (String, Option<String>) {
    let (key, row) = entry.unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (text(key), row.map(text))
}

#[test]
fn the_newest_run_holding_a_key_decides_and_deletions_go_when_complete() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SledStore::open(directory.path()).unwrap());
    let mut writes = WriteBatch::new();
    // Big enough for several pages.
    let old: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..10_000)
        .map(|i| (format!("k{i:05}").into_bytes(), Some(b"old".to_vec())))
        .collect();
    let old_run = write_run(
        SPACE,
        0,
        old.into_iter().map(Ok),
        &mut into_batch(&mut writes),
    )
    .unwrap();
    assert_eq!((old_run.pages, old_run.entries), (3, 10_000));
    store.commit(writes).unwrap();
    let newer = entries(&[
        ("k00001", None),
        ("k00002", Some("new")),
        ("zz", Some("added")),
    ]);
    let merge = |complete| {
        let cursor = RunCursor::new(store.clone(), SPACE, Arc::new(old_run.clone()));
        let newer = newer.clone().into_iter().collect();
        let sources = vec![Source::memory(newer), Source::Run(cursor)];
        Merge::new(sources, complete, Combine::Newest)
            .map(text)
            .collect::<Vec<_>>()
    };
    let complete = merge(true);
    assert_eq!(complete.len(), 10_000);
    assert_eq!(complete[0], ("k00000".into(), Some("old".into())));
    assert_eq!(complete[1], ("k00002".into(), Some("new".into())));
    assert_eq!(complete[9_999], ("zz".into(), Some("added".into())));
    let partial = merge(false);
    assert_eq!(
        partial[1],
        ("k00001".into(), None),
        "kept to hide older runs"
    );
    assert_eq!(stored_run_ids(&*store, SPACE).unwrap(), vec![0]);
}

#[test]
fn runs_grow_geometrically_and_stay_few() {
    let run = |entries| {
        Arc::new(Run {
            id: 0,
            pages: 1,
            entries,
        })
    };
    // A small new run joins small runs, not a big one.
    assert_eq!(runs_to_merge(&[run(1_000_000), run(100)], 100), 1);
    assert_eq!(runs_to_merge(&[run(1_000_000), run(100_000)], 100), 0);
    assert_eq!(runs_to_merge(&[run(300), run(100)], 100), 2);
    // Nothing new: runs are merged only when there are too many.
    assert_eq!(runs_to_merge(&[run(3), run(1)], 0), 0);
    let many: Vec<_> = (0..20).map(|i| run(1 << (40 - i))).collect();
    assert!(runs_to_merge(&many, 1) >= 9, "never more than a dozen runs");
}

#[test]
fn a_damaged_page_is_corruption() {
    assert_eq!(decode_page(&[0, 0, 0, 2, 0]).unwrap_err().code, "XX001");
    let page = encode_page(&[(b"k".to_vec(), None), (b"j".to_vec(), Some(b"r".to_vec()))]);
    let decoded = decode_page(&page).unwrap();
    assert_eq!(decoded[0], (b"k".to_vec(), None));
    assert_eq!(decoded[1], (b"j".to_vec(), Some(b"r".to_vec())));
}

fn first_three(key: &[u8]) -> &[u8] {
    &key[..3]
}

/// Entries of indexed runs are counted from their keys; a prefix lookup
/// finds a key's entries across pages and runs, and only its own.
#[test]
fn indexed_runs_tell_their_entries_and_are_read_by_prefix() {
    let directory = tempfile::tempdir().unwrap();
    let store = SledStore::open(directory.path()).unwrap();
    let mut runs = Vec::new();
    for (id, count) in [(0u64, 5_000usize), (1, 7)] {
        let source: Vec<Result<Entry>> = (0..count)
            .map(|i| {
                Ok((
                    format!("p{:02}{i:05}", i % 50).into_bytes(),
                    Some(vec![id as u8]),
                ))
            })
            .collect::<Vec<_>>();
        let mut sorted: Vec<Entry> = source.into_iter().map(Result::unwrap).collect();
        sorted.sort();
        let mut writes = WriteBatch::new();
        let (run, index) = write_indexed_run(
            SPACE,
            id,
            sorted.into_iter().map(Ok),
            count,
            first_three,
            &mut into_batch(&mut writes),
        )
        .unwrap();
        store.commit(writes).unwrap();
        assert!(id == 1 || run.pages > 2, "several pages");
        runs.push((run, index));
    }
    assert_eq!(stored_entries(&store, SPACE).unwrap(), 5_007);
    let mut found = Vec::new();
    let listed = runs.iter().map(|(run, index)| (run, index));
    lookup_prefix(&store, SPACE, listed, b"p03", &mut |key, value| {
        found.push((key.to_vec(), value.unwrap()[0]));
        Ok(())
    })
    .unwrap();
    assert_eq!(found.len(), 100 + 1);
    assert!(found.iter().all(|(key, _)| key.starts_with(b"p03")));
    assert_eq!(found.last().unwrap().1, 1, "the older run first");
}

/// Runs of equal size arriving are merged in tiers: each entry is
/// rewritten a few times, not once per run that came after it, and the
/// runs stay few.
#[test]
fn tiered_merges_rewrite_each_entry_about_once_a_tier() {
    let mut runs: Vec<Arc<Run>> = Vec::new();
    let (mut written, mut arrived) = (0u64, 0u64);
    for id in 0..200u64 {
        let new = 1_000;
        let taken = runs_to_merge_tiered(&runs, new, 8, 24);
        let merged = runs.split_off(runs.len() - taken);
        let entries = new + merged.iter().map(|run| run.entries).sum::<u64>();
        written += entries;
        arrived += new;
        runs.push(Arc::new(Run {
            id,
            pages: 1,
            entries,
        }));
        assert!(runs.len() <= 24);
        for pair in runs.windows(2) {
            assert!(pair[0].entries >= pair[1].entries, "older runs are bigger");
        }
    }
    // 200 runs of 1,000: tiers of 8 and 64 runs; each entry written about
    // three times (the first write, then once a tier).
    let amplification = written as f64 / arrived as f64;
    assert!(amplification < 3.5, "{amplification}");
    assert!(runs.len() <= 3 * 7, "{}", runs.len());
    assert_eq!(runs.iter().map(|run| run.entries).sum::<u64>(), arrived);
}
