//! The `gregor` client subcommands against a `gregor dev` they do not share with other tests:
//! `topics create|list|describe|delete`, `produce` from standard input, `consume` back, and bad
//! input giving a clear error and a non-zero exit (never a panic). Every command is bounded by
//! COMMAND_TIMEOUT; only loopback addresses are used.

mod common;
use common::{free_port, wait_bounded, Broker};

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `gregor ARGS` with `input` on standard input, killing it past COMMAND_TIMEOUT.
fn gregor(args: &[&str], input: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gregor");
    let mut stdin = child.stdin.take().expect("stdin piped");
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
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
    let status = wait_bounded(&mut child, COMMAND_TIMEOUT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    writer.join().expect("stdin writer");
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    assert!(
        status.is_some(),
        "gregor {args:?} ran longer than {COMMAND_TIMEOUT:?}: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked"),
        "gregor {args:?} panicked: {}",
        run.stderr
    );
    run
}

fn ok(args: &[&str], input: &[u8]) -> String {
    let run = gregor(args, input);
    assert_eq!(
        run.code,
        Some(0),
        "gregor {args:?} failed: {}{}",
        run.stdout,
        run.stderr
    );
    run.stdout
}

fn fails(args: &[&str], input: &[u8], needle: &str) {
    let run = gregor(args, input);
    assert!(
        run.code.is_some_and(|c| c != 0),
        "gregor {args:?} should fail, exited {:?}: {}",
        run.code,
        run.stdout
    );
    assert!(
        run.stderr.contains(needle),
        "gregor {args:?}: stderr lacks {needle:?}: {}",
        run.stderr
    );
    println!(
        "gregor {args:?} failed as it should: {}",
        run.stderr.lines().next().unwrap_or("")
    );
}

