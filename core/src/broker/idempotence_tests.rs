//! Idempotent produce through the broker: producer ids, sequence checks, and both surviving a
//! restart and a crash of the crash-model disk.

use std::collections::BTreeSet;

use super::*;
use crate::disk::mem::{CrashMode, MemDisk};
use crate::log::Log;
use crate::record::{build_batch, records, NewRecord, ProducerFields};

/// A batch of `n` records from producer `pid` at `epoch`, sequences from `seq`; values name
/// the sequence so a fetch shows which batches were written.
fn pbatch(pid: i64, epoch: i16, seq: i32, n: i32) -> Vec<u8> {
    let recs: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp: 1_000,
            key: None,
            value: Some(format!("{pid}/{epoch}/{}", seq + i).into_bytes()),
        })
        .collect();
    build_batch(
        &recs,
        ProducerFields {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        },
    )
}

fn setup(disk: &mut MemDisk, overrides: &[(String, String)]) -> Broker {
    let mut b = Broker::open(disk, BrokerConfig::default(), 0).expect("open");
    b.create_topic(disk, "t", 1, 1, overrides, TopicId::from_random(1, 1), false)
        .expect("create");
    b
}

fn produce(b: &mut Broker, disk: &mut MemDisk, mut records: Vec<u8>) -> Result<Offset, ErrorCode> {
    b.produce(disk, "t", 0, &mut records, -1, 5).map(|ok| ok.base_offset)
}

fn end(b: &Broker) -> Offset {
    b.offsets("t", 0).expect("partition").2
}

/// Every value in the partition, in offset order.
fn values(b: &Broker, disk: &MemDisk) -> Vec<String> {
    let slice = b.fetch(disk, "t", 0, -1, Offset(0), u64::MAX).expect("fetch").slice;
    let bytes = Log::read_bytes(disk, slice).expect("read");
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = BatchHeader::parse(&bytes[at..]).expect("batch");
        for r in records(&bytes[at..at + h.total_bytes()]).expect("uncompressed") {
            out.push(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
        }
        at += h.total_bytes();
    }
    out
}

#[test]
fn a_retried_batch_gets_its_original_offset_and_is_not_written_again() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 0, 3)), Ok(Offset(0)));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 3, 2)), Ok(Offset(3)));
    // Another producer's batch in between: the retry's answer must not be the log end.
    assert_eq!(produce(&mut b, &mut disk, pbatch(8, 0, 0, 1)), Ok(Offset(5)));
    let size = disk.len("t-0/00000000000000000000.log").expect("segment");
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 0, 3)), Ok(Offset(0)));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 3, 2)), Ok(Offset(3)));
    assert_eq!(end(&b), Offset(6));
    assert_eq!(disk.len("t-0/00000000000000000000.log").expect("segment"), size);
    assert_eq!(
        values(&b, &disk),
        ["7/0/0", "7/0/1", "7/0/2", "7/0/3", "7/0/4", "8/0/0"]
    );
    // And the producer carries on after its retries.
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 5, 1)), Ok(Offset(6)));
}

#[test]
fn a_gap_in_sequences_is_out_of_order_and_writes_nothing() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    produce(&mut b, &mut disk, pbatch(7, 0, 0, 2)).expect("first");
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 0, 3, 1)),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    // Behind the window's last batch but not one of its batches: out of order too.
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 0, 1, 1)),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(end(&b), Offset(2));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 2, 1)), Ok(Offset(2)));
}

#[test]
fn an_older_epoch_is_fenced_and_a_newer_one_starts_at_sequence_zero() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    produce(&mut b, &mut disk, pbatch(7, 1, 0, 2)).expect("epoch 1");
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 0, 2, 1)),
        Err(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 2, 2, 1)),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(end(&b), Offset(2));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 2, 0, 1)), Ok(Offset(2)));
    // Epoch 1 is now a zombie, even with the sequence it would have had next.
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 1, 2, 1)),
        Err(ErrorCode::InvalidProducerEpoch)
    );
}

