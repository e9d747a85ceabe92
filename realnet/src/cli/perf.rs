//! `gregor perf produce|consume`: a bounded load from core's client, like
//! kafka-producer-perf-test / kafka-consumer-perf-test. Each of `--runs` runs moves at most
//! `--num-records` records within at most `--duration-ms-max`, and prints records/s, MB/s and
//! (produce) per-batch latency percentiles; the last line gives the medians over the runs.
//!
//! Without `--bootstrap-server` it starts its own `gregor dev` (this same binary) on a free
//! loopback port over a fresh data directory under the temporary directory, and stops it
//! (SIGTERM, then kill) and removes the directory when done, whatever happened.
//!
//! By default the produce runs use the sync producer: one batch of `--batch-records` at a time,
//! waiting for its acknowledgement, so throughput is bounded by the round trip per batch. With
//! `--linger-ms` or `--batch-size` they use the batching producer (`send()` per record, batches
//! by `linger.ms` / `batch.size`, 5 requests in flight) and report bytes per Produce request.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;
use gregor_core::client::batching::BatchingProducer;
use gregor_core::client::consumer::{Consumer, ConsumerConfig};
use gregor_core::client::producer::{Producer, ProducerConfig};
use gregor_core::record::NewRecord;

use super::produce::parse_acks;
use super::ConnectArgs;

/// How long a started `gregor dev` may take to listen, and to stop.
const DEV_START_TIMEOUT: Duration = Duration::from_secs(30);
const DEV_STOP_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    /// The broker to load; without it a `gregor dev` is started on a free loopback port.
    #[arg(long)]
    pub bootstrap_server: Option<String>,
    /// Client properties for `--bootstrap-server` (`security.protocol=SSL`, `ssl.ca.location`,
    /// SASL keys), as the other client commands take.
    #[arg(long)]
    pub command_config: Option<PathBuf>,
    #[arg(long, default_value = "gregor-perf")]
    pub topic: String,
    /// Partitions of the topic if it has to be created.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Records per run at most.
    #[arg(long, default_value_t = 100_000)]
    pub num_records: u64,
    /// Value bytes per record.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Records per produce batch.
    #[arg(long, default_value_t = 500)]
    pub batch_records: usize,
    /// all (idempotent), 1 or 0.
    #[arg(long, default_value = "1", value_parser = parse_acks)]
    pub acks: i16,
    /// Runs; the summary gives their medians.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// The longest one run may take.
    #[arg(long, default_value_t = 30_000)]
    pub duration_ms_max: u64,
    /// produce: use the batching producer with this `linger.ms` (`--batch-records` is then
    /// ignored: records are sent one by one and batched by the producer).
    #[arg(long)]
    pub linger_ms: Option<u64>,
    /// produce: use the batching producer with this `batch.size` in bytes.
    #[arg(long)]
    pub batch_size: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produces `--num-records` records per run.
    Produce(PerfArgs),
    /// Produces `--num-records` records once, then reads them back from the beginning per run.
    Consume(PerfArgs),
}

/// One run's outcome.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Per-batch latencies (produce only), milliseconds.
    pub latencies_ms: Vec<f64>,
}

impl RunStats {
    pub fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e6
    }
}

/// The `q` quantile (0..=1) of `values` by nearest rank; 0 when empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

pub fn run(command: PerfCommand) -> anyhow::Result<()> {
    let (args, consume) = match command {
        PerfCommand::Produce(a) => (a, false),
        PerfCommand::Consume(a) => (a, true),
    };
    if args.runs == 0 || args.num_records == 0 || args.batch_records == 0 {
        bail!("--runs, --num-records and --batch-records must be at least 1");
    }
    if args.partitions < 1 {
        bail!("--partitions must be at least 1");
    }
    let mut own = None;
    let bootstrap = match &args.bootstrap_server {
        Some(b) => b.clone(),
        None => {
            let dev = DevBroker::start()?;
            let addr = dev.addr.clone();
            eprintln!("perf: started gregor dev on {addr}");
            own = Some(dev);
            addr
        }
    };
    let connect = ConnectArgs {
        bootstrap_server: bootstrap,
        request_timeout_ms: 30_000,
        sasl_user: None,
        sasl_password: None,
        sasl_mechanism: None,
        command_config: args.command_config.clone(),
    };
    let result = if consume {
        consume_runs(&connect, &args)
    } else {
        produce_runs(&connect, &args)
    };
    if let Some(dev) = own {
        dev.stop();
    }
    let stats = result?;
    let median = |f: &dyn Fn(&RunStats) -> f64| quantile(&stats.iter().map(f).collect::<Vec<_>>(), 0.5);
    let batching = match (args.linger_ms, args.batch_size) {
        (None, None) => format!("batch {} records", args.batch_records),
        (linger, size) => {
            let d = ProducerConfig::default();
            format!(
                "batching producer, linger.ms {}, batch.size {}",
                linger.unwrap_or(d.linger_ms),
                size.unwrap_or(d.batch_bytes_max)
            )
        }
    };
    println!(
        "perf {}: median of {} runs: {:.0} records/s, {:.2} MB/s ({} B records, acks={}, {batching})",
        if consume { "consume" } else { "produce" },
        stats.len(),
        median(&RunStats::records_per_s),
        median(&RunStats::mb_per_s),
        args.record_size,
        acks_name(args.acks),
    );
    Ok(())
}

