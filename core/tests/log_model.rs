//! Model-based test of the partition log: random sequences of append, flush, read, roll,
//! truncate, retention, timestamp lookup, index damage, clean reopen and crash-at-any-point,
//! checked after every step against a plain list of the batches appended.
//!
//! The property the issue asks for: after every crash, recovery yields exactly a prefix of the
//! appended batches (from the log start) that contains every synced batch. "Synced" is what the
//! log promises durable: everything up to the last `flush`, and the closed segments after
//! `sync_closed`. A `roll` promises nothing by itself. Reads must return the batch holding the requested offset and
//! following whole batches, byte-identical to what was appended.

use gregor_core::disk::mem::{CrashMode, MemDisk};
use gregor_core::disk::Disk;
use gregor_core::log::{Log, LogConfig, LogError};
use gregor_core::record::{build_batch, records, BatchHeader, NewRecord, ProducerFields};
use gregor_core::{LeaderEpoch, Offset};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the runs compared, so a run that checked nothing fails instead of passing.
static OPS: AtomicU64 = AtomicU64::new(0);
static CRASHES: AtomicU64 = AtomicU64::new(0);
static SYNCED_CHECKED: AtomicU64 = AtomicU64::new(0);
static TORN_TAILS: AtomicU64 = AtomicU64::new(0);
static INDEXES_REBUILT: AtomicU64 = AtomicU64::new(0);
static BATCHES_COMPARED: AtomicU64 = AtomicU64::new(0);
/// Reads whose bytes the read kept, and reads served from the file again.
static KEPT_READS: AtomicU64 = AtomicU64::new(0);
static FILE_READS: AtomicU64 = AtomicU64::new(0);

const DIR: &str = "topic-0";

#[derive(Clone, Debug)]
enum Op {
    /// One record set of `batches` batches, each of `records` records with `value_len` bytes.
    Append {
        batches: usize,
        records: usize,
        value_len: usize,
        ts_jitter: i64,
    },
    NewEpoch,
    Flush,
    Roll,
    SyncClosed,
    Read {
        pick: u64,
        max_bytes: u64,
    },
    TimestampLookup {
        pick: u64,
    },
    Truncate {
        pick: u64,
    },
    Retention {
        advance_ms: i64,
    },
    DamageIndex {
        pick: u64,
        bit: u8,
    },
    Reopen,
    Crash {
        seed: u64,
        torn: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Now and then values of kilobytes: reads past `Log::read`'s in-memory tail walk (8 KiB).
        10 => (1usize..3, 1usize..5, prop_oneof![9 => 0usize..120, 1 => 1_000usize..3_000], -500i64..500)
            .prop_map(|(batches, records, value_len, ts_jitter)| Op::Append { batches, records, value_len, ts_jitter }),
        1 => Just(Op::NewEpoch),
        2 => Just(Op::Flush),
        1 => Just(Op::Roll),
        1 => Just(Op::SyncClosed),
        3 => (any::<u64>(), prop_oneof![Just(1u64), 100u64..2000, Just(u64::MAX)]).prop_map(|(pick, max_bytes)| Op::Read { pick, max_bytes }),
        1 => any::<u64>().prop_map(|pick| Op::TimestampLookup { pick }),
        1 => any::<u64>().prop_map(|pick| Op::Truncate { pick }),
        1 => (0i64..5_000).prop_map(|advance_ms| Op::Retention { advance_ms }),
        1 => (any::<u64>(), 0u8..8).prop_map(|(pick, bit)| Op::DamageIndex { pick, bit }),
        1 => Just(Op::Reopen),
        2 => (any::<u64>(), any::<bool>()).prop_map(|(seed, torn)| Op::Crash { seed, torn }),
    ]
}

fn config() -> impl Strategy<Value = LogConfig> {
    (
        prop_oneof![Just(1600u64), Just(3000), Just(1 << 20)],
        prop_oneof![Just(1u64), Just(300), Just(4096)],
        prop_oneof![Just(None), (500u64..4000).prop_map(Some)],
        prop_oneof![Just(None), (1_000i64..20_000).prop_map(Some)],
        prop_oneof![Just(i64::MAX), 2_000i64..10_000],
    )
        .prop_map(
            |(segment_bytes, index_interval_bytes, retention_bytes, retention_ms, segment_ms)| LogConfig {
                segment_bytes,
                index_interval_bytes,
                retention_bytes,
                retention_ms,
                segment_ms,
                max_message_bytes: 1 << 20,
                ..LogConfig::default()
            },
        )
}