#[test]
fn topics_produce_consume_describe_and_delete_through_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&dir.path().join("data"), free_port());
    let addr = broker.addr();
    let b = ["--bootstrap-server", addr.as_str()];
    let with = |args: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.insert(1, b[0].to_string());
        v.insert(2, b[1].to_string());
        v
    };
    let run_ok = |args: &[&'static str], input: &[u8]| {
        let v = with(args);
        ok(&v.iter().map(String::as_str).collect::<Vec<_>>(), input)
    };
    let run_fails = |args: &[&'static str], needle: &str| {
        let v = with(args);
        fails(&v.iter().map(String::as_str).collect::<Vec<_>>(), b"", needle)
    };

    let created = run_ok(
        &[
            "topics",
            "create",
            "lines",
            "--partitions",
            "3",
            "--config",
            "retention.ms=86400000",
        ],
        b"",
    );
    assert_eq!(created.trim(), "Created topic lines.");
    assert_eq!(run_ok(&["topics", "list"], b"").lines().collect::<Vec<_>>(), ["lines"]);

    let described = run_ok(&["topics", "describe", "lines"], b"");
    println!("{described}");
    let head = described.lines().next().expect("a header line");
    assert!(
        head.contains("PartitionCount: 3") && head.contains("Configs: retention.ms=86400000"),
        "{head}"
    );
    assert_eq!(
        described.lines().filter(|l| l.contains("Leader: 0")).count(),
        3,
        "{described}"
    );

    // 100 lines, one of them empty and one with a tab; each line is a record, order kept per
    // partition. Produced in two runs so the unkeyed batches land on different partitions.
    let sent: Vec<String> = (0..100)
        .map(|i| match i {
            7 => String::new(),
            8 => "tab\there".to_string(),
            _ => format!("line-{i:03}"),
        })
        .collect();
    let (first, second) = sent.split_at(60);
    for part in [first, second] {
        let input = part.iter().map(|l| format!("{l}\n")).collect::<String>();
        let summary = run_ok(&["produce", "lines", "--acks", "all"], input.as_bytes());
        assert!(
            summary.starts_with(&format!("produced {} records to lines", part.len())),
            "{summary}"
        );
    }
    let keyed = run_ok(
        &["produce", "lines", "--key", "k", "--acks", "1"],
        b"keyed-a\nkeyed-b\n",
    );
    assert!(keyed.starts_with("produced 2 records"), "{keyed}");

    let consumed = run_ok(
        &[
            "consume",
            "lines",
            "--from-beginning",
            "--max-messages",
            "102",
            "--timeout-ms",
            "5000",
        ],
        b"",
    );
    let mut got: Vec<&str> = consumed.lines().collect();
    let mut want: Vec<&str> = sent.iter().map(String::as_str).chain(["keyed-a", "keyed-b"]).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "consumed records differ from produced ones");
    println!("compared {} records produced and consumed through the CLI", want.len());

    // Without --from-beginning only new records come: none, so the idle timeout ends it.
    assert_eq!(run_ok(&["consume", "lines", "--timeout-ms", "500"], b""), "");

    // Bad input: clear errors, non-zero exits.
    run_fails(&["topics", "create", "lines"], "TopicAlreadyExists");
    run_fails(&["topics", "create", "bad", "--partitions", "0"], "InvalidPartitions");
    run_fails(
        &["topics", "create", "bad", "--config", "no-equals"],
        "is not key=value",
    );
    run_fails(&["topics", "create", "bad", "--config", "nope=1"], "InvalidConfig");
    run_fails(&["topics", "describe", "missing"], "UnknownTopicOrPartition");
    run_fails(&["produce", "lines", "--acks", "2"], "acks must be all, 1 or 0");
    fails(
        &["topics", "--bootstrap-server", "127.0.0.1:1", "list"],
        b"",
        "cannot reach the cluster",
    );
    fails(
        &["topics", "--bootstrap-server", "nonsense", "list"],
        b"",
        "is not host:port",
    );

    assert_eq!(
        run_ok(&["topics", "delete", "lines"], b"").trim(),
        "Deleted topic lines."
    );
    assert_eq!(run_ok(&["topics", "list"], b""), "");
    // The view without the topic and the removal of its replicas are one step of the broker:
    // once `list` misses it, no partition directory of it is left, not even an empty one.
    let left: Vec<String> = std::fs::read_dir(dir.path().join("data"))
        .expect("data dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("lines-"))
        .collect();
    assert!(left.is_empty(), "left after DeleteTopics: {left:?}");
    println!("compared the data directory after DeleteTopics: no lines-* directory left");
    run_fails(&["topics", "delete", "lines"], "UnknownTopicOrPartition");
    run_fails(&["consume", "lines", "--timeout-ms", "100"], "UnknownTopicOrPartition");

    let status = broker.stop();
    assert!(status.success(), "gregor dev exited with {status}");
}

/// `gregor perf` without `--bootstrap-server` starts its own `gregor dev`, runs a bounded load
/// and prints each run and the medians; the runs moved every record asked for.
#[test]
fn perf_produce_and_consume_start_their_own_broker_and_report_medians() {
    for mode in ["produce", "consume"] {
        let out = ok(
            &[
                "perf",
                mode,
                "--num-records",
                "3000",
                "--batch-records",
                "200",
                "--runs",
                "2",
            ],
            b"",
        );
        println!("{out}");
        let runs: Vec<&str> = out.lines().filter(|l| l.starts_with("run ")).collect();
        assert_eq!(runs.len(), 2, "{out}");
        assert!(runs.iter().all(|l| l.contains(": 3000 records in ")), "{out}");
        assert!(out.contains(&format!("perf {mode}: median of 2 runs: ")), "{out}");
    }
    // The batching producer: every record acknowledged, requests counted.
    let out = ok(
        &[
            "perf",
            "produce",
            "--num-records",
            "3000",
            "--partitions",
            "2",
            "--linger-ms",
            "5",
            "--batch-size",
            "4096",
            "--runs",
            "2",
        ],
        b"",
    );
    println!("{out}");
    let runs: Vec<&str> = out.lines().filter(|l| l.contains(": 3000 records in ")).collect();
    assert_eq!(runs.len(), 2, "{out}");
    assert!(out.contains("bytes per request"), "{out}");
    assert!(out.contains("batching producer, linger.ms 5, batch.size 4096"), "{out}");
    fails(&["perf", "produce", "--runs", "0"], b"", "must be at least 1");
}

