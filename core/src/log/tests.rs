//! Unit tests of the log's rules one at a time; `core/tests/log_model.rs` checks them together.

use super::*;
use crate::disk::mem::{CrashMode, MemDisk};
use crate::record::{build_batch, NewRecord, ProducerFields};

fn batch(n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp: ts + i as i64,
            key: None,
            value: Some(vec![7; value_len]),
        })
        .collect();
    build_batch(&recs, ProducerFields::none())
}

fn open(disk: &mut MemDisk, config: LogConfig) -> Log {
    Log::open(disk, "t-0", config).expect("open")
}

#[test]
fn refused_record_sets_change_nothing() {
    let mut disk = MemDisk::new();
    let mut log = open(
        &mut disk,
        LogConfig {
            max_message_bytes: 500,
            ..LogConfig::default()
        },
    );
    log.append_as_leader(&mut disk, &mut batch(2, 10, 10), LeaderEpoch(3), 10)
        .expect("good batch");
    let (end, size, files) = (log.log_end_offset(), log.size_bytes(), disk.paths());
    let good = batch(2, 10, 10);
    let mut bad_crc = good.clone();
    *bad_crc.last_mut().expect("bytes") ^= 0x10;
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    let mut overrun = good.clone();
    overrun[11] = overrun[11].wrapping_add(9);
    let mut good_then_bad = good.clone();
    good_then_bad.extend_from_slice(&bad_crc);
    let cases: Vec<(&str, Vec<u8>, LeaderEpoch)> = vec![
        ("bad crc", bad_crc, LeaderEpoch(3)),
        ("bad magic", bad_magic, LeaderEpoch(3)),
        ("length overruns frame", overrun, LeaderEpoch(3)),
        ("good batch then bad", good_then_bad, LeaderEpoch(3)),
        ("too large", batch(3, 10, 400), LeaderEpoch(3)),
        ("truncated", good[..good.len() - 3].to_vec(), LeaderEpoch(3)),
        ("empty", Vec::new(), LeaderEpoch(3)),
        ("stale epoch", good.clone(), LeaderEpoch(2)),
    ];
    for (what, mut bytes, epoch) in cases {
        let err = log.append_as_leader(&mut disk, &mut bytes, epoch, 20);
        assert!(err.is_err(), "{what}: accepted");
        assert_eq!(
            (log.log_end_offset(), log.size_bytes()),
            (end, size),
            "{what}: log changed"
        );
        assert_eq!(disk.paths(), files, "{what}: files changed");
    }
    assert!(matches!(
        log.append_as_leader(&mut disk, &mut batch(3, 10, 400), LeaderEpoch(3), 20),
        Err(LogError::Batch(BatchError::TooLarge { max: 500, .. }))
    ));
}

#[test]
fn replicated_batches_must_continue_the_log() {
    let (mut leader_disk, mut follower_disk) = (MemDisk::new(), MemDisk::new());
    let mut leader = open(&mut leader_disk, LogConfig::default());
    let mut follower = Log::open(&mut follower_disk, "t-0", LogConfig::default()).expect("open");
    for epoch in [1, 1, 2] {
        leader
            .append_as_leader(&mut leader_disk, &mut batch(3, 5, 4), LeaderEpoch(epoch), 5)
            .expect("append");
    }
    let slice = leader.read(&leader_disk, Offset(3), u64::MAX, None).expect("read");
    let bytes = Log::read_bytes(&leader_disk, slice).expect("bytes");
    assert!(matches!(
        follower.append_replicated(&mut follower_disk, &bytes, 5),
        Err(LogError::NonContiguous {
            expected: Offset(0),
            got: Offset(3)
        })
    ));
    let all = Log::read_bytes(
        &leader_disk,
        leader.read(&leader_disk, Offset(0), u64::MAX, None).expect("read"),
    )
    .expect("bytes");
    follower
        .append_replicated(&mut follower_disk, &all, 5)
        .expect("replicate");
    assert_eq!(follower.log_end_offset(), Offset(9));
    assert_eq!(
        follower.end_offset_for_epoch(LeaderEpoch(1)),
        Some((LeaderEpoch(1), Offset(6)))
    );
    assert_eq!(
        follower.end_offset_for_epoch(LeaderEpoch(2)),
        Some((LeaderEpoch(2), Offset(9)))
    );
    // KIP-101: the follower truncates to the leader's end offset for its epoch, not to a HW.
    assert_eq!(
        follower.truncate_to(&mut follower_disk, Offset(6)).expect("truncate"),
        Offset(6)
    );
    assert_eq!(follower.latest_epoch(), Some(LeaderEpoch(1)));
}