/// A batch as the log must hold it: offsets and epoch already stamped.
#[derive(Clone, Debug)]
struct Stored {
    header: BatchHeader,
    bytes: Vec<u8>,
}

struct Model {
    /// Batches from the log start, in order.
    batches: Vec<Stored>,
    /// `batches[..synced]` must survive any crash.
    synced: usize,
    start: Offset,
}

impl Model {
    fn end(&self) -> Offset {
        self.batches.last().map_or(self.start, |b| b.header.next_offset())
    }

    fn holding(&self, offset: Offset) -> Option<usize> {
        self.batches.iter().position(|b| b.header.last_offset() >= offset)
    }
}

/// Every batch in the log, read front to back through the public read path.
fn read_everything(log: &Log, disk: &MemDisk) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let slice = log.read(disk, at, u64::MAX, None).expect("read in range");
        assert!(slice.len > 0, "no progress reading at {at}");
        let next = slice.next_offset;
        let bytes = Log::read_bytes(disk, slice).expect("slice readable");
        let mut pos = 0;
        while pos < bytes.len() {
            let h = BatchHeader::parse(&bytes[pos..]).expect("whole batches");
            out.push(bytes[pos..pos + h.total_bytes()].to_vec());
            pos += h.total_bytes();
        }
        at = next;
    }
    out
}

fn check_whole_log(log: &Log, disk: &MemDisk, model: &Model) {
    assert_eq!(log.log_start_offset(), model.start, "log start");
    assert_eq!(log.log_end_offset(), model.end(), "log end");
    let got = read_everything(log, disk);
    BATCHES_COMPARED.fetch_add(got.len() as u64, Relaxed);
    let want: Vec<&Vec<u8>> = model.batches.iter().map(|b| &b.bytes).collect();
    assert_eq!(got.len(), want.len(), "batch count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "batch {i} differs");
    }
    for b in &model.batches {
        assert_eq!(
            log.epochs().epoch_for(b.header.base_offset),
            Some(b.header.partition_leader_epoch),
            "epoch cache disagrees with the batch at {}",
            b.header.base_offset
        );
    }
}

