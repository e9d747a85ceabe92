//! Log-append throughput on the real file system, against a plain sequential-write loop of the
//! same bytes to the same file system in the same run.
//!
//! Owns the benchmark for the issue "the log reaches at least 0.8 of the plain write loop with
//! flush off, and the same ratio with flush every 1 MiB against a plain loop that fsyncs every
//! 1 MiB". Every variant writes the same ~16 KiB RecordBatch v2 buffer (16 records × 1 KiB
//! values, built with `gregor_core::record::build_batch`) until `--bytes` have been written:
//!
//! - `plain`:  `std::fs::File::write_all` of the buffer in a loop (the baseline);
//! - `fsdisk`: `FsDisk::append` of the buffer (the Disk layer's own overhead);
//! - `log`:    `Log::append_as_leader` on an `FsDisk` (the system under test; see `run_log`).
//!
//! each once with flush off and once with `sync_data` every 1 MiB (the log: `flush.messages` =
//! 1024 records = 64 batches, the same fsync count as the byte threshold gives the others).
//! Opening the file and the final `sync_data` that drains the page cache are outside the clock,
//! so one variant's write-back does not land on the next one's time. Rounds alternate the
//! variants (rotating which goes first), after one discarded warm-up round; the report gives
//! the median MB/s (10^6 bytes per second) per variant and the ratios to the plain loop.
//!
//! Configuration (flag, else environment, else default):
//! `--bytes N` / `GREGOR_BENCH_BYTES` (suffixes K, M, G are binary; default 256M),
//! `--runs N` / `GREGOR_BENCH_RUNS` (default 5), `--dir D` / `GREGOR_BENCH_DIR` (default: the
//! cargo target directory, which is where the build's disk is; /tmp may be tmpfs),
//! `--segment-bytes N` / `GREGOR_BENCH_SEGMENT_BYTES` (the log's `segment.bytes`, default
//! Kafka's 1 GiB: a run shorter than that never rolls a segment, so set it lower, or `--bytes`
//! higher, to include the cost of rolling).
//!
//! Fault model: none injected; an I/O error ends the run with a message. Each run writes a
//! fresh file in a temporary directory that is deleted afterwards.
//!
//! Run: `cargo bench -p gregor-realnet --bench log_append [-- --bytes 1G --runs 7]`.

use std::error::Error;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gregor_core::disk::Disk;
use gregor_core::ids::LeaderEpoch;
use gregor_core::log::{Log, LogConfig};
use gregor_core::record::{build_batch, NewRecord, ProducerFields};
use gregor_realnet::FsDisk;

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Records per batch and value size: the "1 KiB-record batches of about 16 KiB".
const RECORDS_PER_BATCH: usize = 16;
const VALUE_BYTES: usize = 1024;
/// The flush interval of the flushing variants.
const FLUSH_BYTES: u64 = 1 << 20;
/// The log's flush interval in records: 1024 records = 64 batches, the same number of fsyncs as
/// `FLUSH_BYTES` gives the other variants (64 batches is the first multiple past 1 MiB).
const FLUSH_MESSAGES: u64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    FsDisk,
    Log,
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    kind: Kind,
    flush: bool,
}

impl Variant {
    fn name(self) -> String {
        let kind = match self.kind {
            Kind::Plain => "plain",
            Kind::FsDisk => "fsdisk",
            Kind::Log => "log",
        };
        let flush = if self.flush { "flush/1MiB" } else { "no flush" };
        format!("{kind} ({flush})")
    }
}

struct Config {
    bytes_total: u64,
    segment_bytes: u64,
    runs: usize,
    dir: PathBuf,
}

