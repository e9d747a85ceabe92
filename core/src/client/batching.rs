//! The batching producer, Kafka's design: [`BatchingProducer::send`] puts a record in the
//! [`Accumulator`] and returns a [`SendHandle`] at once (it waits only for buffer room or topic
//! metadata, at most `max.block.ms`); a sender task drains ready batches per leader into Produce
//! requests (one batch per partition, several partitions per request, at most
//! `max.request.size`); one connection task per broker pipelines up to
//! `max.in.flight.requests.per.connection` requests and hands each answer back to the
//! accumulator, which acknowledges, retries (after `retry.backoff.ms`, within
//! `delivery.timeout.ms`) or fails each batch.
//!
//! Everything runs as tasks of the [`Runtime`] (they die with the process: records still
//! buffered then are never sent, and their handles never complete). All state is in one
//! `RefCell` shared by the tasks of one thread; no borrow is held across an await.
//!
//! Fault model: a broker may answer with an error code (not written), not answer at all, or
//! close the connection (maybe written): the connection is dropped, every request in flight on
//! it is maybe-written and retried, and the topic's metadata is refreshed. Idempotence is as safe
//! as the sync producer's ([`super::producer`]): batches are stamped once and resent byte for
//! byte; a stamped batch that ends unacknowledged drops the producer id.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::name_map::NameMap;
use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use crate::protocol::{shared_name, Request, Response};
use crate::record::{record_bytes, NewRecord, HEADER_BYTES};
use crate::runtime::Runtime;
use crate::short_eq;

use super::accumulator::{
    complete, Accumulator, Batch, Completion, Delivery, PartitionKey, PartitionState, ProducerStats, Slot,
};
use super::conn::with_timeout;
use super::partitioner::Partitioner;
use super::producer::{init_producer_id, ProducerConfig, SendError};
use super::{code, ClientError, Cluster, KafkaConn, PRODUCE_VERSION};

/// Bytes of a Produce request around its batches, per partition at most (index, length) and
/// per request (header, topic name), for the `max.request.size` check.
const REQUEST_OVERHEAD_BYTES: usize = 256;
const PARTITION_OVERHEAD_BYTES: usize = 16;

/// A send's outcome, when it is known.
pub struct SendHandle {
    slot: Slot,
    partition: Option<i32>,
}

impl SendHandle {
    /// The outcome if already known.
    pub fn result(&self) -> Option<Delivery> {
        self.slot.borrow().result.clone()
    }

    /// The partition the record was buffered for (the caller's or the partitioner's choice,
    /// Kafka's `RecordMetadata.partition()`); `None` when the send failed before one was chosen.
    pub fn partition(&self) -> Option<i32> {
        self.partition
    }
}

