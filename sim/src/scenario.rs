//! Scenario files: the cluster, topics, client configurations, workload, faults and the outcome a
//! run must have. Parsed strictly: an unknown key, a bad value or an impossible topology is an
//! error naming the file, the line and the key, and nothing runs.
//!
//! Client settings use Kafka's names as quoted TOML keys (`"linger.ms" = 5`), so a scenario reads
//! like the client configuration it models. The format, by example (every key shown; most have
//! defaults):
//!
//! ```toml
//! description = "acks=all with min ISR 2 keeps every acknowledged write through a leader crash"
//! rule = "1 acknowledgement"   # optional: the no-loss rule it shows (the README's rules table)
//! seed = 17               # optional: pins the scenario to this seed (a shrunk failing case)
//! duration_s = 60          # workload and faults
//! heal_s = 20              # faults healed, consumers drain, then the final read
//!
//! [cluster]
//! brokers = 3
//! coordinators = 3
//!
//! [topic]
//! name = "events"
//! partitions = 3
//! "replication.factor" = 3
//! "min.insync.replicas" = 2
//! "retention.ms" = 604800000
//! "retention.bytes" = -1
//! "segment.bytes" = 1048576
//! "flush.messages" = -1
//! "unclean.leader.election.enable" = false
//! # Several topics: `[[topic]]` tables instead (1 to 16, distinct names), each with the keys
//! # above. Producers write them in turn (see producer.topics), consumers read them all (a group
//! # subscribes to every one). [elastic], [acl] and [quorum] scenarios have one topic; a fault
//! # node "leader" or "follower" is of the first topic's partition 0.
//!
//! [broker]
//! "replica.lag.time.max.ms" = 30000   # a follower this far behind leaves the ISR
//! "min.insync.replicas" = 1            # the brokers' default (__consumer_offsets takes it)
//! "log.flush.interval.ms" = 1000       # the brokers' default flush.ms (unset: never)
//! "offsets.topic.num.partitions" = 50  # __consumer_offsets (clusters only)
//! "offsets.topic.replication.factor" = 3
//! # negative controls, never Kafka settings (each documented on `Broker` below):
//! "mutant.follower.truncate.to.high.watermark" = false  # pre-KIP-101 truncation
//! "mutant.ignore.broker.restarts" = false    # no broker epochs (KIP-380)
//! "mutant.every.broker.coordinates" = false  # groups without __consumer_offsets
//! "mutant.reuse.leader.epoch" = false        # elections keep the leader epoch
//!
//! [producer]
//! count = 2
//! mode = "sync"            # or "async": sends return at once, results arrive later
//! acks = "all"             # "all" | "1" | "0"
//! "linger.ms" = 5
//! "batch.size" = 16384
//! "enable.idempotence" = true
//! retries = 2147483647
//! "delivery.timeout.ms" = 120000
//! "buffer.memory" = 33554432                   # async: bytes buffered at most
//! "max.block.ms" = 60000                       # async: send() waits this long for room
//! "max.in.flight.requests.per.connection" = 5  # async: at most 5 with idempotence
//! rate_per_s = 100         # per producer
//! partitioner = "round-robin"  # the workload picks partitions in turn (Kafka's RoundRobinPartitioner),
//!                          # or "sticky": keyless records, the producer's built-in partitioner
//!                          # (KIP-794 sticky) picks, so records batch (async only)
//! topics = ["events"]      # the topics written, a record each in turn (unset: every topic)
//!
//! [consumer]
//! count = 2
//! group = "checker"
//! commit = "after-processing"   # "before-processing" | "auto" | "none"
//! "auto.commit.interval.ms" = 5000
//! "auto.offset.reset" = "earliest"
//! start_after_s = 0        # a consumer that starts late lags behind retention
//! "group.id" = "app"       # set: the consumers form one consumer group (subscribe)
//! "enable.auto.commit" = false              # defaults to commit = "auto"
//! "session.timeout.ms" = 10000
//! "partition.assignment.strategy" = "range" # or "roundrobin", or "range,roundrobin"
//! processing_ms = 0        # per record; with commit = "auto" processing runs behind polling
//!
//! [faults]
//! profile = "none"         # or crashes | crash-storm | partitions | disk | mixed | network | swarm
//!                          # (`crate::nemesis::PROFILES`; swarm: each seed its own subset of fault kinds
//!                          # and rates, `crate::nemesis::ActiveProfile`)
//! profile_timer_only = false  # true: wake and draw as the profile would, play only the schedule
//! [[faults.schedule]]
//! at_s = 20
//! fault = "crash"          # crash | kill | disk-lost | pause | isolate | disk-full | sync-fail | clock-skew
//!                          # | duplicate-frames | corrupt-frames | bridge | swizzle-clog
//! node = "leader"          # "leader", "follower" (of partition 0), "controller", "broker-N", "coordinator-N", "producer-N", "consumer-N"
//!                          # (bridge: the node in the middle; swizzle-clog: the first node clogged)
//! heal_after_s = 5         # the opposite fault (restart, resume, repair, ...) after this long
//! rate = 0.05              # duplicate-frames, corrupt-frames only: share of the node's frames hit
//! # Recorded random faults (what `gregor-sim shrink` writes), by node name:
//! # fault = "partition-halves" with sides = [["broker-0"], ["broker-1", "coordinator-0"]];
//! # fault = "bridge" with sides = [...]; fault = "swizzle-clog" with order = [...], unclog = [...]
//!
//! [elastic]               # optional: brokers join or leave while the workload runs
//! initial_brokers = 3      # brokers 0..3 run from the start; the others join at join_at_s
//! join_at_s = 10
//! rebalance_at_s = 15      # an admin submits the balancing planner's moves over brokers
//! target_brokers = 5       # 0..target_brokers (AlterPartitionReassignments, retried until done);
//!                          # brokers past the target are stopped once no replica is left on them
//! "mutant.switch.before.isr" = false  # negative control: moves complete before the new replicas catch up
//! "auto.rebalance.enable" = false      # the controller balances by itself; no admin submits moves
//!                          # (rebalance_at_s is then unused; target_brokers must be all brokers)
//! "leader.imbalance.check.interval.seconds" = 300  # the controller's preferred leader elections:
//! "leader.imbalance.per.broker.percentage" = 10     # how often, and above which imbalance (Kafka's)
//!
//! [quorum]                # optional (clusters only): the coordinator quorum is reconfigured
//! initial_coordinators = 3 # coordinators 1..=3 start as the quorum; the others are held back,
//! replace_at_s = 10        # start at replace_at_s, join as learners and are promoted one at a
//! remove = 1               # time; then coordinator `remove` is removed from the quorum and stopped
//!
//! [acl]                   # optional (clusters only): SASL PLAIN and an authorizer on every broker
//! toggled_producers = 1    # producers 0..N (User:producer-N) lose and regain Write on the topic;
//!                          # the others keep it; brokers and the harness log in as User:admin (super user)
//! granted_s = 4            # an ACL driver revokes after this long granted,
//! revoked_s = 4            # and grants again after this long revoked (answered DeleteAcls / CreateAcls)
//! bound_ms = 2500          # the propagation bound (README): after an answered revocation + this,
//!                          # no record its principal creates may appear in any replica's log
//! "mutant.ignore.revocations" = false  # negative control: broker caches never drop a binding
//!
//! [expect]
//! outcome = "no-anomalies" # or "anomaly", with:
//! anomaly = "lost-write"   # the anomaly a negative control must produce
//! min_share = 0.95         # in at least this share of seeds (the canary sets its own)
//! require = ["leader-failover-under-load"]  # hard states some seed of the sweep must reach
//!                          # (`crate::coverage::State`); the sweep fails naming any never reached
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// A scenario as written, validated.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(skip)]
    pub name: String,
    pub description: String,
    /// The no-loss rule the scenario shows, for the rules table (`gregor-sim run --markdown`):
    /// e.g. "1 acknowledgement". Optional.
    #[serde(default)]
    pub rule: Option<String>,
    /// Pins the scenario to this one seed: `run` and `check-determinism` run only it and
    /// `replay` defaults to it (a shrunk failing case, `gregor-sim shrink`). Optional. A seed past
    /// `i64::MAX` (campaigns drew 64-bit seeds before) does not fit a TOML integer: write it as a
    /// string, `seed = "10048716408039069478"`.
    #[serde(
        default,
        deserialize_with = "seed_number_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub seed: Option<u64>,
    #[serde(default = "defaults::duration_s")]
    pub duration_s: u64,
    #[serde(default = "defaults::heal_s")]
    pub heal_s: u64,
    #[serde(default)]
    pub cluster: Cluster,
    #[serde(default)]
    pub broker: Broker,
    /// One `[topic]`, or several as `[[topic]]` (distinct names): the first is the one
    /// single-topic features (`[elastic]`, `[acl]`, `[quorum]`) use.
    #[serde(
        rename = "topic",
        deserialize_with = "one_topic_or_many",
        serialize_with = "one_topic_or_many_out"
    )]
    pub topics: Vec<Spanned<Topic>>,
    pub producer: Producer,
    #[serde(default)]
    pub consumer: Option<Consumer>,
    #[serde(default)]
    pub faults: Faults,
    #[serde(default)]
    pub elastic: Option<Elastic>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<Acl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<Quorum>,
    pub expect: Spanned<Expect>,
}

