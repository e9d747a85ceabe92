//! Authentication with real processes on loopback: one `gregor coordinator` and one
//! `gregor broker` whose listener is SASL_PLAINTEXT (PLAIN users from `sasl.plain.users`).
//! The `gregor` CLI and confluent-kafka (librdkafka) log in as an allowed user and produce and
//! consume; without a login, or with a wrong password, they are refused. Every process and wait
//! is bounded; all addresses are 127.0.0.1.
//!
//! The same over SASL_SSL (TLS from rustls, certificates made by rcgen when the test runs):
//! confluent-kafka and kcat with SCRAM-SHA-256, the gregor CLI through `--command-config`, and
//! garbage or plaintext Kafka on the TLS port closing only that connection.

mod common;
use common::{free_port, wait_bounded};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(20);
const PASSWORD: &str = "alice-secret";

/// One `gregor` server process, killed (SIGKILL) when dropped.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn start(args: &[String], log: PathBuf) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start gregor");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let proc = Proc { child, log };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.contains(": listening on 127.0.0.1:") => proc,
            other => panic!("{args:?} did not start ({other:?}); log:\n{}", proc.log_text()),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, Duration::from_secs(10));
    }
}

/// Waits for `child` at most `limit` (killing it after), then reads its stdout and stderr.
fn finish(child: &mut std::process::Child, limit: Duration) -> (Option<std::process::ExitStatus>, String, String) {
    let status = wait_bounded(child, limit);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut s) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut err);
    }
    (status, out, err)
}

/// Runs `gregor ARGS` with `stdin`; whether it succeeded, and its stdout and stderr.
fn gregor(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gregor");
    let mut input = child.stdin.take().expect("stdin piped");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    let (status, out, err) = finish(&mut child, Duration::from_secs(30));
    (status.is_some_and(|s| s.success()), out, err)
}

/// A coordinator and a broker whose one listener is SASL_PLAINTEXT.
struct SaslCluster {
    dir: tempfile::TempDir,
    _coord: Proc,
    broker: Proc,
    bootstrap: String,
}

fn start_sasl_cluster() -> SaslCluster {
    start_cluster(None)
}

/// With `tls`, the listener is SASL_SSL over the PKI written in the cluster's directory.
fn start_cluster(tls: Option<fn(&Path) -> common::certs::TestPki>) -> SaslCluster {
    let dir = tempfile::tempdir().expect("temp dir");
    let (protocol, ssl) = match tls {
        None => ("SASL_PLAINTEXT", String::new()),
        Some(make) => {
            let pki = make(dir.path());
            (
                "SASL_SSL",
                format!(
                    "\"ssl.certificate.location\" = \"{}\"\n\"ssl.key.location\" = \"{}\"\n\"ssl.ca.location\" = \"{}\"\n",
                    pki.server_cert.display(),
                    pki.server_key.display(),
                    pki.ca.display()
                ),
            )
        }
    };
    let users = format!(
        "\"sasl.plain.users\" = \"alice:{PASSWORD},admin:admin-secret\"\n\"sasl.scram.users\" = \"alice:{PASSWORD}\"\n"
    );
    launch(dir, protocol, &format!("{users}{ssl}"))
}