#[test]
fn a_new_epoch_forgets_the_old_epochs_batches() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    produce(&mut b, &mut disk, pbatch(7, 0, 0, 2)).expect("epoch 0");
    produce(&mut b, &mut disk, pbatch(7, 0, 2, 2)).expect("epoch 0");
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 1, 0, 2)), Ok(Offset(4)));
    // Same sequences as an epoch-0 batch, but new data: written, not answered as a duplicate.
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 1, 2, 2)), Ok(Offset(6)));
    assert_eq!(end(&b), Offset(8));
}

#[test]
fn an_unknown_producer_must_start_at_sequence_zero() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 0, 5, 1)),
        Err(ErrorCode::UnknownProducerId)
    );
    assert_eq!(end(&b), Offset(0));
    assert!(b.producer_state("t", 0).expect("partition").is_empty());
}

#[test]
fn a_record_set_is_refused_whole_when_one_batch_is_out_of_order() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    let mut set = pbatch(7, 0, 0, 2);
    set.extend(pbatch(7, 0, 5, 1));
    assert_eq!(
        produce(&mut b, &mut disk, set),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(end(&b), Offset(0));
    assert!(b.producer_state("t", 0).expect("partition").is_empty());
    let mut set = pbatch(7, 0, 0, 2);
    set.extend(pbatch(7, 0, 2, 1));
    assert_eq!(produce(&mut b, &mut disk, set.clone()), Ok(Offset(0)));
    // Both batches are remembered where they landed: the set's retry is a duplicate.
    assert_eq!(produce(&mut b, &mut disk, set), Ok(Offset(0)));
    assert_eq!(end(&b), Offset(3));
    // A retry of an old batch with a new one behind it is refused rather than half-answered.
    let mut mixed = pbatch(7, 0, 2, 1);
    mixed.extend(pbatch(7, 0, 3, 1));
    assert_eq!(
        produce(&mut b, &mut disk, mixed),
        Err(ErrorCode::DuplicateSequenceNumber)
    );
    assert_eq!(end(&b), Offset(3));
}

#[test]
fn a_corrupt_batch_is_refused_as_corrupt_not_judged_by_its_sequence() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    let mut bad = pbatch(7, 0, 9, 1);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(produce(&mut b, &mut disk, bad), Err(ErrorCode::CorruptMessage));
}

#[test]
fn plain_batches_are_untouched_by_the_producer_checks() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    let plain = pbatch(-1, -1, -1, 2);
    assert_eq!(produce(&mut b, &mut disk, plain.clone()), Ok(Offset(0)));
    assert_eq!(produce(&mut b, &mut disk, plain), Ok(Offset(2)));
    assert!(b.producer_state("t", 0).expect("partition").is_empty());
}

#[test]
fn after_a_restart_a_retried_batch_is_still_recognised() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    for seq in [0, 2, 4] {
        produce(&mut b, &mut disk, pbatch(7, 0, seq, 2)).expect("produce");
    }
    produce(&mut b, &mut disk, pbatch(8, 3, 0, 1)).expect("produce");
    assert!(b.flush_all(&mut disk).is_empty());
    let before = b.producer_state("t", 0).expect("partition").clone();
    drop(b);
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen");
    assert_eq!(b.producer_state("t", 0).expect("partition"), &before);
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 2, 2)), Ok(Offset(2)));
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(7, 0, 7, 1)),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(
        produce(&mut b, &mut disk, pbatch(8, 2, 1, 1)),
        Err(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(end(&b), Offset(7));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 6, 1)), Ok(Offset(7)));
}

