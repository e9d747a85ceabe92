//! `gregor dev` against the two common Python Kafka clients, as users run them:
//! confluent-kafka (librdkafka in its manylinux wheel) and kafka-python (pure Python, its own
//! protocol code). Each script under `tests/python/` creates a 3-partition topic, produces 5000
//! keyed messages with acks=all (idempotently), reads every partition back from the beginning
//! without a consumer group (the broker serves no group APIs yet), and checks each partition
//! holds exactly the acknowledged messages, byte for byte, in send order. `kafka_python_admin.py`
//! checks the admin APIs (DescribeConfigs, DeleteTopics) through kafka-python's admin client;
//! `confluent_group.py` a consumer group of two confluent-kafka members with manual commits;
//! `confluent_admin_groups.py` the AdminClient listing and describing a group.
//!
//! The Python comes from `GREGOR_PYTHON` (`.ci/run` sets it to a venv with pinned client
//! versions). Without it, or without a client module, the test is skipped, except under CI=true,
//! where it fails. Every wait is bounded; only loopback addresses are used.

mod common;
use common::{free_port, wait_bounded, Broker};

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::Duration;

/// Each script bounds itself by SCRIPT_BUDGET; the test kills it at SCRIPT_TIMEOUT.
const SCRIPT_BUDGET: Duration = Duration::from_secs(90);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const MESSAGES: usize = 5000;
const PARTITIONS: usize = 3;

/// Runs `cmd` (no stdin), killing it and failing if it runs longer than `timeout`.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let out = thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).map(|_| v)
    });
    let mut stderr = child.stderr.take().expect("stderr piped");
    let err = thread::spawn(move || {
        let mut v = Vec::new();
        stderr.read_to_end(&mut v).map(|_| v)
    });
    let Some(status) = wait_bounded(&mut child, timeout) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} ran longer than {timeout:?}");
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader").expect("read stdout"),
        stderr: err.join().expect("stderr reader").expect("read stderr"),
    }
}

/// The Python to run the scripts with, if it has `module`; None means skip (never under CI).
fn python_with(module: &str) -> Option<String> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let Ok(python) = std::env::var("GREGOR_PYTHON") else {
        assert!(
            !ci,
            "GREGOR_PYTHON is unset under CI=true: .ci/run should have made the client venv"
        );
        eprintln!("SKIPPED: set GREGOR_PYTHON to a Python with {module} (see .ci/run)");
        return None;
    };
    let mut cmd = Command::new(&python);
    cmd.args(["-c", &format!("import {module}")]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    if out.status.success() {
        return Some(python);
    }
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(!ci, "{python} cannot import {module} under CI=true: {why}");
    eprintln!("SKIPPED: {python} cannot import {module}: {why}");
    None
}

/// Runs `tests/python/{script}` against a fresh `gregor dev`; returns its `compared` line.
fn round_trip(python: &str, script: &str, topic: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&dir.path().join("data"), free_port());
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let mut cmd = Command::new(python);
    cmd.arg(scripts.join(script))
        .args([
            broker.addr(),
            topic.to_string(),
            PARTITIONS.to_string(),
            MESSAGES.to_string(),
            SCRIPT_BUDGET.as_secs().to_string(),
        ])
        .current_dir(&scripts)
        // No stale or root-owned __pycache__ in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = run_bounded(cmd, SCRIPT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}{stderr}\nbroker log:\n{}",
        out.status,
        broker.log_text()
    );
    let status = broker.stop();
    assert!(status.success(), "gregor dev exited with {status}");
    let expected = format!("compared {MESSAGES} messages byte for byte across {PARTITIONS} partitions");
    let line = stdout
        .lines()
        .find(|l| l.contains(&expected))
        .unwrap_or_else(|| panic!("{script} did not report {expected:?}:\n{stdout}{stderr}"));
    println!("{line}");
    line.to_string()
}

#[test]
fn confluent_kafka_idempotent_producer_and_groupless_consumer_round_trip() {
    let Some(python) = python_with("confluent_kafka") else {
        return;
    };
    round_trip(&python, "confluent_roundtrip.py", "confluent");
}

#[test]
fn kafka_python_producer_and_groupless_consumer_round_trip() {
    let Some(python) = python_with("kafka") else {
        return;
    };
    round_trip(&python, "kafka_python_roundtrip.py", "kafka-python");
}

/// Runs `tests/python/{script} BOOTSTRAP ARGS...` against a fresh `gregor dev` and returns the
/// `compared ...` line it printed (a line that compared nothing fails).
fn run_script(python: &str, script: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&dir.path().join("data"), free_port());
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let mut cmd = Command::new(python);
    cmd.arg(scripts.join(script))
        .arg(broker.addr())
        .args(args)
        .current_dir(&scripts)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = run_bounded(cmd, SCRIPT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}{stderr}\nbroker log:\n{}",
        out.status,
        broker.log_text()
    );
    let status = broker.stop();
    assert!(status.success(), "gregor dev exited with {status}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("compared ") && !l.starts_with("compared 0 "))
        .unwrap_or_else(|| panic!("{script} printed no compared line:\n{stdout}{stderr}"));
    println!("{line}");
    line.to_string()
}

/// kafka-python's admin client: DescribeConfigs (topic overrides, defaults, the broker resource,
/// unknown topics) and DeleteTopics (the topic leaves the metadata; a second delete fails).
#[test]
fn kafka_python_admin_describes_configs_and_deletes_topics() {
    let Some(python) = python_with("kafka") else {
        return;
    };
    run_script(&python, "kafka_python_admin.py", &["admin-topic"]);
}

/// confluent-kafka consumer groups: two members split the partitions and consume every message
/// once with manual commits; when one leaves the other takes all; a restarted member resumes
/// from the committed offsets.
#[test]
fn confluent_kafka_group_of_two_splits_partitions_and_resumes_from_commits() {
    let Some(python) = python_with("confluent_kafka") else {
        return;
    };
    let budget = SCRIPT_BUDGET.as_secs().to_string();
    let line = run_script(&python, "confluent_group.py", &["group-topic", "4000", &budget]);
    assert!(line.contains("compared 4000 messages consumed once"), "{line}");
}

/// confluent-kafka's AdminClient: list_consumer_groups (ListGroups) shows a group STABLE while
/// its member consumes and EMPTY after it left; describe_consumer_groups (DescribeGroups) shows
/// the member's client id, host and assignment; the committed offsets add up.
#[test]
fn confluent_kafka_admin_lists_and_describes_consumer_groups() {
    let Some(python) = python_with("confluent_kafka") else {
        return;
    };
    let budget = SCRIPT_BUDGET.as_secs().to_string();
    let line = run_script(
        &python,
        "confluent_admin_groups.py",
        &["admin-groups-topic", "admin-groups", "200", &budget],
    );
    assert!(line.contains("200 committed offsets"), "{line}");
}
