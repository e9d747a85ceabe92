//! A replicated cluster of real `gregor` processes on loopback: 3 `gregor coordinator` + 3
//! `gregor broker`. confluent-kafka produces with acks=all and idempotence while the test kills
//! the partition's leader with SIGKILL and restarts it; afterwards every acknowledged message
//! must be in the log, none twice (`tests/python/confluent_failover.py` checks and prints what it
//! compared). A second test stops the leader with SIGTERM instead (Kafka's controlled
//! shutdown): before it exits, its own view must show the leadership moved to another broker and
//! itself out of the ISR, and the producer must see no failed send. Every process and wait is
//! bounded; all addresses are 127.0.0.1. A fourth test grows the cluster: a fourth broker joins
//! and `gregor partitions reassign` moves partition 0 onto it under acks=all (issue 9).

mod common;
use common::{free_port, wait_bounded};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(20);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(150);

/// One `gregor` server process, killed (SIGKILL) when dropped.
struct Proc {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    /// Its stdout lines after the `listening` one.
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn start(args: Vec<String>, log: PathBuf) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
            .args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .expect("log file"),
            )
            .spawn()
            .expect("start gregor");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let proc = Proc {
            child: Some(child),
            args,
            log,
            lines: rx,
        };
        match proc.lines.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.contains(": listening on 127.0.0.1:") => proc,
            other => panic!("{:?} did not start ({other:?}); log:\n{}", proc.args, proc.log_text()),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: a crash, no flush.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = wait_bounded(&mut child, Duration::from_secs(10));
        }
    }

    /// SIGTERM; the exit status (None: it ignored SIGTERM and was killed) and what it printed.
    fn terminate(&mut self) -> (Option<std::process::ExitStatus>, Vec<String>) {
        let Some(mut child) = self.child.take() else {
            return (None, vec![]);
        };
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
        let status = wait_bounded(&mut child, Duration::from_secs(30));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            lines.push(line);
        }
        (status, lines)
    }

    fn restart(&mut self) {
        self.kill();
        let again = Proc::start(self.args.clone(), self.log.clone());
        *self = again;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn gregor(args: &[&str]) -> (bool, String) {
    gregor_with_input(args, b"")
}

fn python_with_confluent() -> Option<String> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let Ok(python) = std::env::var("GREGOR_PYTHON") else {
        assert!(
            !ci,
            "GREGOR_PYTHON is unset under CI=true: .ci/run should have made the client venv"
        );
        eprintln!("SKIPPED: set GREGOR_PYTHON to a Python with confluent_kafka (see .ci/run)");
        return None;
    };
    let ok = Command::new(&python)
        .args(["-c", "import confluent_kafka"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok || !ci, "{python} cannot import confluent_kafka under CI=true");
    ok.then_some(python)
}

/// The leader of partition 0 as `gregor topics describe` prints it.
fn leader_of_partition_0(bootstrap: &str, topic: &str) -> Option<i32> {
    let (ok, out) = gregor(&["topics", "--bootstrap-server", bootstrap, "describe", topic]);
    if !ok {
        return None;
    }
    let line = out.lines().find(|l| l.contains("Partition: 0\t"))?;
    line.split("Leader: ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// A running cluster: 3 coordinators, 3 brokers (ids 0..3), the topic "failover" (1 partition,
/// replication factor 3, min.insync.replicas 2), and its partition 0's leader.
struct Cluster {
    dir: tempfile::TempDir,
    coords: Vec<Proc>,
    /// The coordinators' addresses, as brokers are given them.
    coordinators: String,
    brokers: Vec<Proc>,
    broker_ports: Vec<u16>,
    leader: i32,
}

impl Cluster {
    fn bootstrap(&self) -> String {
        self.broker_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Starts broker `id` listening on 127.0.0.1:`port`, its data in `dir`/b`id`.
fn start_broker(dir: &Path, id: usize, port: u16, coordinators: &str) -> Proc {
    Proc::start(
        vec![
            "broker".into(),
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--coordinators".into(),
            coordinators.into(),
            "--data-dir".into(),
            dir.join(format!("b{id}")).display().to_string(),
            "--replica-lag-time-max-ms".into(),
            "5000".into(),
        ],
        dir.join(format!("b{id}.log")),
    )
}

/// Starts three coordinators (ids 1..=3, data in `dir`/c0..c2) with `extra` arguments each;
/// returns them and their addresses as brokers are given them.
fn start_coordinators(dir: &Path, extra: &[String]) -> (Vec<Proc>, String) {
    let coord_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = coord_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let coordinators = coord_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let coords = (0..3)
        .map(|i| {
            let mut args = vec![
                "coordinator".into(),
                "--id".into(),
                (i + 1).to_string(),
                "--peers".into(),
                peers.clone(),
                "--data-dir".into(),
                dir.join(format!("c{i}")).display().to_string(),
            ];
            args.extend_from_slice(extra);
            Proc::start(args, dir.join(format!("c{i}.log")))
        })
        .collect();
    (coords, coordinators)
}

fn start_cluster() -> Cluster {
    let dir = tempfile::tempdir().expect("temp dir");
    let (coords, coordinators) = start_coordinators(dir.path(), &[]);
    let broker_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let brokers: Vec<Proc> = (0..3)
        .map(|i| start_broker(dir.path(), i, broker_ports[i], &coordinators))
        .collect();
    let first = format!("127.0.0.1:{}", broker_ports[0]);
    // The brokers register within a few seconds; creation needs 3 live brokers for rf 3.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = gregor(&[
            "topics",
            "--bootstrap-server",
            &first,
            "create",
            "failover",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ]);
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "topic creation kept failing: {out}");
        thread::sleep(Duration::from_millis(300));
    }
    let leader = loop {
        if let Some(l) = leader_of_partition_0(&first, "failover") {
            break l;
        }
        assert!(Instant::now() < deadline, "no leader for failover-0");
        thread::sleep(Duration::from_millis(200));
    };
    Cluster {
        dir,
        coords,
        coordinators,
        brokers,
        broker_ports,
        leader,
    }
}

#[test]
fn leader_killed_with_sigkill_loses_no_acknowledged_message() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let mut cluster = start_cluster();
    let (leader, bootstrap) = (cluster.leader, cluster.bootstrap());
    let first = format!("127.0.0.1:{}", cluster.broker_ports[0]);
    println!("partition 0 leader: broker {leader}");
    let mut script = start_producer(&python, cluster.dir.path(), &bootstrap);
    thread::sleep(Duration::from_millis(1_000));
    let victim = usize::try_from(leader).expect("broker ids are 0..3");
    println!("SIGKILL broker {victim} (the leader) mid-produce");
    cluster.brokers[victim].kill();
    thread::sleep(Duration::from_secs(8));
    cluster.brokers[victim].restart();
    println!("broker {victim} restarted");

    let (status, out, err) = finish_script(&mut script);
    println!("{out}");
    // Each broker's last lines: the failover is at the end of the three logs, not of one.
    let tails: String = cluster
        .brokers
        .iter()
        .map(|b| tail(&b.log_text(), 40))
        .collect::<Vec<_>>()
        .join("\n----\n");
    assert!(
        status.is_some_and(|s| s.success()),
        "the failover check failed ({status:?}):\n{out}{err}\nbroker logs (tail):\n{tails}"
    );
    let after = leader_of_partition_0(&first, "failover");
    println!("partition 0 leader after the failover: {after:?}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("compared ") && !l.starts_with("compared 0 ")),
        "no comparison reported:\n{out}{err}"
    );
}

