//! The broker's partition semantics on one node, over the crash-model disk.

use super::*;
use crate::disk::mem::{CrashMode, MemDisk};
use crate::record::{build_batch, NewRecord, ProducerFields};

fn batch(n: usize, ts: i64) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp: ts + i as i64,
            key: None,
            value: Some(vec![i as u8; 10]),
        })
        .collect();
    build_batch(&recs, ProducerFields::none())
}

fn id(n: u64) -> TopicId {
    TopicId::from_random(n, n)
}

fn broker(disk: &mut MemDisk) -> Broker {
    Broker::open(disk, BrokerConfig::default(), 0).expect("open")
}

#[test]
fn produce_fetch_and_list_offsets() {
    let mut disk = MemDisk::new();
    let mut b = broker(&mut disk);
    b.create_topic(&mut disk, "orders", 2, 1, &[], id(1), false)
        .expect("create");
    let ok = b
        .produce(&mut disk, "orders", 1, &mut batch(3, 100), 1, 5)
        .expect("produce");
    assert_eq!(ok.base_offset, Offset(0));
    let ok = b
        .produce(&mut disk, "orders", 1, &mut batch(2, 200), -1, 5)
        .expect("produce");
    assert_eq!(ok.base_offset, Offset(3));
    let f = b.fetch(&disk, "orders", 1, -1, Offset(4), 1 << 20).expect("fetch");
    assert_eq!(
        (f.high_watermark, f.slice.first_offset, f.slice.next_offset),
        (Offset(5), Offset(3), Offset(5))
    );
    assert_eq!(
        b.fetch(&disk, "orders", 1, -1, Offset(5), 100)
            .expect("fetch at end")
            .slice
            .len,
        0
    );
    assert_eq!(
        b.fetch(&disk, "orders", 1, -1, Offset(6), 100),
        Err(ErrorCode::OffsetOutOfRange)
    );
    assert_eq!(b.list_offset(&disk, "orders", 1, LATEST_TIMESTAMP), Ok((Offset(5), -1)));
    assert_eq!(
        b.list_offset(&disk, "orders", 1, EARLIEST_TIMESTAMP),
        Ok((Offset(0), -1))
    );
    assert_eq!(b.list_offset(&disk, "orders", 1, 201), Ok((Offset(4), 201)));
    assert_eq!(b.list_offset(&disk, "orders", 1, 999), Ok((Offset(-1), -1)));
    assert_eq!(b.offsets("orders", 0), Ok((Offset(0), Offset(0), Offset(0))));
}

#[test]
fn bad_requests_get_kafka_error_codes_and_change_nothing() {
    let mut disk = MemDisk::new();
    let mut b = broker(&mut disk);
    let files = disk.paths();
    for (name, parts, rf, overrides, code) in [
        ("bad/name", 1, 1, vec![], ErrorCode::InvalidTopicException),
        ("t", 0, 1, vec![], ErrorCode::InvalidPartitions),
        ("t", 1, 3, vec![], ErrorCode::InvalidReplicationFactor),
        (
            "t",
            1,
            1,
            vec![("retention.ms".to_string(), "soon".to_string())],
            ErrorCode::InvalidConfig,
        ),
        (
            "t",
            1,
            1,
            vec![("no.such.config".to_string(), "1".to_string())],
            ErrorCode::InvalidConfig,
        ),
        (
            "t",
            1,
            1,
            vec![("cleanup.policy".to_string(), "compact".to_string())],
            ErrorCode::InvalidConfig,
        ),
    ] {
        let err = b
            .create_topic(&mut disk, name, parts, rf, &overrides, id(2), false)
            .expect_err("accepted");
        assert_eq!(err.0, code, "{name} {parts} {rf} {overrides:?}: {}", err.1);
    }
    assert_eq!(disk.paths(), files, "a refused create touched the disk");
    assert!(b.topics().is_empty());
    b.create_topic(
        &mut disk,
        "t",
        1,
        1,
        &[("min.insync.replicas".into(), "2".into())],
        id(3),
        false,
    )
    .expect("create");
    assert_eq!(
        b.create_topic(&mut disk, "t", 1, 1, &[], id(4), false).map_err(|e| e.0),
        Err(ErrorCode::TopicAlreadyExists)
    );
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut batch(1, 0), -1, 0),
        Err(ErrorCode::NotEnoughReplicas)
    );
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut batch(1, 0), 2, 0),
        Err(ErrorCode::InvalidRequiredAcks)
    );
    assert_eq!(
        b.produce(&mut disk, "t", 1, &mut batch(1, 0), 1, 0),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    assert_eq!(
        b.produce(&mut disk, "nope", 0, &mut batch(1, 0), 1, 0),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    let mut corrupt = batch(1, 0);
    *corrupt.last_mut().expect("bytes") ^= 1;
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut corrupt, 1, 0),
        Err(ErrorCode::CorruptMessage)
    );
    assert_eq!(
        b.offsets("t", 0),
        Ok((Offset(0), Offset(0), Offset(0))),
        "a refused produce appended"
    );
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut batch(1, 0), 1, 0)
            .map(|o| o.base_offset),
        Ok(Offset(0))
    );
}

#[test]
fn topics_survive_restart_with_their_ids_and_configs() {
    let mut disk = MemDisk::new();
    let mut b = broker(&mut disk);
    b.create_topic(
        &mut disk,
        "a-b.c",
        3,
        1,
        &[("retention.ms".into(), "1000".into())],
        id(7),
        false,
    )
    .expect("create");
    b.produce(&mut disk, "a-b.c", 2, &mut batch(4, 0), 1, 0)
        .expect("produce");
    b.flush_all(&mut disk);
    disk.crash(CrashMode::DropUnsynced);
    let b = broker(&mut disk);
    let meta = b.topic("a-b.c").expect("topic back");
    assert_eq!(
        (meta.id, meta.partitions, meta.log_config.retention_ms),
        (id(7), 3, Some(1000))
    );
    assert_eq!(b.offsets("a-b.c", 2), Ok((Offset(0), Offset(4), Offset(4))));
    assert!(b.startup_warnings.is_empty(), "{:?}", b.startup_warnings);
}

