//! The `gregor-sim` command itself, as a user's shell runs it.

use std::process::{Command, Stdio};

/// Output piped into a reader that stops early (`gregor-sim run ... | head -1`) ends the command
/// quietly, with the status a shell gives a command killed by SIGPIPE, instead of a panic and a
/// backtrace on the first line it can no longer write.
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/one_broker_fsync_each_batch_survives_power_loss.toml"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gregor-sim"))
        .args(["run", scenario, "--seeds", "0..1"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("gregor-sim starts")
        .wait_with_output()
        .expect("gregor-sim ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("exit status {:?}; stderr: {stderr:?}", out.status.code());
    assert!(
        !stderr.contains("panicked"),
        "gregor-sim panicked writing to a closed pipe: {stderr}"
    );
    assert_eq!(out.status.code(), Some(141), "the status of a command ended by SIGPIPE");
}

/// `--version` names the commit the binary was built from, stamped at build time (`build.rs`),
/// which is this checkout's HEAD while its tests run (with `+dirty` when its sources have
/// uncommitted changes). Outside a git checkout both sides say so.
#[test]
fn the_version_names_the_commit_the_binary_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_gregor-sim"))
        .arg("--version")
        .output()
        .expect("gregor-sim starts");
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    println!("version: {version:?}; this checkout's HEAD: {head:?}");
    let stamp = version
        .strip_prefix(concat!("gregor-sim ", env!("CARGO_PKG_VERSION"), " (commit "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version output: {version:?}"));
    match head {
        Some(head) => assert!(
            stamp == head || stamp == format!("{head}+dirty"),
            "the binary names commit {stamp:?}, the checkout is at {head:?}"
        ),
        None => assert_eq!(stamp, "unknown"),
    }
}
