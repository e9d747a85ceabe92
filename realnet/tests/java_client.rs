//! The Java client (org.apache.kafka:kafka-clients 4.1.1, the reference implementation) against
//! `gregor dev`: the AdminClient creates a topic, an idempotent producer sends 2000 keyed
//! messages with acks=all, and a consumer group member (classic protocol, commitSync) reads every
//! one back exactly once (tests/java/GregorInterop.java, run with Java's source launcher).
//!
//! `.ci/run` copies the jars into tests/java/lib with Maven (cached in ~/.m2). Without java or
//! those jars the test is skipped, except under CI=true, where it fails. Every wait is bounded;
//! only loopback addresses are used.

mod common;
use common::{free_port, wait_bounded, Broker};

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

const MESSAGES: usize = 2000;
/// The program bounds itself by PROGRAM_BUDGET; the test kills it at PROGRAM_TIMEOUT.
const PROGRAM_BUDGET: Duration = Duration::from_secs(90);
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(150);

#[test]
fn java_client_produces_and_a_consumer_group_reads_every_message_once() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java");
    let has_jar = std::fs::read_dir(dir.join("lib"))
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("kafka-clients-"))
        })
        .unwrap_or(false);
    if !has_jar {
        assert!(
            !ci,
            "kafka-clients is not in {dir:?}/lib under CI=true: .ci/run should have fetched it"
        );
        eprintln!(
            "SKIPPED: run `mvn dependency:copy-dependencies -DoutputDirectory=lib` in {}",
            dir.display()
        );
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&data.path().join("data"), free_port());
    let mut child = Command::new("java")
        .args(["-cp", "lib/*", "GregorInterop.java"])
        .args([
            broker.addr(),
            "java-client".to_string(),
            MESSAGES.to_string(),
            PROGRAM_BUDGET.as_secs().to_string(),
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn java (is a JDK installed?)");
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
    let status = wait_bounded(&mut child, PROGRAM_TIMEOUT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (stdout, stderr) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(
        status.is_some_and(|s| s.success()),
        "GregorInterop.java failed ({status:?}):\n{stdout}{stderr}\nbroker log:\n{}",
        broker.log_text()
    );
    let stopped = broker.stop();
    assert!(stopped.success(), "gregor dev exited with {stopped}");
    let expected = format!("compared {MESSAGES} messages across 3 partitions through a consumer group");
    let line = stdout
        .lines()
        .find(|l| l.contains(&expected))
        .unwrap_or_else(|| panic!("GregorInterop.java did not report {expected:?}:\n{stdout}{stderr}"));
    println!("{line}");
}
