//! One run of a scenario under one seed: broker nodes running the real node driver on
//! [`SimRuntime`], producer and consumer nodes running Gregor's real client, the nemesis playing
//! the scenario's faults, a heal phase, a final read of every partition, and the checker.
//!
//! Phases, in virtual time: setup (topic created) → `duration_s` of workload and faults → faults
//! healed, producers stopped → `heal_s` for consumers to drain → final read → check. A run is a
//! pure function of (scenario, seed): every random choice comes from `crate::seed` streams and
//! madsim's seeded scheduler.
//!
//! Limits of this first version (stated, not hidden): one broker per cluster (replication and the
//! coordinator come with issue #4); sync sends are one record per batch; async producers run the
//! batching producer (`linger.ms`, `batch.size`, several requests in flight); consumers read every partition
//! by manual assignment and do not commit, unless the scenario sets `"group.id"`: then they
//! subscribe as one consumer group and commit per the scenario's `commit` policy.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gregor_core::client::batching::BatchingProducer;
use gregor_core::client::conn::with_timeout;
use gregor_core::client::consumer::{Consumer, ConsumerConfig};
use gregor_core::client::group::{GroupConfig, GroupConsumer, RebalanceListener, TopicPartition};
use gregor_core::client::producer::{Producer, ProducerConfig, SendError};
use gregor_core::client::{ClientConfig, Cluster};
use gregor_core::node::{start_broker, NodeConfig};
use gregor_core::record::NewRecord;
use gregor_core::runtime::Runtime;
use gregor_core::BrokerId;

use crate::checker::{self, Report};
use crate::coverage::{Observed, Reached};
use crate::history::{Assignment, Commit, FinalRead, History, Partition, Poll, Processed, Send, SendOutcome, Value};
use crate::nemesis::{FaultEvent, Nemesis};
use crate::runtime::SimRuntime;
use crate::scenario::{CommitPolicy, PartitionerChoice, Scenario, ScheduledFault, SendMode};
use crate::world::{node_ip, run_seed_with, NodeIndex, World, WorldConfig};
use books::{books, Books, Pending};

mod acl;
mod books;
pub mod cluster;
mod elastic;
mod quorum;

/// Kafka's port on every simulated broker.
pub const KAFKA_PORT: u16 = 9092;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub seed: u64,
    pub print_trace: bool,
    pub trace_filter: Option<String>,
}

#[derive(Clone, Debug)]
pub struct RunResult {
    pub scenario: String,
    pub seed: u64,
    pub report: Report,
    /// Hash of every trace event of the run: equal for equal (scenario, seed).
    pub trace_hash: u64,
    pub simulated_ms: u64,
    pub wall_ms: u64,
    pub faults: Vec<FaultEvent>,
    /// The faults the nemesis played, as an explicit schedule (`Nemesis::played`): what
    /// `gregor-sim shrink` replays and cuts down.
    pub played: Vec<ScheduledFault>,
    /// What the workload did (for replay output and timelines).
    pub history: History,
    /// The run itself failed (a panic, the time limit): counts as a failure.
    pub error: Option<String>,
    /// The hard states the run reached (`crate::coverage`).
    pub coverage: Reached,
}

struct Simulated {
    history: History,
    faults: Vec<FaultEvent>,
    played: Vec<ScheduledFault>,
    simulated_ms: u64,
    /// Virtual ms when producers stopped.
    produce_until_ms: u64,
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere in the run already fails it; the history is still worth reading.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn run_scenario(scenario: &Scenario, options: &RunOptions) -> RunResult {
    let wall = std::time::Instant::now();
    let limit_s = scenario.duration_s + scenario.heal_s + 600;
    let config = WorldConfig {
        time_limit: Duration::from_secs(limit_s),
        ..WorldConfig::default()
    };
    let (seed, owned) = (options.seed, scenario.clone());
    let captured = crate::trace::Capture::new(options.print_trace, options.trace_filter.as_deref()).map(|capture| {
        let outcome = tracing::dispatcher::with_default(capture.dispatch(), || {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                run_seed_with(seed, config, move |world| simulate(world, owned))
            }))
        });
        (outcome, capture.summary().hash, capture.observed())
    });
    let (outcome, trace_hash, observed) = match captured {
        Ok((outcome, hash, observed)) => (outcome.map_err(panic_message), hash, observed),
        Err(e) => (Err(e.to_string()), 0, Observed::default()),
    };
    let wall_ms = wall.elapsed().as_millis() as u64;
    match outcome {
        Ok(sim) => RunResult {
            scenario: scenario.name.clone(),
            seed,
            coverage: observed.reached(sim.produce_until_ms, sim.history.sends.iter().map(|s| s.at_ms).max()),
            report: checker::check(&sim.history),
            history: sim.history,
            trace_hash,
            simulated_ms: sim.simulated_ms,
            wall_ms,
            faults: sim.faults,
            played: sim.played,
            error: None,
        },
        Err(why) => RunResult {
            scenario: scenario.name.clone(),
            seed,
            report: Report::default(),
            trace_hash: 0,
            simulated_ms: 0,
            wall_ms,
            faults: Vec::new(),
            played: Vec::new(),
            history: History::default(),
            error: Some(why),
            coverage: Reached::default(),
        },
    }
}

fn panic_message(panic: Box<dyn std::any::Any + std::marker::Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the run panicked".into())
}

fn broker_addr(i: usize) -> String {
    format!("{}:{KAFKA_PORT}", node_ip(NodeIndex(i)))
}