/// The last `n` lines of a log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Waits (bounded by SCRIPT_TIMEOUT, killing it after) for a client script: its exit status
/// (`None`: timed out), stdout and stderr.
fn finish_script(script: &mut Child) -> (Option<std::process::ExitStatus>, String, String) {
    let status = wait_bounded(script, SCRIPT_TIMEOUT);
    if status.is_none() {
        let _ = script.kill();
    }
    let mut out = String::new();
    if let Some(mut s) = script.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
    }
    let mut err = String::new();
    if let Some(mut s) = script.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut err);
    }
    (status, out, err)
}

/// Starts `confluent_failover.py` producing 3000 messages to "failover" and waits until one is
/// acknowledged.
fn start_producer(python: &str, dir: &Path, bootstrap: &str) -> Child {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let ready = dir.join("ready");
    let script = Command::new(python)
        .arg(scripts.join("confluent_failover.py"))
        .args([bootstrap, "failover", "3000", "60"])
        .arg(&ready)
        .current_dir(&scripts)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the python producer");
    let wait_ready = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < wait_ready, "the producer never got an acknowledgement");
        thread::sleep(Duration::from_millis(50));
    }
    script
}

/// SIGTERM on the partition leader: Kafka's controlled shutdown. Before it exits, the broker's
/// own view shows partition 0 led by another broker and an ISR without it (it prints that
/// view), and the idempotent acks=all producer sees no failed send: every message acknowledged,
/// all in the log, none twice.
#[test]
fn leader_stopped_with_sigterm_hands_off_leadership_before_exiting() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let mut cluster = start_cluster();
    let leader = cluster.leader;
    println!("partition 0 leader: broker {leader}");
    let mut script = start_producer(&python, cluster.dir.path(), &cluster.bootstrap());
    thread::sleep(Duration::from_millis(1_000));
    let victim = usize::try_from(leader).expect("broker ids are 0..3");
    println!("SIGTERM broker {victim} (the leader) mid-produce");
    let (status, lines) = cluster.brokers[victim].terminate();
    for l in &lines {
        println!("  {l}");
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "broker {victim} did not exit cleanly on SIGTERM ({status:?}); log:\n{}",
        cluster.brokers[victim].log_text()
    );
    let summary = lines
        .iter()
        .find(|l| l.contains("controlled shutdown: handed off"))
        .unwrap_or_else(|| panic!("broker {victim} did not report a hand-off: {lines:?}"));
    assert!(summary.contains("deregistered true"), "{summary}");
    let partition = lines
        .iter()
        .find(|l| l.contains("controlled shutdown: failover-0 leader "))
        .unwrap_or_else(|| panic!("broker {victim} did not print partition 0's state: {lines:?}"));
    let after: Vec<&str> = partition
        .split("failover-0 leader ")
        .nth(1)
        .expect("checked above")
        .splitn(2, " isr ")
        .collect();
    let new_leader: i32 = after[0].parse().expect("a broker id");
    let isr: Vec<i32> = after[1]
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|b| b.parse().expect("a broker id"))
        .collect();
    assert!(
        new_leader >= 0 && new_leader != leader,
        "leader before exit: {new_leader}"
    );
    assert!(!isr.contains(&leader) && isr.len() == 2, "ISR before exit: {isr:?}");
    println!("checked: before exiting, broker {leader} saw partition 0 led by {new_leader} with ISR {isr:?}");

    let (status, out, err) = finish_script(&mut script);
    println!("{out}");
    assert!(
        status.is_some_and(|s| s.success()),
        "the producer's check failed ({status:?}):\n{out}{err}"
    );
    let produced = out
        .lines()
        .find(|l| l.starts_with("produced "))
        .unwrap_or_else(|| panic!("no summary line:\n{out}{err}"));
    assert!(
        produced.starts_with("produced 3000, acked 3000, failed 0 "),
        "every send must be acknowledged: {produced}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("compared 3000 acknowledged messages")),
        "no comparison reported:\n{out}{err}"
    );
    println!("checked: 3000 acks=all sends, none failed, all in the log once");
}