#[test]
fn after_a_crash_synced_batches_are_duplicates_and_lost_ones_are_written_again() {
    let mut disk = MemDisk::new();
    let mut b = setup(&mut disk, &[]);
    produce(&mut b, &mut disk, pbatch(7, 0, 0, 2)).expect("produce");
    assert!(b.flush_all(&mut disk).is_empty());
    // Acknowledged with acks=1 semantics but never synced (flush.messages unset): lost below.
    produce(&mut b, &mut disk, pbatch(7, 0, 2, 2)).expect("produce");
    disk.crash(CrashMode::DropUnsynced);
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen");
    assert_eq!(end(&b), Offset(2));
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 0, 2)), Ok(Offset(0)));
    // Not a duplicate: the state lost it with the log, so the retry is written.
    assert_eq!(produce(&mut b, &mut disk, pbatch(7, 0, 2, 2)), Ok(Offset(2)));
    assert_eq!(values(&b, &disk), ["7/0/0", "7/0/1", "7/0/2", "7/0/3"]);
}

#[test]
fn torn_crashes_rebuild_exactly_the_state_of_the_surviving_log() {
    for seed in 0..40 {
        let mut disk = MemDisk::new();
        let mut b = setup(&mut disk, &[]);
        for seq in (0..10).map(|i| i * 2) {
            produce(&mut b, &mut disk, pbatch(7, 0, seq, 2)).expect("produce");
            if seq == 6 {
                assert!(b.flush_all(&mut disk).is_empty());
            }
        }
        disk.crash(CrashMode::Torn { seed });
        let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen");
        let kept = end(&b).0;
        assert!(kept >= 8 && kept % 2 == 0, "seed {seed}: synced batches survive whole");
        let (_, last) = b
            .producer_state("t", 0)
            .expect("partition")
            .last_batch(ProducerId(7))
            .expect("known");
        assert_eq!(i64::from(last.last_seq), kept - 1, "seed {seed}");
        assert_eq!(last.last_offset, Offset(kept - 1), "seed {seed}");
        let next = i32::try_from(kept).expect("small");
        assert_eq!(
            produce(&mut b, &mut disk, pbatch(7, 0, next, 1)),
            Ok(Offset(kept)),
            "seed {seed}"
        );
    }
}

#[test]
fn producer_ids_never_repeat_across_restarts_and_crashes() {
    let mut disk = MemDisk::new();
    let mut seen = BTreeSet::new();
    let mut take = |b: &mut Broker, disk: &mut MemDisk, n: usize| {
        for _ in 0..n {
            let (id, epoch) = b.allocate_producer_id(disk).expect("id");
            assert_eq!(epoch, ProducerEpoch(0));
            assert!(seen.insert(id), "{id:?} handed out twice");
        }
    };
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    take(&mut b, &mut disk, 3);
    drop(b);
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("restart");
    // Across a block boundary, then a crash right after claiming the next block.
    let n = usize::try_from(producer_ids::BLOCK_SIZE).expect("small") + 1;
    take(&mut b, &mut disk, n);
    for seed in [1, 2, 3] {
        disk.crash(CrashMode::Torn { seed });
        let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen after crash");
        take(&mut b, &mut disk, 2);
    }
    disk.crash(CrashMode::DropUnsynced);
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen after crash");
    take(&mut b, &mut disk, 1);
}

#[test]
fn a_damaged_producer_id_file_stops_the_broker_rather_than_reuse_ids() {
    let mut disk = MemDisk::new();
    let mut b = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    b.allocate_producer_id(&mut disk).expect("id");
    disk.write_file_atomic(producer_ids::FILE, b"12x").expect("damage");
    assert!(matches!(
        Broker::open(&mut disk, BrokerConfig::default(), 0),
        Err(BrokerError::ProducerIds(_))
    ));
}