/// Starts a coordinator and a broker in `dir` whose one listener speaks `protocol` with every SASL
/// mechanism and `admin` as the inter-broker user; `extra` adds server.properties lines (users, TLS,
/// the authorizer).
fn launch(dir: tempfile::TempDir, protocol: &str, extra: &str) -> SaslCluster {
    let coord_port = free_port();
    let coord = Proc::start(
        &[
            "coordinator".into(),
            "--id".into(),
            "1".into(),
            "--peers".into(),
            format!("1=127.0.0.1:{coord_port}"),
            "--data-dir".into(),
            dir.path().join("c").display().to_string(),
        ],
        dir.path().join("c.log"),
    );
    let port = free_port();
    let config = dir.path().join("broker.toml");
    std::fs::write(
        &config,
        format!(
            "\"broker.id\" = 0\n\
             \"listeners\" = \"CLIENT://127.0.0.1:{port}\"\n\
             \"listener.security.protocol.map\" = \"CLIENT:{protocol}\"\n\
             \"sasl.enabled.mechanisms\" = \"PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\"\n\
             \"sasl.inter.broker.username\" = \"admin\"\n\
             \"sasl.inter.broker.password\" = \"admin-secret\"\n\
             \"zookeeper.connect\" = \"127.0.0.1:{coord_port}\"\n\
             \"log.dirs\" = \"{}\"\n\
             \"offsets.topic.num.partitions\" = 2\n\
             \"offsets.topic.replication.factor\" = 1\n{extra}",
            dir.path().join("b").display()
        ),
    )
    .expect("write broker config");
    let broker = Proc::start(
        &["broker".into(), "--config".into(), config.display().to_string()],
        dir.path().join("b.log"),
    );
    SaslCluster {
        dir,
        _coord: coord,
        broker,
        bootstrap: format!("127.0.0.1:{port}"),
    }
}

fn login<'a>(bootstrap: &'a str, password: &'a str) -> Vec<&'a str> {
    vec![
        "--bootstrap-server",
        bootstrap,
        "--sasl-mechanism",
        "PLAIN",
        "--sasl-user",
        "alice",
        "--sasl-password",
        password,
    ]
}

#[test]
fn gregor_cli_logs_in_with_plain_and_is_refused_without_a_login_or_with_a_wrong_password() {
    let c = start_sasl_cluster();
    let b = c.bootstrap.as_str();
    // The broker registers within a few seconds; retry creation until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut args = vec!["topics"];
        args.extend(login(b, PASSWORD));
        args.extend(["create", "secured", "--partitions", "1", "--replication-factor", "1"]);
        let (ok, out, err) = gregor(&args, "");
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "creation as alice kept failing: {out}{err}\n{}",
            c.broker.log_text()
        );
        thread::sleep(Duration::from_millis(300));
    }
    let mut produce = vec!["produce"];
    produce.extend(login(b, PASSWORD));
    produce.push("secured");
    let (ok, out, err) = gregor(&produce, "one\ntwo\nthree\n");
    assert!(ok, "produce as alice: {out}{err}");
    let mut consume = vec!["consume"];
    consume.extend(login(b, PASSWORD));
    consume.extend([
        "secured",
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "10000",
    ]);
    let (ok, out, err) = gregor(&consume, "");
    assert!(ok, "consume as alice: {out}{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["one", "two", "three"], "{err}");
    println!("alice produced and consumed 3 records over SASL_PLAINTEXT/PLAIN");

    let (ok, out, err) = gregor(&["topics", "--bootstrap-server", b, "list"], "");
    assert!(!ok, "listing topics without a login succeeded: {out}");
    println!("no login: refused ({})", err.trim());
    let mut wrong = vec!["topics"];
    wrong.extend(login(b, "not-the-password"));
    wrong.push("list");
    let (ok, out, err) = gregor(&wrong, "");
    assert!(!ok, "listing topics with a wrong password succeeded: {out}");
    assert!(err.contains("SaslAuthenticationFailed"), "{err}");
    println!("wrong password: refused ({})", err.trim());
    let log = c.broker.log_text();
    assert!(log.contains("SASL authentication failed"), "failure not logged:\n{log}");
    assert!(
        !log.contains("not-the-password") && !log.contains(PASSWORD),
        "a password is in the broker log"
    );
    drop(c.dir);
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

fn confluent(python: &str, c: &SaslCluster, mechanism: &str, password: &str, mode: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/confluent_sasl.py");
    let ca = c.dir.path().join("ca.pem");
    let tls = ca.exists();
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .args([
            c.bootstrap.as_str(),
            if tls { "SASL_SSL" } else { "SASL_PLAINTEXT" },
            mechanism,
            "alice",
            password,
            mode,
            "sasl-topic",
            "200",
            "60",
        ])
        .args(tls.then_some(&ca))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start python");
    let (status, out, err) = finish(&mut child, Duration::from_secs(90));
    assert!(
        status.is_some_and(|s| s.success()),
        "confluent_sasl.py {mode} failed ({status:?}):\n{out}{err}\nbroker log:\n{}",
        c.broker.log_text()
    );
    out
}

#[test]
fn confluent_kafka_produces_and_consumes_as_a_plain_user_and_a_wrong_password_is_refused() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let c = start_sasl_cluster();
    let out = confluent(&python, &c, "PLAIN", PASSWORD, "ok");
    assert!(out.contains("compared 200 messages"), "{out}");
    print!("{out}");
    let out = confluent(&python, &c, "PLAIN", "not-the-password", "refused");
    assert!(out.starts_with("refused: "), "{out}");
    print!("{out}");
}

