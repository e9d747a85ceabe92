//! The batching producer's record accumulator, Kafka's `RecordAccumulator` plus the bookkeeping
//! of its `Sender`: per-partition queues of batches, which batches are ready to send, which are in
//! flight, and how each batch ends. It does no I/O and never waits; [`super::batching`] drives it
//! from its sender and connection tasks and hands it the time.
//!
//! Contract:
//! - Records of one partition are sent in the order they were appended: only a partition's head
//!   batch is ever drained, and a batch that goes back to the queue (a retry) goes back in front
//!   of every later batch of its partition (ordered by batch id, which is creation order). A
//!   retried batch is sent only when nothing else of its partition is in flight, so it cannot be
//!   overtaken. Without idempotence a batch that fails retriably while a later one of its
//!   partition is in flight can still be written after it, as in Kafka with
//!   `max.in.flight.requests.per.connection` > 1; with idempotence the broker refuses the later
//!   one (OUT_OF_ORDER_SEQUENCE_NUMBER) and it is retried after the earlier one.
//! - With idempotence a batch is stamped (producer id, epoch, base sequence) and encoded once,
//!   when it is first drained; every retry resends those bytes. A stamped batch that ends
//!   without an acknowledgement leaves the broker's sequence and ours in doubt, so the producer
//!   drops its id ([`Accumulator::reset_identity`]): the other batches stamped under the old id
//!   and not in flight fail at once, those in flight fail unless acknowledged, and later batches
//!   are stamped under a new id. This is the sync producer's rule (see [`super::producer`]).
//! - Every record's outcome is reported once: `Ok(offset)`, `Failed` (certainly not written) or
//!   `Unknown` (an attempt may have been written).
//! - Limits: `buffer.memory` bounds the estimated bytes of every record not yet completed,
//!   `batch.size` closes batches, `max.request.size` bounds a request (one batch per partition).

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;
use std::task::Waker;

use bytes::Bytes;

use super::partition_list::PartitionList;
use crate::broker::producer_state::{last_sequence, next_sequence};
use crate::ids::{ProducerEpoch, ProducerId};
use crate::record::{build_batch, record_bytes, NewRecord, ProducerFields, HEADER_BYTES};
use crate::ErrorCode;

use super::producer::{ProducerConfig, SendError};
use super::ClientError;

/// A send's outcome: the record's offset when acknowledged (`None` with acks=0).
pub type Delivery = Result<Option<i64>, SendError>;

/// A send's completion callback (Kafka's `Callback.onCompletion`).
pub type OnDelivery = Box<dyn FnOnce(Delivery)>;

/// Where one send's outcome lands, and who waits for it: a task polling its handle, or a
/// callback.
#[derive(Default)]
pub struct SlotState {
    pub result: Option<Delivery>,
    pub waker: Option<Waker>,
    pub callback: Option<OnDelivery>,
}

pub type Slot = Rc<RefCell<SlotState>>;

/// How a buffered record's outcome is delivered: into a handle's slot, or to a callback. A
/// callback send needs no slot: one allocation a record (the callback's box) instead of two.
pub enum Completion {
    Handle(Slot),
    Callback(OnDelivery),
}

impl Completion {
    /// Delivers `result`: as [`complete`] for a handle, else by running the callback.
    pub fn complete(self, result: Delivery) {
        match self {
            Completion::Handle(slot) => complete(&slot, result),
            Completion::Callback(callback) => callback(result),
        }
    }
}

/// Sets a send's outcome once (later outcomes are ignored), and wakes its waiter or runs its
/// callback, with the slot's borrow released.
pub fn complete(slot: &Slot, result: Delivery) {
    let mut s = slot.borrow_mut();
    if s.result.is_some() {
        return;
    }
    if let Some(callback) = s.callback.take() {
        s.result = Some(result.clone());
        drop(s);
        callback(result);
        return;
    }
    s.result = Some(result);
    if let Some(w) = s.waker.take() {
        w.wake();
    }
}

/// (topic, partition)
pub type PartitionKey = (String, i32);

/// The producer identity a batch was stamped with, and its encoded bytes.
#[derive(Clone, Debug)]
pub struct Stamp {
    /// Which identity (0, 1, ... as ids are dropped and asked for again); 0 without idempotence.
    pub generation: u64,
    pub bytes: Bytes,
}