/// Node `index`'s broker settings, single-node or replicated.
fn broker_node_config(index: usize) -> NodeConfig {
    let ip = node_ip(NodeIndex(index)).to_string();
    let mut config = NodeConfig::single_node(&broker_addr(index), &ip, i32::from(KAFKA_PORT), "gregor-sim");
    config.broker.broker_id = BrokerId(index as i32);
    config.broker.auto_create_topics = false;
    // Scenarios run minutes, not days: look for expired segments every second.
    config.broker.retention_check_interval_ms = 1_000;
    config
}

pub(crate) async fn broker_main(rt: SimRuntime, index: usize) {
    let config = broker_node_config(index);
    match start_broker(rt, config).await {
        Ok((_broker, accept_loop)) => accept_loop.await,
        Err(e) => tracing::error!(target: "broker", error = %e, "broker failed to start"),
    }
}

pub(crate) fn client(rt: &SimRuntime, name: String, brokers: usize) -> Cluster<SimRuntime> {
    let config = ClientConfig {
        sasl: acl::client_login(&name),
        client_id: name,
        request_timeout_ms: 5_000,
        retry_backoff_ms: 100,
    };
    Cluster::new(rt.clone(), (0..brokers).map(broker_addr).collect(), config)
}

struct Workload {
    scenario: Scenario,
    brokers: usize,
    /// `[acl]`: when each toggled producer's value was created (virtual ms since start).
    created: Shared<BTreeMap<Value, u64>>,
    /// Virtual ms (since the run started) when producers stop and consumers must have drained.
    produce_until_ms: u64,
    consume_until_ms: u64,
}

async fn producer_main(rt: SimRuntime, w: Arc<Workload>, p: u32) {
    let spec = &w.scenario.producer;
    let config = ProducerConfig {
        enable_idempotence: spec.idempotent(),
        acks: spec.acks_value(),
        retries: spec.retries,
        delivery_timeout_ms: spec.delivery_timeout_ms,
        linger_ms: spec.linger_ms,
        batch_bytes_max: spec.batch_size as usize,
        buffer_bytes_max: usize::try_from(spec.buffer_memory).expect("validated: at most 4 GiB"),
        block_ms_max: spec.max_block_ms,
        in_flight_max: spec.max_in_flight as usize,
        ..ProducerConfig::default()
    };
    let mut pacer = Pacer::new(Duration::from_millis(u64::from(1_000 / spec.rate_per_s.max(1)).max(1)));
    // The topics this producer writes, in turn: (place in the scenario's list, name, partitions).
    let topics: Vec<(u16, &str, u32)> = w
        .scenario
        .producer_topics()
        .into_iter()
        .map(|k| {
            let t = w.scenario.topics[usize::from(k)].get_ref();
            (k, t.name.as_str(), t.partitions)
        })
        .collect();
    let n = u32::try_from(topics.len()).expect("validated: at most 16 topics");
    // Sticky: the producer's partitioner picks (keyless records); until it has, the record's
    // partition is NOT_CHOSEN.
    let sticky = spec.partitioner == PartitionerChoice::Sticky;
    // A record's value, partition and topic name.
    let next = |now: u64| {
        let (value, partition, name) = books(|b| {
            let seq = b.pending.next_seq(p);
            // Record `seq` goes to topic `seq % n`, round robin over its partitions.
            let (topic, name, partitions) = topics[(seq % n) as usize];
            let index = if sticky {
                NOT_CHOSEN
            } else {
                (seq / n % partitions) as i32
            };
            let (value, partition) = (Value::new(p, seq), Partition { topic, index });
            b.pending.insert(value, partition);
            (value, partition, name)
        });
        if w.scenario.acl.as_ref().is_some_and(|a| p < a.toggled_producers) {
            lock(&w.created).insert(value, now);
        }
        (value, partition, name)
    };
    match spec.mode {
        SendMode::Sync => {
            let mut producer = Producer::new(client(&rt, format!("producer-{p}"), w.brokers), config);
            loop {
                let (now, timestamp) = rt.clock_ms();
                if now >= w.produce_until_ms {
                    break;
                }
                let (value, partition, topic) = next(now);
                let result = producer.send(topic, partition.index, &[record(timestamp, value)]).await;
                record_outcome(&rt, &w, p, value, partition, result);
                if let Some(pause) = pacer.after_send() {
                    rt.sleep(pause).await;
                }
            }
        }
        SendMode::Async => {
            // The batching producer: send() returns once the record is in this process's buffer,
            // where it waits for linger.ms / batch.size and dies with the process if it crashes
            // first (never acknowledged, its callback never runs). Each send's callback records
            // its outcome at the virtual time the producer learns it. A task awaiting the sends'
            // handles instead was polled once per record (to register with each new handle).
            let producer = BatchingProducer::start(client(&rt, format!("producer-{p}"), w.brokers), config);
            // What every callback needs, behind one counter bumped without an atomic: a runtime
            // and a workload cloned into each of 30,000 callbacks a seed cost five atomic
            // increments and five decrements a record (the callback need not be Send).
            let shared = Rc::new((rt.clone(), w.clone()));
            loop {
                // The loop's test and the record's timestamp from one reading of the clock (no
                // wait comes between them).
                let (now, timestamp) = rt.clock_ms();
                if now >= w.produce_until_ms {
                    break;
                }
                let (value, partition, topic) = next(now);
                let chosen = (!sticky).then_some(partition.index);
                let cb = shared.clone();
                let on_delivery = move |chosen: Option<i32>, result| {
                    let partition = Partition {
                        index: chosen.unwrap_or(partition.index),
                        ..partition
                    };
                    record_outcome(&cb.0, &cb.1, p, value, partition, result);
                };
                let chosen = producer
                    .send_with_callback(topic, chosen, record(timestamp, value), on_delivery)
                    .await;
                let partition = Partition {
                    index: chosen.unwrap_or(partition.index),
                    ..partition
                };
                books(|b| b.pending.returned(value, partition));
                if let Some(pause) = pacer.after_send() {
                    rt.sleep(pause).await;
                }
            }
            // close(): wait for what is buffered, as Kafka's producer does, within the run.
            let left_ms = w.consume_until_ms.saturating_sub(rt.monotonic_ms());
            with_timeout(&rt, left_ms, producer.flush()).await;
        }
    }
}

