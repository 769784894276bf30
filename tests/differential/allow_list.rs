//! The known differences from PostgreSQL, read from
//! `docs/postgres-differences.md` (the page users read): each row of its
//! table is a regular expression over the statement, the kind of
//! difference it allows (`error`, `type`, `text`, `binary` or `any`), and
//! the reason. A difference no row allows fails the harness.

use regex::Regex;

use super::outcome::Difference;

pub struct Entry {
    pub pattern: Regex,
    pub kind: String,
    pub reason: String,
    /// How many differences it allowed in this run.
    pub used: usize,
}

pub fn load() -> Vec<Entry> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/postgres-differences.md");
    let text = std::fs::read_to_string(path).expect("read docs/postgres-differences.md");
    // The rows of the table under the "Statement matches" header, up to
    // the first line that is not a row (other tables on the page are not
    // the list).
    text.lines()
        .skip_while(|line| !line.starts_with("| Statement matches"))
        .take_while(|line| line.starts_with('|'))
        .filter_map(entry)
        .collect()
}

/// A table row `| \`pattern\` | kind | reason |`.
fn entry(line: &str) -> Option<Entry> {
    let cells: Vec<&str> = line.trim().strip_prefix('|')?.split(" | ").collect();
    let [pattern, kind, reason] = cells.as_slice() else {
        return None;
    };
    // `\|` is a `|` escaped for the Markdown table.
    let pattern = pattern
        .trim()
        .strip_prefix('`')?
        .strip_suffix('`')?
        .replace("\\|", "|");
    let pattern = pattern.as_str();
    let pattern = Regex::new(pattern).unwrap_or_else(|error| {
        panic!("bad pattern {pattern} in postgres-differences.md: {error}")
    });
    Some(Entry {
        pattern,
        kind: kind.trim().to_string(),
        reason: reason.trim().trim_end_matches('|').trim().to_string(),
        used: 0,
    })
}

/// The first entry allowing `difference` in `statement`, counted.
pub fn allows<'a>(
    entries: &'a mut [Entry],
    statement: &str,
    difference: &Difference,
) -> Option<&'a Entry> {
    let entry = entries
        .iter_mut()
        .find(|entry| kind_allows(&entry.kind, difference) && entry.pattern.is_match(statement))?;
    entry.used += 1;
    Some(entry)
}

fn kind_allows(kind: &str, difference: &Difference) -> bool {
    if kind == "any" || kind == difference.kind {
        return true;
    }
    let Some(states) = kind.strip_prefix("error ") else {
        return false;
    };
    let Some((postgres, weir)) = states.split_once('→') else {
        return false;
    };
    let matches = |wanted: &str, actual: &str| wanted == "*" || wanted == actual;
    difference.kind == "error"
        && matches(postgres, &difference.states.0)
        && matches(weir, &difference.states.1)
}