#[test]
fn confluent_kafka_produces_and_consumes_with_scram_sha_256_and_a_wrong_password_is_refused() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let c = start_sasl_cluster();
    let out = confluent(&python, &c, "SCRAM-SHA-256", PASSWORD, "ok");
    assert!(out.contains("compared 200 messages"), "{out}");
    print!("{out}");
    let out = confluent(&python, &c, "SCRAM-SHA-256", "not-the-password", "refused");
    assert!(out.starts_with("refused: "), "{out}");
    print!("{out}");
    // The gregor CLI speaks SCRAM-SHA-512 to the same broker.
    let (ok, out, err) = gregor(
        &[
            "topics",
            "--bootstrap-server",
            &c.bootstrap,
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-user",
            "alice",
            "--sasl-password",
            PASSWORD,
            "list",
        ],
        "",
    );
    assert!(
        ok && out.contains("sasl-topic"),
        "gregor topics list over SCRAM-SHA-512: {out}{err}"
    );
    println!("gregor CLI over SCRAM-SHA-512 lists {}", out.trim());
}

/// A `--command-config` file logging in as alice over SASL_SSL with SCRAM-SHA-256.
fn sasl_ssl_properties(c: &SaslCluster, password: &str) -> PathBuf {
    let path = c.dir.path().join(format!("client-{}.properties", password.len()));
    std::fs::write(
        &path,
        format!(
            "security.protocol=SASL_SSL\nssl.ca.location={}\nsasl.mechanism=SCRAM-SHA-256\n\
             sasl.username=alice\nsasl.password={password}\n",
            c.dir.path().join("ca.pem").display()
        ),
    )
    .expect("write client properties");
    path
}

/// kcat's `-X` settings for alice over SASL_SSL with SCRAM-SHA-256.
fn kcat_sasl_ssl(c: &SaslCluster, password: &str) -> Vec<String> {
    [
        "security.protocol=SASL_SSL".to_string(),
        "sasl.mechanisms=SCRAM-SHA-256".to_string(),
        "sasl.username=alice".to_string(),
        format!("sasl.password={password}"),
        format!("ssl.ca.location={}", c.dir.path().join("ca.pem").display()),
    ]
    .into_iter()
    .flat_map(|x| ["-X".to_string(), x])
    .collect()
}

fn kcat_available() -> bool {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kcat is missing under CI=true: .ci/run should have installed it"
        );
        eprintln!("SKIPPED: kcat is not installed (apt-get install kcat)");
    }
    found
}

/// Runs kcat against the cluster; its success, stdout and stderr.
fn kcat(c: &SaslCluster, password: &str, args: &[&str], stdin: &[u8]) -> (bool, Vec<u8>, String) {
    let mut child = Command::new("kcat")
        .args(["-b", &c.bootstrap])
        .args(kcat_sasl_ssl(c, password))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kcat");
    let mut input = child.stdin.take().expect("stdin piped");
    input.write_all(stdin).expect("write kcat stdin");
    drop(input);
    // stdout is read on a thread so a full pipe cannot stall kcat.
    let mut stdout = child.stdout.take().expect("stdout piped");
    let reader = thread::spawn(move || {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
        out
    });
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = reader.join().expect("kcat reader");
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut err);
    }
    (status.is_some_and(|s| s.success()), out, err)
}