fn main() -> BenchResult<()> {
    let config = config()?;
    let batch = make_batch();
    let variants: Vec<Variant> = [false, true]
        .into_iter()
        .flat_map(|flush| {
            [Kind::Plain, Kind::FsDisk, Kind::Log]
                .into_iter()
                .map(move |kind| Variant { kind, flush })
        })
        .collect();

    let scratch = tempfile::Builder::new()
        .prefix("gregor-bench-")
        .tempdir_in(&config.dir)?;
    println!(
        "log_append: {} MiB per run in {}-byte batches ({} x {} B records), {} runs, \
         log segments of {} MiB, in {} ({})",
        config.bytes_total >> 20,
        batch.len(),
        RECORDS_PER_BATCH,
        VALUE_BYTES,
        config.runs,
        config.segment_bytes >> 20,
        scratch.path().display(),
        fs_type(scratch.path()),
    );

    let mut mbps: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    // Round 0 is a warm-up (page cache, allocator, CPU frequency): measured, not reported.
    for round in 0..=config.runs {
        for i in 0..variants.len() {
            let index = (i + round) % variants.len();
            let variant = variants[index];
            let dir = scratch.path().join(format!("r{round}-{index}"));
            fs::create_dir(&dir)?;
            let elapsed = run(variant, &dir, &batch, &config)?;
            fs::remove_dir_all(&dir)?;
            let rate = config.bytes_total as f64 / elapsed.as_secs_f64() / 1e6;
            if round > 0 {
                mbps[index].push(rate);
            }
        }
    }

    println!("\n{:<22} {:>10}   runs (MB/s)", "variant", "median");
    let mut medians = Vec::new();
    for (variant, rates) in variants.iter().zip(&mbps) {
        let m = median(rates);
        medians.push(m);
        let runs: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        println!("{:<22} {:>10.0}   {}", variant.name(), m, runs.join(" "));
    }
    println!("\nratio to the plain loop with the same flush policy (target >= 0.80):");
    for (variant, m) in variants.iter().zip(&medians) {
        if variant.kind == Kind::Plain {
            continue;
        }
        let plain = variants
            .iter()
            .zip(&medians)
            .find(|(v, _)| v.kind == Kind::Plain && v.flush == variant.flush)
            .map(|(_, m)| *m)
            .ok_or("no plain baseline")?;
        let ratio = m / plain;
        let verdict = if ratio >= 0.8 { "ok" } else { "BELOW TARGET" };
        println!("  {:<22} {ratio:.2}  {verdict}", variant.name());
    }
    Ok(())
}

/// Runs one variant once in the empty directory `dir`; returns the time the writes took.
fn run(variant: Variant, dir: &Path, batch: &[u8], config: &Config) -> BenchResult<Duration> {
    let bytes_total = config.bytes_total;
    let flush_bytes = variant.flush.then_some(FLUSH_BYTES);
    match variant.kind {
        Kind::Plain => run_plain(dir, batch, bytes_total, flush_bytes),
        Kind::FsDisk => run_fsdisk(dir, batch, bytes_total, flush_bytes),
        Kind::Log => run_log(dir, batch, bytes_total, config.segment_bytes, variant.flush),
    }
}

/// The baseline: `write_all` of the same buffer, `sync_data` every `flush_bytes`.
fn run_plain(dir: &Path, batch: &[u8], bytes_total: u64, flush_bytes: Option<u64>) -> BenchResult<Duration> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join("plain.bin"))?;
    let start = Instant::now();
    let (mut written, mut unsynced) = (0u64, 0u64);
    while written < bytes_total {
        file.write_all(batch)?;
        written += batch.len() as u64;
        unsynced += batch.len() as u64;
        if flush_bytes.is_some_and(|f| unsynced >= f) {
            file.sync_data()?;
            unsynced = 0;
        }
    }
    let elapsed = start.elapsed();
    file.sync_data()?;
    Ok(elapsed)
}

/// `FsDisk::append` of the same buffer, `FsDisk::sync` every `flush_bytes`.
fn run_fsdisk(dir: &Path, batch: &[u8], bytes_total: u64, flush_bytes: Option<u64>) -> BenchResult<Duration> {
    let mut disk = FsDisk::open(dir)?;
    let path = "bench-0/00000000000000000000.log";
    disk.create(path)?;
    let start = Instant::now();
    let (mut written, mut unsynced) = (0u64, 0u64);
    while written < bytes_total {
        disk.append(path, batch)?;
        written += batch.len() as u64;
        unsynced += batch.len() as u64;
        if flush_bytes.is_some_and(|f| unsynced >= f) {
            disk.sync(path)?;
            unsynced = 0;
        }
    }
    let elapsed = start.elapsed();
    disk.sync(path)?;
    Ok(elapsed)
}