/// The rows of `gregor groups describe` as whitespace-separated fields, header dropped.
fn describe_rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip_while(|l| !l.starts_with("GROUP "))
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// `gregor consume --group` commits what it printed; `gregor groups list|describe` then show
/// the group, its committed offset, the log end offset and the lag, and, while a member is
/// consuming, which member (id, host, client id) owns the partition.
#[test]
fn groups_describe_shows_committed_offsets_lag_and_owner() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = Broker::start(&dir.path().join("data"), free_port());
    let addr = broker.addr();
    let run_ok = |args: &[&str]| {
        let mut v = vec![args[0], "--bootstrap-server", addr.as_str()];
        v.extend_from_slice(&args[1..]);
        ok(&v, b"")
    };
    run_ok(&["topics", "create", "events", "--partitions", "1"]);
    let input: String = (0..100).map(|i| format!("event-{i}\n")).collect();
    let mut produce = vec!["produce", "--bootstrap-server", addr.as_str(), "events"];
    produce.extend(["--acks", "all"]);
    ok(&produce, input.as_bytes());

    let consumed = run_ok(&[
        "consume",
        "events",
        "--group",
        "readers",
        "--from-beginning",
        "--max-messages",
        "30",
        "--timeout-ms",
        "10000",
    ]);
    assert_eq!(consumed.lines().count(), 30, "{consumed}");

    assert_eq!(run_ok(&["groups", "list"]).trim(), "readers");
    let listed = run_ok(&["groups", "list", "--state"]);
    assert!(
        listed.lines().any(|l| l.split_whitespace().eq(["readers", "Empty"])),
        "{listed}"
    );

    let described = run_ok(&["groups", "describe", "readers"]);
    println!("{described}");
    assert!(described.contains("has no active members"), "{described}");
    let rows = describe_rows(&described);
    let want = ["readers", "events", "0", "30", "100", "70", "-", "-", "-"];
    assert_eq!(rows, vec![want.map(String::from).to_vec()], "{described}");
    println!("compared committed 30, log end 100, lag 70 and no owner after the member left");

    // A member that stays: it reads the other 70, commits, and idles until killed.
    let mut member = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args([
            "consume",
            "--bootstrap-server",
            addr.as_str(),
            "events",
            "--group",
            "readers",
        ])
        .args(["--timeout-ms", "25000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the group member");
    let mut last = String::new();
    let mut owned = None;
    for _ in 0..40 {
        last = run_ok(&["groups", "describe", "readers"]);
        let rows = describe_rows(&last);
        if let [row] = rows.as_slice() {
            if row[3..6] == ["100", "100", "0"] && row[6] != "-" {
                owned = Some(row.clone());
                break;
            }
        }
        thread::sleep(Duration::from_millis(250));
    }
    let _ = member.kill();
    let _ = member.wait();
    println!("{last}");
    let row = owned.unwrap_or_else(|| panic!("no row with lag 0 and an owner: {last}"));
    assert!(row[6].starts_with("gregor-cli-"), "member id {row:?}");
    assert_eq!(row[7..], ["/127.0.0.1", "gregor-cli"], "{row:?}");
    println!(
        "compared committed 100, lag 0 and owner {} on {} while the member lived",
        row[6], row[7]
    );

    fails(
        &["groups", "--bootstrap-server", addr.as_str(), "describe", "nobody"],
        b"",
        "does not exist",
    );
    let status = broker.stop();
    assert!(status.success(), "gregor dev exited with {status}");
}