/// Creates `topic` over SASL_SSL with the gregor CLI, retrying while the broker registers.
fn create_topic_over_sasl_ssl(c: &SaslCluster, topic: &str, partitions: &str) {
    let props = sasl_ssl_properties(c, PASSWORD);
    let props = props.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let args = [
            "topics",
            "--bootstrap-server",
            &c.bootstrap,
            "--command-config",
            &props,
            "create",
            topic,
            "--partitions",
            partitions,
            "--replication-factor",
            "1",
        ];
        let (ok, out, err) = gregor(&args, "");
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "creating {topic} over SASL_SSL kept failing: {out}{err}\n{}",
            c.broker.log_text()
        );
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn confluent_kafka_over_sasl_ssl_with_scram_sha_256_produces_and_consumes_and_a_wrong_password_is_refused() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let c = start_cluster(Some(common::certs::make));
    let out = confluent(&python, &c, "SCRAM-SHA-256", PASSWORD, "ok");
    assert!(out.contains("compared 200 messages"), "{out}");
    print!("{out}");
    let out = confluent(&python, &c, "SCRAM-SHA-256", "not-the-password", "refused");
    assert!(out.starts_with("refused: "), "{out}");
    print!("{out}");
    // Nothing of the refused client landed: the topic holds exactly the 200 messages, read back
    // by the gregor CLI over SASL_SSL.
    let props = sasl_ssl_properties(&c, PASSWORD).display().to_string();
    let args = [
        "consume",
        "--bootstrap-server",
        &c.bootstrap,
        "--command-config",
        &props,
        "sasl-topic",
        "--from-beginning",
        "--max-messages",
        "201",
        "--timeout-ms",
        "3000",
    ];
    // The values are binary and larger than a pipe: stdout is dropped, and the count comes from
    // the CLI's own summary on stderr.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gregor consume");
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut err);
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "gregor consume over SASL_SSL: {err}"
    );
    println!("gregor CLI over SASL_SSL: {} (expected 200)", err.trim());
    assert!(err.contains("consumed 200 records from sasl-topic"), "{err}");
}

#[test]
fn kcat_over_sasl_ssl_with_scram_sha_256_round_trips_bytes_and_garbage_closes_only_its_connection() {
    if !kcat_available() {
        return;
    }
    let c = start_cluster(Some(common::certs::make));
    create_topic_over_sasl_ssl(&c, "kcat-tls", "1");
    let input: Vec<u8> = (0..500)
        .flat_map(|i| format!("message {i} \u{e9}\u{1f600}\n").into_bytes())
        .collect();
    let (ok, _, err) = kcat(&c, PASSWORD, &["-P", "-t", "kcat-tls"], &input);
    assert!(ok, "kcat produce over SASL_SSL: {err}\n{}", c.broker.log_text());

    // Garbage and a plaintext ApiVersions v0 request on the TLS port: the broker closes each of
    // those connections (read gives EOF or a reset), bounded by a read timeout.
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 7919 % 251) as u8).collect();
    let api_versions = vec![0, 0, 0, 14, 0, 18, 0, 0, 0, 0, 0, 1, 0, 4, b'r', b'a', b'w', b'!'];
    for (what, bytes) in [("garbage", garbage), ("plaintext ApiVersions", api_versions)] {
        let mut raw = std::net::TcpStream::connect(&c.bootstrap).expect("connect");
        raw.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        raw.write_all(&bytes).expect("write");
        let mut reply = Vec::new();
        let result = std::io::Read::read_to_end(&mut raw, &mut reply);
        let closed = match &result {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        // A TLS alert may come back first; no Kafka response can (it would start with a length
        // prefix then the correlation id 1, which a TLS record never does).
        println!("{what}: {} bytes back, then {result:?}", reply.len());
        assert!(closed, "{what}: the broker kept the connection open ({result:?})");
        assert!(reply.len() < 64, "{what}: the broker answered {} bytes", reply.len());
    }

    let (ok, out, err) = kcat(&c, PASSWORD, &["-C", "-t", "kcat-tls", "-o", "beginning", "-e"], b"");
    assert!(ok, "kcat consume over SASL_SSL: {err}\n{}", c.broker.log_text());
    println!(
        "kcat over SASL_SSL: {} bytes produced, {} consumed",
        input.len(),
        out.len()
    );
    assert_eq!(out, input, "kcat read back different bytes");
    let (ok, _, err) = kcat(&c, "not-the-password", &["-L"], b"");
    println!(
        "kcat with a wrong password: success {ok}; {}",
        err.lines().last().unwrap_or("")
    );
    assert!(!ok, "kcat -L with a wrong password succeeded");
}