/// A coordinator node replaced (see the module example): the held-back coordinators join as
/// learners and are promoted, then one of the initial ones is removed and stopped, all through
/// the coordinators' membership request. The checker's `lost-coordinator-write` compares every
/// acknowledged write of a probe client with the coordinator's tree at the end.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Quorum {
    pub initial_coordinators: u32,
    pub replace_at_s: f64,
    /// The id (1-based) of the coordinator removed.
    pub remove: u64,
}

/// Authentication and ACLs racing the workload (see the module example): producers log in with
/// SASL PLAIN as `User:producer-N`, and a driver revokes and grants Write for the toggled ones
/// while the nemesis runs. The checker's `revoked-write` ([`crate::checker::acl`]) compares every
/// replica's log against the revocations the driver saw answered.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Acl {
    #[serde(default = "defaults::one")]
    pub toggled_producers: u32,
    pub granted_s: f64,
    pub revoked_s: f64,
    pub bound_ms: u64,
    /// Simulator-only mutant (a negative control): brokers' ACL caches ignore revocations.
    #[serde(rename = "mutant.ignore.revocations", default)]
    pub mutant_ignore_revocations: bool,
}

/// Brokers joining and leaving during the run (see the module example). With it, the controller
/// runs preferred leader elections (`auto.leader.rebalance.enable`) and the checker compares
/// the final replica and leader counts of the target brokers (`unbalanced`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    pub initial_brokers: u32,
    #[serde(default)]
    pub join_at_s: f64,
    pub rebalance_at_s: f64,
    pub target_brokers: u32,
    /// Simulator-only mutant (a negative control): a reassignment switches to its target before
    /// the new replicas are in the ISR.
    #[serde(rename = "mutant.switch.before.isr", default)]
    pub mutant_switch_before_isr: bool,
    /// The controller's `auto.rebalance.enable`: it runs the planner itself when brokers join,
    /// and the admin submits nothing.
    #[serde(rename = "auto.rebalance.enable", default)]
    pub auto_rebalance: bool,
    /// The controller's `leader.imbalance.check.interval.seconds` (Kafka's default 300, longer
    /// than any scenario: the balanced scenarios set it).
    #[serde(
        rename = "leader.imbalance.check.interval.seconds",
        default = "defaults::leader_imbalance_check_interval_s"
    )]
    pub leader_imbalance_check_interval_s: u64,
    /// The controller's `leader.imbalance.per.broker.percentage` (Kafka's default 10).
    #[serde(
        rename = "leader.imbalance.per.broker.percentage",
        default = "defaults::leader_imbalance_per_broker_percentage"
    )]
    pub leader_imbalance_per_broker_percentage: u32,
}

/// A pinned seed: a TOML integer, or a string holding any u64 (TOML integers are signed).
fn seed_number_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Seed {
        Number(u64),
        Text(String),
    }
    match Option::<Seed>::deserialize(d)? {
        None => Ok(None),
        Some(Seed::Number(n)) => Ok(Some(n)),
        Some(Seed::Text(t)) => t
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("seed {t:?} is not an unsigned 64-bit integer"))),
    }
}

/// `[topic]` (one table) or `[[topic]]` (an array of tables), as a list. Each topic keeps its
/// span for errors; a single table's is the span of the whole value.
fn one_topic_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Spanned<Topic>>, D::Error> {
    struct OneOrMany(Vec<Spanned<Topic>>);
    impl<'de> Deserialize<'de> for OneOrMany {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = OneOrMany;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a [topic] table or [[topic]] tables")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<OneOrMany, A::Error> {
                    let topic = Topic::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                    Ok(OneOrMany(vec![Spanned::new(0..0, topic)]))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                    let mut topics = Vec::new();
                    while let Some(topic) = seq.next_element::<Spanned<Topic>>()? {
                        topics.push(topic);
                    }
                    Ok(OneOrMany(topics))
                }
            }
            d.deserialize_any(Visit)
        }
    }
    let spanned = Spanned::<OneOrMany>::deserialize(d)?;
    let span = spanned.span();
    let mut topics = spanned.into_inner().0;
    if let [one] = topics.as_mut_slice() {
        if one.span() == (0..0) {
            *one = Spanned::new(span, one.get_ref().clone());
        }
    }
    Ok(topics)
}

/// The topics as they were written: one table when there is one.
fn one_topic_or_many_out<S: serde::Serializer>(topics: &[Spanned<Topic>], s: S) -> Result<S::Ok, S::Error> {
    match topics {
        [one] => one.get_ref().serialize(s),
        many => s.collect_seq(many.iter().map(Spanned::get_ref)),
    }
}

mod defaults {
    pub fn leader_imbalance_check_interval_s() -> u64 {
        gregor_core::controller::LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT / 1_000
    }
    pub fn leader_imbalance_per_broker_percentage() -> u32 {
        gregor_core::controller::LEADER_IMBALANCE_PER_BROKER_PERCENTAGE_DEFAULT
    }
    pub fn duration_s() -> u64 {
        30
    }
    pub fn heal_s() -> u64 {
        10
    }
    pub fn one() -> u32 {
        1
    }
    pub fn minus_one() -> i64 {
        -1
    }
    pub fn week_ms() -> i64 {
        7 * 24 * 3600 * 1000
    }
    pub fn segment_bytes() -> i64 {
        1 << 30
    }
    pub fn acks() -> String {
        "all".into()
    }
    pub fn batch_size() -> u32 {
        16_384
    }
    pub fn retries() -> u32 {
        i32::MAX as u32
    }
    pub fn delivery_timeout_ms() -> u64 {
        120_000
    }
    pub fn buffer_memory() -> u64 {
        32 * 1024 * 1024
    }
    pub fn max_block_ms() -> u64 {
        60_000
    }
    pub fn max_in_flight() -> u32 {
        5
    }
    pub fn rate_per_s() -> u32 {
        50
    }
    pub fn group() -> String {
        "checker".into()
    }
    pub fn auto_commit_interval_ms() -> u64 {
        5_000
    }
    pub fn earliest() -> String {
        "earliest".into()
    }
    pub fn session_timeout_ms() -> u32 {
        10_000
    }
    pub fn range() -> String {
        "range".into()
    }
    pub fn min_share() -> f64 {
        0.95
    }
    pub fn replica_lag_time_max_ms() -> u64 {
        30_000
    }
    pub fn one_i32() -> i32 {
        1
    }
    pub fn offsets_topic_num_partitions() -> u32 {
        50
    }
    pub fn offsets_topic_replication_factor() -> u32 {
        3
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    #[serde(default = "defaults::one")]
    pub brokers: u32,
    #[serde(default = "defaults::one")]
    pub coordinators: u32,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            brokers: 1,
            coordinators: 1,
        }
    }
}