fn acks_name(acks: i16) -> &'static str {
    match acks {
        -1 => "all",
        0 => "0",
        _ => "1",
    }
}

fn print_run(i: u32, s: &RunStats) {
    let mut line = format!(
        "run {i}: {} records in {:.3} s: {:.0} records/s, {:.2} MB/s",
        s.records,
        s.seconds,
        s.records_per_s(),
        s.mb_per_s()
    );
    if !s.latencies_ms.is_empty() {
        line.push_str(&format!(
            ", batch latency p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms",
            quantile(&s.latencies_ms, 0.5),
            quantile(&s.latencies_ms, 0.99),
            quantile(&s.latencies_ms, 0.999)
        ));
    }
    println!("{line}");
}

/// Produces one run's records; `None` for the run count means once (the consume setup).
async fn produce_one(
    producer: &mut Producer<crate::RealRuntime>,
    args: &PerfArgs,
    partitions: i32,
) -> anyhow::Result<RunStats> {
    let value = vec![b'x'; args.record_size];
    let started = Instant::now();
    let limit = Duration::from_millis(args.duration_ms_max);
    let mut stats = RunStats::default();
    let mut partition = 0;
    while stats.records < args.num_records && started.elapsed() < limit {
        let n = (args.num_records - stats.records).min(args.batch_records as u64) as usize;
        let now = super::produce::now_ms();
        let records: Vec<NewRecord> = (0..n)
            .map(|_| NewRecord {
                timestamp: now,
                key: None,
                value: Some(value.clone()),
            })
            .collect();
        let sent = Instant::now();
        producer
            .send(&args.topic, partition, &records)
            .await
            .map_err(|e| anyhow::anyhow!("produce failed after {} records: {e:?}", stats.records))?;
        stats.latencies_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        stats.records += n as u64;
        stats.bytes += (n * args.record_size) as u64;
        partition = (partition + 1) % partitions;
    }
    stats.seconds = started.elapsed().as_secs_f64();
    Ok(stats)
}

fn producer_for(
    connect: &ConnectArgs,
    rt: &crate::RealRuntime,
    acks: i16,
) -> anyhow::Result<Producer<crate::RealRuntime>> {
    let config = ProducerConfig {
        acks,
        enable_idempotence: acks == -1,
        delivery_timeout_ms: 60_000,
        ..ProducerConfig::default()
    };
    Ok(Producer::new(connect.cluster(rt)?, config))
}

async fn prepare_topic(producer: &mut Producer<crate::RealRuntime>, args: &PerfArgs) -> anyhow::Result<i32> {
    producer
        .cluster
        .create_topic(&args.topic, args.partitions, 1, &[])
        .await
        .map_err(|e| anyhow::anyhow!("cannot create topic {}: {e}", args.topic))?;
    super::partition_count(&mut producer.cluster, &args.topic).await
}

fn produce_runs(connect: &ConnectArgs, args: &PerfArgs) -> anyhow::Result<Vec<RunStats>> {
    if args.linger_ms.is_some() || args.batch_size.is_some() {
        return batching_runs(connect, args);
    }
    let rt = super::client_runtime()?;
    let mut producer = producer_for(connect, &rt, args.acks)?;
    super::run(async move {
        let partitions = prepare_topic(&mut producer, args).await?;
        let mut all = vec![];
        for i in 1..=args.runs {
            let stats = produce_one(&mut producer, args, partitions).await?;
            print_run(i, &stats);
            all.push(stats);
        }
        Ok(all)
    })
}