fn run(config: LogConfig, ops: Vec<Op>) {
    let mut disk = MemDisk::new();
    let mut log = Log::open(&mut disk, DIR, config.clone()).expect("open empty");
    let mut model = Model {
        batches: Vec::new(),
        synced: 0,
        start: Offset(0),
    };
    let mut epoch = LeaderEpoch(0);
    let mut now_ms: i64 = 1_000_000;
    for op in ops {
        OPS.fetch_add(1, Relaxed);
        now_ms += 7;
        match op {
            Op::Append {
                batches,
                records: n,
                value_len,
                ts_jitter,
            } => {
                let mut set = Vec::new();
                for b in 0..batches {
                    let recs: Vec<NewRecord> = (0..n)
                        .map(|i| NewRecord {
                            timestamp: now_ms + ts_jitter + (i as i64 * 13 + b as i64 * 5) % 40 - 20,
                            key: Some(format!("k{i}").into_bytes()),
                            value: Some(vec![(i + b) as u8; value_len]),
                        })
                        .collect();
                    set.extend(build_batch(&recs, ProducerFields::none()));
                }
                if set.len() as u64 > config.segment_bytes {
                    // Kilobyte values in small segments: refused whole, the log unchanged.
                    let refused = log.append_as_leader(&mut disk, &mut set, epoch, now_ms);
                    assert!(
                        matches!(refused, Err(LogError::LargerThanSegment { .. })),
                        "a {}-byte set into {}-byte segments: {refused:?}",
                        set.len(),
                        config.segment_bytes
                    );
                    continue;
                }
                let info = log
                    .append_as_leader(&mut disk, &mut set, epoch, now_ms)
                    .expect("valid append");
                assert_eq!(info.base_offset, model.end(), "assigned base offset");
                let mut pos = 0;
                while pos < set.len() {
                    let header = BatchHeader::parse(&set[pos..]).expect("batch");
                    assert_eq!(header.partition_leader_epoch, epoch);
                    model.batches.push(Stored {
                        header,
                        bytes: set[pos..pos + header.total_bytes()].to_vec(),
                    });
                    pos += header.total_bytes();
                }
                assert_eq!(info.last_offset.plus(1), model.end());
            }
            Op::NewEpoch => epoch = LeaderEpoch(epoch.0 + 1),
            Op::Flush => {
                log.flush(&mut disk).expect("flush");
                model.synced = model.batches.len();
            }
            Op::Roll => log.roll(&mut disk, now_ms).expect("roll"),
            Op::SyncClosed => {
                log.sync_closed(&mut disk).expect("sync closed");
                let active = *log.segment_bases().last().expect("a segment");
                let closed = model
                    .batches
                    .iter()
                    .take_while(|b| b.header.base_offset < active)
                    .count();
                model.synced = model.synced.max(closed);
            }
            Op::Read { pick, max_bytes } => {
                let span = (model.end().0 - model.start.0 + 1) as u64;
                let offset = Offset(model.start.0 + (pick % span) as i64);
                let slice = log.read(&disk, offset, max_bytes, None).expect("in range");
                match model.holding(offset) {
                    None => assert_eq!(slice.len, 0, "data past the end"),
                    Some(i) => {
                        // The bytes a read kept (near the segment's end) are the file's.
                        let on_file = disk
                            .read_vec(&slice.path, slice.position, slice.len as usize)
                            .expect("slice within the file");
                        match &slice.bytes {
                            Some(kept) => {
                                assert_eq!(kept, &on_file, "kept bytes of the read at {offset}");
                                KEPT_READS.fetch_add(1, Relaxed);
                            }
                            None => {
                                FILE_READS.fetch_add(1, Relaxed);
                            }
                        }
                        let bytes = Log::read_bytes(&disk, slice.clone()).expect("readable");
                        assert_eq!(bytes, on_file, "read at {offset}");
                        assert!(
                            bytes.starts_with(&model.batches[i].bytes),
                            "read at {offset} does not start with the batch holding it"
                        );
                        assert!(
                            slice.len <= max_bytes.max(model.batches[i].bytes.len() as u64),
                            "over max_bytes with more than one batch"
                        );
                        let mut pos = 0;
                        let mut j = i;
                        while pos < bytes.len() {
                            let len = model.batches[j].bytes.len();
                            assert_eq!(
                                &bytes[pos..pos + len],
                                &model.batches[j].bytes[..],
                                "batch {j} in read differs"
                            );
                            pos += len;
                            j += 1;
                        }
                        assert_eq!(slice.next_offset, model.batches[j - 1].header.next_offset());
                    }
                }
                let past = log.read(&disk, model.end().plus(1), 100, None);
                assert!(past.is_err(), "read past the end accepted");
            }
            Op::TimestampLookup { pick } => {
                let all: Vec<(Offset, i64)> = model
                    .batches
                    .iter()
                    .flat_map(|b| {
                        records(&b.bytes)
                            .expect("uncompressed")
                            .into_iter()
                            .map(|r| (r.offset, r.timestamp))
                    })
                    .collect();
                let target = if all.is_empty() {
                    now_ms
                } else {
                    all[(pick % all.len() as u64) as usize].1 + (pick % 3) as i64 - 1
                };
                let want = all.iter().find(|(_, ts)| *ts >= target).copied();
                assert_eq!(
                    log.offset_for_timestamp(&disk, target).expect("lookup"),
                    want,
                    "timestamp {target}"
                );
            }
            Op::Truncate { pick } => {
                if model.end() == model.start {
                    continue;
                }
                let span = (model.end().0 - model.start.0) as u64;
                let offset = Offset(model.start.0 + (pick % span) as i64);
                let i = model.holding(offset).expect("inside the log");
                let new_end = log.truncate_to(&mut disk, offset).expect("truncate");
                if offset == model.start {
                    model.batches.clear();
                    model.start = offset;
                } else {
                    model.batches.truncate(i);
                }
                assert_eq!(new_end, model.end(), "end after truncation");
                model.synced = model.synced.min(model.batches.len());
            }
            Op::Retention { advance_ms } => {
                now_ms += advance_ms;
                let before = log.log_start_offset();
                log.apply_retention(&mut disk, now_ms, log.log_end_offset())
                    .expect("retention");
                let after = log.log_start_offset();
                assert!(after >= before, "log start went backwards");
                let removed = model
                    .batches
                    .iter()
                    .take_while(|b| b.header.base_offset < after)
                    .count();
                if removed < model.batches.len() {
                    assert_eq!(
                        model.batches[removed].header.base_offset, after,
                        "retention cut inside a batch"
                    );
                }
                if let Some(max) = config.retention_bytes {
                    assert!(
                        removed == 0 || log.size_bytes() >= max || config.retention_ms.is_some(),
                        "retention.bytes deleted below its limit"
                    );
                }
                model.batches.drain(..removed);
                model.synced = model.synced.saturating_sub(removed);
                model.start = after;
            }
            Op::DamageIndex { pick, bit } => {
                let indexes: Vec<String> = disk
                    .paths()
                    .into_iter()
                    .filter(|p| p.ends_with("index"))
                    .filter(|p| disk.len(p).unwrap_or(0) > 0)
                    .collect();
                if indexes.is_empty() {
                    continue;
                }
                let path = &indexes[(pick % indexes.len() as u64) as usize];
                let len = disk.len(path).expect("exists");
                disk.flip_bit(path, pick % len, bit).expect("flip");
                log = Log::open(&mut disk, DIR, config.clone()).expect("reopen after index damage");
                INDEXES_REBUILT.fetch_add(log.recovery_report().indexes_rebuilt as u64, Relaxed);
            }
            Op::Reopen => {
                log = Log::open(&mut disk, DIR, config.clone()).expect("clean reopen");
            }
            Op::Crash { seed, torn } => {
                CRASHES.fetch_add(1, Relaxed);
                SYNCED_CHECKED.fetch_add(model.synced as u64, Relaxed);
                disk.crash(if torn {
                    CrashMode::Torn { seed }
                } else {
                    CrashMode::DropUnsynced
                });
                log = Log::open(&mut disk, DIR, config.clone()).expect("recovery");
                TORN_TAILS.fetch_add(u64::from(log.recovery_report().bytes_truncated > 0), Relaxed);
                let got = read_everything(&log, &disk);
                assert!(
                    got.len() >= model.synced,
                    "recovery lost synced batches: kept {} of {} synced",
                    got.len(),
                    model.synced
                );
                assert!(got.len() <= model.batches.len(), "recovery invented batches");
                for (i, g) in got.iter().enumerate() {
                    assert_eq!(
                        g, &model.batches[i].bytes,
                        "recovered batch {i} is not the appended one"
                    );
                }
                model.batches.truncate(got.len());
                model.synced = model.batches.len();
            }
        }
        check_whole_log(&log, &disk, &model);
    }
}