/// Consumer groups of a real client on the cluster: the coordinator is the leader of the group's
/// `__consumer_offsets` partition (created, 50 partitions with rf 3, on the first
/// FindCoordinator), commits are replicated before they are acknowledged, and the members find
/// it through any broker. The single-node group script runs unchanged against the three brokers:
/// two members split the partitions, one leaves, the other resumes from its commits, and a new
/// member starts exactly at the committed offsets.
#[test]
fn confluent_group_on_a_cluster_resumes_from_replicated_commits() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let cluster = start_cluster();
    let bootstrap = cluster.bootstrap();
    let first = format!("127.0.0.1:{}", cluster.broker_ports[0]);
    let brokers = &cluster.brokers;
    // Wait until the three brokers are registered: a topic with rf 3 can then be created.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = gregor(&[
            "topics",
            "--bootstrap-server",
            &first,
            "create",
            "ready",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ]);
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never took a topic: {out}");
        thread::sleep(Duration::from_millis(300));
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
    let mut script = Command::new(&python)
        .arg(scripts.join("confluent_group.py"))
        .args([&bootstrap, "cluster-group-topic", "2000", "120"])
        .current_dir(&scripts)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the python consumers");
    let (status, out, err) = finish_script(&mut script);
    println!("{out}");
    let logs: Vec<String> = brokers.iter().map(|b| b.log_text()).collect();
    assert!(
        status.is_some_and(|s| s.success()),
        "the group script failed ({status:?}):\n{out}{err}\nbroker logs:\n{}\ncoordinator logs (tail):\n{}",
        logs.join("\n----\n"),
        cluster
            .coords
            .iter()
            .map(|c| tail(&c.log_text(), 30))
            .collect::<Vec<_>>()
            .join("\n----\n")
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("compared 2000 messages consumed once")),
        "no comparison reported:\n{out}{err}"
    );
    assert!(
        logs.iter().any(|l| l.contains("offsets topic created")),
        "no broker created __consumer_offsets: the group was not coordinated through it"
    );
}