/// Produce runs with the batching producer: every record a `send()`, then a flush.
fn batching_runs(connect: &ConnectArgs, args: &PerfArgs) -> anyhow::Result<Vec<RunStats>> {
    let rt = super::client_runtime()?;
    let mut setup = producer_for(connect, &rt, args.acks)?;
    let defaults = ProducerConfig::default();
    let config = ProducerConfig {
        linger_ms: args.linger_ms.unwrap_or(defaults.linger_ms),
        batch_bytes_max: args.batch_size.unwrap_or(defaults.batch_bytes_max),
        ..setup.config.clone()
    };
    let cluster = connect.cluster(&rt)?;
    super::run(async move {
        let partitions = prepare_topic(&mut setup, args).await?;
        let producer = BatchingProducer::start(cluster, config);
        let value = vec![b'x'; args.record_size];
        let mut all = vec![];
        for i in 1..=args.runs {
            let before = producer.stats();
            let started = Instant::now();
            let limit = Duration::from_millis(args.duration_ms_max);
            let mut handles = Vec::new();
            let mut n = 0u64;
            while n < args.num_records && started.elapsed() < limit {
                let record = NewRecord {
                    timestamp: super::produce::now_ms(),
                    key: None,
                    value: Some(value.clone()),
                };
                let partition = i32::try_from(n % partitions as u64).expect("fewer than 2^31 partitions");
                handles.push(producer.send(&args.topic, Some(partition), record).await);
                n += 1;
                if n.is_multiple_of(64) {
                    // The sender and connection tasks share this thread.
                    yield_now().await;
                }
            }
            producer.flush().await;
            let mut stats = RunStats {
                seconds: started.elapsed().as_secs_f64(),
                ..RunStats::default()
            };
            for h in &handles {
                match h.result() {
                    Some(Ok(_)) => {
                        stats.records += 1;
                        stats.bytes += args.record_size as u64;
                    }
                    other => bail!("a send failed: {other:?}"),
                }
            }
            let after = producer.stats();
            let requests = after.requests - before.requests;
            print_run(i, &stats);
            println!(
                "run {i}: {requests} Produce requests, {:.0} bytes per request",
                (after.request_batch_bytes - before.request_batch_bytes) as f64 / requests.max(1) as f64
            );
            all.push(stats);
        }
        producer.close().await;
        Ok(all)
    })
}

/// Lets the other tasks of this thread run once.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

fn consume_runs(connect: &ConnectArgs, args: &PerfArgs) -> anyhow::Result<Vec<RunStats>> {
    let rt = super::client_runtime()?;
    let mut producer = producer_for(connect, &rt, 1)?;
    let connect = connect.clone();
    super::run(async move {
        let partitions = prepare_topic(&mut producer, args).await?;
        let setup = produce_one(&mut producer, args, partitions).await?;
        eprintln!("perf consume: produced {} records to read back", setup.records);
        let mut all = vec![];
        for i in 1..=args.runs {
            let mut consumer = Consumer::new(connect.cluster(&rt)?, ConsumerConfig::default(), &args.topic);
            for p in 0..partitions {
                consumer.assign(p, None);
            }
            let started = Instant::now();
            let limit = Duration::from_millis(args.duration_ms_max);
            let mut stats = RunStats::default();
            while stats.records < setup.records && started.elapsed() < limit {
                let polled = consumer
                    .poll()
                    .await
                    .map_err(|e| anyhow::anyhow!("consume failed: {e}"))?;
                for r in &polled.records {
                    stats.records += 1;
                    stats.bytes += r.value.as_ref().map_or(0, |v| v.len() as u64);
                }
            }
            stats.seconds = started.elapsed().as_secs_f64();
            print_run(i, &stats);
            all.push(stats);
        }
        Ok(all)
    })
}

/// A `gregor dev` this command started and owns.
struct DevBroker {
    child: Child,
    addr: String,
    data_dir: PathBuf,
}

impl DevBroker {
    fn start() -> anyhow::Result<DevBroker> {
        let exe = std::env::current_exe().context("cannot find the gregor binary")?;
        let port = free_loopback_port()?;
        let data_dir = std::env::temp_dir().join(format!("gregor-perf-{}-{port}", std::process::id()));
        let addr = format!("127.0.0.1:{port}");
        let mut child = Process::new(exe)
            .args(["dev", "--listen", &addr, "--data-dir"])
            .arg(&data_dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start gregor dev")?;
        let stdout = child.stdout.take().context("gregor dev's stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let dev = DevBroker { child, addr, data_dir };
        match rx.recv_timeout(DEV_START_TIMEOUT) {
            Ok(line) if line.starts_with("gregor dev: listening on") => Ok(dev),
            Ok(line) => {
                dev.stop();
                bail!("gregor dev said {line:?} instead of listening")
            }
            Err(_) => {
                dev.stop();
                bail!("gregor dev did not listen within {DEV_START_TIMEOUT:?}")
            }
        }
    }

    fn stop(mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + DEV_STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// A loopback port free right now, below the ephemeral range (as the tests pick theirs).
fn free_loopback_port() -> anyhow::Result<u16> {
    let start = 20_000 + (std::process::id() % 10_000) as u16;
    for i in 0..2_000u16 {
        let port = 20_000 + (start - 20_000 + i) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free loopback port between 20000 and 32000")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.999), 100.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