/// Paces a workload producer as Kafka's `ThroughputThrottler` paces `kafka-producer-perf-test`
/// and the `VerifiableProducer` of Kafka's own system tests: every send adds the interval between
/// records to a sleep deficit, and the producer sleeps the deficit off once it reaches 2 ms (the
/// throttler's `MIN_SLEEP_NS`). An interval of 2 ms or more is slept after every send, as
/// before; above 500 records a second the records go out in bursts of two a wake-up (at 1,000 a
/// second: two records, then 2 ms), the rate unchanged and half the wake-ups.
#[derive(Debug)]
struct Pacer {
    interval: Duration,
    deficit: Duration,
}

impl Pacer {
    const MIN_SLEEP: Duration = Duration::from_millis(2);

    fn new(interval: Duration) -> Self {
        Pacer {
            interval,
            deficit: Duration::ZERO,
        }
    }

    /// How long to sleep after a send, if at all.
    fn after_send(&mut self) -> Option<Duration> {
        self.deficit += self.interval;
        (self.deficit >= Self::MIN_SLEEP).then(|| std::mem::take(&mut self.deficit))
    }
}

/// The partition of a keyless record whose send failed before the partitioner chose one.
const NOT_CHOSEN: i32 = -1;

/// A record of `value` stamped `timestamp` (the producer node's wall clock, as Kafka's producer
/// stamps `CreateTime`).
fn record(timestamp: i64, value: Value) -> NewRecord {
    NewRecord {
        timestamp,
        key: None,
        value: Some(value.to_bytes().to_vec()),
    }
}

/// Records a send's outcome in the history.
fn record_outcome(
    rt: &SimRuntime,
    w: &Workload,
    p: u32,
    value: Value,
    partition: Partition,
    result: Result<Option<i64>, SendError>,
) {
    let outcome = match result {
        Ok(Some(offset)) => SendOutcome::Acked { offset },
        Ok(None) if w.scenario.producer.acks_value() == 0 => SendOutcome::SentUnacknowledged,
        Ok(None) | Err(SendError::Unknown(_)) => SendOutcome::Unknown,
        Err(SendError::Failed(_)) => SendOutcome::Failed,
    };
    let at_ms = rt.monotonic_ms();
    books(|b| {
        b.pending.remove(value);
        b.history.sends.push(Send {
            producer: p,
            partition,
            value,
            outcome,
            at_ms,
        });
    });
}

