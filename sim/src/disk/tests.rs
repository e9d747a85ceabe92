//! The log over a faulty disk: every injected fault is refused, detected or recovered from, and
//! none loses a synced batch or panics.

use super::*;
use gregor_core::log::{Log, LogConfig, LogError};
use gregor_core::record::{build_batch, NewRecord, ProducerFields};
use gregor_core::{LeaderEpoch, Offset};

fn batch(value_len: usize) -> Vec<u8> {
    let rec = NewRecord {
        timestamp: 1,
        key: None,
        value: Some(vec![3; value_len]),
    };
    build_batch(&[rec.clone(), rec], ProducerFields::none())
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4 * batch(100).len() as u64,
        index_interval_bytes: 1,
        ..LogConfig::default()
    }
}

fn log_with(disk: &mut SimDisk, batches: usize) -> Log {
    let mut log = Log::open(disk, "t-0", config()).expect("open");
    for _ in 0..batches {
        log.append_as_leader(disk, &mut batch(100), LeaderEpoch(1), 1)
            .expect("append");
    }
    log.flush(disk).expect("flush");
    log
}

#[test]
fn no_space_refuses_the_append_and_cuts_the_partial_write() {
    let mut disk = SimDisk::default();
    let mut log = log_with(&mut disk, 2);
    let (end, size) = (log.log_end_offset(), log.size_bytes());
    disk.fill(disk.inner().used_bytes() + 50);
    let err = log.append_as_leader(&mut disk, &mut batch(100), LeaderEpoch(1), 1);
    assert_eq!(err, Err(LogError::Disk(DiskError::NoSpace)));
    assert_eq!((log.log_end_offset(), log.size_bytes()), (end, size));
    assert_eq!(
        disk.len("t-0/00000000000000000000.log").expect("len"),
        size,
        "partial write left behind"
    );
    disk.drain();
    log.append_as_leader(&mut disk, &mut batch(100), LeaderEpoch(1), 1)
        .expect("append after drain");
    assert_eq!(disk.stats().writes_refused_no_space, 1);
}

#[test]
fn failed_sync_poisons_the_log_and_recovery_keeps_what_was_synced() {
    let mut disk = SimDisk::default();
    let mut log = log_with(&mut disk, 3);
    let synced_end = log.log_end_offset();
    log.append_as_leader(&mut disk, &mut batch(100), LeaderEpoch(1), 1)
        .expect("append");
    disk.fail_syncs();
    assert!(log.flush(&mut disk).is_err());
    assert!(matches!(
        log.append_as_leader(&mut disk, &mut batch(1), LeaderEpoch(1), 1),
        Err(LogError::Failed(_))
    ));
    for seed in 0..20 {
        let mut crashed = disk.clone();
        crashed.heal_syncs();
        crashed.crash(seed);
        let log = Log::open(&mut crashed, "t-0", config()).expect("recover");
        assert!(log.log_end_offset() >= synced_end, "seed {seed}: synced batches lost");
    }
}

#[test]
fn flipped_bits_and_misdirected_writes_are_caught_by_checksums() {
    let mut disk = SimDisk::default();
    let log = log_with(&mut disk, 6); // segments at 0 (4 batches of 2 records) and 8
    assert_eq!(log.segment_bases(), vec![Offset(0), Offset(8)]);
    let one = batch(100).len() as u64;
    let active = "t-0/00000000000000000008.log";
    // A misdirected write: the old segment's first batch lands over the active segment's last.
    // It is a valid batch with a valid CRC, but the wrong offset: the chain check catches it.
    disk.misdirect("t-0/00000000000000000000.log", 0, active, one, one as usize)
        .expect("misdirect");
    // And damage in the trusted segment's index.
    disk.flip_bit("t-0/00000000000000000000.index", 25, 3).expect("flip");
    let log = Log::open(&mut disk, "t-0", config()).expect("recover");
    assert_eq!(log.log_end_offset(), Offset(10), "the misdirected batch was trusted");
    assert!(log.recovery_report().indexes_rebuilt >= 1);
    assert_eq!(
        log.read(disk.inner(), Offset(5), u64::MAX, None)
            .expect("read")
            .first_offset,
        Offset(4)
    );
    // A flipped bit in the last batch's payload: CRC32C catches it.
    disk.flip_bit(active, one - 3, 0).expect("flip");
    let log = Log::open(&mut disk, "t-0", config()).expect("recover");
    assert_eq!(log.log_end_offset(), Offset(8));
    assert_eq!(log.recovery_report().bytes_truncated, one);
}

#[test]
fn read_errors_are_errors_until_healed() {
    let mut disk = SimDisk::default();
    let log = log_with(&mut disk, 2);
    disk.fail_reads();
    assert!(matches!(
        log.read(&disk, Offset(0), 1000, None),
        Err(LogError::Disk(DiskError::Io { .. }))
    ));
    assert!(
        Log::open(&mut disk, "t-0", config()).is_err(),
        "recovery must not proceed on unreadable data"
    );
    // Both ways of reading fail: into a buffer, and into a new vector (a fetch's answer).
    let path = log.read(disk.inner(), Offset(0), 1000, None).expect("read").path;
    assert!(matches!(disk.read_at(&path, 0, &mut [0; 8]), Err(DiskError::Io { .. })));
    assert!(matches!(disk.read_vec(&path, 0, 8), Err(DiskError::Io { .. })));
    disk.heal_reads();
    assert!(log.read(&disk, Offset(0), 1000, None).expect("read").len > 0);
    assert_eq!(disk.read_vec(&path, 0, 8).expect("healed").len(), 8);
}

#[test]
fn latency_is_accounted_not_slept() {
    let mut disk = SimDisk::new(DiskLatency::default());
    disk.create("f").expect("create");
    disk.append("f", &vec![0; 1 << 20]).expect("append");
    disk.sync("f").expect("sync");
    assert_eq!(disk.take_latency_us(), 2 + (2 + 700) + 140);
    assert_eq!(disk.take_latency_us(), 0);
}