/// Broker settings (Kafka names), the same for every broker of the cluster.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Broker {
    /// A follower that has not caught up with the leader's log end for this long leaves the ISR.
    #[serde(rename = "replica.lag.time.max.ms", default = "defaults::replica_lag_time_max_ms")]
    pub replica_lag_time_max_ms: u64,
    /// Simulator-only mutant (a negative control, never a Kafka setting): followers truncate to
    /// their own high watermark when they start following a new leader, as Kafka did before
    /// KIP-101, instead of asking the leader for their epoch's end offset.
    #[serde(rename = "mutant.follower.truncate.to.high.watermark", default)]
    pub mutant_truncate_to_high_watermark: bool,
    /// Simulator-only: brokers and controller ignore restarts (no KIP-380 broker epoch), so a
    /// quickly restarted broker keeps its leadership and ISR membership. Lets a scenario show a
    /// fault that restart detection would otherwise mask.
    #[serde(rename = "mutant.ignore.broker.restarts", default)]
    pub mutant_ignore_broker_restarts: bool,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` (Kafka's default 50).
    #[serde(
        rename = "offsets.topic.num.partitions",
        default = "defaults::offsets_topic_num_partitions"
    )]
    pub offsets_topic_num_partitions: u32,
    /// `offsets.topic.replication.factor` (Kafka's default 3, capped at the live brokers).
    #[serde(
        rename = "offsets.topic.replication.factor",
        default = "defaults::offsets_topic_replication_factor"
    )]
    pub offsets_topic_replication_factor: u32,
    /// Simulator-only mutant (a negative control): every broker of a cluster coordinates every
    /// group with its own unreplicated offsets, as before `__consumer_offsets` was replicated, so
    /// two members that reach different brokers get two coordinators.
    #[serde(rename = "mutant.every.broker.coordinates", default)]
    pub mutant_every_broker_coordinates: bool,
    /// Simulator-only mutant (a negative control): the controller elects a new leader in the
    /// partition's current leader epoch instead of the next one, so two brokers lead one
    /// partition in one epoch.
    #[serde(rename = "mutant.reuse.leader.epoch", default)]
    pub mutant_reuse_leader_epoch: bool,
    /// `min.insync.replicas`, the brokers' default: what topics without an override get,
    /// `__consumer_offsets` included (Kafka's default 1).
    #[serde(rename = "min.insync.replicas", default = "defaults::one_i32")]
    pub min_insync_replicas: i32,
    /// `log.flush.interval.ms`, the brokers' default `flush.ms` (unset: never, Kafka's default).
    /// The simulated disk never writes dirty pages back by itself; this stands in for the
    /// operating system's writeback on internal topics such as `__consumer_offsets`.
    #[serde(rename = "log.flush.interval.ms", default)]
    pub log_flush_interval_ms: Option<i64>,
    /// `follower.replication.throttled.rate`: bytes per second each broker fetches for the
    /// partitions a reassignment is adding it to (unset: unthrottled).
    #[serde(rename = "follower.replication.throttled.rate", default)]
    pub follower_replication_throttled_rate: Option<u64>,
}

impl Default for Broker {
    fn default() -> Self {
        Broker {
            replica_lag_time_max_ms: defaults::replica_lag_time_max_ms(),
            mutant_truncate_to_high_watermark: false,
            mutant_ignore_broker_restarts: false,
            offsets_topic_num_partitions: defaults::offsets_topic_num_partitions(),
            offsets_topic_replication_factor: defaults::offsets_topic_replication_factor(),
            mutant_every_broker_coordinates: false,
            mutant_reuse_leader_epoch: false,
            min_insync_replicas: 1,
            log_flush_interval_ms: None,
            follower_replication_throttled_rate: None,
        }
    }
}

/// The longest `replica.lag.time.max.ms` a scenario may set: beyond a scenario's length the ISR
/// would never shrink, which a scenario should say by its topology instead.
pub const REPLICA_LAG_TIME_MS_MAX: u64 = 600_000;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topic {
    #[serde(default = "defaults::group")]
    pub name: String,
    #[serde(default = "defaults::one")]
    pub partitions: u32,
    #[serde(rename = "replication.factor", default = "defaults::one")]
    pub replication_factor: u32,
    #[serde(rename = "min.insync.replicas", default = "defaults::one")]
    pub min_insync_replicas: u32,
    #[serde(rename = "retention.ms", default = "defaults::week_ms")]
    pub retention_ms: i64,
    #[serde(rename = "retention.bytes", default = "defaults::minus_one")]
    pub retention_bytes: i64,
    #[serde(rename = "segment.bytes", default = "defaults::segment_bytes")]
    pub segment_bytes: i64,
    #[serde(rename = "flush.messages", default = "defaults::minus_one")]
    pub flush_messages: i64,
    /// `flush.ms`: fsync at least this often (unset: never, Kafka's default). Stands in for the
    /// operating system's writeback of dirty pages, which the simulated disk does not do.
    #[serde(rename = "flush.ms", default)]
    pub flush_ms: Option<i64>,
    #[serde(rename = "unclean.leader.election.enable", default)]
    pub unclean_leader_election: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SendMode {
    Sync,
    Async,
}

/// Who picks a record's partition.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionerChoice {
    /// The workload, in turn over the partitions (Kafka's `RoundRobinPartitioner`): every
    /// partition gets records from every producer, one batch each.
    #[default]
    RoundRobin,
    /// The producer: records carry no key and no partition, so Kafka's built-in partitioner
    /// keeps them on one partition until `batch.size` bytes went there (twice that when batches
    /// leave by `linger.ms` before they fill), then draws another (KIP-794). Async producers
    /// only.
    Sticky,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Producer {
    #[serde(default = "defaults::one")]
    pub count: u32,
    pub mode: SendMode,
    #[serde(default = "defaults::acks")]
    pub acks: String,
    #[serde(rename = "linger.ms", default)]
    pub linger_ms: u64,
    #[serde(rename = "batch.size", default = "defaults::batch_size")]
    pub batch_size: u32,
    /// Kafka 3's rule: on by default when `acks` is all; asking for it with another `acks` is a
    /// configuration error.
    #[serde(rename = "enable.idempotence", default)]
    pub enable_idempotence: Option<bool>,
    #[serde(default = "defaults::retries")]
    pub retries: u32,
    #[serde(rename = "delivery.timeout.ms", default = "defaults::delivery_timeout_ms")]
    pub delivery_timeout_ms: u64,
    #[serde(rename = "buffer.memory", default = "defaults::buffer_memory")]
    pub buffer_memory: u64,
    #[serde(rename = "max.block.ms", default = "defaults::max_block_ms")]
    pub max_block_ms: u64,
    #[serde(
        rename = "max.in.flight.requests.per.connection",
        default = "defaults::max_in_flight"
    )]
    pub max_in_flight: u32,
    #[serde(default = "defaults::rate_per_s")]
    pub rate_per_s: u32,
    #[serde(default)]
    pub partitioner: PartitionerChoice,
    /// The topics the producers write, by name (unset: every topic). Each producer sends its
    /// records to them in turn, one record each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<String>>,
}

impl Producer {
    /// Whether the producer is idempotent, after Kafka's defaulting.
    pub fn idempotent(&self) -> bool {
        self.enable_idempotence.unwrap_or(self.acks_value() == -1)
    }

    /// `acks` as the wire value (-1 for all).
    pub fn acks_value(&self) -> i16 {
        match self.acks.as_str() {
            "all" | "-1" => -1,
            "1" => 1,
            _ => 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CommitPolicy {
    /// Manual commit after the records are processed: at-least-once.
    AfterProcessing,
    /// Manual commit before processing: a crash in between loses processing.
    BeforeProcessing,
    /// `enable.auto.commit=true`: commits on a timer, whatever was processed.
    Auto,
    /// No commits at all.
    None,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Consumer {
    #[serde(default = "defaults::one")]
    pub count: u32,
    #[serde(default = "defaults::group")]
    pub group: String,
    pub commit: CommitPolicy,
    #[serde(rename = "auto.commit.interval.ms", default = "defaults::auto_commit_interval_ms")]
    pub auto_commit_interval_ms: u64,
    #[serde(rename = "auto.offset.reset", default = "defaults::earliest")]
    pub auto_offset_reset: String,
    /// Seconds after the workload starts before consumers start (a lagging consumer).
    #[serde(default)]
    pub start_after_s: u64,
    /// `group.id`: when set, the consumers subscribe as one consumer group (Gregor's group
    /// consumer) instead of reading every partition by manual assignment.
    #[serde(rename = "group.id", default)]
    pub group_id: Option<String>,
    /// `enable.auto.commit`: defaults to `commit = "auto"`; given, it must agree with it.
    #[serde(rename = "enable.auto.commit", default)]
    pub enable_auto_commit: Option<bool>,
    #[serde(rename = "session.timeout.ms", default = "defaults::session_timeout_ms")]
    pub session_timeout_ms: u32,
    /// `"range"` or `"roundrobin"`, or both comma-separated in preference order.
    #[serde(rename = "partition.assignment.strategy", default = "defaults::range")]
    pub partition_assignment_strategy: String,
    /// Virtual ms the application spends processing each record. With `commit = "auto"` the
    /// application hands polled records to a worker in its process and keeps polling, so
    /// auto-commit runs ahead of processing.
    #[serde(default)]
    pub processing_ms: u64,
}

impl Consumer {
    /// `partition.assignment.strategy` as assignors, in preference order.
    pub fn assignors(&self) -> Result<Vec<gregor_core::client::group::Assignor>, String> {
        self.partition_assignment_strategy
            .split(',')
            .map(|name| {
                gregor_core::client::group::Assignor::from_name(name.trim())
                    .ok_or_else(|| format!("partition.assignment.strategy: {name:?} is not range or roundrobin"))
            })
            .collect()
    }

    /// Whether auto-commit is on: `enable.auto.commit`, defaulting to `commit = "auto"`.
    pub fn auto_commit(&self) -> bool {
        self.enable_auto_commit.unwrap_or(self.commit == CommitPolicy::Auto)
    }

    fn group_settings_error(&self) -> Result<(), String> {
        if self
            .enable_auto_commit
            .is_some_and(|on| on != (self.commit == CommitPolicy::Auto))
        {
            return Err("enable.auto.commit must be true exactly when commit = \"auto\"".into());
        }
        if self.group_id.is_none() && self.commit != CommitPolicy::None && self.enable_auto_commit.is_some() {
            return Err("enable.auto.commit needs group.id".into());
        }
        if !(6_000..=1_800_000).contains(&self.session_timeout_ms) {
            return Err(format!(
                "session.timeout.ms {} is outside the broker's 6000..=1800000",
                self.session_timeout_ms
            ));
        }
        self.assignors().map(|_| ())
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Power loss: the node dies and its disk drops or tears unsynced writes. Opposite: restart.
    Crash,
    /// Process kill: the node dies, its page cache (unsynced writes) survives. Opposite: restart.
    Kill,
    /// The node dies and its disk is replaced by an empty one (a lost drive). Opposite: restart,
    /// with nothing on the disk.
    DiskLost,
    /// The node stops running but keeps its state. Opposite: resume.
    Pause,
    /// The node's links to every other node are cut. Opposite: repair.
    Isolate,
    /// The node's disk refuses writes with ENOSPC. Opposite: drain.
    DiskFull,
    /// The node's fsyncs fail with EIO. Opposite: heal.
    SyncFail,
    /// The node's wall clock jumps ahead by a minute. Opposite: reset.
    ClockSkew,
    /// A share (`rate`) of the frames the node sends on Kafka connections arrive twice: a
    /// client's retry on the same connection, a server answering twice. Opposite: heal.
    DuplicateFrames,
    /// A share (`rate`) of the frames the node sends on Kafka connections arrive with one bit
    /// flipped inside a record batch, which its CRC32C must catch. Opposite: heal.
    CorruptFrames,
    /// Bridge (Jepsen): the other brokers and coordinators are cut into two halves that can only
    /// talk through this node, which still reaches both. Opposite: repair.
    Bridge,
    /// Swizzle-clogging (FoundationDB): this node and then each other broker have their links
    /// clogged one at a time, then unclogged one at a time in another order. Opposite: the
    /// unclogging.
    SwizzleClog,
    /// The brokers and coordinators cut into the two `sides` the fault names (a random profile's
    /// `partition-halves`, recorded). Opposite: repair.
    PartitionHalves,
}

impl FaultKind {
    /// Whether the fault takes a `rate`.
    pub fn has_rate(self) -> bool {
        matches!(self, FaultKind::DuplicateFrames | FaultKind::CorruptFrames)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    pub at_s: f64,
    pub fault: FaultKind,
    pub node: String,
    /// When the opposite fault runs; `None` means never (until the heal phase).
    #[serde(default)]
    pub heal_after_s: Option<f64>,
    /// For `duplicate-frames` and `corrupt-frames`: the share of frames hit, in (0, 1]
    /// (default [`FRAME_FAULT_RATE_DEFAULT`]).
    #[serde(default)]
    pub rate: Option<f64>,
    /// `partition-halves` and `bridge`: the two sides by node name, as a random profile drew
    /// them (a bridge without `sides` splits the other servers itself). Written by `shrink`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sides: Option<[Vec<String>; 2]>,
    /// `swizzle-clog`: the nodes clogged, in this order (`node` first), and the order they are
    /// unclogged in; without them the nemesis picks both. Written by `shrink`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unclog: Option<Vec<String>>,
}

/// The share of frames a frame fault hits when the scenario gives no `rate`.
pub const FRAME_FAULT_RATE_DEFAULT: f64 = 0.05;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    #[serde(default)]
    pub profile: Option<String>,
    /// The profile's timer only: the nemesis wakes and draws when the profile would, but plays
    /// no random fault, only the schedule. A recorded run (`gregor-sim shrink`) replayed this
    /// way wakes the nemesis at the same instants as the original, so madsim schedules every
    /// task as it did and the run is the same run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub profile_timer_only: bool,
    #[serde(default)]
    pub schedule: Vec<Spanned<ScheduledFault>>,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    NoAnomalies,
    Anomaly,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: Outcome,
    #[serde(default)]
    pub anomaly: Option<String>,
    #[serde(default = "defaults::min_share")]
    pub min_share: f64,
    /// Hard states (`crate::coverage::State` names) the sweep must reach in at least one seed;
    /// a sweep that never reached one fails, naming it.
    #[serde(default)]
    pub require: Vec<String>,
    /// A safe scenario with seeds known to fail, and why (which seeds, which open problem):
    /// `gregor-sim campaign` leaves it out, naming the reason, so a campaign finds new failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_failing: Option<String>,
}

impl Expect {
    /// The required states (names validated when the scenario was parsed).
    pub fn required(&self) -> Vec<crate::coverage::State> {
        self.require
            .iter()
            .filter_map(|name| crate::coverage::State::from_name(name))
            .collect()
    }
}

/// What is wrong with a scheduled fault's recorded nodes (`sides`, `order`, `unclog`), if anything:
/// the key and why. `ok_node` says whether a name names a node of the cluster.
fn recorded_nodes_error(f: &ScheduledFault, ok_node: &dyn Fn(&str) -> bool) -> Result<(), (&'static str, String)> {
    let unknown = |names: &[String]| names.iter().find(|n| !ok_node(n)).cloned();
    match (&f.sides, f.fault) {
        (None, FaultKind::PartitionHalves) => {
            return Err(("faults.schedule.sides", "partition-halves needs its two sides".into()))
        }
        (Some(_), kind) if !matches!(kind, FaultKind::PartitionHalves | FaultKind::Bridge) => {
            return Err((
                "faults.schedule.sides",
                "only partition-halves and bridge take sides".into(),
            ))
        }
        (Some(sides), _) => {
            if sides.iter().any(|side| side.is_empty()) {
                return Err(("faults.schedule.sides", "a side is empty".into()));
            }
            if let Some(bad) = sides.iter().find_map(|side| unknown(side)) {
                return Err((
                    "faults.schedule.sides",
                    format!("{bad:?} names no node of this cluster"),
                ));
            }
        }
        (None, _) => {}
    }
    match (&f.order, &f.unclog) {
        (None, None) => Ok(()),
        (Some(order), Some(unclog)) if f.fault == FaultKind::SwizzleClog => {
            let (mut a, mut b) = (order.clone(), unclog.clone());
            a.sort();
            b.sort();
            if order.len() < 2 || order.first() != Some(&f.node) || a != b {
                return Err((
                    "faults.schedule.order",
                    "order must start with node, name two nodes or more, and unclog the same nodes".into(),
                ));
            }
            match unknown(order) {
                Some(bad) => Err((
                    "faults.schedule.order",
                    format!("{bad:?} names no node of this cluster"),
                )),
                None => Ok(()),
            }
        }
        _ => Err((
            "faults.schedule.order",
            "order and unclog come together, on swizzle-clog only".into(),
        )),
    }
}

/// A scenario that could not be used; the message names the file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioError(pub String);

/// The line of `key` in `[section]` (quoted or not), else of the section's header, else 1: for
/// errors about values that carry no span.
fn key_line(source: &str, section: &str, key: &str) -> usize {
    let mut in_section = false;
    let mut header = None;
    for (i, line) in source.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = t == format!("[{section}]");
            if in_section {
                header = Some(i + 1);
            }
            continue;
        }
        let k = t.split('=').next().unwrap_or("").trim().trim_matches('"');
        if in_section && k == key {
            return i + 1;
        }
    }
    header.unwrap_or(1)
}

/// The line of `key` in the table whose header is at or after `offset` (a `[[topic]]` of
/// several), else of that header.
fn key_line_from(source: &str, offset: usize, key: &str) -> usize {
    let header = line_of(source, offset);
    for (i, line) in source.lines().enumerate().skip(header) {
        let t = line.trim();
        if t.starts_with('[') {
            break;
        }
        if t.split('=').next().unwrap_or("").trim().trim_matches('"') == key {
            return i + 1;
        }
    }
    header
}

/// What is wrong with `t` on a cluster of `brokers`, as (key, why).
fn topic_error(t: &Topic, brokers: u32) -> Result<(), (&'static str, String)> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if t.name.is_empty() || t.name.len() > 249 || !t.name.chars().all(legal) || t.name.starts_with("__") {
        return Err((
            "name",
            format!(
                "{:?} is not a topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-', not starting with \"__\")",
                t.name
            ),
        ));
    }
    if t.partitions == 0 || t.partitions > 64 {
        return Err(("partitions", format!("{} is not between 1 and 64", t.partitions)));
    }
    if t.replication_factor == 0 || t.replication_factor > brokers {
        let why = format!("{} is impossible with {brokers} broker(s)", t.replication_factor);
        return Err(("replication.factor", why));
    }
    if t.min_insync_replicas == 0 || t.min_insync_replicas > t.replication_factor {
        let why = format!(
            "{} must be between 1 and the replication factor {}",
            t.min_insync_replicas, t.replication_factor
        );
        return Err(("min.insync.replicas", why));
    }
    let mut log = gregor_core::log::LogConfig::default();
    for (key, value) in [
        ("retention.ms", t.retention_ms),
        ("retention.bytes", t.retention_bytes),
        ("segment.bytes", t.segment_bytes),
        ("flush.messages", t.flush_messages),
        ("flush.ms", t.flush_ms.unwrap_or(i64::MAX)),
    ] {
        log.apply(key, &value.to_string()).map_err(|why| (key, why))?;
    }
    Ok(())
}

fn line_of(source: &str, offset: usize) -> usize {
    source[..offset.min(source.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

impl Scenario {
    /// The places (in [`Scenario::topics`]) of the topics the producers write, in turn.
    pub fn producer_topics(&self) -> Vec<u16> {
        let place = |name: &String| self.topics.iter().position(|t| &t.get_ref().name == name);
        match &self.producer.topics {
            Some(names) => names
                .iter()
                .filter_map(place)
                .filter_map(|i| u16::try_from(i).ok())
                .collect(),
            None => (0..self.topics.len()).filter_map(|i| u16::try_from(i).ok()).collect(),
        }
    }

    /// The first topic: the one `[elastic]`, `[acl]` and `[quorum]` scenarios (which have one)
    /// act on.
    pub fn topic(&self) -> &Topic {
        self.topics[0].get_ref()
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("{}: cannot read: {e}", path.display())))?;
        let name = path
            .file_stem()
            .map_or_else(|| "scenario".to_string(), |s| s.to_string_lossy().into_owned());
        Scenario::parse(&source, &path.display().to_string(), &name)
    }

    /// Parses and validates `source` (from `file`, for messages).
    pub fn parse(source: &str, file: &str, name: &str) -> Result<Scenario, ScenarioError> {
        let mut scenario: Scenario = toml::from_str(source).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!(":{}", line_of(source, s.start)))
                .unwrap_or_default();
            ScenarioError(format!("{file}{line}: {}", e.message()))
        })?;
        scenario.name = name.to_string();
        let at = |span: std::ops::Range<usize>| format!("{file}:{}", line_of(source, span.start));
        let bad = |where_: String, key: &str, why: String| Err(ScenarioError(format!("{where_}: {key}: {why}")));
        let c = &scenario.cluster;
        let key_at = |section: &str, key: &str| format!("{file}:{}", key_line(source, section, key));
        if c.brokers == 0 || c.brokers > 9 {
            return bad(
                key_at("cluster", "brokers"),
                "cluster.brokers",
                format!("{} is not between 1 and 9", c.brokers),
            );
        }
        // With `[quorum]` the count includes the nodes that join later (4 = 3 voters + 1 joiner).
        let odd = !c.coordinators.is_multiple_of(2) || scenario.quorum.is_some();
        if c.coordinators == 0 || c.coordinators > 7 || !odd {
            return bad(
                key_at("cluster", "coordinators"),
                "cluster.coordinators",
                format!(
                    "{} is not an odd number from 1 to 7 (any number with [quorum])",
                    c.coordinators
                ),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for spanned in &scenario.topics {
            let t = spanned.get_ref();
            let key_at = |key: &str| format!("{file}:{}", key_line_from(source, spanned.span().start, key));
            if let Err((key, why)) = topic_error(t, c.brokers) {
                return bad(key_at(key), &format!("topic.{key}"), why);
            }
            if !names.insert(t.name.as_str()) {
                return bad(key_at("name"), "topic.name", format!("{:?} names two topics", t.name));
            }
        }
        if scenario.topics.is_empty() || scenario.topics.len() > 16 {
            return bad(format!("{file}:1"), "topic", "1 to 16 topics are needed".into());
        }
        let extra_topics = scenario.topics.len() > 1;
        for (section, present) in [
            ("elastic", scenario.elastic.is_some()),
            ("acl", scenario.acl.is_some()),
            ("quorum", scenario.quorum.is_some()),
        ] {
            if extra_topics && present {
                return bad(
                    key_at(section, ""),
                    section,
                    format!("[{section}] scenarios have one [topic]"),
                );
            }
        }
        let topic = scenario.topic();
        if let Some(e) = &scenario.elastic {
            let rf = topic.replication_factor;
            let ok = (rf..=c.brokers).contains(&e.initial_brokers)
                && (rf..=c.brokers).contains(&e.target_brokers)
                && e.join_at_s >= 0.0
                && e.rebalance_at_s >= e.join_at_s
                && e.rebalance_at_s < scenario.duration_s as f64
                && (!e.auto_rebalance || e.target_brokers == c.brokers)
                && e.leader_imbalance_check_interval_s >= 1
                && c.coordinators > 0;
            if !ok {
                return bad(
                    key_at("elastic", "target_brokers"),
                    "elastic",
                    format!(
                        "initial_brokers and target_brokers must be from the replication factor {rf} to the {} brokers, and 0 <= join_at_s <= rebalance_at_s < duration_s (with auto.rebalance.enable, target_brokers = brokers; leader.imbalance.check.interval.seconds at least 1)",
                        c.brokers
                    ),
                );
            }
        }
        if let Some(q) = &scenario.quorum {
            let ok = c.brokers > 1
                && (1..c.coordinators).contains(&q.initial_coordinators)
                && (1..=u64::from(q.initial_coordinators)).contains(&q.remove)
                && q.replace_at_s >= 0.0
                && q.replace_at_s < scenario.duration_s as f64;
            if !ok {
                return bad(
                    key_at("quorum", "initial_coordinators"),
                    "quorum",
                    "needs a cluster (brokers > 1), 1 <= initial_coordinators < coordinators, remove among the initial ones, and 0 <= replace_at_s < duration_s".into(),
                );
            }
        }
        if let Some(a) = &scenario.acl {
            let ok = c.brokers > 1
                && a.toggled_producers <= scenario.producer.count
                && a.granted_s >= 0.5
                && a.revoked_s >= 0.5
                && a.granted_s + a.revoked_s < scenario.duration_s as f64
                && a.bound_ms > 0;
            if !ok {
                return bad(
                    key_at("acl", "toggled_producers"),
                    "acl",
                    "needs a cluster (brokers > 1), toggled_producers <= producer.count, granted_s and revoked_s >= 0.5 with one grant and revocation inside duration_s, and bound_ms > 0".into(),
                );
            }
        }
        let lag_ms = scenario.broker.replica_lag_time_max_ms;
        if lag_ms == 0 || lag_ms > REPLICA_LAG_TIME_MS_MAX {
            return bad(
                key_at("broker", "replica.lag.time.max.ms"),
                "broker.replica.lag.time.max.ms",
                format!("{lag_ms} is not between 1 and {REPLICA_LAG_TIME_MS_MAX}"),
            );
        }
        let offsets_partitions = scenario.broker.offsets_topic_num_partitions;
        if !(1..=1_000).contains(&offsets_partitions) {
            return bad(
                key_at("broker", "offsets.topic.num.partitions"),
                "broker.offsets.topic.num.partitions",
                format!("{offsets_partitions} is not between 1 and 1000"),
            );
        }
        if !(1..=16).contains(&scenario.broker.min_insync_replicas) {
            return bad(
                key_at("broker", "min.insync.replicas"),
                "broker.min.insync.replicas",
                format!("{} is not between 1 and 16", scenario.broker.min_insync_replicas),
            );
        }
        if let Some(ms) = scenario.broker.log_flush_interval_ms {
            if let Err(why) = gregor_core::log::LogConfig::default().apply("flush.ms", &ms.to_string()) {
                return bad(
                    key_at("broker", "log.flush.interval.ms"),
                    "broker.log.flush.interval.ms",
                    why,
                );
            }
        }
        let offsets_rf = scenario.broker.offsets_topic_replication_factor;
        if !(1..=16).contains(&offsets_rf) {
            return bad(
                key_at("broker", "offsets.topic.replication.factor"),
                "broker.offsets.topic.replication.factor",
                format!("{offsets_rf} is not between 1 and 16"),
            );
        }
        if let Some(names) = &scenario.producer.topics {
            let unknown = names
                .iter()
                .find(|n| !scenario.topics.iter().any(|t| &t.get_ref().name == *n));
            let twice = names.iter().enumerate().any(|(i, n)| names[..i].contains(n));
            if names.is_empty() || unknown.is_some() || twice {
                return bad(
                    key_at("producer", "topics"),
                    "producer.topics",
                    match unknown {
                        Some(n) => format!("{n:?} is not a [topic] of this scenario"),
                        None => "must name one or more topics, each once".into(),
                    },
                );
            }
        }
        if !matches!(scenario.producer.acks.as_str(), "all" | "-1" | "0" | "1") {
            return bad(
                at(0..0),
                "producer.acks",
                format!("{:?} is not one of \"all\", \"1\", \"0\"", scenario.producer.acks),
            );
        }
        if scenario.producer.enable_idempotence == Some(true) && scenario.producer.acks_value() != -1 {
            return bad(
                at(0..0),
                "producer.enable.idempotence",
                "needs acks = \"all\", as Kafka requires".into(),
            );
        }
        if scenario.producer.count == 0 || scenario.producer.count > 64 || scenario.producer.rate_per_s == 0 {
            return bad(
                at(0..0),
                "producer",
                "count must be 1 to 64 and rate_per_s at least 1".into(),
            );
        }
        let pr = &scenario.producer;
        if pr.partitioner == PartitionerChoice::Sticky && pr.mode != SendMode::Async {
            return bad(
                key_at("producer", "partitioner"),
                "producer.partitioner",
                "\"sticky\" needs mode = \"async\": the sync producer sends to the partition it is given".into(),
            );
        }
        if pr.max_in_flight == 0 || (pr.idempotent() && pr.max_in_flight > 5) {
            return bad(
                at(0..0),
                "producer.max.in.flight.requests.per.connection",
                "must be 1 or more, and at most 5 with idempotence, as Kafka requires".into(),
            );
        }
        if pr.buffer_memory == 0 || pr.buffer_memory > 1 << 32 || pr.batch_size == 0 {
            return bad(
                at(0..0),
                "producer.buffer.memory",
                "buffer.memory must be 1 to 4 GiB and batch.size at least 1".into(),
            );
        }
        if let Some(consumer) = &scenario.consumer {
            if !matches!(consumer.auto_offset_reset.as_str(), "earliest" | "latest") {
                return bad(
                    at(0..0),
                    "consumer.auto.offset.reset",
                    format!("{:?} is not earliest or latest", consumer.auto_offset_reset),
                );
            }
            if let Err(why) = consumer.group_settings_error() {
                return bad(at(0..0), "consumer", why);
            }
        }
        if let Some(profile) = &scenario.faults.profile {
            if crate::nemesis::profile(profile).is_none() {
                // `profile` is a plain string (no span): point at the line that sets it.
                let line = source
                    .lines()
                    .position(|l| l.trim_start().starts_with("profile"))
                    .map_or(1, |i| i + 1);
                let names: Vec<&str> = crate::nemesis::PROFILES.iter().map(|p| p.name).collect();
                return bad(
                    format!("{file}:{line}"),
                    "faults.profile",
                    format!("{profile:?} is not one of {names:?}"),
                );
            }
        }
        if scenario.faults.profile_timer_only && scenario.faults.profile.is_none() {
            return bad(
                key_at("faults", "profile_timer_only"),
                "faults.profile_timer_only",
                "needs a profile whose timer to keep".into(),
            );
        }
        for fault in &scenario.faults.schedule {
            let f = fault.get_ref();
            let nth_below = |node: &str, prefix: &str, count: u32| {
                node.strip_prefix(prefix)
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n < count)
            };
            let consumers = scenario.consumer.as_ref().map_or(0, |c| c.count);
            let ok_node = |node: &str| {
                node == "leader"
                    || (node == "follower" && c.brokers > 1)
                    || node == "controller"
                    || nth_below(node, "broker-", c.brokers)
                    || nth_below(node, "coordinator-", c.coordinators)
                    || nth_below(node, "producer-", scenario.producer.count)
                    || nth_below(node, "consumer-", consumers)
            };
            if !ok_node(&f.node) {
                return bad(
                    at(fault.span()),
                    "faults.schedule.node",
                    format!("{:?} names no node of this cluster", f.node),
                );
            }
            if let Err((key, why)) = recorded_nodes_error(f, &ok_node) {
                return bad(at(fault.span()), key, why);
            }
            match f.rate {
                Some(_) if !f.fault.has_rate() => {
                    return bad(
                        at(fault.span()),
                        "faults.schedule.rate",
                        "only duplicate-frames and corrupt-frames take a rate".into(),
                    )
                }
                Some(rate) if !(rate > 0.0 && rate <= 1.0) => {
                    return bad(
                        at(fault.span()),
                        "faults.schedule.rate",
                        format!("{rate} is not in (0, 1]"),
                    )
                }
                _ => {}
            }
            if !(0.0..=scenario.duration_s as f64).contains(&f.at_s) {
                return bad(
                    at(fault.span()),
                    "faults.schedule.at_s",
                    format!("{} is outside the run's {} s", f.at_s, scenario.duration_s),
                );
            }
        }
        let expect = scenario.expect.get_ref();
        let expect_at = at(scenario.expect.span());
        match (expect.outcome, &expect.anomaly) {
            (Outcome::NoAnomalies, Some(_)) => {
                return bad(
                    expect_at,
                    "expect.anomaly",
                    "given with outcome = \"no-anomalies\"".into(),
                );
            }
            (Outcome::Anomaly, None) => {
                return bad(
                    expect_at,
                    "expect.anomaly",
                    "missing: which anomaly must appear?".into(),
                )
            }
            (Outcome::Anomaly, Some(a)) if crate::checker::AnomalyKind::from_name(a).is_none() => {
                return bad(
                    expect_at,
                    "expect.anomaly",
                    format!("{a:?} is not an anomaly the checker reports"),
                );
            }
            _ => {}
        }
        if let Some(name) = expect
            .require
            .iter()
            .find(|name| crate::coverage::State::from_name(name).is_none())
        {
            return bad(
                key_at("expect", "require"),
                "expect.require",
                format!(
                    "{name:?} is not a state the sweep counts: one of {:?}",
                    crate::coverage::State::names()
                ),
            );
        }
        if !(0.0..=1.0).contains(&expect.min_share) {
            return bad(
                expect_at,
                "expect.min_share",
                format!("{} is not between 0 and 1", expect.min_share),
            );
        }
        Ok(scenario)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description = "test"
[cluster]
brokers = 3
[topic]
partitions = 2
"replication.factor" = 3
"min.insync.replicas" = 2
[producer]
mode = "sync"
acks = "all"
"linger.ms" = 5
[consumer]
commit = "after-processing"
[[faults.schedule]]
at_s = 10
fault = "crash"
node = "leader"
heal_after_s = 3
[expect]
outcome = "no-anomalies"
"#;

    #[test]
    fn a_good_scenario_parses_with_kafka_names() {
        let s = Scenario::parse(GOOD, "good.toml", "good").expect("parses");
        assert_eq!(s.topic().replication_factor, 3);
        assert_eq!(s.producer.linger_ms, 5);
        assert_eq!(s.producer.acks_value(), -1);
        assert_eq!(s.faults.schedule[0].get_ref().fault, FaultKind::Crash);
        assert_eq!(
            s.consumer.as_ref().map(|c| c.commit),
            Some(CommitPolicy::AfterProcessing)
        );
    }

    fn error(source: &str) -> String {
        Scenario::parse(source, "bad.toml", "bad")
            .expect_err("must be refused")
            .0
    }

    #[test]
    fn bad_scenarios_name_file_line_and_key() {
        let unknown = GOOD.replace("\"linger.ms\" = 5", "\"linger.ms\" = 5\n\"linger.sm\" = 5");
        let e = error(&unknown);
        assert!(e.starts_with("bad.toml:13:") && e.contains("linger.sm"), "{e}");
        let bad_value = GOOD.replace("mode = \"sync\"", "mode = \"sometimes\"");
        let e = error(&bad_value);
        assert!(e.starts_with("bad.toml:10:") && e.contains("sometimes"), "{e}");
        let impossible = GOOD.replace("\"replication.factor\" = 3", "\"replication.factor\" = 4");
        let e = error(&impossible);
        assert!(
            e.contains("bad.toml:7:") && e.contains("topic.replication.factor") && e.contains("3 broker"),
            "{e}"
        );
        let e = error(&GOOD.replace("node = \"leader\"", "node = \"broker-7\""));
        assert!(e.contains("bad.toml:15:") && e.contains("faults.schedule.node"), "{e}");
        let e = error(&GOOD.replace(
            "outcome = \"no-anomalies\"",
            "outcome = \"anomaly\"\nanomaly = \"lost-wrte\"",
        ));
        assert!(e.contains("expect.anomaly") && e.contains("lost-wrte"), "{e}");
        let e = error(&GOOD.replace(
            "outcome = \"no-anomalies\"",
            "outcome = \"no-anomalies\"\nrequire = [\"isr-shrink\", \"leader-failover\"]",
        ));
        assert!(
            e.contains("expect.require")
                && e.contains("\"leader-failover\"")
                && e.contains("leader-failover-under-load"),
            "{e}"
        );
        let required = GOOD.replace(
            "outcome = \"no-anomalies\"",
            "outcome = \"no-anomalies\"\nrequire = [\"isr-shrink\", \"segment-roll\"]",
        );
        let s = Scenario::parse(&required, "ok.toml", "ok").expect("known states parse");
        use crate::coverage::State;
        assert_eq!(
            s.expect.get_ref().required(),
            vec![State::IsrShrink, State::SegmentRoll]
        );
        let e = error(&GOOD.replace(
            "[[faults.schedule]]",
            "[faults]\nprofile = \"chaos\"\n[[faults.schedule]]",
        ));
        assert!(
            e.contains("bad.toml:16:") && e.contains("faults.profile") && e.contains("chaos"),
            "{e}"
        );
        let e = error(&GOOD.replace("\"linger.ms\" = 5", "\"linger.ms\" = -5"));
        assert!(e.contains("bad.toml:12:"), "{e}");
        let e = error(&GOOD.replace("heal_after_s = 3", "heal_after_s = 3\nrate = 0.1"));
        assert!(e.contains("bad.toml:15:") && e.contains("faults.schedule.rate"), "{e}");
        let frames = GOOD.replace("fault = \"crash\"", "fault = \"corrupt-frames\"");
        let e = error(&frames.replace("heal_after_s = 3", "heal_after_s = 3\nrate = 1.5"));
        assert!(e.contains("faults.schedule.rate") && e.contains("1.5"), "{e}");
        let s = Scenario::parse(
            &frames.replace("heal_after_s = 3", "heal_after_s = 3\nrate = 0.5"),
            "f",
            "f",
        )
        .expect("a frame fault takes a rate");
        assert_eq!(s.faults.schedule[0].get_ref().rate, Some(0.5));
    }

    #[test]
    fn multi_node_topology_parses_with_replication_settings_and_targets() {
        let source = GOOD
            .replace("brokers = 3", "brokers = 3\ncoordinators = 3")
            .replace(
                "\"min.insync.replicas\" = 2",
                "\"min.insync.replicas\" = 2\n\"unclean.leader.election.enable\" = true\n[broker]\n\"replica.lag.time.max.ms\" = 10000",
            );
        let s = Scenario::parse(&source, "multi.toml", "multi").expect("parses");
        assert_eq!((s.cluster.brokers, s.cluster.coordinators), (3, 3));
        let t = s.topic();
        assert_eq!((t.replication_factor, t.min_insync_replicas), (3, 2));
        assert!(t.unclean_leader_election);
        assert_eq!(s.broker.replica_lag_time_max_ms, 10_000);
        // Defaults: one coordinator, Kafka's 30 s lag, unclean election off.
        let d = Scenario::parse(GOOD, "good.toml", "good").expect("parses");
        assert_eq!(d.cluster.coordinators, 1);
        assert_eq!(d.broker.replica_lag_time_max_ms, 30_000);
        assert!(!d.topic().unclean_leader_election);
        // Every kind of fault target of a 3-broker, 3-coordinator cluster.
        for node in [
            "leader",
            "controller",
            "coordinator-0",
            "coordinator-2",
            "broker-2",
            "producer-0",
            "consumer-0",
        ] {
            let with = source.replace("node = \"leader\"", &format!("node = \"{node}\""));
            assert!(Scenario::parse(&with, "t.toml", "t").is_ok(), "{node}");
        }
    }

    #[test]
    fn impossible_replication_settings_are_refused_with_their_line() {
        let e = error(&GOOD.replace("\"min.insync.replicas\" = 2", "\"min.insync.replicas\" = 4"));
        assert!(
            e.starts_with("bad.toml:8:") && e.contains("topic.min.insync.replicas"),
            "{e}"
        );
        let e = error(&GOOD.replace("\"min.insync.replicas\" = 2", "\"min.insync.replicas\" = 0"));
        assert!(e.contains("topic.min.insync.replicas"), "{e}");
        let e = error(&GOOD.replace("\"replication.factor\" = 3", "\"replication.factor\" = 0"));
        assert!(
            e.starts_with("bad.toml:7:") && e.contains("topic.replication.factor"),
            "{e}"
        );
        let e = error(&GOOD.replace("brokers = 3", "brokers = 3\ncoordinators = 2"));
        assert!(
            e.starts_with("bad.toml:5:") && e.contains("cluster.coordinators"),
            "{e}"
        );
        let e = error(&GOOD.replace("brokers = 3", "brokers = 0"));
        assert!(e.starts_with("bad.toml:4:") && e.contains("cluster.brokers"), "{e}");
        // coordinator-1 does not exist with the default single coordinator.
        let e = error(&GOOD.replace("node = \"leader\"", "node = \"coordinator-1\""));
        assert!(e.contains("bad.toml:15:") && e.contains("coordinator-1"), "{e}");
        let lag = GOOD.replace("[producer]", "[broker]\n\"replica.lag.time.max.ms\" = 0\n[producer]");
        let e = error(&lag);
        assert!(
            e.starts_with("bad.toml:10:") && e.contains("replica.lag.time.max.ms"),
            "{e}"
        );
        let e = error(&GOOD.replace("[producer]", "[broker]\n\"replica.lag.time.mx\" = 5\n[producer]"));
        assert!(
            e.starts_with("bad.toml:10:") && e.contains("replica.lag.time.mx"),
            "{e}"
        );
        let e = error(&GOOD.replace(
            "\"min.insync.replicas\" = 2",
            "\"unclean.leader.election.enable\" = \"yes\"",
        ));
        assert!(e.starts_with("bad.toml:8:"), "{e}");
    }

    #[test]
    fn recorded_faults_take_sides_and_orders_and_bad_ones_are_refused() {
        let halves = GOOD.replace(
            "fault = \"crash\"\nnode = \"leader\"",
            "fault = \"partition-halves\"\nnode = \"broker-0\"\nsides = [[\"broker-0\"], [\"broker-1\", \"broker-2\"]]",
        );
        let s = Scenario::parse(&format!("seed = 7\n{halves}"), "h.toml", "h").expect("parses");
        assert_eq!(s.seed, Some(7));
        // A seed past i64::MAX is written as a string (TOML integers are signed).
        let big = Scenario::parse(&format!("seed = \"10048716408039069478\"\n{halves}"), "h.toml", "h");
        assert_eq!(big.expect("parses").seed, Some(10_048_716_408_039_069_478));
        assert!(Scenario::parse(&format!("seed = \"-1\"\n{halves}"), "h.toml", "h").is_err());
        let f = s.faults.schedule[0].get_ref();
        assert_eq!(f.fault, FaultKind::PartitionHalves);
        assert_eq!(f.sides.as_ref().map(|[a, b]| (a.len(), b.len())), Some((1, 2)));
        let e = error(&halves.replace("\"broker-2\"]]", "\"broker-9\"]]"));
        assert!(
            e.contains("bad.toml:15:") && e.contains("faults.schedule.sides") && e.contains("broker-9"),
            "{e}"
        );
        let e = error(&halves.replace("sides = [[\"broker-0\"], [\"broker-1\", \"broker-2\"]]", ""));
        assert!(e.contains("faults.schedule.sides") && e.contains("needs"), "{e}");
        let swizzle = GOOD.replace(
            "fault = \"crash\"\nnode = \"leader\"",
            "fault = \"swizzle-clog\"\nnode = \"broker-1\"\norder = [\"broker-1\", \"broker-0\"]\nunclog = [\"broker-0\", \"broker-1\"]",
        );
        Scenario::parse(&swizzle, "s.toml", "s").expect("a recorded swizzle parses");
        let e = error(&swizzle.replace(
            "unclog = [\"broker-0\", \"broker-1\"]",
            "unclog = [\"broker-0\", \"broker-2\"]",
        ));
        assert!(e.contains("faults.schedule.order"), "{e}");
        let e = error(&GOOD.replace("node = \"leader\"", "node = \"leader\"\norder = [\"leader\"]"));
        assert!(e.contains("faults.schedule.order"), "{e}");
    }

    #[test]
    fn the_sticky_partitioner_is_for_async_producers() {
        let sticky = GOOD.replace("\"linger.ms\" = 5", "\"linger.ms\" = 5\npartitioner = \"sticky\"");
        let s = Scenario::parse(&sticky.replace("mode = \"sync\"", "mode = \"async\""), "s.toml", "s").expect("parses");
        assert_eq!(s.producer.partitioner, PartitionerChoice::Sticky);
        let round_robin = Scenario::parse(GOOD, "good.toml", "good").expect("parses");
        assert_eq!(
            round_robin.producer.partitioner,
            PartitionerChoice::RoundRobin,
            "the default"
        );
        // Line 13 sets it; the sync producer sends where it is told.
        let e = error(&sticky);
        assert!(
            e.starts_with("bad.toml:13:") && e.contains("producer.partitioner") && e.contains("async"),
            "{e}"
        );
        let e = error(&sticky.replace("\"sticky\"", "\"murmur\""));
        assert!(e.contains("murmur"), "{e}");
    }

    #[test]
    fn every_shipped_scenario_still_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut parsed = 0;
        for entry in std::fs::read_dir(&dir).expect("scenarios/ exists") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                parsed += 1;
            }
        }
        println!("parsed {parsed} scenarios in {}", dir.display());
        assert!(parsed > 0, "no scenario found in {}", dir.display());
    }

    #[test]
    fn group_consumer_settings_parse_and_contradictions_are_refused() {
        let group = GOOD.replace(
            "commit = \"after-processing\"",
            "commit = \"auto\"\n\"group.id\" = \"app\"\n\"session.timeout.ms\" = 6000\n\"partition.assignment.strategy\" = \"roundrobin,range\"",
        );
        let s = Scenario::parse(&group, "g.toml", "g").expect("parses");
        let c = s.consumer.as_ref().expect("a consumer");
        assert_eq!(c.group_id.as_deref(), Some("app"));
        assert!(c.auto_commit(), "commit = auto turns auto-commit on");
        assert_eq!(c.session_timeout_ms, 6000);
        use gregor_core::client::group::Assignor;
        assert_eq!(c.assignors(), Ok(vec![Assignor::RoundRobin, Assignor::Range]));
        let e = error(&group.replace(
            "\"group.id\" = \"app\"",
            "\"group.id\" = \"app\"\n\"enable.auto.commit\" = false",
        ));
        assert!(e.contains("enable.auto.commit"), "{e}");
        let e = error(&group.replace("roundrobin,range", "sticky"));
        assert!(
            e.contains("partition.assignment.strategy") && e.contains("sticky"),
            "{e}"
        );
        let e = error(&group.replace("= 6000", "= 100"));
        assert!(e.contains("session.timeout.ms"), "{e}");
    }

    /// `[[topic]]` tables: several topics, each checked as a `[topic]` is, an error naming the
    /// line of the key in its own table; distinct names; the producers' `topics` must name
    /// them; the single-topic sections refuse several; written back as they were written.
    #[test]
    fn several_topics_parse_and_each_is_checked_as_one_is() {
        let two = GOOD
            .replace("[topic]\npartitions = 2", "[[topic]]\nname = \"a\"\npartitions = 2")
            .replace(
                "[producer]",
                "[[topic]]\nname = \"b\"\npartitions = 3\n\"replication.factor\" = 2\n[producer]",
            );
        let s = Scenario::parse(&two, "two.toml", "two").expect("parses");
        let names: Vec<&str> = s.topics.iter().map(|t| t.get_ref().name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!((s.topic().name.as_str(), s.producer_topics()), ("a", vec![0, 1]));
        assert_eq!(s.topics[1].get_ref().replication_factor, 2);

        // Each error names its line and what is wrong: in the second table, its own lines.
        let refused = |source: &str, line: usize, words: &[&str]| {
            let e = error(source);
            let at = format!("bad.toml:{line}:");
            assert!(e.starts_with(&at) && words.iter().all(|w| e.contains(w)), "{e}");
        };
        let rf = "\"replication.factor\" = 2";
        refused(
            &two.replace(rf, "\"replication.factor\" = 4"),
            13,
            &["topic.replication.factor"],
        );
        refused(
            &two.replace(rf, &format!("{rf}\n\"retention.sm\" = 1")),
            14,
            &["retention.sm"],
        );
        refused(
            &two.replace(rf, &format!("{rf}\n\"retention.ms\" = -5")),
            14,
            &["topic.retention.ms"],
        );
        refused(&two.replace("name = \"b\"", "name = \"a\""), 11, &["names two topics"]);
        refused(
            &two.replace("name = \"b\"", "name = \"b c\""),
            11,
            &["not a topic name"],
        );
        // A single [topic] names its lines too (9: the unknown key).
        let isr = "\"min.insync.replicas\" = 2";
        refused(
            &GOOD.replace(isr, &format!("{isr}\n\"retention.sm\" = 1")),
            9,
            &["retention.sm"],
        );

        // The producers write the topics named, in the order named.
        let only_b = two.replace("mode = \"sync\"", "mode = \"sync\"\ntopics = [\"b\"]");
        let s = Scenario::parse(&only_b, "b.toml", "b").expect("parses");
        assert_eq!(s.producer_topics(), vec![1]);
        for (topics, why) in [
            ("[\"c\"]", "\"c\" is not a [topic]"),
            ("[]", "one or more"),
            ("[\"a\", \"a\"]", "each once"),
        ] {
            let source = two.replace("mode = \"sync\"", &format!("mode = \"sync\"\ntopics = {topics}"));
            refused(&source, 16, &["producer.topics", why]);
        }
        let quorum = "[quorum]\ninitial_coordinators = 2\nreplace_at_s = 10\nremove = 1\n[expect]";
        let e = error(
            &two.replace("[expect]", quorum)
                .replace("brokers = 3", "brokers = 3\ncoordinators = 3"),
        );
        assert!(e.contains("quorum") && e.contains("one [topic]"), "{e}");

        // Written back (as `shrink` writes a scenario): one table stays `[topic]`, several
        // `[[topic]]`, and each reads back the same.
        for source in [GOOD, two.as_str()] {
            let s = Scenario::parse(source, "s.toml", "s").expect("parses");
            let text = toml::to_string(&s).expect("serialises");
            let back = Scenario::parse(&text, "back.toml", "s").expect("reads back");
            let topics = |s: &Scenario| s.topics.iter().map(|t| t.get_ref().clone()).collect::<Vec<_>>();
            assert_eq!(topics(&back), topics(&s), "{text}");
            assert_eq!(text.contains("[[topic]]"), s.topics.len() > 1, "{text}");
        }
    }
}
