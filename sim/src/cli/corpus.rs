//! The corpus of failing seeds a campaign keeps: one `[[failure]]` entry per failing seed, with
//! the scenario's path, the seed, the commit it failed on and why. `replay` and `shrink` read it
//! (`--from-corpus FILE --index N`).
//!
//! Contract: [`append`] adds one entry at the end of the file (creating it with a header), so a
//! campaign that is stopped keeps what it found; [`load`] reads every entry back, or says which
//! file and why not. A seed replays the same run only on the commit it failed on: callers compare
//! [`Entry::commit`] with their own and warn when they differ.

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One failing seed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The scenario file, as the campaign was given it.
    pub scenario: String,
    pub seed: u64,
    /// The commit the binary that found it was built from (`+dirty` with local changes).
    pub commit: String,
    /// Why the seed failed (the verdict's words).
    pub why: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    failure: Vec<Entry>,
}

const HEADER: &str = "# gregor-sim campaign corpus: failing seeds, one [[failure]] each.\n\
                      # Replay one: gregor-sim replay --from-corpus FILE --index N (shrink the same way).\n";

/// Appends `entry` to the corpus at `path` (created if missing).
pub fn append(path: &Path, entry: &Entry) -> std::io::Result<()> {
    if i64::try_from(entry.seed).is_err() {
        return Err(std::io::Error::other(format!(
            "seed {} is past i64::MAX, which a TOML integer cannot hold",
            entry.seed
        )));
    }
    let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let body = toml::to_string(&File {
        failure: vec![entry.clone()],
    })
    .map_err(std::io::Error::other)?;
    if new {
        file.write_all(HEADER.as_bytes())?;
    }
    file.write_all(format!("\n{body}").as_bytes())
}

/// Every entry of the corpus at `path`, in file order.
pub fn load(path: &Path) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    toml::from_str::<File>(&text)
        .map(|f| f.failure)
        .map_err(|e| format!("{}: not a corpus: {}", path.display(), e.message()))
}

/// Entry `index` of the corpus at `path`, or why not.
pub fn pick(path: &Path, index: usize) -> Result<Entry, String> {
    let entries = load(path)?;
    let count = entries.len();
    entries.into_iter().nth(index).ok_or_else(|| {
        format!(
            "{}: no entry {index}: the corpus holds {count} (indexes from 0)",
            path.display()
        )
    })
}

/// The warning for an entry found on another commit than `current`, if it was.
pub fn commit_warning(entry: &Entry, current: &str) -> Option<String> {
    (entry.commit != current).then(|| {
        format!(
            "warning: this seed failed on commit {}, this binary is at {current}: the replay may differ",
            entry.commit
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_append_and_load_back_in_order() {
        let dir = std::env::temp_dir().join(format!("gregor-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("corpus.toml");
        let _ = std::fs::remove_file(&path);
        let entry = |seed| Entry {
            scenario: "scenarios/x.toml".into(),
            seed,
            commit: "abc1234".into(),
            why: "anomalies: lost-write ×1".into(),
        };
        append(&path, &entry(7)).expect("append");
        append(&path, &entry(9)).expect("append");
        assert_eq!(load(&path).expect("loads"), vec![entry(7), entry(9)]);
        assert_eq!(pick(&path, 1).expect("entry 1").seed, 9);
        assert!(pick(&path, 2).expect_err("no entry 2").contains("holds 2"));
        let too_big = append(&path, &entry(u64::MAX)).expect_err("a seed past i64::MAX is refused");
        assert!(too_big.to_string().contains("past i64::MAX"), "{too_big}");
        assert_eq!(load(&path).expect("still loads").len(), 2, "nothing half-written");
        assert_eq!(commit_warning(&entry(7), "abc1234"), None);
        let w = commit_warning(&entry(7), "def5678").expect("another commit warns");
        assert!(w.contains("abc1234") && w.contains("def5678"), "{w}");
        std::fs::write(&path, "[[failure]]\nscenario = 3\n").expect("write");
        assert!(load(&path).expect_err("bad corpus").contains("not a corpus"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