#[test]
fn segments_roll_by_size_and_by_age() {
    let mut disk = MemDisk::new();
    let one = batch(1, 0, 100).len() as u64;
    let mut log = open(
        &mut disk,
        LogConfig {
            segment_bytes: one * 2,
            segment_ms: 1_000,
            ..LogConfig::default()
        },
    );
    for _ in 0..5 {
        log.append_as_leader(&mut disk, &mut batch(1, 0, 100), LeaderEpoch(0), 10)
            .expect("append");
    }
    assert_eq!(log.segment_bases(), vec![Offset(0), Offset(2), Offset(4)], "size roll");
    // Records 999 ms newer than the active segment's first (timestamp 0) stay, whatever the
    // clock says; records a full segment.ms newer roll.
    log.append_as_leader(&mut disk, &mut batch(1, 999, 1), LeaderEpoch(0), 1_000_000)
        .expect("append");
    assert_eq!(
        log.segment_bases(),
        vec![Offset(0), Offset(2), Offset(4)],
        "rolled on the clock, not record time"
    );
    log.append_as_leader(&mut disk, &mut batch(1, 1_000, 1), LeaderEpoch(0), 5)
        .expect("append");
    assert_eq!(
        log.segment_bases(),
        vec![Offset(0), Offset(2), Offset(4), Offset(6)],
        "age roll"
    );
}

/// Truncation into an older segment drops every segment after it, whatever their number, and
/// leaves a log that reads, appends and reopens as one that never held the cut records.
#[test]
fn truncation_into_an_older_segment_drops_all_the_later_ones() {
    let one = batch(1, 0, 100).len() as u64;
    let config = LogConfig {
        segment_bytes: one * 2,
        ..LogConfig::default()
    };
    for target in [1, 2, 3, 5] {
        let mut disk = MemDisk::new();
        let mut log = open(&mut disk, config.clone());
        for _ in 0..7 {
            log.append_as_leader(&mut disk, &mut batch(1, 0, 100), LeaderEpoch(0), 10)
                .expect("append");
        }
        assert_eq!(log.segment_bases().len(), 4, "segments at 0, 2, 4, 6");
        assert_eq!(log.truncate_to(&mut disk, Offset(target)), Ok(Offset(target)));
        assert_eq!(log.log_end_offset(), Offset(target), "truncated to {target}");
        let kept: Vec<Offset> = log.segment_bases().into_iter().filter(|b| b.0 >= target).collect();
        assert!(kept.len() <= 1, "to {target}: segments kept at or past it {kept:?}");
        for at in 0..target {
            let slice = log.read(&disk, Offset(at), u64::MAX, None).expect("read");
            assert_eq!(slice.first_offset, Offset(at), "to {target}, read at {at}");
        }
        let past = log
            .read(&disk, Offset(target), u64::MAX, None)
            .expect("read at the end");
        assert_eq!(past.len, 0, "to {target}: records past the end");
        log.append_as_leader(&mut disk, &mut batch(1, 0, 100), LeaderEpoch(0), 10)
            .expect("append after");
        assert_eq!(log.log_end_offset(), Offset(target + 1));
        let bases = log.segment_bases();
        drop(log);
        let reopened = open(&mut disk, config.clone());
        assert_eq!(
            (reopened.segment_bases(), reopened.log_end_offset()),
            (bases, Offset(target + 1))
        );
    }
}