/// Two brokers of one cluster never hand out the same producer id (a shared id makes one
/// producer's batch look like a retry of the other's: answered, never written).
#[test]
fn brokers_hand_out_producer_ids_from_disjoint_ranges() {
    let mut ids = std::collections::BTreeSet::new();
    for broker_id in [0, 1, 2] {
        let mut disk = MemDisk::new();
        let config = BrokerConfig {
            broker_id: crate::ids::BrokerId(broker_id),
            ..BrokerConfig::default()
        };
        let mut b = Broker::open(&mut disk, config, 0).expect("open");
        for _ in 0..1_500 {
            let (id, _) = b.allocate_producer_id(&mut disk).expect("id");
            assert!(ids.insert(id.0), "producer id {} handed out twice", id.0);
        }
    }
    println!("compared {} producer ids from 3 brokers: all distinct", ids.len());
    assert_eq!(ids.len(), 4_500);
}

/// A [`MemDisk`] whose syncs of the leader-epoch checkpoint fail with EIO while `failing` is set
/// (the simulator's sync-fail fault, aimed at the one write that made the campaign's seed
/// 10048716408039069478 append a retried batch twice).
struct EpochCheckpointSyncFails {
    inner: MemDisk,
    failing: bool,
}

impl Disk for EpochCheckpointSyncFails {
    fn create(&mut self, p: &str) -> Result<(), DiskError> {
        self.inner.create(p)
    }
    fn len(&self, p: &str) -> Result<u64, DiskError> {
        self.inner.len(p)
    }
    fn append(&mut self, p: &str, d: &[u8]) -> Result<u64, DiskError> {
        self.inner.append(p, d)
    }
    fn read_at(&self, p: &str, pos: u64, b: &mut [u8]) -> Result<(), DiskError> {
        self.inner.read_at(p, pos, b)
    }
    fn sync(&mut self, p: &str) -> Result<(), DiskError> {
        if self.failing && p.contains(crate::log::epoch::FILE) {
            return Err(DiskError::Io {
                path: p.into(),
                detail: "EIO (injected)".into(),
            });
        }
        self.inner.sync(p)
    }
    fn truncate(&mut self, p: &str, l: u64) -> Result<(), DiskError> {
        self.inner.truncate(p, l)
    }
    fn rename(&mut self, f: &str, t: &str) -> Result<(), DiskError> {
        self.inner.rename(f, t)
    }
    fn remove(&mut self, p: &str) -> Result<(), DiskError> {
        self.inner.remove(p)
    }
    fn list(&self, d: &str) -> Result<Vec<String>, DiskError> {
        self.inner.list(d)
    }
    fn exists(&self, p: &str) -> bool {
        self.inner.exists(p)
    }
}

/// The first batch of a new leader epoch also writes the leader-epoch checkpoint. When that
/// write failed after the batch was already in the segment, the produce answered
/// KAFKA_STORAGE_ERROR, the producer state never learnt of the batch, and the producer's retry
/// (same id, epoch and sequence) was appended a second time: a duplicate under idempotence.
/// An append that fails must leave nothing behind, so the retry is the only copy.
#[test]
fn a_batch_refused_on_a_failed_epoch_checkpoint_is_written_once_by_its_retry() {
    let mut mem = MemDisk::new();
    let mut b = setup(&mut mem, &[]);
    let mut disk = EpochCheckpointSyncFails {
        inner: mem,
        failing: true,
    };
    let mut first = pbatch(7, 0, 0, 1);
    let refused = b.produce(&mut disk, "t", 0, &mut first, -1, 5).map(|ok| ok.base_offset);
    assert_eq!(refused, Err(ErrorCode::KafkaStorageError));
    assert_eq!(end(&b), Offset(0), "a refused append left a batch in the log");
    disk.failing = false;
    let mut retry = pbatch(7, 0, 0, 1);
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut retry, -1, 5).map(|ok| ok.base_offset),
        Ok(Offset(0))
    );
    let mut next = pbatch(7, 0, 1, 1);
    assert_eq!(
        b.produce(&mut disk, "t", 0, &mut next, -1, 5).map(|ok| ok.base_offset),
        Ok(Offset(1))
    );
    let written = values(&b, &disk.inner);
    println!("after a refused append, its retry and the next batch the partition holds {written:?}");
    assert_eq!(written, ["7/0/0", "7/0/1"]);
}