#[test]
fn replica_fetches_between_two_ssl_brokers_run_over_tls_and_fill_the_isr() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = common::certs::make(dir.path());
    let coord_port = free_port();
    let _coord = Proc::start(
        &[
            "coordinator".into(),
            "--id".into(),
            "1".into(),
            "--peers".into(),
            format!("1=127.0.0.1:{coord_port}"),
            "--data-dir".into(),
            dir.path().join("c").display().to_string(),
        ],
        dir.path().join("c.log"),
    );
    let ports = [free_port(), free_port()];
    let brokers: Vec<Proc> = (0..2)
        .map(|i| {
            let config = dir.path().join(format!("b{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "\"broker.id\" = {i}\n\"listeners\" = \"SSL://127.0.0.1:{}\"\n\
                     \"ssl.certificate.location\" = \"{}\"\n\"ssl.key.location\" = \"{}\"\n\
                     \"ssl.ca.location\" = \"{}\"\n\"zookeeper.connect\" = \"127.0.0.1:{coord_port}\"\n\
                     \"log.dirs\" = \"{}\"\n\"offsets.topic.num.partitions\" = 1\n\
                     \"offsets.topic.replication.factor\" = 1\n\"replica.lag.time.max.ms\" = 3000\n",
                    ports[i],
                    pki.server_cert.display(),
                    pki.server_key.display(),
                    pki.ca.display(),
                    dir.path().join(format!("b{i}")).display()
                ),
            )
            .expect("write broker config");
            Proc::start(
                &["broker".into(), "--config".into(), config.display().to_string()],
                dir.path().join(format!("b{i}.log")),
            )
        })
        .collect();
    let props = dir.path().join("ssl.properties");
    std::fs::write(
        &props,
        format!("security.protocol=SSL\nssl.ca.location={}\n", pki.ca.display()),
    )
    .expect("write client properties");
    let props = props.display().to_string();
    let bootstrap = format!("127.0.0.1:{}", ports[0]);
    let client = |args: &[&str], stdin: &str| {
        let mut all = vec![
            "--bootstrap-server",
            bootstrap.as_str(),
            "--command-config",
            props.as_str(),
        ];
        all.splice(0..0, args[..1].iter().copied());
        all.extend(&args[1..]);
        gregor(&all, stdin)
    };
    // Both brokers register within seconds; retry until creation with two replicas succeeds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = client(
            &[
                "topics",
                "create",
                "rep",
                "--partitions",
                "2",
                "--replication-factor",
                "2",
            ],
            "",
        );
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "create over SSL kept failing: {out}{err}");
        thread::sleep(Duration::from_millis(300));
    }
    let input: String = (0..500).map(|i| format!("record {i}\n")).collect();
    let (ok, out, err) = client(&["produce", "rep", "--acks", "all"], &input);
    assert!(ok, "produce over SSL with acks=all: {out}{err}");
    // A follower is in the ISR only once it has fetched up to the leader's end over the TLS
    // listener (with plaintext fetchers the ISR stays at the leader alone: checked by hand).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = client(&["topics", "describe", "rep"], "");
        let full = out.matches("Isr: 0,1").count() + out.matches("Isr: 1,0").count();
        if ok && full == 2 {
            println!("acks=all produce of 500 records succeeded; ISR over TLS:\n{out}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ISR never filled over TLS: {out}{err}\nbroker logs:\n{}\n{}",
            brokers[0].log_text(),
            brokers[1].log_text()
        );
        thread::sleep(Duration::from_millis(300));
    }
}