#[test]
fn flush_policy_by_messages_and_by_time() {
    let mut disk = MemDisk::new();
    let mut log = open(
        &mut disk,
        LogConfig {
            flush_messages: Some(5),
            flush_ms: Some(100),
            ..LogConfig::default()
        },
    );
    assert!(
        !log.append_as_leader(&mut disk, &mut batch(3, 0, 1), LeaderEpoch(0), 0)
            .expect("append")
            .flush_due
    );
    assert!(!log.flush_due(99));
    assert!(log.flush_due(100), "flush.ms elapsed");
    assert!(
        log.append_as_leader(&mut disk, &mut batch(2, 0, 1), LeaderEpoch(0), 1)
            .expect("append")
            .flush_due,
        "flush.messages reached"
    );
    log.flush(&mut disk).expect("flush");
    assert!(!log.flush_due(1_000));
    disk.crash(CrashMode::DropUnsynced);
    assert_eq!(
        open(&mut disk, LogConfig::default()).log_end_offset(),
        Offset(5),
        "flushed batches lost"
    );
}

#[test]
fn retention_deletes_whole_segments_and_never_passes_the_high_watermark() {
    let mut disk = MemDisk::new();
    let one = batch(1, 0, 100).len() as u64;
    let config = LogConfig {
        segment_bytes: one,
        retention_ms: Some(1_000),
        ..LogConfig::default()
    };
    let mut log = open(&mut disk, config.clone());
    for ts in [100, 200, 5_000, 6_000] {
        log.append_as_leader(&mut disk, &mut batch(1, ts, 100), LeaderEpoch(0), ts)
            .expect("append");
    }
    assert_eq!(log.segment_bases().len(), 4);
    // At now = 2000 the first two are expired, but the high watermark is 1: only one may go.
    assert_eq!(log.apply_retention(&mut disk, 2_000, Offset(1)).expect("retention"), 1);
    assert_eq!(log.log_start_offset(), Offset(1));
    assert_eq!(log.apply_retention(&mut disk, 2_000, Offset(4)).expect("retention"), 1);
    assert_eq!(log.log_start_offset(), Offset(2));
    assert!(matches!(
        log.read(&disk, Offset(1), 100, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // Everything expired, the active segment included: the log rolls and keeps its end.
    assert_eq!(
        log.apply_retention(&mut disk, 100_000, Offset(4)).expect("retention"),
        2
    );
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (Offset(4), Offset(4)));
    let reopened = open(&mut disk, config);
    assert_eq!(
        (reopened.log_start_offset(), reopened.log_end_offset()),
        (Offset(4), Offset(4))
    );

    let mut disk = MemDisk::new();
    let mut log = open(
        &mut disk,
        LogConfig {
            segment_bytes: one,
            retention_ms: None,
            retention_bytes: Some(2 * one),
            ..LogConfig::default()
        },
    );
    for _ in 0..5 {
        log.append_as_leader(&mut disk, &mut batch(1, 0, 100), LeaderEpoch(0), 0)
            .expect("append");
    }
    assert_eq!(log.apply_retention(&mut disk, 0, Offset(5)).expect("retention"), 3);
    assert_eq!(log.size_bytes(), 2 * one);
}

#[test]
fn timestamps_find_the_first_record_at_or_after() {
    let mut disk = MemDisk::new();
    let mut log = open(
        &mut disk,
        LogConfig {
            index_interval_bytes: 1,
            ..LogConfig::default()
        },
    );
    log.append_as_leader(&mut disk, &mut batch(3, 100, 1), LeaderEpoch(0), 0)
        .expect("append"); // 100..=102
    log.append_as_leader(&mut disk, &mut batch(3, 50, 1), LeaderEpoch(0), 0)
        .expect("append"); // 50..=52
    log.append_as_leader(&mut disk, &mut batch(3, 200, 1), LeaderEpoch(0), 0)
        .expect("append"); // 200..=202
    assert_eq!(
        log.offset_for_timestamp(&disk, 0).expect("lookup"),
        Some((Offset(0), 100))
    );
    assert_eq!(
        log.offset_for_timestamp(&disk, 101).expect("lookup"),
        Some((Offset(1), 101))
    );
    assert_eq!(
        log.offset_for_timestamp(&disk, 103).expect("lookup"),
        Some((Offset(6), 200))
    );
    assert_eq!(log.offset_for_timestamp(&disk, 203).expect("lookup"), None);
}

#[test]
fn damaged_tail_and_indexes_are_repaired_on_recovery() {
    let mut disk = MemDisk::new();
    let one = batch(2, 0, 50).len() as u64;
    let config = LogConfig {
        segment_bytes: one * 3,
        index_interval_bytes: 1,
        ..LogConfig::default()
    };
    let mut log = open(&mut disk, config.clone());
    for _ in 0..7 {
        log.append_as_leader(&mut disk, &mut batch(2, 0, 50), LeaderEpoch(0), 0)
            .expect("append");
    }
    log.flush(&mut disk).expect("flush");
    // Segments 0 and 6 are below the recovery point; 12 is active. Damage an old index, and
    // flip a bit in the active segment's last batch (past its CRC start).
    let bases = log.segment_bases();
    assert_eq!(bases, vec![Offset(0), Offset(6), Offset(12)]);
    disk.flip_bit("t-0/00000000000000000006.index", 3, 1).expect("flip");
    disk.flip_bit("t-0/00000000000000000012.log", one - 5, 0).expect("flip");
    let log = open(&mut disk, config.clone());
    let report = log.recovery_report().clone();
    assert_eq!(report.segments_trusted, 1, "{report:?}");
    assert_eq!(report.segments_scanned, 2, "{report:?}");
    assert_eq!(report.bytes_truncated, one, "{report:?}");
    assert!(report.indexes_rebuilt >= 1, "{report:?}");
    assert_eq!(log.log_end_offset(), Offset(12));
    assert_eq!(
        log.read(&disk, Offset(7), u64::MAX, None).expect("read").first_offset,
        Offset(6)
    );
    let again = open(&mut disk, config);
    assert_eq!(
        again.recovery_report().indexes_rebuilt,
        0,
        "rebuilt indexes were not written back"
    );
    assert_eq!(again.recovery_report().segments_trusted, 2);
}

#[test]
fn a_failed_sync_poisons_the_log() {
    struct FailingSync(MemDisk);
    impl Disk for FailingSync {
        fn create(&mut self, p: &str) -> Result<(), DiskError> {
            self.0.create(p)
        }
        fn len(&self, p: &str) -> Result<u64, DiskError> {
            self.0.len(p)
        }
        fn append(&mut self, p: &str, d: &[u8]) -> Result<u64, DiskError> {
            self.0.append(p, d)
        }
        fn read_at(&self, p: &str, pos: u64, b: &mut [u8]) -> Result<(), DiskError> {
            self.0.read_at(p, pos, b)
        }
        fn sync(&mut self, p: &str) -> Result<(), DiskError> {
            if p.ends_with(".log") {
                Err(DiskError::Io {
                    path: p.into(),
                    detail: "EIO".into(),
                })
            } else {
                self.0.sync(p)
            }
        }
        fn truncate(&mut self, p: &str, l: u64) -> Result<(), DiskError> {
            self.0.truncate(p, l)
        }
        fn rename(&mut self, f: &str, t: &str) -> Result<(), DiskError> {
            self.0.rename(f, t)
        }
        fn remove(&mut self, p: &str) -> Result<(), DiskError> {
            self.0.remove(p)
        }
        fn list(&self, d: &str) -> Result<Vec<String>, DiskError> {
            self.0.list(d)
        }
        fn exists(&self, p: &str) -> bool {
            self.0.exists(p)
        }
    }
    let mut disk = FailingSync(MemDisk::new());
    let config = LogConfig {
        flush_ms: Some(1_000),
        ..LogConfig::default()
    };
    let mut log = Log::open(&mut disk, "t-0", config).expect("open");
    log.append_as_leader(&mut disk, &mut batch(1, 0, 1), LeaderEpoch(0), 0)
        .expect("append");
    assert_eq!(log.flush_deadline_ms(), Some(1_000));
    assert!(matches!(
        log.flush(&mut disk),
        Err(LogError::Disk(DiskError::Io { .. }))
    ));
    // A failed log has no flush due: the broker's timer would otherwise retry it at once, for ever.
    assert_eq!((log.flush_deadline_ms(), log.closed_sync_deadline_ms()), (None, None));
    assert!(matches!(
        log.append_as_leader(&mut disk, &mut batch(1, 0, 1), LeaderEpoch(0), 0),
        Err(LogError::Failed(_))
    ));
}

/// A read returns the batch holding the offset and the following whole batches of its segment
/// that fit `max_bytes` and end by the limit: checked against the batches as appended, from every
/// offset, with limits and sizes that stop the walk at every kind of place. Reads far from the
/// segment's end walk the headers one disk read at a time, reads near it walk the rest of the
/// file in memory (`TAIL_WALK_BYTES_MAX`): both ways are covered, and must agree.
#[test]
fn reads_return_the_batches_that_fit_far_from_and_near_the_segment_end() {
    let mut disk = MemDisk::new();
    let mut log = open(
        &mut disk,
        LogConfig {
            segment_bytes: 1 << 20,
            ..LogConfig::default()
        },
    );
    // (base offset, next offset, position, bytes) of each batch, in one segment.
    let mut batches: Vec<(i64, i64, u64, u64)> = Vec::new();
    let mut position = 0u64;
    for i in 0..300usize {
        let mut bytes = batch(1 + i % 4, 10, 20 + (i * 37) % 90);
        let len = bytes.len() as u64;
        let info = log
            .append_as_leader(&mut disk, &mut bytes, LeaderEpoch(1), 10)
            .expect("append");
        batches.push((info.base_offset.0, info.last_offset.0 + 1, position, len));
        position += len;
    }
    assert_eq!(log.segments.len(), 1, "one segment, so every read may walk to the end");
    let end = log.log_end_offset().0;
    let (mut compared, mut near, mut far) = (0usize, 0usize, 0usize);
    for offset in 0..end {
        let i = batches.iter().position(|b| b.1 > offset).expect("offset below the end");
        for max_bytes in [1, 200, 1_000, 5_000, 1 << 20] {
            for limit in [
                None,
                Some(Offset(offset + 1)),
                Some(Offset(offset + 40)),
                Some(Offset(end - 3)),
            ] {
                let got = log.read(&disk, Offset(offset), max_bytes, limit).expect("read");
                let limit_at = limit.map_or(end, |l| l.0.min(end));
                let want = if batches[i].1 > limit_at {
                    None
                } else {
                    let mut j = i + 1;
                    let mut len = batches[i].3;
                    while j < batches.len() && batches[j].1 <= limit_at && len + batches[j].3 <= max_bytes {
                        len += batches[j].3;
                        j += 1;
                    }
                    Some((batches[i].2, len, batches[i].0, batches[j - 1].1))
                };
                let got_tuple = (got.len > 0).then_some((got.position, got.len, got.first_offset.0, got.next_offset.0));
                assert_eq!(
                    got_tuple, want,
                    "read from {offset}, max {max_bytes} bytes, limit {limit:?}"
                );
                let rest = position - (batches[i].2 + batches[i].3);
                if rest <= TAIL_WALK_BYTES_MAX as u64 {
                    near += 1;
                } else {
                    far += 1;
                }
                compared += 1;
            }
        }
    }
    println!("{compared} reads compared: {near} walked in memory near the end, {far} header by header");
    assert!(
        near > 1_000 && far > 1_000,
        "both walks covered: {near} near, {far} far"
    );
}
