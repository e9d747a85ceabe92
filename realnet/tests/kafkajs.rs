//! kafkajs (npm, pure JavaScript, its own protocol code) against `gregor dev`: the admin client
//! creates a topic, an idempotent producer sends 2000 keyed messages with acks=all, and a consumer
//! group member reads every one back exactly once (tests/node/roundtrip.js).
//!
//! `.ci/run` installs kafkajs with `npm ci` into tests/node/node_modules from the committed
//! package-lock.json. Without node or that install the test is skipped, except under CI=true,
//! where it fails. Every wait is bounded; only loopback addresses are used.

mod common;
use common::{free_port, wait_bounded, Broker};

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

const MESSAGES: usize = 2000;
/// The script bounds itself by SCRIPT_BUDGET; the test kills it at SCRIPT_TIMEOUT.
const SCRIPT_BUDGET: Duration = Duration::from_secs(90);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn kafkajs_produces_and_a_consumer_group_reads_every_message_once() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    if !dir.join("node_modules/kafkajs").is_dir() {
        assert!(
            !ci,
            "kafkajs is not installed under CI=true: .ci/run should have run npm ci in {dir:?}"
        );
        eprintln!("SKIPPED: run `npm ci` in {} to install kafkajs", dir.display());
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&data.path().join("data"), free_port());
    let mut child = Command::new("node")
        .arg("roundtrip.js")
        .args([
            broker.addr(),
            "kafkajs".to_string(),
            MESSAGES.to_string(),
            SCRIPT_BUDGET.as_secs().to_string(),
        ])
        .current_dir(&dir)
        .env("KAFKAJS_NO_PARTITIONER_WARNING", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node (is Node.js installed?)");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut stderr = child.stderr.take().expect("stderr piped");
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = wait_bounded(&mut child, SCRIPT_TIMEOUT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (stdout, stderr) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(
        status.is_some_and(|s| s.success()),
        "roundtrip.js failed ({status:?}):\n{stdout}{stderr}\nbroker log:\n{}",
        broker.log_text()
    );
    let stopped = broker.stop();
    assert!(stopped.success(), "gregor dev exited with {stopped}");
    let expected = format!("compared {MESSAGES} messages across 3 partitions through a consumer group");
    let line = stdout
        .lines()
        .find(|l| l.contains(&expected))
        .unwrap_or_else(|| panic!("roundtrip.js did not report {expected:?}:\n{stdout}{stderr}"));
    println!("{line}");
}