/// A coordinator and a broker with SASL_PLAINTEXT/SCRAM and the authorizer on; `admin` (a
/// config-file SCRAM user, the bootstrap) is the super user. Every other user is made with
/// `gregor users add`, so its credential lives in the coordinator.
fn start_secured_cluster() -> SaslCluster {
    let dir = tempfile::tempdir().expect("temp dir");
    launch(
        dir,
        "SASL_PLAINTEXT",
        "\"sasl.plain.users\" = \"admin:admin-secret\"\n\
         \"sasl.scram.users\" = \"admin:admin-secret\"\n\
         \"authorizer.class.name\" = \"gregor\"\n\
         \"super.users\" = \"User:admin\"\n",
    )
}

/// `gregor ARGS` as the super user over SCRAM-SHA-256; panics with its output on failure.
fn as_admin(c: &SaslCluster, args: &[&str]) -> String {
    let mut all = vec![
        args[0],
        "--bootstrap-server",
        &c.bootstrap,
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-user",
        "admin",
        "--sasl-password",
        "admin-secret",
    ];
    all.extend_from_slice(&args[1..]);
    let (ok, out, err) = gregor(&all, "");
    assert!(
        ok,
        "gregor {args:?} failed: {out}{err}\nbroker log:\n{}",
        c.broker.log_text()
    );
    out
}

/// Runs one confluent_acl.py step as `user`; its stdout, or a panic with everything it said.
fn acl_step(python: &str, c: &SaslCluster, user: &str, password: &str, mode: &str, topic: &str, n: usize) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/confluent_acl.py");
    let mut child = Command::new(python)
        .arg(script)
        .args([
            &c.bootstrap,
            "SCRAM-SHA-256",
            user,
            password,
            mode,
            topic,
            &n.to_string(),
            "40",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    let (status, out, err) = finish(&mut child, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "confluent_acl.py {mode} {topic} as {user} failed ({status:?}):\n{out}{err}\nbroker log:\n{}",
        c.broker.log_text()
    );
    print!("{user} {mode} {topic}: {out}");
    out
}

fn end_offset(python: &str, c: &SaslCluster, topic: &str) -> u64 {
    let out = acl_step(python, c, "admin", "admin-secret", "end-offset", topic, 0);
    out.trim()
        .strip_prefix("end-offset ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no end offset in {out:?}"))
}