/// The replicas of partition 0 as `gregor topics describe` prints them.
fn replicas_of_partition_0(bootstrap: &str, topic: &str) -> Option<Vec<i32>> {
    let (ok, out) = gregor(&["topics", "--bootstrap-server", bootstrap, "describe", topic]);
    if !ok {
        return None;
    }
    let line = out.lines().find(|l| l.contains("Partition: 0\t"))?;
    let list = line.split("Replicas: ").nth(1)?.split_whitespace().next()?;
    list.split(',').map(|b| b.trim().parse().ok()).collect()
}

/// Issue 9 at process level: a fourth broker joins a running three-broker cluster and
/// `gregor partitions reassign` moves partition 0 onto it, dropping its leader (so leadership
/// moves too), while confluent-kafka produces with acks=all and idempotence. `gregor partitions
/// status` is polled until the move is done; then the log holds exactly the acknowledged
/// messages, each once, and no send failed.
#[test]
fn fourth_broker_joins_and_a_partition_moves_onto_it_under_acks_all() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let mut cluster = start_cluster();
    let leader = cluster.leader;
    let first = format!("127.0.0.1:{}", cluster.broker_ports[0]);
    let port = free_port();
    let coordinators = cluster.coordinators.clone();
    cluster
        .brokers
        .push(start_broker(cluster.dir.path(), 3, port, &coordinators));
    cluster.broker_ports.push(port);
    // The new broker registers; clients find it through Metadata alone.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = gregor(&["brokers", "--bootstrap-server", &first, "list"]);
        if ok && out.lines().any(|l| l.starts_with("Broker: 3\t")) {
            println!("broker 3 registered:\n{out}");
            break;
        }
        assert!(Instant::now() < deadline, "broker 3 never showed in the cluster: {out}");
        thread::sleep(Duration::from_millis(300));
    }
    let before = replicas_of_partition_0(&first, "failover").expect("partition 0's replicas");
    let target: Vec<i32> = std::iter::once(3)
        .chain(before.iter().copied().filter(|&b| b != leader))
        .collect();
    println!("partition 0: replicas {before:?}, leader {leader}; moving to {target:?}");

    let mut script = start_producer(&python, cluster.dir.path(), &cluster.bootstrap());
    thread::sleep(Duration::from_millis(1_000));
    let list = target.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(",");
    let (ok, out) = gregor(&[
        "partitions",
        "--bootstrap-server",
        &first,
        "reassign",
        "--topic",
        "failover",
        "--partition",
        "0",
        "--replicas",
        &list,
    ]);
    assert!(ok, "gregor partitions reassign failed: {out}");
    print!("{out}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    loop {
        let (ok, out) = gregor(&["partitions", "--bootstrap-server", &first, "status"]);
        polls += 1;
        if ok && out.contains("No partition reassignments in progress.") {
            println!("reassignment done after {polls} status polls");
            break;
        }
        if polls % 10 == 1 {
            print!("status: {out}");
        }
        assert!(Instant::now() < deadline, "the move did not finish in 60 s: {out}");
        thread::sleep(Duration::from_millis(250));
    }
    let producing = script.try_wait().is_ok_and(|s| s.is_none());
    println!("the producer was still sending when the move completed: {producing}");
    // The broker answering Metadata may see the completion a refresh later. Asked through the
    // new broker: `first` may be the leader the move dropped, and one CI run saw `topics
    // describe` through that broker fail for 15 s after the move (open, see the note); its
    // answer is printed for the record.
    let joined = format!("127.0.0.1:{port}");
    let (ok, out) = gregor(&["topics", "--bootstrap-server", &first, "describe", "failover"]);
    println!("describe through broker 0 after the move (ok {ok}): {out}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let (after, new_leader) = loop {
        let after = replicas_of_partition_0(&joined, "failover");
        let new_leader = leader_of_partition_0(&joined, "failover");
        if after.as_ref() == Some(&target) || Instant::now() > deadline {
            break (after, new_leader);
        }
        thread::sleep(Duration::from_millis(200));
    };
    println!("partition 0 after the move: replicas {after:?}, leader {new_leader:?}");
    assert_eq!(after, Some(target.clone()), "the assignment is the target");
    assert!(
        new_leader.is_some_and(|l| l != leader && target.contains(&l)),
        "leadership moved off broker {leader}: {new_leader:?}"
    );

    let (status, out, err) = finish_script(&mut script);
    println!("{out}");
    let tails = cluster
        .brokers
        .iter()
        .map(|b| tail(&b.log_text(), 40))
        .collect::<Vec<_>>()
        .join("\n----\n");
    assert!(
        status.is_some_and(|s| s.success()),
        "the producer's check failed ({status:?}):\n{out}{err}\nbroker logs (tail):\n{tails}"
    );
    // "produced N, acked A, failed F (...), read R distinct": with nothing lost (checked by the
    // script) and A == R, what was read is exactly the acknowledged set; none twice is checked
    // by the script too.
    let produced = out
        .lines()
        .find(|l| l.starts_with("produced "))
        .unwrap_or_else(|| panic!("no summary line:\n{out}{err}"));
    let number_after = |word: &str| -> usize {
        produced
            .split(word)
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {word:?} in {produced:?}"))
    };
    let (acked, failed, read) = (number_after("acked "), number_after("failed "), number_after("read "));
    assert!(acked > 0, "{produced}");
    assert_eq!(failed, 0, "no send may fail: {produced}");
    assert_eq!(
        read, acked,
        "the log holds exactly the acknowledged messages: {produced}"
    );
    println!("checked: {acked} acks=all sends across the move, none failed, exactly these in the log, once each");
}