/// The system under test: `Log::append_as_leader` of the same batch on an `FsDisk`, which
/// rewrites the base offset in place (as the broker does to a produced batch) and asks for a
/// flush every `FLUSH_MESSAGES` records when `flush` is on.
fn run_log(dir: &Path, batch: &[u8], bytes_total: u64, segment_bytes: u64, flush: bool) -> BenchResult<Duration> {
    let mut disk = FsDisk::open(dir)?;
    let mut batch = batch.to_vec();
    let config = LogConfig {
        flush_messages: flush.then_some(FLUSH_MESSAGES),
        segment_bytes,
        ..LogConfig::default()
    };
    let mut log = Log::open(&mut disk, "bench-0", config)?;
    let start = Instant::now();
    let mut written = 0u64;
    while written < bytes_total {
        let info = log.append_as_leader(&mut disk, &mut batch[..], LeaderEpoch(0), now_ms())?;
        if info.flush_due {
            log.flush(&mut disk)?;
        }
        written += batch.len() as u64;
    }
    let elapsed = start.elapsed();
    log.flush(&mut disk)?;
    // A bench that measured a log writing nothing would pass with flying colours: check it.
    let batches = written / batch.len() as u64;
    let records = batches * RECORDS_PER_BATCH as u64;
    let mut on_disk = 0;
    for name in disk.list("bench-0")?.iter().filter(|n| n.ends_with(".log")) {
        on_disk += disk.len(&format!("bench-0/{name}"))?;
    }
    if log.log_end_offset().0 as u64 != records || log.size_bytes() != written || on_disk != written {
        return Err(format!(
            "log holds offsets to {:?} and {} bytes ({on_disk} in .log files), expected {records} \
             records in {written} bytes",
            log.log_end_offset(),
            log.size_bytes()
        )
        .into());
    }
    Ok(elapsed)
}

/// One batch of `RECORDS_PER_BATCH` records with `VALUE_BYTES`-byte values.
fn make_batch() -> Vec<u8> {
    let now = now_ms();
    let records: Vec<NewRecord> = (0..RECORDS_PER_BATCH)
        .map(|i| NewRecord {
            timestamp: now,
            key: None,
            value: Some((0..VALUE_BYTES).map(|j| (i * 31 + j) as u8).collect()),
        })
        .collect();
    build_batch(&records, ProducerFields::none())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn config() -> BenchResult<Config> {
    let mut bytes = std::env::var("GREGOR_BENCH_BYTES").ok();
    let mut runs = std::env::var("GREGOR_BENCH_RUNS").ok();
    let mut dir = std::env::var("GREGOR_BENCH_DIR").ok();
    let mut segment_bytes = std::env::var("GREGOR_BENCH_SEGMENT_BYTES").ok();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo bench passes `--bench` to every harness = false target.
            "--bench" => {}
            "--bytes" => bytes = Some(args.next().ok_or("--bytes needs a value")?),
            "--runs" => runs = Some(args.next().ok_or("--runs needs a value")?),
            "--dir" => dir = Some(args.next().ok_or("--dir needs a value")?),
            "--segment-bytes" => segment_bytes = Some(args.next().ok_or("--segment-bytes needs a value")?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: log_append [--bytes N[K|M|G]] [--runs N] [--dir D] [--segment-bytes N[K|M|G]]"
                )
                .into())
            }
        }
    }
    let bytes_total = match bytes {
        Some(text) => parse_bytes(&text)?,
        None => 256 << 20,
    };
    if bytes_total == 0 {
        return Err("--bytes must be positive".into());
    }
    let segment_bytes = match segment_bytes {
        Some(text) => parse_bytes(&text)?,
        None => LogConfig::default().segment_bytes,
    };
    let runs = match runs {
        Some(text) => text.parse::<usize>()?.max(1),
        None => 5,
    };
    let dir = match dir {
        Some(dir) => PathBuf::from(dir),
        None => target_dir()?,
    };
    Ok(Config {
        bytes_total,
        segment_bytes,
        runs,
        dir,
    })
}

/// `64M` → 64 MiB; a plain number is bytes.
fn parse_bytes(text: &str) -> BenchResult<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 10),
        Some((i, 'M' | 'm')) => (&text[..i], 20),
        Some((i, 'G' | 'g')) => (&text[..i], 30),
        _ => (text, 0),
    };
    let n: u64 = digits.parse()?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text} bytes is too many").into())
}

/// The cargo target directory: the bench binary runs from `target/<profile>/deps/`.
fn target_dir() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("bench binary has no target directory above it")?;
    Ok(profile_dir.to_path_buf())
}

/// The file system type of the mount holding `path` (from /proc/self/mounts), for the report:
/// a tmpfs result would measure memory, not the disk.
fn fs_type(path: &Path) -> String {
    let Ok(path) = path.canonicalize() else {
        return "unknown fs".to_string();
    };
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return "unknown fs".to_string();
    };
    let best = mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let mount_point = fields.next()?;
            let fs_type = fields.next()?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), format!("{fs_type} on {device}")))
        })
        .max_by_key(|(len, _)| *len);
    match best {
        Some((_, fs)) if fs.starts_with("tmpfs") || fs.starts_with("ramfs") => {
            format!("{fs} -- WARNING: memory-backed, not a disk; pass --dir")
        }
        Some((_, fs)) => fs,
        None => "unknown fs".to_string(),
    }
}