async fn consumer_main(rt: SimRuntime, w: Arc<Workload>, c: u32, sessions: Arc<AtomicU32>) {
    let Some(spec) = &w.scenario.consumer else { return };
    if let Some(group_id) = &spec.group_id {
        return group_consumer_main(rt, w.clone(), c, sessions, group_id.clone()).await;
    }
    let start_ms = w.produce_until_ms - w.scenario.duration_s * 1_000 + spec.start_after_s * 1_000;
    rt.sleep(Duration::from_millis(start_ms.saturating_sub(rt.monotonic_ms())))
        .await;
    let session = sessions.fetch_add(1, Ordering::Relaxed);
    let config = ConsumerConfig {
        reset_to_earliest: spec.auto_offset_reset == "earliest",
        ..ConsumerConfig::default()
    };
    // Every partition of every topic assigned: a consumer per topic, polled together as one
    // Kafka consumer `assign()`ed them all is.
    let mut consumers: Vec<Consumer<SimRuntime>> = Vec::with_capacity(w.scenario.topics.len());
    for t in &w.scenario.topics {
        let t = t.get_ref();
        let mut consumer = Consumer::new(client(&rt, format!("consumer-{c}"), w.brokers), config.clone(), &t.name);
        for p in 0..t.partitions {
            consumer.assign(p as i32, None);
        }
        consumers.push(consumer);
    }
    let mut consumers: Vec<&mut Consumer<SimRuntime>> = consumers.iter_mut().collect();
    // Each poll's records as (partition, offset, value), read from the fetched bytes as the poll
    // goes (no `ConsumerRecord` built, no reference count taken), stamped when it returns.
    let mut read: Vec<(Partition, i64, Value)> = Vec::new();
    while rt.monotonic_ms() < w.consume_until_ms {
        read.clear();
        let polled = Consumer::poll_all_with(&mut consumers, |topic, index, r| {
            if let Some(value) = r.value.and_then(Value::from_bytes) {
                let topic = u16::try_from(topic).expect("validated: at most 16 topics");
                read.push((Partition { topic, index }, r.offset.0, value));
            }
        })
        .await;
        match polled {
            Ok(_) => {
                let at_ms = rt.monotonic_ms();
                books(|b| {
                    let h = &mut b.history;
                    for &(partition, offset, value) in &read {
                        h.polls.push(Poll {
                            consumer: c,
                            session,
                            partition,
                            offset,
                            value,
                            at_ms,
                        });
                        h.processed.push(Processed { consumer: c, value });
                    }
                });
            }
            Err(e) => {
                tracing::debug!(target: "workload", consumer = c, error = %e, "poll failed");
                rt.sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What the application commits when partitions are revoked: its positions, when it processes
/// what it polls before polling again (every polled record is processed by then).
struct CommitOnRevoke(bool);

impl RebalanceListener for CommitOnRevoke {
    fn on_partitions_revoked(
        &mut self,
        _revoked: &BTreeSet<TopicPartition>,
        positions: &BTreeMap<TopicPartition, i64>,
    ) -> BTreeMap<TopicPartition, i64> {
        if self.0 {
            positions.clone()
        } else {
            BTreeMap::new()
        }
    }
}

/// A consumer of the scenario's consumer group: polls, processes per the commit policy, and
/// records its polls, processing, accepted commits and assignments. A kill loses everything in
/// its memory (positions, the hand-off queue); on restart it joins as a new member.
async fn group_consumer_main(rt: SimRuntime, w: Arc<Workload>, c: u32, sessions: Arc<AtomicU32>, group_id: String) {
    let spec = w
        .scenario
        .consumer
        .as_ref()
        .expect("group consumers run with a [consumer]");
    let topics: Vec<&str> = w.scenario.topics.iter().map(|t| t.get_ref().name.as_str()).collect();
    let start_ms = w.produce_until_ms - w.scenario.duration_s * 1_000 + spec.start_after_s * 1_000;
    rt.sleep(Duration::from_millis(start_ms.saturating_sub(rt.monotonic_ms())))
        .await;
    let mut config = GroupConfig::new(&group_id);
    config.consumer = ConsumerConfig {
        reset_to_earliest: spec.auto_offset_reset == "earliest",
        ..ConsumerConfig::default()
    };
    config.session_timeout_ms = i32::try_from(spec.session_timeout_ms).expect("validated: at most 1800000");
    config.heartbeat_interval_ms = u64::from(spec.session_timeout_ms / 3).min(3_000);
    config.max_poll_interval_ms = 30_000;
    config.assignors = spec.assignors().expect("validated when the scenario was parsed");
    config.enable_auto_commit = spec.auto_commit();
    config.auto_commit_interval_ms = spec.auto_commit_interval_ms;
    let mut consumer = GroupConsumer::new(client(&rt, format!("consumer-{c}"), w.brokers), config);
    let policy = spec.commit;
    let commits_on_revoke = matches!(policy, CommitPolicy::AfterProcessing | CommitPolicy::BeforeProcessing);
    consumer.subscribe(&topics, Box::new(CommitOnRevoke(commits_on_revoke)));
    let processing = Duration::from_millis(spec.processing_ms);

    // commit = "auto": the application hands records to a worker and keeps polling.
    let queue: Rc<RefCell<VecDeque<Value>>> = Rc::default();
    if policy == CommitPolicy::Auto {
        let (rt, w, queue) = (rt.clone(), w.clone(), queue.clone());
        rt.clone().spawn(async move {
            while rt.monotonic_ms() < w.consume_until_ms {
                let next = queue.borrow_mut().pop_front();
                match next {
                    Some(value) => {
                        rt.sleep(processing).await;
                        books(|b| b.history.processed.push(Processed { consumer: c, value }));
                    }
                    None => rt.sleep(Duration::from_millis(1)).await,
                }
            }
        });
    }

    let mut session = sessions.fetch_add(1, Ordering::Relaxed);
    // The (member id, generation) of the latest assignment recorded. A generation number alone
    // may come back: a coordinator that forgets a group whose members all left starts it again
    // at generation 1, under new member ids.
    let mut generation_seen: Option<(String, i32)> = None;
    // Each poll's records as (partition, offset, value), read from the fetched bytes as the poll
    // goes (no `GroupRecord` built, no copy of the topic's name per record).
    let mut records: Vec<(Partition, i64, Value)> = Vec::new();
    while rt.monotonic_ms() < w.consume_until_ms {
        records.clear();
        let polled = consumer
            .poll_with(|topic, index, r| {
                if let Some(value) = r.value.and_then(Value::from_bytes) {
                    records.push((partition_of(&topics, topic, index), r.offset.0, value));
                }
            })
            .await;
        let at_ms = rt.monotonic_ms();
        let (member, generation) = consumer.generation();
        let seen = generation_seen.as_ref().map(|(m, g)| (m.as_str(), *g));
        if generation >= 0 && seen != Some((member, generation)) {
            // A new assignment: positions come from committed offsets, a new poll session.
            generation_seen = Some((member.to_string(), generation));
            session = sessions.fetch_add(1, Ordering::Relaxed);
            let assignment = Assignment {
                consumer: c,
                group: group_id.clone(),
                member: member.to_string(),
                generation,
                partitions: consumer
                    .assignment()
                    .iter()
                    .map(|tp| partition_of(&topics, &tp.topic, tp.partition))
                    .collect(),
                at_ms,
                session,
            };
            books(|b| b.history.assignments.push(assignment));
        }
        record_commits(c, &group_id, &topics, &mut consumer);
        if let Err(e) = polled {
            tracing::debug!(target: "workload", consumer = c, error = %e, "group poll failed");
            rt.sleep(Duration::from_millis(100)).await;
            continue;
        }
        books(|b| {
            for &(partition, offset, value) in &records {
                b.history.polls.push(Poll {
                    consumer: c,
                    session,
                    partition,
                    offset,
                    value,
                    at_ms,
                });
            }
        });
        if policy == CommitPolicy::BeforeProcessing && !records.is_empty() {
            let positions = consumer.positions();
            if let Err(e) = consumer.commit_sync(&positions).await {
                tracing::debug!(target: "workload", consumer = c, error = %e, "commit failed");
            }
            record_commits(c, &group_id, &topics, &mut consumer);
        }
        match policy {
            CommitPolicy::Auto => queue.borrow_mut().extend(records.iter().map(|r| r.2)),
            _ => {
                for &(_, _, value) in &records {
                    if !processing.is_zero() {
                        rt.sleep(processing).await;
                    }
                    books(|b| b.history.processed.push(Processed { consumer: c, value }));
                }
            }
        }
        if policy == CommitPolicy::AfterProcessing && !records.is_empty() {
            let positions = consumer.positions();
            if let Err(e) = consumer.commit_sync(&positions).await {
                tracing::debug!(target: "workload", consumer = c, error = %e, "commit failed");
            }
            record_commits(c, &group_id, &topics, &mut consumer);
        }
    }
}

/// Partition `index` of the topic named `topic`, one of `topics` (the scenario's, in order).
fn partition_of(topics: &[&str], topic: &str, index: i32) -> Partition {
    let place = match topics {
        [_] => 0,
        _ => topics.iter().position(|&t| t == topic).unwrap_or(usize::MAX),
    };
    Partition {
        topic: u16::try_from(place).unwrap_or(u16::MAX),
        index,
    }
}

/// The commits the coordinator accepted from `consumer` since the last call, into the history,
/// each at the time its answer arrived (commits made inside a poll are taken after it returns).
fn record_commits(c: u32, group: &str, topics: &[&str], consumer: &mut GroupConsumer<SimRuntime>) {
    let commits = consumer.take_commits();
    books(|b| {
        for (at_ms, offsets) in commits {
            for (tp, offset) in offsets {
                b.history.commits.push(Commit {
                    consumer: c,
                    group: group.to_string(),
                    partition: partition_of(topics, &tp.topic, tp.partition),
                    offset,
                    at_ms,
                });
            }
        }
    });
}

/// Creates the topics with the scenario's configs, in order, retrying each until the cluster
/// answers.
async fn setup(rt: SimRuntime, w: Arc<Workload>) {
    let mut cluster = client(&rt, "admin".into(), w.brokers);
    'topics: for t in &w.scenario.topics {
        let t = t.get_ref();
        let configs: Vec<(String, String)> = [
            ("min.insync.replicas", i64::from(t.min_insync_replicas)),
            ("retention.ms", t.retention_ms),
            ("retention.bytes", t.retention_bytes),
            ("segment.bytes", t.segment_bytes),
            ("flush.messages", t.flush_messages),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(
            t.unclean_leader_election
                .then(|| ("unclean.leader.election.enable".to_string(), "true".to_string())),
        )
        .chain(t.flush_ms.map(|ms| ("flush.ms".to_string(), ms.to_string())))
        .collect();
        let configs: Vec<(&str, &str)> = configs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for attempt in 0..600 {
            match cluster
                .create_topic(&t.name, t.partitions as i32, t.replication_factor as i16, &configs)
                .await
            {
                Ok(()) => continue 'topics,
                Err(e) => {
                    tracing::debug!(target: "workload", attempt, error = %e, "create topic failed; retrying");
                    rt.sleep(Duration::from_millis(100)).await;
                }
            }
        }
        panic!("topic {:?} could not be created in 60 s of virtual time", t.name);
    }
}

/// Reads every partition of every topic from its log start to its high watermark.
async fn final_read(rt: SimRuntime, w: Arc<Workload>) -> BTreeMap<Partition, FinalRead> {
    let mut reads = BTreeMap::new();
    for (k, t) in w.scenario.topics.iter().enumerate() {
        let t = t.get_ref();
        let topic = u16::try_from(k).expect("validated: at most 16 topics");
        for index in 0..t.partitions as i32 {
            let p = Partition { topic, index };
            for _attempt in 0..100 {
                match read_partition(&rt, &w, &t.name, index).await {
                    Ok(read) => {
                        reads.insert(p, read);
                        break;
                    }
                    Err(e) => {
                        tracing::info!(target: "workload", partition = index, error = %e, "final read failed; retrying");
                        rt.sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
    }
    reads
}

async fn read_partition(rt: &SimRuntime, w: &Workload, topic: &str, p: i32) -> Result<FinalRead, String> {
    let earliest = ConsumerConfig {
        reset_to_earliest: true,
        fetch_max_wait_ms: 0,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(client(rt, "final-read".into(), w.brokers), earliest, topic);
    consumer.assign(p, None);
    let mut read = FinalRead {
        log_start_offset: -1,
        high_watermark: -1,
        records: Vec::new(),
    };
    let mut quiet_polls = 0;
    // Bounded: a partition of N records takes about N / (records per fetch) polls.
    for _ in 0..100_000 {
        // The offset of the poll's first record, and the records straight into the read (the
        // value of each, read from the fetched bytes: no `ConsumerRecord` built).
        let mut first = None;
        let records = &mut read.records;
        let polled = consumer
            .poll_with(|_, r| {
                first.get_or_insert(r.offset.0);
                if let Some(v) = r.value.and_then(Value::from_bytes) {
                    records.push((r.offset.0, v));
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        if read.log_start_offset < 0 {
            read.log_start_offset = first.unwrap_or(consumer.position(p).unwrap_or(0));
        }
        if !polled.resets.is_empty() {
            return Err("the log start moved during the final read".into());
        }
        if polled.records == 0 {
            quiet_polls += 1;
            if quiet_polls >= 3 {
                read.high_watermark = consumer.position(p).unwrap_or(0);
                return Ok(read);
            }
            continue;
        }
        quiet_polls = 0;
    }
    Err("the final read did not finish".into())
}

/// About how many records the scenario's producers send (their rate for the duration): the
/// history's vectors start with room for as many (at most 131,072: a few MB), instead of
/// copying themselves as they double.
fn expected_sends(s: &Scenario) -> usize {
    let per_producer = u64::from(s.producer.rate_per_s).saturating_mul(s.duration_s);
    let all = per_producer.saturating_mul(u64::from(s.producer.count));
    usize::try_from(all.min(1 << 17)).unwrap_or(1 << 17)
}

async fn simulate(world: World, scenario: Scenario) -> Simulated {
    let s = &scenario;
    books(|b| {
        *b = Books {
            history: History::with_room_for(expected_sends(s)),
            pending: Pending::default(),
        }
    });
    let replicated = cluster::is_cluster(s);
    let (brokers, coordinators): (Vec<NodeIndex>, Vec<NodeIndex>) = if replicated {
        cluster::add_nodes(&world, s)
    } else {
        let brokers = (0..s.cluster.brokers as usize)
            .map(|i| world.add_node(&format!("broker-{i}"), move |rt| broker_main(rt, i)))
            .collect();
        (brokers, Vec::new())
    };
    if let Some(e) = &s.elastic {
        elastic::hold_back(&world, &brokers, e);
    }
    if let Some(q) = &s.quorum {
        quorum::hold_back(&world, &coordinators, q);
    }
    // A cluster needs its coordinator quorum elected and its brokers registered first.
    let setup_ms = if replicated { 5_000 } else { 2_000 };
    let w = Arc::new(Workload {
        scenario: scenario.clone(),
        brokers: brokers.len(),
        created: Arc::default(),
        produce_until_ms: setup_ms + s.duration_s * 1_000,
        consume_until_ms: setup_ms + (s.duration_s + s.heal_s) * 1_000,
    });
    acl::set_secured(s.acl.is_some());
    // A node lives while its main runs: the admin node only hosts tasks spawned on it.
    let admin = world.add_node("admin", |_rt| std::future::pending::<()>());
    {
        let w = w.clone();
        world
            .spawn_on(admin, move |rt| setup(rt, w))
            .await
            .expect("the admin node is never killed");
        if s.acl.is_some() {
            let (s, brokers) = (s.clone(), brokers.len());
            world
                .spawn_on(admin, move |rt| acl::grant_all(rt, s, brokers))
                .await
                .expect("the admin node is never killed");
        }
    }
    madsim::time::sleep(Duration::from_millis(setup_ms.saturating_sub(monotonic_ms()))).await;

    let mut producers = Vec::new();
    for p in 0..s.producer.count {
        let w = w.clone();
        let name = format!("producer-{p}");
        producers.push(world.add_node(&name, move |rt| producer_main(rt, w.clone(), p)));
    }
    let mut consumers = Vec::new();
    if let Some(consumer) = &s.consumer {
        for c in 0..consumer.count {
            let (w, sessions) = (w.clone(), Arc::new(AtomicU32::new(0)));
            let name = format!("consumer-{c}");
            consumers.push(world.add_node(&name, move |rt| consumer_main(rt, w.clone(), c, sessions.clone())));
        }
    }

    let resolve = |name: &str| -> Option<NodeIndex> {
        let nth = |prefix: &str, nodes: &[NodeIndex]| {
            name.strip_prefix(prefix)
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| nodes.get(n).copied())
        };
        let topic = &s.topic().name;
        match name {
            "leader" if replicated => cluster::current_leader(topic),
            "follower" if replicated => cluster::current_follower(topic),
            "controller" if replicated => cluster::current_controller(),
            "leader" | "controller" => brokers.first().copied(),
            _ => nth("broker-", &brokers)
                .or_else(|| nth("coordinator-", &coordinators))
                .or_else(|| nth("producer-", &producers))
                .or_else(|| nth("consumer-", &consumers)),
        }
    };
    let mut nemesis = Nemesis::new(s, world.seed());
    let acl_windows = s.acl.as_ref().map(|_| {
        let (s, brokers, start_ms, until_ms) = (s.clone(), w.brokers, monotonic_ms(), w.produce_until_ms);
        world.spawn_on(admin, move |rt| acl::drive(rt, s, brokers, start_ms, until_ms))
    });
    let mut moves = None;
    let mut quorum_seen = None;
    match &s.elastic {
        Some(e) => {
            let start_ms = monotonic_ms();
            // The admin keeps re-planning through the heal (the faults end, the cluster is
            // healthy, moves slowed by crashes or a throttle still finish), until the final read
            // is near: an operator does not give up on a rebalance when the faults stop.
            let until_ms = w.consume_until_ms.saturating_sub(elastic::FINAL_READ_MARGIN_MS);
            let ((), window) = tokio::join!(
                async {
                    nemesis.play(&world, &resolve).await;
                    nemesis.heal(&world);
                    cluster::restart_stopped_coordinators(&world, &coordinators);
                },
                elastic::drive(&world, &brokers, admin, e, start_ms, until_ms)
            );
            // Before anything changes: until brokers join, or (shrinking) until the moves start.
            let changes_at_s = if e.join_at_s > 0.0 {
                e.join_at_s
            } else {
                e.rebalance_at_s
            };
            let join_ms = start_ms + (changes_at_s * 1_000.0) as u64;
            moves = Some((join_ms, window));
        }
        None => {
            match &s.quorum {
                Some(q) => {
                    let addrs = cluster::coordinator_addrs(s);
                    let ((), seen) = tokio::join!(
                        nemesis.play(&world, &resolve),
                        quorum::drive(
                            &world,
                            &coordinators,
                            admin,
                            q,
                            addrs,
                            monotonic_ms(),
                            w.produce_until_ms
                        )
                    );
                    quorum_seen = Some(seen);
                }
                None => nemesis.play(&world, &resolve).await,
            }
            nemesis.heal(&world);
            cluster::restart_stopped_coordinators(&world, &coordinators);
        }
    }
    let acl_windows = match acl_windows {
        Some(driver) => Some(driver.await.expect("the admin node is never killed")),
        None => None,
    };
    let faults = nemesis.events().to_vec();
    let played = nemesis.played().to_vec();

    let drain = Duration::from_millis(w.consume_until_ms).saturating_sub(Duration::from_millis(monotonic_ms()));
    madsim::time::sleep(drain + Duration::from_millis(500)).await;
    let reads = {
        let w = w.clone();
        world
            .spawn_on(admin, move |rt| final_read(rt, w))
            .await
            .expect("the admin node is never killed")
    };
    let (mut history, unfinished) = books(|b| (std::mem::take(&mut b.history), b.pending.take()));
    for (value, (partition, returned)) in unfinished {
        // Handed to a producer that died before an outcome: never acknowledged. An async send had
        // already returned to the application; a sync one had not (the application died waiting).
        let outcome = if returned {
            SendOutcome::Abandoned
        } else {
            SendOutcome::Unknown
        };
        history.sends.push(Send {
            producer: value.producer(),
            partition,
            value,
            outcome,
            at_ms: monotonic_ms(),
        });
    }
    history.final_reads = reads;
    history.topics = s.topics.iter().map(|t| t.get_ref().name.clone()).collect();
    if let Some(mut seen) = quorum_seen {
        let addrs = cluster::coordinator_addrs(s);
        seen.read = world
            .spawn_on(admin, move |rt| quorum::read_back(rt, addrs))
            .await
            .expect("the admin node is never killed");
        history.quorum = Some(seen);
    }
    if replicated {
        (history.leaders, history.controllers) = cluster::take_role_observations();
        history.replicas = (s.topics.iter())
            .flat_map(|t| cluster::collect_replicas(&world, &t.get_ref().name, t.get_ref().partitions))
            .collect();
        let t = s.topic();
        history.balance = s
            .elastic
            .as_ref()
            .and_then(|e| elastic::observe_balance(&t.name, e.target_brokers));
        history.acl = s.acl.as_ref().map(|a| crate::checker::acl::AclObservation {
            bound_ms: a.bound_ms,
            windows: acl_windows.clone().unwrap_or_default(),
            created_ms: std::mem::take(&mut *lock(&w.created)),
            replica_records: acl::collect_records(&world, &t.name, t.partitions),
        });
    }
    if let Some((join_ms, window)) = moves {
        let acked: Vec<u64> = history
            .sends
            .iter()
            .filter(|s| matches!(s.outcome, SendOutcome::Acked { .. }))
            .map(|s| s.at_ms)
            .collect();
        // Producers stop at the heal: a move window running into it counts up to there.
        let producing = (window.0, window.1.min(w.produce_until_ms));
        if let Some((before, during)) = elastic::producer_rates(&acked, join_ms, producing) {
            tracing::info!(target: "elastic", before = format!("{before:.1}"), during = format!("{during:.1}"),
                ratio = format!("{:.2}", during / before), moves_ms = window.1 - window.0,
                "producer acks per virtual second before the join and while moving");
        }
    }
    history.tracks_processing = s.consumer.is_some();
    history.consumers_drained = s.consumer.is_some();
    Simulated {
        history,
        faults,
        played,
        simulated_ms: monotonic_ms(),
        produce_until_ms: w.produce_until_ms,
    }
}

/// Virtual ms since the simulation started (as `SimRuntime::monotonic_ms`).
fn monotonic_ms() -> u64 {
    madsim::time::TimeHandle::current().elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_seed(file: &str, seed: u64) -> RunResult {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios")
            .join(file);
        let scenario = Scenario::load(&path).expect("the scenario loads");
        let result = run_scenario(
            &scenario,
            &RunOptions {
                seed,
                print_trace: false,
                trace_filter: None,
            },
        );
        assert!(result.error.is_none(), "seed {seed}: {:?}", result.error);
        result
    }

    /// `scenarios/topics/retention_applies_per_topic_short_one_loses_unread.toml`: two topics
    /// written in turn, a consumer 25 s late. Every unseen record is of `short` (retention.ms 5 s,
    /// so the findings name `short-N`), and every acknowledged record of `kept` (a week) was
    /// polled: each topic's retention is its own.
    #[test]
    fn each_topic_keeps_to_its_own_retention() {
        for seed in 0..2 {
            let result = run_seed("topics/retention_applies_per_topic_short_one_loses_unread.toml", seed);
            let h = &result.history;
            let unseen: Vec<&str> = (result.report.findings.iter())
                .filter(|f| f.kind == crate::checker::AnomalyKind::Unseen)
                .map(|f| f.detail.as_str())
                .collect();
            let polled: std::collections::HashSet<Value> = h.polls.iter().map(|p| p.value).collect();
            let kept: Vec<&Send> = (h.sends.iter())
                .filter(|s| s.partition.topic == 0 && matches!(s.outcome, SendOutcome::Acked { .. }))
                .collect();
            let short = h.sends.iter().filter(|s| s.partition.topic == 1).count();
            println!(
                "seed {seed}: {} unseen findings, {} acknowledged sends to kept, {short} sends to short",
                unseen.len(),
                kept.len()
            );
            assert!(
                !unseen.is_empty() && !kept.is_empty() && short > 0,
                "seed {seed}: compared nothing"
            );
            assert!(
                unseen.iter().all(|d| d.contains("partition short-")),
                "seed {seed}: {:?}",
                unseen.iter().find(|d| !d.contains("partition short-"))
            );
            assert!(
                kept.iter().all(|s| polled.contains(&s.value)),
                "seed {seed}: a record of kept went unread"
            );
        }
    }

    /// `scenarios/topics/acks1_leader_crashes_lose_acknowledged_in_both_topics.toml`: the
    /// lost-write findings of a few seeds name partitions of both topics, and each names a
    /// partition the scenario has.
    #[test]
    fn lost_writes_are_found_in_each_topic() {
        let mut topics_named = BTreeSet::new();
        let mut lost = 0;
        for seed in 0..3 {
            let result = run_seed(
                "topics/acks1_leader_crashes_lose_acknowledged_in_both_topics.toml",
                seed,
            );
            for f in &result.report.findings {
                if f.kind != crate::checker::AnomalyKind::LostWrite {
                    continue;
                }
                lost += 1;
                let named = ["orders", "payments"]
                    .into_iter()
                    .find(|t| (0..3).any(|p| f.detail.contains(&format!("partition {t}-{p} "))));
                topics_named.insert(
                    named.unwrap_or_else(|| panic!("seed {seed}: no partition of the scenario in {}", f.detail)),
                );
            }
        }
        println!("{lost} lost-write findings over seeds 0..3, of topics {topics_named:?}");
        assert_eq!(topics_named, BTreeSet::from(["orders", "payments"]));
    }

    /// `scenarios/topics/group_reads_two_topics_and_an_idle_one_through_broker_crashes.toml`: the
    /// group's members are assigned partitions of all three topics (the idle one too), they poll
    /// records of both written topics, none of the idle one, and the checker finds nothing.
    #[test]
    fn a_group_reads_every_subscribed_topic() {
        for seed in 0..2 {
            let result = run_seed(
                "topics/group_reads_two_topics_and_an_idle_one_through_broker_crashes.toml",
                seed,
            );
            let h = &result.history;
            let assigned: BTreeSet<u16> = h
                .assignments
                .iter()
                .flat_map(|a| a.partitions.iter().map(|p| p.topic))
                .collect();
            let polled: BTreeMap<u16, usize> = h.polls.iter().fold(BTreeMap::new(), |mut m, p| {
                *m.entry(p.partition.topic).or_default() += 1;
                m
            });
            println!(
                "seed {seed}: topics assigned {assigned:?}, polls per topic {polled:?}, {} findings",
                result.report.findings.len()
            );
            assert_eq!(assigned, BTreeSet::from([0, 1, 2]), "seed {seed}");
            assert_eq!(polled.keys().copied().collect::<Vec<_>>(), [0, 1], "seed {seed}");
            assert!(
                result.report.findings.is_empty(),
                "seed {seed}: {}",
                result.report.summary()
            );
        }
    }

    /// `scenarios/replication/consumer_reads_on_while_one_leader_is_cut_off.toml`: while
    /// consumer-0 cannot reach broker-1, it keeps reading the partitions the other two brokers
    /// lead. The longest time without a poll that brought records, over the cut, stays under a
    /// second (records arrive every few ms). Awaiting every leader's answer in each poll made it
    /// 5 s and more: the cut-off leader's Fetch, then its connect, each waited out
    /// request.timeout.ms.
    #[test]
    fn a_consumer_cut_off_from_one_leader_reads_the_others() {
        for seed in 0..2 {
            let result = run_seed("replication/consumer_reads_on_while_one_leader_is_cut_off.toml", seed);
            let at = |what: &str| {
                let event = result.faults.iter().find(|f| f.what == what);
                event
                    .unwrap_or_else(|| panic!("seed {seed}: no {what} in {:?}", result.faults))
                    .at_ms
            };
            let (cut, mended) = (at("partition-halves"), at("repair-halves"));
            let mut polled: Vec<u64> = result.history.polls.iter().map(|p| p.at_ms).collect();
            polled.retain(|&t| cut <= t && t <= mended);
            polled.dedup();
            let mut partitions: BTreeMap<i32, (u64, u64, usize)> = BTreeMap::new();
            for p in result
                .history
                .polls
                .iter()
                .filter(|p| cut <= p.at_ms && p.at_ms <= mended)
            {
                let e = partitions.entry(p.partition.index).or_insert((p.at_ms, p.at_ms, 0));
                e.1 = p.at_ms;
                e.2 += 1;
            }
            let mut gaps: Vec<u64> = polled.windows(2).map(|w| w[1] - w[0]).collect();
            gaps.push(polled.first().map_or(mended - cut, |first| first - cut));
            gaps.push(polled.last().map_or(mended - cut, |last| mended - last));
            let longest = gaps.iter().copied().max().unwrap_or(0);
            println!(
                "seed {seed}: cut {cut}..{mended} ms, {} polls with records over it, of partitions \
                 {partitions:?}, longest without one {longest} ms",
                polled.len()
            );
            assert!(polled.len() >= 10, "seed {seed}: the consumer read during the cut");
            let read_late = partitions.values().filter(|&&(_, last, _)| last > cut + 1_000).count();
            assert!(
                (1..6).contains(&read_late),
                "seed {seed}: {read_late} partitions read past the cut's first second: the \
                 cut-off leader's must not be"
            );
            assert!(
                longest < 1_000,
                "seed {seed}: {longest} ms without records during the cut"
            );
        }
    }

    /// The sleeps of `sends` sends: one entry per send, `None` for a send not followed by one.
    fn sleeps(interval_ms: u64, sends: usize) -> Vec<Option<u64>> {
        let mut pacer = Pacer::new(Duration::from_millis(interval_ms));
        (0..sends)
            .map(|_| pacer.after_send().map(|d| d.as_millis() as u64))
            .collect()
    }

    #[test]
    fn pacer_sleeps_every_interval_of_two_ms_or_more_after_each_send() {
        for interval in [2, 5, 50, 1_000] {
            assert_eq!(sleeps(interval, 4), vec![Some(interval); 4], "interval {interval} ms");
        }
    }

    #[test]
    fn pacer_sends_two_records_a_wake_up_at_one_ms_keeping_the_rate() {
        let s = sleeps(1, 1_000);
        assert_eq!(s[..4], [None, Some(2), None, Some(2)]);
        let slept: u64 = s.iter().flatten().sum();
        let wake_ups = s.iter().flatten().count();
        assert_eq!(
            (slept, wake_ups),
            (1_000, 500),
            "1,000 sends at 1 ms: 1 s slept in 500 wake-ups"
        );
    }
}