#[test]
fn deleted_topics_leave_nothing_to_resurrect() {
    let mut disk = MemDisk::new();
    let mut b = broker(&mut disk);
    b.create_topic(&mut disk, "t", 2, 1, &[], id(1), false).expect("create");
    b.produce(&mut disk, "t", 0, &mut batch(4, 0), 1, 0).expect("produce");
    assert_eq!(b.delete_topic(&mut disk, "t").map_err(|e| e.0), Ok(id(1)));
    assert!(disk.paths().is_empty(), "{:?}", disk.paths());
    b.create_topic(&mut disk, "t", 1, 1, &[], id(2), false)
        .expect("recreate");
    assert_eq!(b.offsets("t", 0), Ok((Offset(0), Offset(0), Offset(0))));
    // A half-deleted partition (metadata gone, data left) is cleaned up at startup.
    b.produce(&mut disk, "t", 0, &mut batch(2, 0), 1, 0).expect("produce");
    b.flush_all(&mut disk);
    disk.remove("t-0/partition.metadata").expect("remove");
    let b = broker(&mut disk);
    assert!(b.topic("t").is_none());
    assert!(disk.list("t-0").expect("list").is_empty());
    assert_eq!(b.startup_warnings.len(), 1);
}

#[test]
fn timers_flush_and_apply_retention() {
    let mut disk = MemDisk::new();
    let config = BrokerConfig {
        retention_check_interval_ms: 1_000,
        ..BrokerConfig::default()
    };
    let mut b = Broker::open(&mut disk, config, 0).expect("open");
    let overrides = [
        ("flush.ms".to_string(), "50".to_string()),
        ("retention.ms".into(), "500".into()),
        ("segment.bytes".into(), "200".into()),
    ];
    b.create_topic(&mut disk, "t", 1, 1, &overrides, id(1), false)
        .expect("create");
    b.produce(&mut disk, "t", 0, &mut batch(2, 10), 1, 10).expect("produce");
    b.produce(&mut disk, "t", 0, &mut batch(2, 20), 1, 20).expect("produce");
    assert_eq!(b.poll_timeout(), Some(60), "flush.ms deadline");
    assert!(b.handle_timeout(&mut disk, 60).is_empty());
    let mut crashed = disk.clone();
    crashed.crash(CrashMode::DropUnsynced);
    assert_eq!(
        Broker::open(&mut crashed, BrokerConfig::default(), 0)
            .expect("open")
            .offsets("t", 0)
            .map(|o| o.2),
        Ok(Offset(4))
    );
    b.produce(&mut disk, "t", 0, &mut batch(2, 900), 1, 900)
        .expect("produce"); // rolls: 200-byte segments
    assert_eq!(b.poll_timeout(), Some(950), "flush.ms deadline first");
    assert!(b.handle_timeout(&mut disk, 950).is_empty());
    assert_eq!(b.poll_timeout(), Some(1_000), "retention check next");
    assert!(b.handle_timeout(&mut disk, 1_000).is_empty());
    // At 1000 the first segment (newest record at 21) is past retention.ms=500; the second
    // (newest at 901) is not.
    assert_eq!(b.offsets("t", 0), Ok((Offset(4), Offset(6), Offset(6))));
}

#[test]
fn only_a_clean_shutdown_lets_the_next_start_claim_an_intact_log() {
    let mut disk = MemDisk::new();
    let mut b = broker(&mut disk);
    assert_eq!(b.intact_since(), None, "an empty disk is an unclean start");
    b.create_topic(&mut disk, "t", 1, 1, &[], id(3), false).expect("create");
    // Never registered: nothing to claim, no marker even after a clean shutdown.
    assert!(b.flush_all(&mut disk).is_empty());
    assert!(!disk.exists(clean_shutdown::MARKER_FILE));
    let mut b = broker(&mut disk);
    b.note_registered(7);
    b.note_registered(9);
    assert_eq!(b.intact_since(), Some(7), "the process's first registration counts");
    b.produce(&mut disk, "t", 0, &mut batch(2, 0), 1, 0).expect("produce");
    assert!(b.flush_all(&mut disk).is_empty());
    disk.crash(CrashMode::DropUnsynced);
    // A clean restart carries the claim over; the marker is gone (durably) once read.
    let mut b = broker(&mut disk);
    println!("after a clean shutdown: intact_since {:?}", b.intact_since());
    assert_eq!(b.intact_since(), Some(7));
    assert!(!disk.exists(clean_shutdown::MARKER_FILE));
    b.note_registered(12);
    assert_eq!(
        b.intact_since(),
        Some(7),
        "a later registration does not move the claim"
    );
    b.produce(&mut disk, "t", 0, &mut batch(1, 0), 1, 0).expect("produce");
    disk.crash(CrashMode::DropUnsynced);
    // A crash without the shutdown's sync: unclean, whatever the previous process claimed.
    let b = broker(&mut disk);
    println!("after a crash: intact_since {:?}", b.intact_since());
    assert_eq!(b.intact_since(), None);
    // A marker that does not parse is an unclean start too, and is removed.
    disk.write_file_atomic(clean_shutdown::MARKER_FILE, b"garbage")
        .expect("write");
    assert_eq!(broker(&mut disk).intact_since(), None);
    assert!(!disk.exists(clean_shutdown::MARKER_FILE));
}