pub struct Batch {
    pub id: u64,
    pub key: PartitionKey,
    pub records: Vec<NewRecord>,
    pub slots: Vec<Completion>,
    /// Estimated bytes, as counted against `batch.size` and `buffer.memory`.
    pub bytes: usize,
    pub created_ms: u64,
    /// `delivery.timeout.ms` after the first record was appended.
    pub deadline_ms: u64,
    /// Closed to appends: full, or drained once.
    pub closed: bool,
    pub attempts: u32,
    pub retry_at_ms: u64,
    /// Whether an attempt may have been written (decides `Failed` vs `Unknown`).
    pub maybe_written: bool,
    /// `maybe_written` before the attempt in flight (an error answer restores it).
    pub maybe_written_before: bool,
    pub stamp: Option<Stamp>,
}

impl Batch {
    /// Whether `bytes` more may join this batch under `batch.size`.
    fn fits(&self, bytes: usize, batch_bytes_max: usize) -> bool {
        !self.closed && self.bytes + bytes <= batch_bytes_max
    }

    fn fail(&self, why: String) -> SendError {
        if self.maybe_written {
            SendError::Unknown(why)
        } else {
            SendError::Failed(why)
        }
    }
}

#[derive(Default)]
pub struct PartitionState {
    pub queue: VecDeque<Batch>,
    /// Batches of this partition in flight: (batch id, stamp generation).
    pub in_flight: Vec<(u64, u64)>,
    /// No drain before this (the leader was unknown).
    pub backoff_until_ms: u64,
    /// Records in this partition's last drained batch: a new batch starts with room for as many.
    pub records_hint: usize,
}

/// What [`Accumulator::append`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// A batch was started (its linger timer begins) or became full: the sender should look.
    pub sender_should_look: bool,
    /// The batch the record joined is full: none of the partition's batches is open to appends.
    pub batch_full: bool,
    /// The record's bytes, as counted against `batch.size`.
    pub bytes: usize,
}

/// Counters for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    pub requests: u64,
    /// Bytes of record batches carried by Produce requests (retries included).
    pub request_batch_bytes: u64,
    pub batches_sent: u64,
    pub records_acked: u64,
    pub records_failed: u64,
}

pub struct Accumulator {
    pub config: ProducerConfig,
    pub retry_backoff_ms: u64,
    /// Every partition appended to, kept when its batches are done, as Kafka keeps its deques:
    /// dropping an idle entry (after nearly every batch with the sticky partitioner) and making
    /// it again at the next batch copied the topic's name and grew its queue anew.
    pub partitions: PartitionList<PartitionState>,
    pub buffered_bytes: usize,
    next_batch_id: u64,
    /// Batches appended to and not yet completed.
    pub outstanding: BTreeSet<u64>,
    pub flushes: usize,
    /// `send()` calls waiting for buffer room: every batch is then ready (Kafka's `exhausted`).
    pub blocked_sends: usize,
    pub closing: bool,
    pub identity: Option<(ProducerId, ProducerEpoch)>,
    pub generation: u64,
    next_sequences: PartitionList<i32>,
    /// Topics whose cached metadata the sender should forget (NOT_LEADER and the like).
    pub invalidate: BTreeSet<String>,
    pub stats: ProducerStats,
}

impl Accumulator {
    pub fn new(config: ProducerConfig, retry_backoff_ms: u64) -> Self {
        Accumulator {
            config,
            retry_backoff_ms,
            partitions: PartitionList::new(),
            buffered_bytes: 0,
            next_batch_id: 0,
            outstanding: BTreeSet::new(),
            flushes: 0,
            blocked_sends: 0,
            closing: false,
            identity: None,
            generation: 0,
            next_sequences: PartitionList::new(),
            invalidate: BTreeSet::new(),
            stats: ProducerStats::default(),
        }
    }

    pub fn idempotent(&self) -> bool {
        self.config.enable_idempotence
    }

    /// The id the next batch will get: a flush waits for every batch below it.
    pub fn next_batch_id(&self) -> u64 {
        self.next_batch_id
    }

