//! Per-partition state of idempotent producers (KIP-98, without transactions): for each producer
//! id, its epoch and the sequence numbers and offsets of its last [`BATCHES_PER_PRODUCER`]
//! batches. It lets the leader refuse a zombie (an older epoch), refuse a gap in sequences, and
//! answer a retried batch that was already written with the original offsets instead of writing
//! it twice.
//!
//! Contract:
//! - [`ProducerStateTable::check`] judges a whole record set before anything is appended, each
//!   batch against the state as the batches before it in the set would leave it: the set is
//!   appended whole, answered as a duplicate whole, or refused whole.
//! - [`ProducerStateTable::record`] is called with each batch's header after it is in the log
//!   (offsets assigned), in log order. Replaying the log's headers through it at startup rebuilds
//!   the table: the log is the only persistent copy of this state.
//!
//! Fault model: the state is derived from the log, so it is exactly as durable as the log. A
//! batch lost in a crash (unsynced) is also absent from the rebuilt state, and a retry of it is
//! appended again rather than taken for a duplicate. Batches removed by retention stay in the
//! table while the broker runs (Kafka keeps them in its snapshots) but are gone after a restart,
//! since no snapshot is written yet.
//!
//! Rules (Kafka 2.4's `ProducerAppendInfo`, before KIP-360's "accept any sequence"):
//! - epoch older than the one seen → INVALID_PRODUCER_EPOCH (a fenced zombie);
//! - epoch newer → its first sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - same epoch and (first, last) sequence equal to one of the last 5 batches → duplicate;
//! - same epoch and first == last + 1 (wrapping at `i32::MAX` to 0) → append;
//! - any other sequence → OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - unknown producer id with first sequence != 0 → UNKNOWN_PRODUCER_ID. Kafka 2.5+ accepts
//!   any sequence here (state lost to retention); Gregor refuses, because the other way this
//!   happens is acknowledged-but-unsynced batches lost in a crash (acks=1, `flush.messages`
//!   unset), and accepting would hide that gap from the producer and from the checker.
//!
//! Not yet here: expiry of idle producers (Kafka's `producer.id.expiration.ms`, a day), so the
//! table grows with every producer id a partition has seen until the next restart; snapshots
//! (Kafka writes `.snapshot` files at rolls), so startup reads one header per batch of the whole
//! log; and a rebuild after follower truncation, which replication will need.

use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::ids::{Offset, ProducerEpoch, ProducerId};
use crate::log::{Log, LogError};
use crate::record::BatchHeader;

/// Batches remembered per producer: Kafka's `NUM_BATCHES_TO_RETAIN`, which is why a producer
/// may have at most 5 requests in flight per connection with idempotence on.
pub const BATCHES_PER_PRODUCER: usize = 5;

/// Where one producer batch landed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: Offset,
    pub last_offset: Offset,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ProducerEntry {
    epoch: ProducerEpoch,
    /// Empty only in a check's scratch copy right after an epoch bump.
    batches: LastBatches,
}

/// A producer's last [`BATCHES_PER_PRODUCER`] batches, oldest first, in place.
///
/// Why not a `VecDeque`: every batch recorded pushed one and popped the oldest (a check walks
/// them all), ~60 of `record`'s ~160 instructions in a loaded simulated seed. Five entries move
/// down by one in a few instructions. The places past `len` always hold the default entry, so
/// two equal histories compare equal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LastBatches {
    metas: [BatchMeta; BATCHES_PER_PRODUCER],
    len: u8,
}

impl LastBatches {
    fn as_slice(&self) -> &[BatchMeta] {
        &self.metas[..usize::from(self.len)]
    }

    fn last(&self) -> Option<&BatchMeta> {
        self.as_slice().last()
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `meta`, dropping the oldest when all places are taken.
    fn push(&mut self, meta: BatchMeta) {
        let len = usize::from(self.len);
        if len < BATCHES_PER_PRODUCER {
            self.metas[len] = meta;
            self.len += 1;
        } else {
            self.metas.copy_within(1.., 0);
            self.metas[BATCHES_PER_PRODUCER - 1] = meta;
        }
    }
}

/// What to do with a record set that passed the producer checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Append it.
    Append,
    /// Every batch is already in the log: append nothing and answer with the offset where the
    /// first of them was written.
    Duplicate { base_offset: Offset },
}

enum BatchVerdict {
    Append,
    Duplicate(BatchMeta),
}

/// The last sequence number of a batch, wrapping past `i32::MAX` to 0 as Kafka's
/// `DefaultRecordBatch.incrementSequence`.
pub fn last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    if base_sequence > i32::MAX - last_offset_delta {
        last_offset_delta - (i32::MAX - base_sequence) - 1
    } else {
        base_sequence + last_offset_delta
    }
}

