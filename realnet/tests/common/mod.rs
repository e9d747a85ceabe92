//! What the realnet integration tests share: one `gregor dev` process per test, started on a
//! free loopback port with its own data directory, waited for with bounds, stopped with SIGTERM
//! (and killed if a test ends without stopping it).

#![allow(dead_code)] // each test binary uses its own part of this module

pub mod certs;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const START_TIMEOUT: Duration = Duration::from_secs(30);
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// One `gregor dev` process; killed if the test ends without stopping it.
pub struct Broker {
    pub child: Option<Child>,
    pub port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

/// A loopback port nobody uses right now, below the kernel's ephemeral range (32768 and up by
/// default): a test that restarts a broker on its port must not find it taken meanwhile as the
/// source port of another test's outgoing connection, which an ephemeral port can be. The
/// broker must advertise its port, so it cannot listen on 0.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 20_000 + (std::process::id() % 1_000) as u16 * 10;
    for _ in 0..2_000 {
        let port = 20_000 + (start - 20_000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between 20000 and 32000");
}

impl Broker {
    pub fn start(data_dir: &Path, port: u16) -> Broker {
        let log = data_dir.with_extension(format!("{port}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_gregor"))
            .args(["dev", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&log).expect("broker log file"))
            .spawn()
            .expect("start gregor dev");
        let mut broker = Broker {
            child: Some(child),
            port,
            data_dir: data_dir.to_path_buf(),
            log,
        };
        let stdout = broker
            .child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if line.starts_with(&format!("gregor dev: listening on 127.0.0.1:{port}")) => broker,
            Ok(line) => panic!("unexpected first line {line:?}; log:\n{}", broker.log_text()),
            Err(_) => panic!(
                "gregor dev did not listen within {START_TIMEOUT:?}; log:\n{}",
                broker.log_text()
            ),
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status, within STOP_TIMEOUT.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
        let status = wait_bounded(&mut child, STOP_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "gregor dev ignored SIGTERM for {STOP_TIMEOUT:?}; log:\n{}",
                self.log_text()
            )
        });
        status
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}