impl Future for SendHandle {
    type Output = Delivery;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Delivery> {
        let mut s = self.slot.borrow_mut();
        match &s.result {
            Some(r) => Poll::Ready(r.clone()),
            None => {
                // A task polling its handles on every wake would otherwise clone a waker per
                // handle per wake.
                if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

struct ConnState {
    /// Requests built for this broker, not yet written to the connection.
    outbox: VecDeque<InFlight>,
    /// Requests in the outbox or sent and unanswered.
    in_flight: usize,
    /// The connection's task while it has nothing to send or await ([`request_or_close`]).
    idle: Option<Waker>,
}

struct InFlight {
    request: Request,
    batches: Vec<Batch>,
}

struct Shared {
    acc: Accumulator,
    partitioner: Partitioner,
    /// Partition counts of topics, from the sender's metadata.
    partition_counts: NameMap<i32>,
    /// Topics `send()` needs a partition count for.
    metadata_wanted: BTreeSet<String>,
    conns: NameMap<ConnState>,
    /// Bumped on every change a task may wait for; `wakers` are woken then.
    changes: u64,
    wakers: Vec<Waker>,
    /// The topic name the last Produce request carried, shared by the next (see
    /// [`shared_name`]).
    topic_name: Option<Arc<str>>,
}

impl Shared {
    fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
        for w in self.wakers.drain(..) {
            w.wake();
        }
        if self.acc.closing {
            // An idle connection ends once the producer closed and nothing is left.
            for (_, c) in self.conns.iter_mut() {
                if let Some(w) = c.idle.take() {
                    w.wake();
                }
            }
        }
    }
}

type State = Rc<RefCell<Shared>>;

/// Completes when anything changed since `seen` (a value of `Shared::changes`).
async fn changed_since(state: &State, seen: u64) {
    std::future::poll_fn(|cx| {
        let mut s = state.borrow_mut();
        if s.changes != seen {
            return Poll::Ready(());
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    })
    .await
}

/// Completes when `addr`'s outbox has a request, or the producer closed with nothing left: what
/// a connection with nothing to send or await waits for. Only a request for it and a change
/// while closing wake it: woken by every change of the producer's state (each batch started,
/// each answer), the connections to the leaders not written to polled for nothing (with the
/// sticky partitioner, all but one nearly always).
async fn request_or_close(state: &State, addr: &str) {
    std::future::poll_fn(|cx| {
        let mut s = state.borrow_mut();
        let closed = s.acc.closing && s.acc.is_empty();
        let Some(c) = s.conns.get_mut(addr) else {
            return Poll::Ready(());
        };
        if closed || !c.outbox.is_empty() {
            return Poll::Ready(());
        }
        if !c.idle.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            c.idle = Some(cx.waker().clone());
        }
        Poll::Pending
    })
    .await
}

/// Keeps `Accumulator::blocked_sends` or `flushes` counted while a future waits, also when it
/// is dropped midway.
struct Counted<'a> {
    state: &'a State,
    flush: bool,
}

impl<'a> Counted<'a> {
    fn new(state: &'a State, flush: bool) -> Self {
        let mut s = state.borrow_mut();
        if flush {
            s.acc.flushes += 1;
        } else {
            s.acc.blocked_sends += 1;
        }
        s.changed();
        drop(s);
        Counted { state, flush }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        let mut s = self.state.borrow_mut();
        if self.flush {
            s.acc.flushes -= 1;
        } else {
            s.acc.blocked_sends -= 1;
        }
    }
}

/// The batching producer. Cheap to share by reference between tasks of one thread.
pub struct BatchingProducer<R: Runtime> {
    rt: R,
    state: State,
}

impl<R: Runtime> BatchingProducer<R> {
    /// Starts the sender task on `cluster`'s runtime.
    pub fn start(cluster: Cluster<R>, mut config: ProducerConfig) -> Self {
        if config.enable_idempotence {
            // Kafka's rule: more than 5 in flight cannot keep the broker's last-5-batches dedupe.
            config.in_flight_max = config.in_flight_max.clamp(1, 5);
        }
        config.in_flight_max = config.in_flight_max.max(1);
        let rt = cluster.rt.clone();
        let state = Rc::new(RefCell::new(Shared {
            acc: Accumulator::new(config, cluster.config.retry_backoff_ms),
            partitioner: Partitioner::default(),
            partition_counts: NameMap::new(),
            metadata_wanted: BTreeSet::new(),
            conns: NameMap::new(),
            changes: 0,
            wakers: Vec::new(),
            topic_name: None,
        }));
        rt.spawn(sender_task(state.clone(), cluster));
        BatchingProducer { rt, state }
    }

    /// Counters so far.
    pub fn stats(&self) -> ProducerStats {
        self.state.borrow().acc.stats
    }

    /// Bytes of records buffered or in flight.
    pub fn buffered_bytes(&self) -> usize {
        self.state.borrow().acc.buffered_bytes
    }

    /// Buffers `record` for `topic` (`partition`, or the partitioner's choice: murmur2 of the key,
    /// sticky for null keys) and returns a handle to its outcome. Waits up to `max.block.ms` for
    /// buffer room or the topic's partition count; a send that cannot be buffered, or a record
    /// larger than `max.request.size`, fails alone through its handle.
    pub async fn send(&self, topic: &str, partition: Option<i32>, record: NewRecord) -> SendHandle {
        let slot = Slot::default();
        let sticky = partition.is_none() && record.key.is_none();
        let partition = match self.admit(topic, partition, &record).await {
            Ok((p, now)) => {
                self.append(topic, p, sticky, record, Completion::Handle(slot.clone()), now);
                Some(p)
            }
            Err((p, e)) => {
                complete(&slot, Err(e));
                p
            }
        };
        SendHandle { slot, partition }
    }

    /// [`send`](Self::send) with Kafka's completion callback instead of a handle: `callback` runs
    /// once with the partition (as [`SendHandle::partition`]) and the outcome, when the outcome is
    /// known: before this returns if the send failed at once, else in the producer's own task
    /// that completed the batch, so no task has to wait on the send. Like Kafka's callbacks it
    /// should be quick, and it must not call this producer (the producer's state is borrowed
    /// while callbacks run). Returns the partition too.
    pub async fn send_with_callback(
        &self,
        topic: &str,
        partition: Option<i32>,
        record: NewRecord,
        callback: impl FnOnce(Option<i32>, Delivery) + 'static,
    ) -> Option<i32> {
        let sticky = partition.is_none() && record.key.is_none();
        match self.admit(topic, partition, &record).await {
            Ok((p, now)) => {
                let done = Completion::Callback(Box::new(move |result| callback(Some(p), result)));
                self.append(topic, p, sticky, record, done, now);
                Some(p)
            }
            Err((p, e)) => {
                callback(p, Err(e));
                p
            }
        }
    }

    /// Puts a record [`admit`](Self::admit) let in at `now_ms` in the accumulator, with no wait
    /// between the two (nothing can change in between). `sticky`: the partitioner chose the
    /// partition for a keyless record, and counts its bytes (KIP-794).
    fn append(&self, topic: &str, partition: i32, sticky: bool, record: NewRecord, done: Completion, now_ms: u64) {
        let mut s = self.state.borrow_mut();
        let s = &mut *s;
        let appended = s.acc.append(topic, partition, record, done, now_ms);
        if sticky {
            let batch_size = s.acc.config.batch_bytes_max;
            s.partitioner.appended(
                topic,
                partition,
                appended.bytes,
                batch_size,
                appended.batch_full,
                || self.rt.random_u64(),
            );
        }
        if appended.sender_should_look {
            // A new batch (its linger timer starts) or a full one: the sender looks.
            s.changed();
        }
    }

    /// Whether `record` may be buffered now: its partition and the time, once the checks pass
    /// and there is room (waiting up to `max.block.ms` for metadata or room), else why not and
    /// the partition if one was chosen.
    async fn admit(
        &self,
        topic: &str,
        partition: Option<i32>,
        record: &NewRecord,
    ) -> Result<(i32, u64), (Option<i32>, SendError)> {
        let (block_ms_max, idempotent, acks, request_bytes_max, buffer_bytes_max) = {
            let c = &self.state.borrow().acc.config;
            (
                c.block_ms_max,
                c.enable_idempotence,
                c.acks,
                c.request_bytes_max,
                c.buffer_bytes_max,
            )
        };
        // The time is read again only after a wait (for metadata or buffer room): one clock
        // read a record otherwise.
        let start = self.rt.monotonic_ms();
        let mut waited = false;
        let deadline = start.saturating_add(block_ms_max);
        if idempotent && acks != -1 {
            return Err((
                None,
                SendError::Failed("enable.idempotence needs acks=-1 (all), as Kafka requires".into()),
            ));
        }
        let bytes = record_bytes(record);
        let limit = request_bytes_max.min(buffer_bytes_max);
        if bytes + HEADER_BYTES + REQUEST_OVERHEAD_BYTES > limit {
            return Err((
                None,
                SendError::Failed(format!(
                    "RECORD_TOO_LARGE: the record takes {} bytes serialized, more than max.request.size ({}) or \
                     buffer.memory ({})",
                    bytes + HEADER_BYTES,
                    request_bytes_max,
                    buffer_bytes_max
                )),
            ));
        }
        let chosen = match partition {
            Some(p) => Ok(p),
            None => match self.try_choose_partition(topic, record.key.as_deref()) {
                Some(chosen) => chosen,
                None => {
                    waited = true;
                    self.choose_partition(topic, record.key.as_deref(), deadline).await
                }
            },
        };
        let partition = chosen.map_err(|e| (None, e))?;
        // Wait for room in buffer.memory.
        if !self.state.borrow().acc.has_room(bytes) {
            waited = true;
            let _blocked = Counted::new(&self.state, false);
            loop {
                let seen = {
                    let s = self.state.borrow();
                    if s.acc.has_room(bytes) {
                        break;
                    }
                    s.changes
                };
                let now = self.rt.monotonic_ms();
                if now >= deadline {
                    return Err((
                        Some(partition),
                        SendError::Failed(format!(
                            "buffer.memory ({buffer_bytes_max} bytes) stayed full for max.block.ms ({block_ms_max} ms)"
                        )),
                    ));
                }
                with_timeout(&self.rt, deadline - now, changed_since(&self.state, seen)).await;
            }
        }
        Ok((partition, if waited { self.rt.monotonic_ms() } else { start }))
    }

    /// The partition for a record of `topic`, chosen now if the topic's partition count is
    /// known (`None` if not: the caller waits for metadata).
    fn try_choose_partition(&self, topic: &str, key: Option<&[u8]>) -> Option<Result<i32, SendError>> {
        let mut s = self.state.borrow_mut();
        let &count = s.partition_counts.get(topic)?;
        let s = &mut *s;
        let chosen = s.partitioner.partition(topic, key, count, || self.rt.random_u64());
        let Some(p) = chosen else {
            return Some(Err(SendError::Failed(format!("topic {topic} has no partitions"))));
        };
        Some(Ok(p))
    }

    /// [`try_choose_partition`](Self::try_choose_partition), waiting for the topic's metadata
    /// until `deadline`.
    async fn choose_partition(&self, topic: &str, key: Option<&[u8]>, deadline: u64) -> Result<i32, SendError> {
        loop {
            if let Some(chosen) = self.try_choose_partition(topic, key) {
                return chosen;
            }
            let seen = {
                let mut s = self.state.borrow_mut();
                if s.metadata_wanted.insert(topic.to_string()) {
                    s.changed();
                }
                s.changes
            };
            let now = self.rt.monotonic_ms();
            if now >= deadline {
                return Err(SendError::Failed(format!(
                    "no metadata for topic {topic} within max.block.ms"
                )));
            }
            with_timeout(&self.rt, deadline - now, changed_since(&self.state, seen)).await;
        }
    }

    /// Sends everything buffered now at once (linger ignored) and waits for its outcomes.
    pub async fn flush(&self) {
        let _flushing = Counted::new(&self.state, true);
        let mark = self.state.borrow().acc.next_batch_id();
        loop {
            let seen = {
                let s = self.state.borrow();
                if s.acc.outstanding.range(..mark).next().is_none() {
                    return;
                }
                s.changes
            };
            changed_since(&self.state, seen).await;
        }
    }

    /// Flushes, then stops the sender and connection tasks once nothing is left.
    pub async fn close(&self) {
        self.flush().await;
        let mut s = self.state.borrow_mut();
        s.acc.closing = true;
        s.changed();
    }
}

/// Drains ready batches into per-broker outboxes; keeps metadata and the producer id.
async fn sender_task<R: Runtime>(state: State, mut cluster: Cluster<R>) {
    let rt = cluster.rt.clone();
    let backoff_ms = cluster.config.retry_backoff_ms;
    let mut metadata_retry_at = 0u64;
    loop {
        let (invalidate, wanted) = {
            let mut s = state.borrow_mut();
            let invalidate = std::mem::take(&mut s.acc.invalidate);
            (invalidate, s.metadata_wanted.clone())
        };
        for topic in &invalidate {
            cluster.invalidate(topic);
        }
        if !wanted.is_empty() && rt.monotonic_ms() >= metadata_retry_at {
            for topic in wanted {
                match cluster.refresh(&topic).await {
                    Ok(layout) => {
                        let count = i32::try_from(layout.leaders.len()).unwrap_or(i32::MAX);
                        let mut s = state.borrow_mut();
                        s.partition_counts.insert(&topic, count);
                        s.metadata_wanted.remove(&topic);
                        s.changed();
                    }
                    Err(e) => {
                        tracing::debug!(topic, error = %e, "metadata for send() failed");
                        metadata_retry_at = rt.monotonic_ms().saturating_add(backoff_ms);
                    }
                }
            }
        }
        // One clock reading serves the pass up to its next await, as Kafka's sender takes one
        // `now` a loop (the simulator's clock only moves across an await anyway).
        let now = rt.monotonic_ms();
        state.borrow_mut().acc.expire(now);
        let needs_identity = state.borrow().acc.needs_identity();
        if needs_identity {
            let deadline = state.borrow().acc.next_deadline().unwrap_or_else(|| rt.monotonic_ms());
            match init_producer_id(&mut cluster, deadline).await {
                Ok(identity) => state.borrow_mut().acc.set_identity(identity),
                Err(e) => {
                    let mut s = state.borrow_mut();
                    s.acc.fail_unstamped(&format!("no producer id: {e}"));
                    s.changed();
                }
            }
            continue;
        }
        // Leaders of every partition with records, ready or lingering: looked up before the
        // batch is due (Kafka fetches metadata in send()), from the cache after the first time.
        // When the cache knows them all (nearly always), nothing is copied: the ready batches
        // are grouped by the cached addresses below.
        let waiting = |p: &PartitionState| !p.queue.is_empty() && p.backoff_until_ms <= now;
        let all_cached = (state.borrow().acc.partitions.iter())
            .filter(|(_, p)| waiting(p))
            .all(|((topic, partition), _)| cluster.cached_leader(topic, *partition).is_some());
        let mut leaders: BTreeMap<PartitionKey, String> = BTreeMap::new();
        let mut now = now;
        if !all_cached {
            let waiting: Vec<PartitionKey> = (state.borrow().acc.partitions.iter())
                .filter(|(_, p)| waiting(p))
                .map(|(k, _)| k.clone())
                .collect();
            for key in waiting {
                match cluster.leader(&key.0, key.1).await {
                    Ok((addr, _epoch)) => {
                        leaders.insert(key, addr.to_string());
                    }
                    Err(e) => {
                        tracing::debug!(topic = key.0, partition = key.1, error = %e, "no leader to send to");
                        state.borrow_mut().acc.back_off(&key, rt.monotonic_ms());
                    }
                }
            }
            now = rt.monotonic_ms();
        }
        let (ready, next_ready) = state.borrow().acc.ready(now);
        let addr_of = |key: &PartitionKey| {
            if all_cached {
                cluster.cached_leader(&key.0, key.1)
            } else {
                leaders.get(key).map(String::as_str)
            }
        };
        // Nearly always the ready partitions all have one leader (the sticky partitioner fills
        // one batch at a time): then `ready` is that leader's list as it is, with no map by
        // leader and no list per leader built (two allocations a drain).
        let one_leader =
            (ready.first().and_then(addr_of)).filter(|&first| ready[1..].iter().all(|k| addr_of(k) == Some(first)));
        let drained_any = {
            let mut s = state.borrow_mut();
            let mut any = false;
            if let Some(addr) = one_leader {
                any = drain_to(&mut s, &rt, &state, &cluster, addr, ready);
            } else {
                // By leader, in address order.
                let mut by_leader: BTreeMap<&str, Vec<PartitionKey>> = BTreeMap::new();
                for key in ready {
                    if let Some(addr) = addr_of(&key) {
                        by_leader.entry(addr).or_default().push(key);
                    }
                }
                for (addr, keys) in by_leader {
                    any |= drain_to(&mut s, &rt, &state, &cluster, addr, keys);
                }
            }
            if any {
                s.changed();
            }
            any
        };
        let seen = {
            let s = state.borrow();
            if s.acc.closing && s.acc.is_empty() && s.conns.is_empty() {
                return;
            }
            s.changes
        };
        if drained_any {
            continue;
        }
        let now = rt.monotonic_ms();
        let wake_at = [next_ready, state.borrow().acc.next_deadline()]
            .into_iter()
            .flatten()
            .chain((!state.borrow().metadata_wanted.is_empty()).then_some(metadata_retry_at.max(now + 1)))
            .min();
        match wake_at {
            Some(at) if at > now => {
                with_timeout(&rt, at - now, changed_since(&state, seen)).await;
            }
            Some(_) => {
                // Due now (an expiry): go round once more after yielding to the other tasks.
                with_timeout(&rt, 1, changed_since(&state, seen)).await;
            }
            None => changed_since(&state, seen).await,
        }
    }
}

/// Moves ready batches of `keys` (all led by `addr`) into Produce requests for `addr`, as many
/// as its in-flight limit allows. Returns whether it built any.
fn drain_to<R: Runtime>(
    s: &mut Shared,
    rt: &R,
    state: &State,
    cluster: &Cluster<R>,
    addr: &str,
    keys: Vec<PartitionKey>,
) -> bool {
    let config = s.acc.config.clone();
    let mut keys = VecDeque::from(keys);
    let mut built = false;
    while !keys.is_empty() {
        let in_flight = s.conns.get(addr).map_or(0, |c| c.in_flight);
        if in_flight >= config.in_flight_max {
            break;
        }
        let mut size = REQUEST_OVERHEAD_BYTES;
        // At most one batch a key: room for them all at once (growing the list moved batches).
        let mut batches: Vec<Batch> = Vec::with_capacity(keys.len());
        let mut rest = VecDeque::new();
        while let Some(key) = keys.pop_front() {
            let head_bytes = s
                .acc
                .partitions
                .get(&key.0, key.1)
                .and_then(|p| p.queue.front())
                .map(|b| b.bytes + PARTITION_OVERHEAD_BYTES);
            let Some(head_bytes) = head_bytes else { continue };
            if !batches.is_empty() && size + head_bytes > config.request_bytes_max {
                rest.push_back(key);
                continue;
            }
            if let Some(batch) = s.acc.drain_head(&key) {
                size += head_bytes;
                batches.push(batch);
            }
        }
        keys = rest;
        if batches.is_empty() {
            break;
        }
        s.acc.stats.requests += 1;
        s.acc.stats.request_batch_bytes += batches
            .iter()
            .map(|b| b.stamp.as_ref().map_or(0, |st| st.bytes.len() as u64))
            .sum::<u64>();
        let request = produce_request(
            &batches,
            config.acks,
            cluster.config.request_timeout_ms,
            &mut s.topic_name,
        );
        if let Err(at) = s.conns.find(addr) {
            s.conns.insert_at(
                at,
                addr,
                ConnState {
                    outbox: VecDeque::new(),
                    in_flight: 0,
                    idle: None,
                },
            );
            rt.spawn(connection_task(
                rt.clone(),
                state.clone(),
                addr.to_string(),
                cluster.config.clone(),
            ));
        }
        let conn = s.conns.get_mut(addr).expect("inserted above");
        conn.in_flight += 1;
        conn.outbox.push_back(InFlight { request, batches });
        if let Some(w) = conn.idle.take() {
            w.wake();
        }
        built = true;
    }
    built
}

fn produce_request(batches: &[Batch], acks: i16, request_timeout_ms: u64, names: &mut Option<Arc<str>>) -> Request {
    let mut topics: BTreeMap<&str, Vec<ProducePartition>> = BTreeMap::new();
    for b in batches {
        // Room for every batch in the first topic's list: nearly always there is one topic.
        let partitions = topics
            .entry(b.key.0.as_str())
            .or_insert_with(|| Vec::with_capacity(batches.len()));
        partitions.push(ProducePartition {
            index: b.key.1,
            records: b.stamp.as_ref().map(|s| s.bytes.clone()),
        });
    }
    Request::Produce(ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: i32::try_from(request_timeout_ms).unwrap_or(i32::MAX),
        topics: topics
            .into_iter()
            .map(|(name, partitions)| ProduceTopic {
                name: shared_name(names, name),
                partitions,
            })
            .collect(),
    })
}

/// One broker connection: writes its outbox, reads answers in order (pipelined), and ends on the
/// first error, handing every request it held back to the accumulator.
async fn connection_task<R: Runtime>(rt: R, state: State, addr: String, config: super::ClientConfig) {
    let request_timeout_ms = config.request_timeout_ms;
    let conn = KafkaConn::connect_as(&rt, &addr, &config).await;
    let mut awaiting: VecDeque<(i32, u64, InFlight)> = VecDeque::new();
    let error = match conn {
        Err(e) => e,
        Ok(mut conn) => loop {
            let next = state
                .borrow_mut()
                .conns
                .get_mut(&addr)
                .and_then(|c| c.outbox.pop_front());
            if let Some(mut request) = next {
                let acks = state.borrow().acc.config.acks;
                for b in &mut request.batches {
                    Accumulator::mark_sent(b);
                }
                if acks == 0 {
                    if let Err(e) = conn.send_only(&request.request, PRODUCE_VERSION).await {
                        awaiting.push_back((0, 0, request));
                        break e;
                    }
                    let mut s = state.borrow_mut();
                    for b in request.batches {
                        s.acc.acknowledge(b, None);
                    }
                    if let Some(c) = s.conns.get_mut(&addr) {
                        c.in_flight -= 1;
                    }
                    s.changed();
                    continue;
                }
                match conn.send_request(&request.request, PRODUCE_VERSION).await {
                    Ok(correlation_id) => {
                        awaiting.push_back((correlation_id, rt.monotonic_ms(), request));
                        continue;
                    }
                    Err(e) => {
                        awaiting.push_back((0, 0, request));
                        break e;
                    }
                }
            }
            let Some(&(correlation_id, sent_ms, _)) = awaiting.front() else {
                let closed = {
                    let s = state.borrow();
                    s.acc.closing && s.acc.is_empty()
                };
                if closed {
                    let mut s = state.borrow_mut();
                    s.conns.remove(&addr);
                    // The sender ends when the last connection has: it waits for a change.
                    s.changed();
                    return;
                }
                request_or_close(&state, &addr).await;
                continue;
            };
            let left_ms = (sent_ms + request_timeout_ms).saturating_sub(rt.monotonic_ms()).max(1);
            let api_key = crate::protocol::api::produce::API_KEY;
            match conn
                .recv_response(api_key, PRODUCE_VERSION, correlation_id, left_ms)
                .await
            {
                Ok(response) => {
                    let (_, _, request) = awaiting.pop_front().expect("peeked above");
                    let mut s = state.borrow_mut();
                    answered(&mut s.acc, request.batches, response, rt.monotonic_ms());
                    if let Some(c) = s.conns.get_mut(&addr) {
                        c.in_flight -= 1;
                    }
                    s.changed();
                }
                Err(e) => break e,
            }
        },
    };
    tracing::debug!(addr, error = %error, in_flight = awaiting.len(), "producer connection failed");
    let now = rt.monotonic_ms();
    let mut s = state.borrow_mut();
    let unsent = s.conns.remove(&addr).map(|c| c.outbox).unwrap_or_default();
    for (_, _, request) in awaiting {
        for b in request.batches {
            s.acc.attempt_failed(b, error.clone(), false, now);
        }
    }
    for request in unsent {
        for b in request.batches {
            // Never written to the connection: as if answered with an error.
            s.acc.attempt_failed(b, error.clone(), true, now);
        }
    }
    s.changed();
}

/// Hands a Produce answer's per-partition outcomes to the accumulator.
fn answered(acc: &mut Accumulator, batches: Vec<Batch>, response: Response, now_ms: u64) {
    let Response::Produce(resp) = response else {
        for b in batches {
            acc.fail_batch(b, "Produce answered with another API".into());
        }
        return;
    };
    for b in batches {
        let p = resp
            .topics
            .iter()
            .filter(|t| short_eq::same(&t.name, &b.key.0))
            .flat_map(|t| &t.partitions)
            .find(|p| p.index == b.key.1);
        match p.map(|p| (code(p.error_code), p.base_offset)) {
            None => acc.fail_batch(b, "Produce response lacks the partition".into()),
            Some((crate::ErrorCode::None, base_offset)) => acc.acknowledge(b, Some(base_offset)),
            Some((c, _)) => acc.attempt_failed(b, ClientError::Broker(c), true, now_ms),
        }
    }
}