/// The sequence that follows `last`.
pub fn next_sequence(last: i32) -> i32 {
    last_sequence(last, 1)
}

/// Whether any batch of a record set names a producer id. Reads headers only and stops at the
/// first that does not parse: the log validates the set properly, this just decides whether the
/// producer checks (and their extra validation pass) are needed at all.
pub fn claims_producer(records: &[u8]) -> bool {
    let mut at = 0;
    while let Ok(h) = BatchHeader::parse(&records[at..]) {
        if h.producer_id >= 0 {
            return true;
        }
        at += h.total_bytes();
        if at >= records.len() {
            break;
        }
    }
    false
}

/// The idempotent producers of one partition.
///
/// Kept sorted by id and searched by halving: a partition knows a few dozen producers, and every
/// idempotent Produce looks its producer up twice (check, then record). A `BTreeMap` took ~300
/// instructions a lookup there, most of them in its node walk. The ids are a vector of their
/// own, beside their entries (same index): the search reads 8 bytes an id, not ~140.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerStateTable {
    ids: Vec<ProducerId>,
    entries: Vec<ProducerEntry>,
}

impl ProducerStateTable {
    /// Rebuilds the table from the batch headers in `log` (startup, after log recovery).
    pub fn rebuild<D: Disk>(disk: &D, log: &Log) -> Result<ProducerStateTable, LogError> {
        let mut table = ProducerStateTable::default();
        log.for_each_batch_header(disk, |h| table.record(h))?;
        Ok(table)
    }

    /// Producers known to this partition.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The epoch and last batch of a producer, if known.
    pub fn last_batch(&self, id: ProducerId) -> Option<(ProducerEpoch, BatchMeta)> {
        let entry = self.get(id)?;
        Some((entry.epoch, *entry.batches.last()?))
    }

    fn get(&self, id: ProducerId) -> Option<&ProducerEntry> {
        let i = self.position(id).ok()?;
        Some(&self.entries[i])
    }

    /// Where `id` is in `ids` (and its entry in `entries`), or where it would go.
    fn position(&self, id: ProducerId) -> Result<usize, usize> {
        self.ids.binary_search(&id)
    }

    /// Judges a validated record set (its headers, in order) before anything is appended.
    /// Batches without a producer id are always appended. A set mixing batches already written
    /// with new ones is refused with DUPLICATE_SEQUENCE_NUMBER: Kafka answers such a set as a
    /// duplicate and silently drops the new batches; refusing it loses nothing. (Kafka's own
    /// clients send one batch per partition, so neither case arises with them.)
    pub fn check(&self, headers: &[BatchHeader]) -> Result<Verdict, ErrorCode> {
        // The state as the set's earlier batches would leave it; offsets of batches in this set
        // are not known yet and are never read (a duplicate of one is a mixed set).
        // A few entries at most (one per producer with a later batch in the set): a vector.
        let mut scratch: Vec<(ProducerId, ProducerEntry)> = Vec::new();
        let mut first_duplicate = None;
        let mut appends = 0usize;
        for (i, h) in headers.iter().enumerate() {
            if h.producer_id < 0 {
                appends += 1;
                continue;
            }
            let id = ProducerId(h.producer_id);
            let scratched = scratch.iter().rev().find(|(p, _)| *p == id).map(|(_, e)| e);
            let entry = scratched.or_else(|| self.get(id));
            match check_batch(entry, h)? {
                BatchVerdict::Duplicate(meta) => {
                    first_duplicate.get_or_insert(meta.base_offset);
                }
                BatchVerdict::Append => {
                    appends += 1;
                    // Only a later batch of the same producer in this set reads the scratch
                    // state: a set of one batch (the usual Produce) copies nothing.
                    if !headers[i + 1..].iter().any(|later| later.producer_id == h.producer_id) {
                        continue;
                    }
                    let mut updated = entry.cloned().unwrap_or(ProducerEntry {
                        epoch: ProducerEpoch(h.producer_epoch),
                        batches: LastBatches::default(),
                    });
                    push_batch(&mut updated, h, Offset(-1), Offset(-1));
                    scratch.push((id, updated));
                }
            }
        }
        match (first_duplicate, appends) {
            (None, _) => Ok(Verdict::Append),
            (Some(base_offset), 0) => Ok(Verdict::Duplicate { base_offset }),
            (Some(_), _) => Err(ErrorCode::DuplicateSequenceNumber),
        }
    }

    /// Records a batch now in the log (its header carries the offsets it was written at).
    /// Batches without a producer id are ignored.
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        let id = ProducerId(h.producer_id);
        let i = match self.position(id) {
            Ok(i) => i,
            Err(i) => {
                let entry = ProducerEntry {
                    epoch: ProducerEpoch(h.producer_epoch),
                    batches: LastBatches::default(),
                };
                self.ids.insert(i, id);
                self.entries.insert(i, entry);
                i
            }
        };
        push_batch(&mut self.entries[i], h, h.base_offset, h.last_offset());
    }
}