#[test]
// The case count is a knob of this test harness (CI's long runs raise it), not core configuration.
#[allow(clippy::disallowed_methods)]
fn log_matches_model_across_crashes() {
    let cases = std::env::var("GREGOR_LOG_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (config(), proptest::collection::vec(op(), 1..80));
    if let Err(e) = runner.run(&strategy, |(config, ops)| {
        run(config, ops);
        Ok(())
    }) {
        panic!("{e}");
    }
    let (ops, crashes, synced, torn, rebuilt, compared) = (
        OPS.load(Relaxed),
        CRASHES.load(Relaxed),
        SYNCED_CHECKED.load(Relaxed),
        TORN_TAILS.load(Relaxed),
        INDEXES_REBUILT.load(Relaxed),
        BATCHES_COMPARED.load(Relaxed),
    );
    let (kept, from_file) = (KEPT_READS.load(Relaxed), FILE_READS.load(Relaxed));
    println!("log model: {cases} cases, {ops} operations, {crashes} crashes ({torn} with a torn tail cut), {synced} synced batches checked to survive, {rebuilt} damaged indexes rebuilt, {compared} batch reads compared ({kept} reads with their bytes kept, {from_file} read from the file again)");
    assert!(
        crashes > 0 && synced > 0 && torn > 0 && rebuilt > 0 && compared > 0 && kept > 0 && from_file > 0,
        "the model compared too little to mean anything"
    );
}