    /// Whether `bytes` more fit in `buffer.memory`.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.buffered_bytes.saturating_add(bytes) <= self.config.buffer_bytes_max
    }

    /// Appends a record (the caller checked its size and the buffer's room).
    /// The topic's name is copied only for a new batch or partition, not per record.
    pub fn append(
        &mut self,
        topic: &str,
        partition: i32,
        record: NewRecord,
        done: Completion,
        now_ms: u64,
    ) -> Appended {
        let bytes = record_bytes(&record);
        self.buffered_bytes += bytes;
        let batch_bytes_max = self.config.batch_bytes_max;
        let deadline_ms = now_ms.saturating_add(self.config.delivery_timeout_ms);
        let number = partition;
        let partition = self
            .partitions
            .get_or_insert_with(topic, number, PartitionState::default);
        let fits = partition.queue.back().is_some_and(|b| b.fits(bytes, batch_bytes_max));
        if !fits {
            let key = (topic.to_string(), number);
            if let Some(last) = partition.queue.back_mut() {
                last.closed = true;
            }
            // Half as much again as the last batch held: batches of one partition vary (the
            // sticky partitioner moves on at its own times), and one that outgrew the hint
            // reallocated both vectors (~1.1 times a batch on the batched benchmark).
            let hint = partition.records_hint;
            let room = hint.saturating_add(hint / 2).max(1);
            let id = self.next_batch_id;
            self.next_batch_id += 1;
            self.outstanding.insert(id);
            partition.queue.push_back(Batch {
                id,
                key,
                records: Vec::with_capacity(room),
                slots: Vec::with_capacity(room),
                bytes: HEADER_BYTES,
                created_ms: now_ms,
                deadline_ms,
                closed: false,
                attempts: 0,
                retry_at_ms: 0,
                maybe_written: false,
                maybe_written_before: false,
                stamp: None,
            });
        }
        let batch = partition.queue.back_mut().expect("pushed above if absent");
        batch.records.push(record);
        batch.slots.push(done);
        batch.bytes += bytes;
        if batch.bytes >= batch_bytes_max {
            batch.closed = true;
        }
        Appended {
            sender_should_look: !fits || batch.closed,
            batch_full: batch.closed,
            bytes,
        }
    }

    /// Partitions whose head batch may be drained now, and the earliest later time one may
    /// become ready (linger or backoff ending).
    pub fn ready(&self, now_ms: u64) -> (Vec<PartitionKey>, Option<u64>) {
        let mut ready = Vec::new();
        let mut next: Option<u64> = None;
        let mut later = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        let hurry = self.flushes > 0 || self.closing || self.blocked_sends > 0;
        for (key, p) in self.partitions.iter() {
            let Some(head) = p.queue.front() else { continue };
            if head.attempts > 0 && !p.in_flight.is_empty() {
                // A retry waits for its partition's in-flight batches: it must not be overtaken.
                continue;
            }
            if p.in_flight.iter().any(|&(_, g)| g != self.generation) {
                // Batches stamped under a dropped id are still out: wait for their outcome.
                continue;
            }
            let linger_end = head.created_ms.saturating_add(self.config.linger_ms);
            let not_before = head.retry_at_ms.max(p.backoff_until_ms);
            let full = head.closed || p.queue.len() > 1 || head.attempts > 0;
            if now_ms < not_before {
                later(not_before);
            } else if full || hurry || now_ms >= linger_end {
                ready.push(key.clone());
            } else {
                later(linger_end);
            }
        }
        (ready, next)
    }

    /// Postpones draining `key` (its leader is unknown for now).
    pub fn back_off(&mut self, key: &PartitionKey, now_ms: u64) {
        if let Some(p) = self.partitions.get_mut(&key.0, key.1) {
            p.backoff_until_ms = now_ms.saturating_add(self.retry_backoff_ms);
        }
    }

    /// Whether an unstamped batch waits (with idempotence it needs a producer id first).
    pub fn needs_identity(&self) -> bool {
        self.idempotent()
            && self.identity.is_none()
            && self
                .partitions
                .values()
                .any(|p| p.queue.front().is_some_and(|b| b.stamp.is_none()))
    }

    pub fn set_identity(&mut self, identity: (ProducerId, ProducerEpoch)) {
        self.identity = Some(identity);
        self.next_sequences = PartitionList::new();
    }

    /// Fails every unstamped batch (no producer id could be had).
    pub fn fail_unstamped(&mut self, why: &str) {
        let mut failed = Vec::new();
        for p in self.partitions.values_mut() {
            let (keep, drop): (VecDeque<Batch>, VecDeque<Batch>) = p.queue.drain(..).partition(|b| b.stamp.is_some());
            p.queue = keep;
            failed.extend(drop);
        }
        for b in failed {
            let e = b.fail(why.to_string());
            self.finish(b, Err(e));
        }
    }

    /// Takes `key`'s head batch for a request, stamping and encoding it on its first drain.
    /// `None` when the partition has nothing, or the batch needs a producer id first.
    pub fn drain_head(&mut self, key: &PartitionKey) -> Option<Batch> {
        let identity = self.identity;
        let generation = self.generation;
        let idempotent = self.idempotent();
        let p = self.partitions.get_mut(&key.0, key.1)?;
        let head = p.queue.front()?;
        if head.stamp.is_none() {
            let fields = if idempotent {
                let (id, epoch) = identity?;
                let base_sequence = self.next_sequences.get(&key.0, key.1).copied().unwrap_or(0);
                let last_delta = i32::try_from(head.records.len() - 1).expect("a batch holds far fewer records");
                let next = next_sequence(last_sequence(base_sequence, last_delta));
                self.next_sequences.insert(&key.0, key.1, next);
                ProducerFields {
                    producer_id: id.0,
                    producer_epoch: epoch.0,
                    base_sequence,
                }
            } else {
                ProducerFields::none()
            };
            let head = p.queue.front_mut().expect("checked above");
            // Built once: every retry resends these bytes, so the broker can recognise a duplicate.
            head.stamp = Some(Stamp {
                generation,
                bytes: Bytes::from(build_batch(&head.records, fields)),
            });
        }
        let mut batch = p.queue.pop_front().expect("checked above");
        p.records_hint = batch.records.len();
        batch.closed = true;
        batch.attempts += 1;
        batch.maybe_written_before = batch.maybe_written;
        p.in_flight
            .push((batch.id, batch.stamp.as_ref().map_or(0, |s| s.generation)));
        self.stats.batches_sent += 1;
        Some(batch)
    }

    /// The batch was sent (with acks other than 0): an attempt may now be written.
    pub fn mark_sent(batch: &mut Batch) {
        batch.maybe_written = true;
    }

    fn leave_flight(&mut self, batch: &Batch) {
        if let Some(p) = self.partitions.get_mut(&batch.key.0, batch.key.1) {
            p.in_flight.retain(|&(id, _)| id != batch.id);
        }
    }

    /// The broker acknowledged `batch` at `base_offset` (`None` with acks=0).
    pub fn acknowledge(&mut self, mut batch: Batch, base_offset: Option<i64>) {
        self.leave_flight(&batch);
        self.stats.records_acked += batch.slots.len() as u64;
        for (i, done) in std::mem::take(&mut batch.slots).into_iter().enumerate() {
            done.complete(Ok(base_offset.map(|o| o + i as i64)));
        }
        self.release(&batch);
    }

    /// An attempt of `batch` ended with `error`; `answered`: the broker answered it with an
    /// error code, so this attempt was not written (Kafka's contract).
    pub fn attempt_failed(&mut self, mut batch: Batch, error: ClientError, answered: bool, now_ms: u64) {
        self.leave_flight(&batch);
        if answered {
            batch.maybe_written = batch.maybe_written_before;
        }
        if let ClientError::Broker(
            ErrorCode::NotLeaderOrFollower | ErrorCode::UnknownTopicOrPartition | ErrorCode::FencedLeaderEpoch,
        )
        | ClientError::Net(_)
        | ClientError::Timeout(_) = error
        {
            self.invalidate.insert(batch.key.0.clone());
        }
        let generation = batch.stamp.as_ref().map_or(0, |s| s.generation);
        let stale = self.idempotent() && generation != self.generation;
        // OUT_OF_ORDER_SEQUENCE_NUMBER behind an earlier batch of the same id that is not yet
        // acknowledged: that one is being retried, this one follows it.
        let behind_retry = error == ClientError::Broker(ErrorCode::OutOfOrderSequenceNumber)
            && !stale
            && self.earlier_unacknowledged(&batch);
        let retriable = error.is_retriable() || behind_retry;
        let out_of_time = now_ms >= batch.deadline_ms;
        if stale || !retriable || batch.attempts > self.config.retries || out_of_time {
            let why = if stale {
                format!(
                    "after {} attempt(s): {error}; the producer id changed since",
                    batch.attempts
                )
            } else {
                format!("after {} attempt(s): {error}", batch.attempts)
            };
            self.give_up(batch, why);
            return;
        }
        tracing::debug!(topic = batch.key.0, partition = batch.key.1, attempts = batch.attempts, %error, "produce retry");
        batch.retry_at_ms = now_ms.saturating_add(self.retry_backoff_ms);
        let p = self
            .partitions
            .get_or_insert_with(&batch.key.0, batch.key.1, PartitionState::default);
        let at = p.queue.iter().position(|b| b.id > batch.id).unwrap_or(p.queue.len());
        p.queue.insert(at, batch);
    }

    fn earlier_unacknowledged(&self, batch: &Batch) -> bool {
        let Some(p) = self.partitions.get(&batch.key.0, batch.key.1) else {
            return false;
        };
        p.in_flight.iter().any(|&(id, g)| id < batch.id && g == self.generation)
            || p.queue
                .iter()
                .any(|b| b.id < batch.id && b.stamp.as_ref().is_some_and(|s| s.generation == self.generation))
    }

    /// Ends `batch` without an acknowledgement. A stamped batch leaves the sequences in doubt:
    /// the producer drops its id.
    fn give_up(&mut self, batch: Batch, why: String) {
        let stamped_now = self.idempotent() && batch.stamp.as_ref().is_some_and(|s| s.generation == self.generation);
        let e = batch.fail(why);
        self.finish(batch, Err(e));
        if stamped_now {
            self.reset_identity();
        }
    }

    /// Drops the producer id: batches stamped under it and waiting to be retried fail now
    /// (resending them under a new id could write them twice; under the old one the broker may
    /// refuse them forever).
    pub fn reset_identity(&mut self) {
        self.identity = None;
        self.generation += 1;
        self.next_sequences = PartitionList::new();
        let mut failed = Vec::new();
        for p in self.partitions.values_mut() {
            let (stale, keep): (VecDeque<Batch>, VecDeque<Batch>) = p.queue.drain(..).partition(|b| b.stamp.is_some());
            p.queue = keep;
            failed.extend(stale);
        }
        for b in failed {
            let e = b.fail("another batch failed and the producer id was dropped".to_string());
            self.finish(b, Err(e));
        }
    }

    /// Fails batches past `delivery.timeout.ms` that are not in flight.
    pub fn expire(&mut self, now_ms: u64) {
        if self.next_deadline().is_none_or(|d| d > now_ms) {
            return;
        }
        let mut expired = Vec::new();
        for p in self.partitions.values_mut() {
            let (gone, keep): (VecDeque<Batch>, VecDeque<Batch>) =
                p.queue.drain(..).partition(|b| now_ms >= b.deadline_ms);
            p.queue = keep;
            expired.extend(gone);
        }
        for b in expired {
            let why = format!(
                "delivery.timeout.ms ({} ms) passed after {} attempt(s)",
                self.config.delivery_timeout_ms, b.attempts
            );
            self.give_up(b, why);
        }
    }

    /// The earliest deadline of a queued batch (the sender wakes then to expire it). A queue is
    /// in batch id order (a retry goes back in its place), ids are given in creation order and
    /// a deadline is the creation time plus `delivery.timeout.ms`: each queue's head has its
    /// earliest deadline, so only heads are read.
    pub fn next_deadline(&self) -> Option<u64> {
        self.partitions
            .values()
            .filter_map(|p| p.queue.front().map(|b| b.deadline_ms))
            .min()
    }

    fn finish(&mut self, mut batch: Batch, result: Delivery) {
        if result.is_err() {
            self.stats.records_failed += batch.slots.len() as u64;
        }
        for done in std::mem::take(&mut batch.slots) {
            done.complete(result.clone());
        }
        self.release(&batch);
    }

    fn release(&mut self, batch: &Batch) {
        let records: usize = batch.records.iter().map(record_bytes).sum();
        self.buffered_bytes = self.buffered_bytes.saturating_sub(records);
        self.outstanding.remove(&batch.id);
        if let Some(p) = self.partitions.get_mut(&batch.key.0, batch.key.1) {
            if p.queue.is_empty() && p.in_flight.is_empty() {
                // Idle: as a new entry would be (the entry stays, with its queue's room and its
                // records hint).
                p.backoff_until_ms = 0;
            }
        }
    }

    /// Fails a batch outright (e.g. the response lacked its partition).
    pub fn fail_batch(&mut self, batch: Batch, why: String) {
        self.leave_flight(&batch);
        self.give_up(batch, why);
    }

    /// Whether nothing is buffered or in flight.
    pub fn is_empty(&self) -> bool {
        self.outstanding.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(linger_ms: u64, batch_bytes_max: usize) -> Accumulator {
        let config = ProducerConfig {
            linger_ms,
            batch_bytes_max,
            ..ProducerConfig::default()
        };
        Accumulator::new(config, 100)
    }

    fn rec(n: usize) -> NewRecord {
        NewRecord {
            timestamp: 0,
            key: None,
            value: Some(vec![7; n]),
        }
    }

    fn key(p: i32) -> PartitionKey {
        ("t".into(), p)
    }

    #[test]
    fn a_batch_is_ready_after_linger_or_when_full() {
        let mut a = acc(5, 1_000);
        assert!(
            a.append("t", 0, rec(10), Completion::Handle(Slot::default()), 100)
                .sender_should_look,
            "a new batch: its linger starts"
        );
        assert!(
            !a.append("t", 0, rec(10), Completion::Handle(Slot::default()), 101)
                .sender_should_look
        );
        assert_eq!(a.ready(101), (vec![], Some(105)), "lingers");
        assert_eq!(a.ready(105).0, vec![key(0)], "linger.ms passed");
        // Full: a third record of 136 bytes would take the batch (61 + 2 x 136) past batch.size,
        // so it starts the next batch and the first is ready before linger.ms.
        let mut a = acc(5, 400);
        let first = a.append("t", 0, rec(100), Completion::Handle(Slot::default()), 0);
        assert!(first.sender_should_look && !first.batch_full, "{first:?}");
        let second = a.append("t", 0, rec(100), Completion::Handle(Slot::default()), 0);
        assert!(!second.sender_should_look && !second.batch_full, "{second:?}");
        assert!(
            a.append("t", 0, rec(100), Completion::Handle(Slot::default()), 0)
                .sender_should_look,
            "full: the next batch starts"
        );
        assert_eq!(a.ready(0).0, vec![key(0)]);
        let b = a.drain_head(&key(0)).expect("a batch");
        assert_eq!(b.records.len(), 2);
        assert!(b.bytes <= 400);
        // A record that takes a batch to batch.size fills it: the partitioner may move on.
        let mut a = acc(5, 61 + 136);
        let full = a.append("t", 0, rec(100), Completion::Handle(Slot::default()), 0);
        let expected = Appended {
            sender_should_look: true,
            batch_full: true,
            bytes: 136,
        };
        assert_eq!(full, expected);
    }

    #[test]
    fn a_retry_goes_back_in_front_and_waits_for_its_partition() {
        let mut a = acc(0, 150);
        for _ in 0..3 {
            a.append("t", 0, rec(100), Completion::Handle(Slot::default()), 0);
        }
        let first = a.drain_head(&key(0)).expect("batch 0");
        let second = a.drain_head(&key(0)).expect("batch 1");
        assert_eq!((first.id, second.id), (0, 1));
        a.attempt_failed(first, ClientError::Broker(ErrorCode::NotLeaderOrFollower), true, 10);
        let (ready, next) = a.ready(200);
        assert!(ready.is_empty(), "batch 1 is still in flight: the retry waits");
        assert_eq!(next, None);
        a.acknowledge(second, Some(0));
        assert_eq!(a.ready(200).0, vec![key(0)]);
        assert_eq!(a.drain_head(&key(0)).map(|b| b.id), Some(0), "the retry first");
        assert_eq!(a.drain_head(&key(0)).map(|b| b.id), Some(2));
    }

    /// A partition whose batches are all done stays (no name copied, no queue grown again at
    /// its next batch) and acts as a new one: a back-off it had is over, and the next batch
    /// starts with room for as many records as the last drained one held.
    #[test]
    fn an_idle_partition_stays_and_starts_afresh() {
        let mut a = acc(0, 1_000);
        for _ in 0..3 {
            a.append("t", 0, rec(10), Completion::Handle(Slot::default()), 0);
        }
        let b = a.drain_head(&key(0)).expect("a batch");
        a.acknowledge(b, Some(0));
        assert!(a.is_empty());
        // Backed off (its leader unknown), then its only batch expires.
        a.append("t", 0, rec(10), Completion::Handle(Slot::default()), 1_000);
        let expired_at = 1_000 + a.config.delivery_timeout_ms;
        a.back_off(&key(0), expired_at - 50);
        assert_eq!(a.ready(expired_at - 1), (vec![], Some(expired_at + 50)), "backed off");
        a.expire(expired_at);
        assert!(a.is_empty(), "expired");
        let p = a.partitions.get("t", 0).expect("the idle partition stays");
        assert_eq!((p.backoff_until_ms, p.records_hint), (0, 3));
        // A record now is ready at once, as for a partition never seen.
        a.append("t", 0, rec(10), Completion::Handle(Slot::default()), expired_at);
        assert_eq!(a.ready(expired_at).0, vec![key(0)], "no back-off left over");
        let b = a.drain_head(&key(0)).expect("the new batch");
        assert!(b.records.capacity() >= 3, "room for the last drained batch's records");
        assert_eq!(a.partitions.len(), 1);
    }
}