#[test]
fn scram_users_made_with_gregor_users_are_held_to_their_acls_by_confluent_kafka() {
    let Some(python) = python_with_confluent() else {
        return;
    };
    let c = start_secured_cluster();
    for t in ["t", "orders-eu", "payments"] {
        as_admin(&c, &["topics", "create", t, "--partitions", "1"]);
    }
    for (user, pw) in [("alice", "alice-pw"), ("bob", "bob-pw"), ("carol", "carol-pw")] {
        let out = as_admin(
            &c,
            &["users", "add", user, "--mechanism", "SCRAM-SHA-256", "--password", pw],
        );
        assert!(out.contains("Added SCRAM user"), "{out}");
    }
    let listed = as_admin(&c, &["users", "list"]);
    for user in ["admin", "alice", "bob", "carol"] {
        assert!(
            listed.contains(&format!("{user}\tSCRAM-SHA-256\titerations=4096")),
            "{listed}"
        );
    }
    assert!(!listed.contains("pw"), "users list shows a secret: {listed}");
    // alice: Read, Write, Describe on t; bob: Describe only on t; carol: Read on the prefix
    // `orders-`. Each may use its own consumer group prefix `g-`.
    let acl = |args: &[&str]| as_admin(&c, &[&["acls", "add"][..], args].concat());
    acl(&[
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Write",
        "--operation",
        "Describe",
        "--topic",
        "t",
    ]);
    acl(&[
        "--allow-principal",
        "User:bob",
        "--operation",
        "Describe",
        "--topic",
        "t",
    ]);
    acl(&[
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--topic",
        "orders-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    acl(&[
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        "User:bob",
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--group",
        "g-",
        "--resource-pattern-type",
        "prefixed",
    ]);

    // An allowed user produces and consumes; a wrong password is refused.
    let out = acl_step(&python, &c, "alice", "alice-pw", "roundtrip", "t", 50);
    assert!(out.contains("compared 50 messages"), "{out}");
    let out = acl_step(&python, &c, "alice", "not-alice-pw", "refused", "t", 0);
    assert!(out.starts_with("refused: "), "{out}");

    // Without Write: TOPIC_AUTHORIZATION_FAILED, and the log end does not move.
    let before = end_offset(&python, &c, "t");
    let out = acl_step(&python, &c, "bob", "bob-pw", "denied-produce", "t", 0);
    assert!(out.contains("denied-produce"), "{out}");
    let after = end_offset(&python, &c, "t");
    println!("t's log end offset: {before} before bob's refused produce, {after} after");
    assert_eq!(before, 50, "alice's 50 records");
    assert_eq!(after, before, "a refused produce appended");

    // Prefixed Read: orders-eu yes, payments no.
    acl_step(&python, &c, "admin", "admin-secret", "produce", "orders-eu", 5);
    acl_step(&python, &c, "admin", "admin-secret", "produce", "payments", 5);
    let out = acl_step(&python, &c, "carol", "carol-pw", "consume", "orders-eu", 5);
    assert!(out.contains("consumed 5"), "{out}");
    let out = acl_step(&python, &c, "carol", "carol-pw", "denied-consume", "payments", 0);
    assert!(out.contains("denied-consume"), "{out}");

    // Metadata for all topics lists only what each user may Describe (Read and Write imply
    // it). Asked with `gregor topics list` (an all-topics Metadata): librdkafka 2.16's
    // all-topics Metadata v12 is refused by the Metadata decoder today (3 bytes left over;
    // a bug outside this test, reported). Named topics through librdkafka: refused above.
    let visible = |user: &str, pw: &str| {
        let (ok, out, err) = gregor(
            &[
                "topics",
                "--bootstrap-server",
                &c.bootstrap,
                "--sasl-mechanism",
                "SCRAM-SHA-256",
                "--sasl-user",
                user,
                "--sasl-password",
                pw,
                "list",
            ],
            "",
        );
        assert!(ok, "topics list as {user}: {out}{err}");
        let mut topics: Vec<String> = out
            .lines()
            .filter(|l| !l.starts_with("__"))
            .map(str::to_string)
            .collect();
        topics.sort();
        println!("{user} sees {topics:?}");
        topics
    };
    assert_eq!(visible("carol", "carol-pw"), ["orders-eu"]);
    assert_eq!(visible("alice", "alice-pw"), ["t"]);
    assert_eq!(visible("admin", "admin-secret"), ["orders-eu", "payments", "t"]);

    // A deleted user can no longer log in.
    let out = as_admin(&c, &["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"]);
    assert!(out.contains("Deleted"), "{out}");
    let out = acl_step(&python, &c, "alice", "alice-pw", "refused", "t", 0);
    assert!(out.starts_with("refused: "), "{out}");
    // Deleting again: RESOURCE_NOT_FOUND.
    let (ok, out, err) = gregor(
        &[
            "users",
            "--bootstrap-server",
            &c.bootstrap,
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--sasl-user",
            "admin",
            "--sasl-password",
            "admin-secret",
            "delete",
            "alice",
        ],
        "",
    );
    assert!(!ok && err.contains("ResourceNotFound"), "{out}{err}");
    let log = c.broker.log_text();
    for secret in ["alice-pw", "bob-pw", "carol-pw"] {
        assert!(!log.contains(secret), "a password is in the broker log");
    }
    println!("checked: roundtrip, wrong password, denied produce with unchanged log end, prefixed read, metadata filtering for 3 users, deleted user refused");
}