/// `gregor ARGS` with `input` on stdin: whether it succeeded, and its stdout and stderr.
fn gregor_with_input(args: &[&str], input: &[u8]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gregor");
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, input).expect("write stdin");
    }
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
    }
    (status.is_some_and(|s| s.success()), out)
}

/// Issue 7: the coordinator port authenticates. Three coordinators and two brokers share a
/// cluster secret (`--coordinator-auth-secret-file`); a third broker holds a different one. It
/// cannot open a coordinator session, so it never registers (a topic of replication factor 3
/// cannot be placed) and its log says why, while the two members serve produce and consume.
/// No log holds either secret.
#[test]
fn broker_with_a_wrong_cluster_secret_cannot_register_while_the_members_serve() {
    const SECRET: &str = "correct horse battery staple 4711";
    const WRONG: &str = "not the secret of this cluster 0815";
    let dir = tempfile::tempdir().expect("temp dir");
    let write_secret = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).expect("write secret");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        path.display().to_string()
    };
    let good = write_secret("cluster.secret", SECRET);
    let wrong = write_secret("wrong.secret", WRONG);
    let (coords, coordinators) =
        start_coordinators(dir.path(), &["--coordinator-auth-secret-file".into(), good.clone()]);
    let broker_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let brokers: Vec<Proc> = (0..3)
        .map(|i| {
            let secret = if i == 2 { &wrong } else { &good };
            Proc::start(
                vec![
                    "broker".into(),
                    "--id".into(),
                    i.to_string(),
                    "--listen".into(),
                    format!("127.0.0.1:{}", broker_ports[i]),
                    "--coordinators".into(),
                    coordinators.clone(),
                    "--data-dir".into(),
                    dir.path().join(format!("b{i}")).display().to_string(),
                    "--coordinator-auth-secret-file".into(),
                    secret.clone(),
                ],
                dir.path().join(format!("b{i}.log")),
            )
        })
        .collect();
    let members = format!("127.0.0.1:{},127.0.0.1:{}", broker_ports[0], broker_ports[1]);
    let create = |topic: &str, rf: &str| {
        gregor(&[
            "topics",
            "--bootstrap-server",
            &members,
            "create",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            rf,
        ])
    };
    // The two members register within seconds: a topic replicated on both can be created.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = create("guarded", "2");
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "topic creation kept failing: {out}");
        thread::sleep(Duration::from_millis(300));
    }
    // The outsider tried, and says why it failed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !brokers[2].log_text().contains("authentication failed") {
        assert!(
            Instant::now() < deadline,
            "broker 2 logged no authentication failure:\n{}",
            brokers[2].log_text()
        );
        thread::sleep(Duration::from_millis(200));
    }
    let outsider = brokers[2].log_text();
    let why = outsider
        .lines()
        .find(|l| l.contains("authentication failed"))
        .expect("found above");
    println!("broker 2 (wrong secret) logged: {why}");
    assert!(why.contains("secrets differ"), "{why}");
    assert!(
        !outsider.contains("coordinator session opened"),
        "broker 2 opened a session:\n{outsider}"
    );
    // Only two brokers are registered: replication factor 3 cannot be placed.
    let (ok, out) = create("three", "3");
    println!("replication factor 3 with broker 2 outside: ok={ok}: {}", out.trim());
    assert!(
        !ok && out.contains("InvalidReplicationFactor") && out.contains("the 2 live brokers"),
        "{out}"
    );
    // The members serve: 20 records produced with acks=all come back.
    let sent: Vec<String> = (0..20).map(|i| format!("record-{i:02}")).collect();
    let input: String = sent.iter().map(|l| format!("{l}\n")).collect();
    let (ok, out) = gregor_with_input(
        &["produce", "--bootstrap-server", &members, "guarded", "--acks", "all"],
        input.as_bytes(),
    );
    assert!(ok, "produce failed: {out}");
    let (ok, out) = gregor_with_input(
        &[
            "consume",
            "--bootstrap-server",
            &members,
            "guarded",
            "--from-beginning",
            "--max-messages",
            "20",
            "--timeout-ms",
            "10000",
        ],
        b"",
    );
    assert!(ok, "consume failed: {out}");
    let got: Vec<&str> = out.lines().filter(|l| l.starts_with("record-")).collect();
    assert_eq!(got, sent, "consumed records differ from produced ones");
    println!(
        "compared {} records produced and consumed through the members",
        got.len()
    );
    // The coordinators logged the refused connections, and no log holds a secret.
    let refused: usize = coords
        .iter()
        .map(|c| c.log_text().matches("failed authentication").count())
        .sum();
    println!("coordinator log lines about refused connections: {refused}");
    assert!(refused > 0, "no coordinator logged a refused connection");
    for p in coords.iter().chain(brokers.iter()) {
        let log = p.log_text();
        assert!(
            !log.contains(SECRET) && !log.contains(WRONG),
            "a log holds a secret: {:?}",
            p.args
        );
        assert!(
            !log.contains("no cluster secret configured"),
            "{:?} warned of no secret",
            p.args
        );
    }
}