fn push_batch(entry: &mut ProducerEntry, h: &BatchHeader, base_offset: Offset, last_offset: Offset) {
    let epoch = ProducerEpoch(h.producer_epoch);
    if epoch != entry.epoch {
        // A new epoch starts its sequences afresh; the old epoch's batches can only be zombies'.
        entry.epoch = epoch;
        entry.batches = LastBatches::default();
    }
    entry.batches.push(BatchMeta {
        first_seq: h.base_sequence,
        last_seq: last_sequence(h.base_sequence, h.last_offset_delta),
        base_offset,
        last_offset,
    });
}

fn check_batch(entry: Option<&ProducerEntry>, h: &BatchHeader) -> Result<BatchVerdict, ErrorCode> {
    if h.producer_epoch < 0 || h.base_sequence < 0 {
        // A producer id with no epoch or sequence is a malformed batch, not a sequence problem.
        return Err(ErrorCode::InvalidRecord);
    }
    let epoch = ProducerEpoch(h.producer_epoch);
    let first = h.base_sequence;
    let last = last_sequence(first, h.last_offset_delta);
    let Some(entry) = entry else {
        return if first == 0 {
            Ok(BatchVerdict::Append)
        } else {
            Err(ErrorCode::UnknownProducerId)
        };
    };
    if epoch < entry.epoch {
        return Err(ErrorCode::InvalidProducerEpoch);
    }
    if epoch > entry.epoch {
        return if first == 0 {
            Ok(BatchVerdict::Append)
        } else {
            Err(ErrorCode::OutOfOrderSequenceNumber)
        };
    }
    if let Some(meta) = entry
        .batches
        .as_slice()
        .iter()
        .find(|b| b.first_seq == first && b.last_seq == last)
    {
        return Ok(BatchVerdict::Duplicate(*meta));
    }
    match entry.batches.last() {
        Some(prev) if first != next_sequence(prev.last_seq) => Err(ErrorCode::OutOfOrderSequenceNumber),
        // No batch yet in this epoch (only in a check's scratch copy) or the next in line.
        _ if entry.batches.is_empty() && first != 0 => Err(ErrorCode::OutOfOrderSequenceNumber),
        _ => Ok(BatchVerdict::Append),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(producer_id: i64, epoch: i16, base_sequence: i32, records: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: Offset(base_offset),
            batch_length: 100,
            partition_leader_epoch: crate::ids::LeaderEpoch(0),
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: epoch,
            base_sequence,
            record_count: records,
        }
    }

    #[test]
    fn sequences_wrap_at_i32_max_as_kafka() {
        assert_eq!(last_sequence(0, 4), 4);
        assert_eq!(last_sequence(i32::MAX, 0), i32::MAX);
        assert_eq!(last_sequence(i32::MAX - 1, 2), 0);
        assert_eq!(last_sequence(i32::MAX, 3), 2);
        assert_eq!(next_sequence(i32::MAX), 0);
        assert_eq!(next_sequence(7), 8);
    }

    #[test]
    fn a_batch_across_the_wrap_then_the_next_one_is_in_sequence() {
        let mut t = ProducerStateTable::default();
        t.record(&header(1, 0, 0, 1, 0));
        // Pretend the producer reached the top: a new epoch from MAX-1 is out of order, so seed
        // the state by replaying as the log would.
        let i = t.position(ProducerId(1)).expect("known");
        t.entries[i].batches.metas[0].last_seq = i32::MAX - 2;
        let wrapping = header(1, 0, i32::MAX - 1, 4, 1);
        assert_eq!(t.check(&[wrapping]), Ok(Verdict::Append));
        t.record(&wrapping);
        assert_eq!(t.last_batch(ProducerId(1)).expect("known").1.last_seq, 1);
        assert_eq!(t.check(&[header(1, 0, 2, 1, 0)]), Ok(Verdict::Append));
        assert_eq!(
            t.check(&[header(1, 0, 3, 1, 0)]),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
    }

    /// The in-place last batches against the `VecDeque` they replaced: random pushes and epoch
    /// resets, the same batches after every step, and equal to a fresh history of the same
    /// batches (so tables compare by what they hold, not by what they held).
    #[test]
    fn last_batches_keep_the_newest_five_as_a_deque_would() {
        let mut draws = crate::seeded::Draws::new(11);
        let mut rand = move |below: u64| draws.below(below);
        let mut batches = LastBatches::default();
        let mut model: std::collections::VecDeque<BatchMeta> = std::collections::VecDeque::new();
        let mut full_pushes = 0;
        for step in 0..2_000i64 {
            if rand(12) == 0 {
                batches = LastBatches::default();
                model.clear();
            } else {
                let meta = BatchMeta {
                    first_seq: step as i32,
                    last_seq: step as i32 + rand(3) as i32,
                    base_offset: Offset(step * 10),
                    last_offset: Offset(step * 10 + 2),
                };
                full_pushes += usize::from(model.len() == BATCHES_PER_PRODUCER);
                batches.push(meta);
                model.push_back(meta);
                if model.len() > BATCHES_PER_PRODUCER {
                    model.pop_front();
                }
            }
            let want: Vec<BatchMeta> = model.iter().copied().collect();
            assert_eq!(batches.as_slice(), &want[..], "step {step}");
            assert_eq!(batches.last(), model.back(), "step {step}");
            assert_eq!(batches.is_empty(), model.is_empty(), "step {step}");
            let mut fresh = LastBatches::default();
            want.iter().for_each(|m| fresh.push(*m));
            assert_eq!(batches, fresh, "step {step}: equal to the same batches pushed afresh");
        }
        assert!(full_pushes > 500, "pushes that dropped the oldest: {full_pushes}");
    }

    #[test]
    fn only_the_last_five_batches_are_recognised_as_duplicates() {
        let mut t = ProducerStateTable::default();
        for i in 0..6 {
            t.record(&header(9, 0, i * 2, 2, i64::from(i) * 2));
        }
        // Batch 0 (seq 0..1) fell out of the window: its retry is out of order, not a duplicate.
        assert_eq!(
            t.check(&[header(9, 0, 0, 2, 0)]),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            t.check(&[header(9, 0, 2, 2, 0)]),
            Ok(Verdict::Duplicate { base_offset: Offset(2) })
        );
        // Same first sequence, different length: not the same batch.
        assert_eq!(
            t.check(&[header(9, 0, 10, 1, 0)]),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
    }

    /// Producers first seen in no particular id order are each found with their own state: the
    /// table keeps them sorted for its search.
    #[test]
    fn producers_recorded_in_any_id_order_keep_their_own_state() {
        let ids = [5i64, 1, 9, 3, 7, 2, 8];
        let mut t = ProducerStateTable::default();
        for (n, &id) in ids.iter().enumerate() {
            // Producer `id` writes `id` batches of one record at offsets 100 * n and on.
            for s in 0..id as i32 {
                t.record(&header(id, 0, s, 1, 100 * n as i64 + i64::from(s)));
            }
        }
        assert_eq!(t.len(), ids.len());
        for (n, &id) in ids.iter().enumerate() {
            let last = id as i32 - 1;
            let (epoch, meta) = t.last_batch(ProducerId(id)).expect("known");
            assert_eq!((epoch, meta.last_seq), (ProducerEpoch(0), last), "producer {id}");
            assert_eq!(
                meta.base_offset,
                Offset(100 * n as i64 + i64::from(last)),
                "producer {id}"
            );
            assert_eq!(
                t.check(&[header(id, 0, last + 1, 1, 0)]),
                Ok(Verdict::Append),
                "producer {id}"
            );
        }
        assert_eq!(t.last_batch(ProducerId(4)), None, "never seen");
        assert_eq!(t.check(&[header(4, 0, 3, 1, 0)]), Err(ErrorCode::UnknownProducerId));
    }

    #[test]
    fn a_set_is_checked_batch_by_batch_against_its_own_earlier_batches() {
        let mut t = ProducerStateTable::default();
        t.record(&header(3, 0, 0, 2, 0));
        let (b1, b2) = (header(3, 0, 2, 2, 0), header(3, 0, 4, 1, 0));
        assert_eq!(t.check(&[b1, b2]), Ok(Verdict::Append));
        assert_eq!(t.check(&[b2, b1]), Err(ErrorCode::OutOfOrderSequenceNumber));
        // The same batch twice in one set: the second is a duplicate of the first.
        assert_eq!(t.check(&[b1, b1]), Err(ErrorCode::DuplicateSequenceNumber));
        // A retry of an old batch followed by a new one: refused whole.
        assert_eq!(
            t.check(&[header(3, 0, 0, 2, 0), b1]),
            Err(ErrorCode::DuplicateSequenceNumber)
        );
        // A new epoch in the set, then its next batch.
        assert_eq!(
            t.check(&[header(3, 1, 0, 1, 0), header(3, 1, 1, 1, 0)]),
            Ok(Verdict::Append)
        );
        // Batches without a producer id pass untouched.
        assert_eq!(t.check(&[header(-1, -1, -1, 3, 0)]), Ok(Verdict::Append));
    }

    #[test]
    fn malformed_producer_fields_are_invalid_records() {
        let t = ProducerStateTable::default();
        assert_eq!(t.check(&[header(1, -1, 0, 1, 0)]), Err(ErrorCode::InvalidRecord));
        assert_eq!(t.check(&[header(1, 0, -5, 1, 0)]), Err(ErrorCode::InvalidRecord));
    }
}
