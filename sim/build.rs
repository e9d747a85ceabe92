//! Stamps the commit `gregor-sim` is built from into the binary (`GREGOR_SIM_COMMIT`): the line
//! that replays a failing seed names the commit the binary was built at, wherever and whenever it
//! runs. It used to ask git at run time, in the checkout it was built from: a binary run after
//! that checkout moved named the checkout's commit, and a copy whose checkout was gone named none.
//!
//! The stamp is HEAD's short hash, with `+dirty` when the sources the binary is built from
//! (`core/`, `sim/`, the workspace's manifest, lock file and cargo config) differ from HEAD, or
//! `unknown` without git or outside a checkout (a source archive). Cargo runs this script again
//! when HEAD moves (HEAD, the branch it names, packed refs) and when any of those sources
//! change, so an edit that makes the tree dirty, or clean again, re-stamps.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the stamp's `+dirty` covers: everything `gregor-sim` is compiled from.
const SOURCES: [&str; 5] = ["core", "sim", "Cargo.toml", "Cargo.lock", ".cargo"];

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    // No optional locks: `git status` would otherwise refresh and rewrite the index.
    let out = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Re-run when `path` changes; a path that does not exist is left out (cargo would re-run the
/// script, and rebuild the crate, on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let workspace = manifest.parent().map_or_else(|| manifest.clone(), Path::to_path_buf);
    for source in SOURCES {
        watch(&workspace.join(source));
    }
    let stamp = match git(&workspace, &["rev-parse", "--short", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let git_path = |name: &str| git(&workspace, &["rev-parse", "--path-format=absolute", "--git-path", name]);
            let mut refs = vec!["HEAD".to_string(), "packed-refs".to_string()];
            refs.extend(git(&workspace, &["symbolic-ref", "-q", "HEAD"]));
            for name in &refs {
                if let Some(path) = git_path(name) {
                    watch(Path::new(&path));
                }
            }
            let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
            status.extend(SOURCES);
            let dirty = git(&workspace, &status).is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}+dirty")
            } else {
                hash
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=GREGOR_SIM_COMMIT={stamp}");
}