/// Issue 9, item 4, from the command line: coordinator 4 starts outside the quorum (`--join`),
/// `gregor coordinators add` makes it a voter and `remove 1` takes coordinator 1 out; then 1 and
/// also 2 are killed, so the remaining majority of {2,3,4} is 3 and 4: every commit needs the new
/// node. The brokers were only ever given coordinators 1 to 3, and reach 4 through the
/// leader hints when it leads. The cluster still creates a topic (the controller writes to the
/// coordinators) and serves produce and consume, and `list` shows voters 2,3,4. Bad input is
/// refused with its reason, before anything is proposed.
#[test]
fn coordinator_added_and_removed_from_the_cli_while_the_cluster_serves() {
    let mut cluster = start_cluster();
    let dir = cluster.dir.path().to_path_buf();
    let coordinators = cluster.coordinators.clone();
    let port4 = free_port();
    let addr4 = format!("127.0.0.1:{port4}");
    let mut peers: Vec<String> = coordinators
        .split(',')
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect();
    peers.push(format!("4={addr4}"));
    let _coord4 = Proc::start(
        vec![
            "coordinator".into(),
            "--id".into(),
            "4".into(),
            "--peers".into(),
            peers.join(","),
            "--join".into(),
            "--data-dir".into(),
            dir.join("c3").display().to_string(),
        ],
        dir.join("c3.log"),
    );
    let admin = |args: &[&str], via: &str| {
        let mut all = vec!["coordinators", "--coordinators", via];
        all.extend_from_slice(args);
        let (ok, out) = gregor(&all);
        println!("gregor coordinators {}: ok={ok}\n{}", args.join(" "), out.trim());
        (ok, out)
    };
    let (ok, out) = admin(&["list"], &coordinators);
    assert!(
        ok && out.contains("voters: 1,2,3\n") && out.contains("learners: \n"),
        "{out}"
    );

    // Refusals, each with its reason; none changes the membership.
    let refusals: [(&[&str], &str); 4] = [
        (&["remove", "9"], "not a member"),
        (&["add", "5=nowhere"], "is not HOST:PORT"),
        (&["add", "x=127.0.0.1:1"], "is not a node id"),
        (&["add", "2=127.0.0.1:1"], "already a voter"),
    ];
    for (args, why) in refusals {
        let (ok, out) = admin(args, &coordinators);
        assert!(!ok && out.contains(why), "{args:?} should fail with {why:?}: {out}");
        assert!(!out.contains("panicked"), "{out}");
    }

    let (ok, out) = admin(&["add", &format!("4={addr4}")], &coordinators);
    assert!(ok && out.contains("voters: 1,2,3,4; learners: \n"), "{out}");
    let (ok, out) = admin(&["remove", "1"], &coordinators);
    assert!(ok && out.contains("voters: 2,3,4; learners: \n"), "{out}");
    println!("SIGKILL coordinator 1 (removed) and coordinator 2 (a voter): commits now need 4");
    cluster.coords[0].kill();
    cluster.coords[1].kill();
    let survivors = format!(
        "{},{addr4}",
        coordinators.split(',').nth(2).expect("three coordinators")
    );
    let (ok, out) = admin(&["list"], &survivors);
    assert!(ok && out.contains("voters: 2,3,4\n"), "{out}");

    // The cluster serves: a topic is created (the controller writes to the coordinators) and
    // records produced with acks=all come back.
    let bootstrap = cluster.bootstrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (ok, out) = gregor(&[
            "topics",
            "--bootstrap-server",
            &bootstrap,
            "create",
            "after",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ]);
        if ok || out.contains("already exists") {
            break;
        }
        assert!(Instant::now() < deadline, "topic creation kept failing: {out}");
        thread::sleep(Duration::from_millis(500));
    }
    while leader_of_partition_0(&bootstrap, "after").is_none() {
        assert!(Instant::now() < deadline, "no leader for after-0");
        thread::sleep(Duration::from_millis(200));
    }
    let sent: Vec<String> = (0..20).map(|i| format!("record-{i:02}")).collect();
    let input: String = sent.iter().map(|l| format!("{l}\n")).collect();
    let (ok, out) = gregor_with_input(
        &["produce", "--bootstrap-server", &bootstrap, "after", "--acks", "all"],
        input.as_bytes(),
    );
    assert!(ok, "produce failed: {out}");
    let (ok, out) = gregor(&[
        "consume",
        "--bootstrap-server",
        &bootstrap,
        "after",
        "--from-beginning",
        "--max-messages",
        "20",
        "--timeout-ms",
        "10000",
    ]);
    assert!(ok, "consume failed: {out}");
    let got: Vec<&str> = out.lines().filter(|l| l.starts_with("record-")).collect();
    assert_eq!(got, sent, "consumed records differ from produced ones");
    println!(
        "compared {} records produced and consumed after the replacement",
        got.len()
    );
}
