//! The broker's partitions on one node: topics, their partition logs, and the Kafka semantics of
//! produce, fetch, list-offsets, create and delete on top of [`Log`].
//!
//! A state machine in the quinn-proto style: requests come in as method calls with `now_ms` and
//! the node's disk, answers go out as return values, and time-driven work (the `flush.ms` policy,
//! retention) is asked for by [`Broker::poll_timeout`] and done in [`Broker::handle_timeout`].
//! No I/O beyond the [`Disk`] handed in.
//!
//! Until the coordinator (issue #4) holds topic metadata, each partition directory carries a
//! `partition.metadata` file (topic id, partition count, config overrides), so a single node
//! restarts with its topics. A directory without valid metadata is a half-created or
//! half-deleted partition: its files are removed at startup, so old data never reappears in a
//! new topic of the same name.
//!
//! Idempotent producers (KIP-98, no transactions): [`Broker::allocate_producer_id`] answers
//! InitProducerId from [`producer_ids`]; each partition keeps a [`ProducerStateTable`], rebuilt
//! from its log's batch headers at [`Broker::open`], and [`Broker::produce`] checks every batch
//! that names a producer against it before appending (see [`producer_state`] for the rules).
//!
//! The group coordinator ([`crate::group`]) lives here too, so it opens (replaying committed
//! offsets) with the partitions and its session/rebalance deadlines join [`Broker::poll_timeout`].
//!
//! A partition is single-node (led by this broker with an ISR of itself, so the high watermark
//! follows the log end) unless the coordinator made it a replicated one through
//! [`Broker::apply_partition_state`]; [`replica`] owns everything about those (followers, HW,
//! ISR proposals, truncation, fencing).

pub mod clean_shutdown;
pub mod coordination;
mod followers;
pub(crate) mod partition_key;
pub mod producer_ids;
pub mod producer_state;
pub mod replica;
pub mod topic;

use std::collections::BTreeMap;

use thiserror::Error;

use crate::disk::{Disk, DiskError};
use crate::error_code::ErrorCode;
use crate::group::{GroupConfig, GroupCoordinator};
use crate::ids::{BrokerId, LeaderEpoch, Offset, ProducerEpoch, ProducerId};
use crate::log::{Log, LogConfig, LogError, ReadSlice};
use crate::record::{self, BatchError, BatchHeader};
pub use coordination::{CommitStart, PendingCommit, PendingStore};
use partition_key::PartitionMap;
use producer_ids::ProducerIdAllocator;
pub use producer_state::ProducerStateTable;
use producer_state::Verdict;
use replica::Replication;
pub use replica::{
    AckWait, ClusterView, FollowerAction, FollowerHosted, FollowerTask, IsrProposal, IsrUpdateResult, TruncationPolicy,
};
pub use topic::TopicId;

/// Producer ids each broker hands out (its range starts at `broker.id` times this): 2^40,
/// with broker ids below 2^22 the ids stay below 2^62.
pub const PRODUCER_IDS_PER_BROKER: i64 = 1 << 40;

/// Broker-wide settings, with Kafka's server.properties names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `broker.id`
    pub broker_id: BrokerId,
    /// `log.*` defaults for new topics.
    pub log: LogConfig,
    /// `num.partitions` for auto-created topics.
    pub num_partitions: i32,
    /// `auto.create.topics.enable`
    pub auto_create_topics: bool,
    /// `min.insync.replicas` default for topics.
    pub min_insync_replicas: i32,
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: i64,
    /// Partitions this broker will host at most (a limit on everything).
    pub partitions_max: usize,
    /// Partitions one topic may have at most.
    pub partitions_per_topic_max: i32,
    /// `group.*` settings of the group coordinator.
    pub group: GroupConfig,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replica.high.watermark.checkpoint.interval.ms`
    pub hw_checkpoint_interval_ms: i64,
    /// How a follower truncates on a leader change. Only code sets this (the simulator's
    /// mutant); no configuration key parses to [`TruncationPolicy::HighWatermark`].
    pub truncation: TruncationPolicy,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_id: BrokerId(0),
            log: LogConfig::default(),
            num_partitions: 1,
            auto_create_topics: true,
            min_insync_replicas: 1,
            retention_check_interval_ms: 300_000,
            partitions_max: 10_000,
            partitions_per_topic_max: 1_000,
            group: GroupConfig::default(),
            replica_lag_time_max_ms: 30_000,
            hw_checkpoint_interval_ms: 5_000,
            truncation: TruncationPolicy::LeaderEpoch,
        }
    }
}

#[derive(Debug, Error)]
pub enum BrokerError {
    #[error("disk: {0}")]
    Disk(#[from] DiskError),
    #[error("partition {dir}: {source}")]
    Log { dir: String, source: LogError },
    #[error("producer ids: {0}")]
    ProducerIds(String),
    #[error("consumer offsets log: {0}")]
    Groups(LogError),
}

/// A topic as this broker knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: TopicId,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic-level overrides by Kafka name, as given.
    pub overrides: BTreeMap<String, String>,
    pub log_config: LogConfig,
    pub min_insync_replicas: i32,
    /// Placed by the controller (its partitions live on several brokers), not created here.
    pub replicated: bool,
}

struct PartitionState {
    log: Log,
    leader_epoch: LeaderEpoch,
    high_watermark: Offset,
    producers: ProducerStateTable,
    /// `None` for a single-node partition.
    repl: Option<Replication>,
}

/// A successful produce to one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProduceOk {
    pub base_offset: Offset,
    pub log_start_offset: Offset,
    /// One past the last offset written: an acks=all reply waits until the HW reaches it.
    pub end_offset: Offset,
    /// The leader epoch the append was made in.
    pub leader_epoch: LeaderEpoch,
    /// The HW right after the append (moved by it when the ISR is this broker alone): an
    /// acks=all answer waits only while it is below `end_offset`.
    pub high_watermark: Offset,
}

/// A successful fetch from one partition: `slice` is a region of a segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchOk {
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    pub slice: ReadSlice,
}

/// `timestamp` values of ListOffsets with special meanings.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

/// A role a broker takes, as told to its [`RoleObserver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleChange<'a> {
    /// It became leader of a partition in this leader epoch.
    PartitionLeader {
        topic: &'a str,
        partition: i32,
        epoch: LeaderEpoch,
    },
    /// It began acting as controller in this controller epoch.
    Controller { epoch: i32 },
}

/// Told of every [`RoleChange`] as the broker makes it: for observers outside the broker (the
/// simulator's one-leader-per-epoch check), which a sampler would miss when a role lasts less
/// than its period. None by default.
pub type RoleObserver = Box<dyn FnMut(RoleChange<'_>)>;

/// The partitions hosted by one broker.
pub struct Broker {
    config: BrokerConfig,
    topics: BTreeMap<String, TopicMeta>,
    partitions: PartitionMap<PartitionState>,
    producer_ids: ProducerIdAllocator,
    next_retention_check_ms: i64,
    groups: GroupCoordinator,
    cluster_view: Option<ClusterView>,
    /// The controller epoch this broker acts as controller in, if it does (cluster mode).
    acting_controller_epoch: Option<i32>,
    role_observer: Option<RoleObserver>,
    hw_checkpoint_dirty: bool,
    next_hw_checkpoint_ms: i64,
    /// A FindCoordinator found no `__consumer_offsets` topic (cluster mode).
    offsets_topic_wanted: bool,
    /// Things found at startup that an operator should hear about.
    pub startup_warnings: Vec<String>,
    /// Since which registration this process's log is intact (see [`clean_shutdown`]): from the
    /// marker after a clean shutdown, else learnt from this process's first registration.
    intact_since: Option<u64>,
}

fn metadata_bytes(meta: &TopicMeta) -> Vec<u8> {
    let mut out = topic::encode_metadata(meta.id);
    out.extend_from_slice(format!("partitions: {}\n", meta.partitions).as_bytes());
    if meta.replicated {
        out.extend_from_slice(format!("replicated: {}\n", meta.replication_factor).as_bytes());
    }
    for (k, v) in &meta.overrides {
        out.extend_from_slice(format!("config: {k}={v}\n").as_bytes());
    }
    out
}

/// KIP-320: a request that names the leader epoch it expects of a partition (`current`; -1
/// names none) is refused when ours differs: FENCED_LEADER_EPOCH when it names an older one (the
/// asker is behind), UNKNOWN_LEADER_EPOCH when a newer one (we are).
pub fn check_epoch(current: i32, ours: LeaderEpoch) -> Result<(), ErrorCode> {
    match current {
        -1 => Ok(()),
        c if c < ours.0 => Err(ErrorCode::FencedLeaderEpoch),
        c if c > ours.0 => Err(ErrorCode::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

fn log_error_code(e: &LogError) -> ErrorCode {
    match e {
        LogError::Batch(BatchError::TooLarge { .. }) | LogError::LargerThanSegment { .. } => ErrorCode::MessageTooLarge,
        LogError::Batch(BatchError::BadMagic(_)) => ErrorCode::UnsupportedForMessageFormat,
        LogError::Batch(BatchError::BadCrc { .. }) => ErrorCode::CorruptMessage,
        LogError::Batch(_) => ErrorCode::InvalidRecord,
        LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
        LogError::StaleEpoch { .. } => ErrorCode::FencedLeaderEpoch,
        LogError::NonContiguous { .. } => ErrorCode::UnknownServerError,
        LogError::Config(_) => ErrorCode::InvalidConfig,
        LogError::Disk(_) | LogError::Failed(_) => ErrorCode::KafkaStorageError,
    }
}

impl Broker {
    /// Opens every partition found in the data directory, recovering each log.
    pub fn open<D: Disk>(disk: &mut D, config: BrokerConfig, now_ms: i64) -> Result<Broker, BrokerError> {
        // First, before any write: a crash from here on must find no marker.
        let intact_since = clean_shutdown::take(disk)?;
        let groups =
            GroupCoordinator::open(disk, config.group.clone(), config.log.clone()).map_err(BrokerError::Groups)?;
        let mut broker = Broker {
            next_retention_check_ms: now_ms.saturating_add(config.retention_check_interval_ms),
            config,
            topics: BTreeMap::new(),
            partitions: PartitionMap::new(),
            producer_ids: ProducerIdAllocator::open(disk).map_err(BrokerError::ProducerIds)?,
            groups,
            cluster_view: None,
            acting_controller_epoch: None,
            role_observer: None,
            hw_checkpoint_dirty: false,
            offsets_topic_wanted: false,
            next_hw_checkpoint_ms: now_ms,
            startup_warnings: Vec::new(),
            intact_since,
        };
        let checkpoint = match disk.read_all(replica::HW_CHECKPOINT_FILE) {
            Ok(bytes) => replica::decode_hw_checkpoint(&bytes).unwrap_or_else(|| {
                broker.startup_warnings.push(format!(
                    "{} is malformed; high watermarks restart at 0",
                    replica::HW_CHECKPOINT_FILE
                ));
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        for dir in disk.list("")? {
            let Some((name, partition)) = topic::parse_partition_dir(&dir) else {
                continue;
            };
            let parsed = disk
                .read_all(&format!("{dir}/{}", topic::METADATA_FILE))
                .ok()
                .and_then(|bytes| broker.parse_metadata(&bytes));
            let Some(meta) = parsed.filter(|m| partition < m.partitions) else {
                broker
                    .startup_warnings
                    .push(format!("{dir}: no valid {}; removing its files", topic::METADATA_FILE));
                for file in disk.list(&dir)? {
                    disk.remove(&format!("{dir}/{file}"))?;
                }
                continue;
            };
            let log = Log::open(disk, &dir, meta.log_config.clone()).map_err(|source| BrokerError::Log {
                dir: dir.clone(),
                source,
            })?;
            let r = log.recovery_report();
            // What recovery kept is what survived: a replay shows here where unsynced data went.
            tracing::info!(
                partition = %dir,
                log_start = log.log_start_offset().0,
                log_end = log.log_end_offset().0,
                bytes_cut = r.bytes_truncated,
                segments_dropped = r.segments_dropped,
                indexes_rebuilt = r.indexes_rebuilt,
                "partition recovered"
            );
            // A replica trusts only its checkpointed HW (Kafka's rule); a single node owns it all.
            let (high_watermark, repl) = if meta.replicated {
                let hw = checkpoint.get(&(name.clone(), partition)).copied().unwrap_or(Offset(0));
                (hw.min(log.log_end_offset()), Some(Replication::offline()))
            } else {
                (log.log_end_offset(), None)
            };
            let leader_epoch = log.latest_epoch().unwrap_or_default();
            let producers = ProducerStateTable::rebuild(disk, &log).map_err(|source| BrokerError::Log {
                dir: dir.clone(),
                source,
            })?;
            broker.topics.entry(name.clone()).or_insert(meta);
            broker.partitions.insert(
                &name,
                partition,
                PartitionState {
                    log,
                    leader_epoch,
                    high_watermark,
                    producers,
                    repl,
                },
            );
        }
        let incomplete: Vec<String> = broker
            .topics
            .iter()
            .filter(|(_, meta)| !meta.replicated)
            .filter(|(name, meta)| (0..meta.partitions).any(|p| !broker.partitions.contains_key(name, p)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in incomplete {
            broker
                .startup_warnings
                .push(format!("topic {name} is missing partitions; they are recreated empty"));
            let meta = broker.topics[&name].clone();
            for p in 0..meta.partitions {
                if !broker.partitions.contains_key(&name, p) {
                    broker
                        .create_partition(disk, &name, p, &meta)
                        .map_err(|source| BrokerError::Log {
                            dir: topic::partition_dir(&name, p),
                            source,
                        })?;
                }
            }
        }
        Ok(broker)
    }

    fn parse_metadata(&self, bytes: &[u8]) -> Option<TopicMeta> {
        let id = topic::decode_metadata(bytes)?;
        let text = std::str::from_utf8(bytes).ok()?;
        let mut partitions = None;
        let mut replicated = None;
        let mut overrides = BTreeMap::new();
        for line in text.lines().skip(2) {
            if let Some(n) = line.strip_prefix("partitions: ") {
                partitions = n.parse().ok();
            } else if let Some(n) = line.strip_prefix("replicated: ") {
                replicated = Some(n.parse::<i16>().ok()?);
            } else if let Some(kv) = line.strip_prefix("config: ") {
                let (k, v) = kv.split_once('=')?;
                overrides.insert(k.to_string(), v.to_string());
            } else {
                return None;
            }
        }
        let (log_config, min_insync_replicas) = self.topic_config(&overrides).ok()?;
        Some(TopicMeta {
            id,
            partitions: partitions?,
            replication_factor: replicated.unwrap_or(1),
            overrides,
            log_config,
            min_insync_replicas,
            replicated: replicated.is_some(),
        })
    }

    /// The effective log config and min ISR of a topic with these overrides.
    pub(crate) fn topic_config(&self, overrides: &BTreeMap<String, String>) -> Result<(LogConfig, i32), String> {
        let mut log = self.config.log.clone();
        let mut min_isr = self.config.min_insync_replicas;
        for (k, v) in overrides {
            if k == "min.insync.replicas" {
                min_isr = v
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("min.insync.replicas: {v:?} is not a number >= 1"))?;
            } else {
                log.apply(k, v)?;
            }
        }
        Ok((log, min_isr))
    }

    /// Whether topic-level overrides are valid here (names known, values in range): what a
    /// CreateTopics in cluster mode checks before it writes the topic to the coordinator.
    pub fn check_topic_configs(&self, overrides: &BTreeMap<String, String>) -> Result<(), String> {
        self.topic_config(overrides).map(|_| ())
    }

    /// The group coordinator (consumer groups and their committed offsets).
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    pub fn groups_mut(&mut self) -> &mut GroupCoordinator {
        &mut self.groups
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn topics(&self) -> &BTreeMap<String, TopicMeta> {
        &self.topics
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<(&String, &TopicMeta)> {
        self.topics.iter().find(|(_, m)| m.id == id)
    }

    /// Creates a topic. `id` comes from the caller's seeded random stream. Validates everything
    /// before touching the disk; with `validate_only` touches nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn create_topic<D: Disk>(
        &mut self,
        disk: &mut D,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        overrides: &[(String, String)],
        id: TopicId,
        validate_only: bool,
    ) -> Result<(), (ErrorCode, String)> {
        topic::validate_name(name).map_err(|e| (ErrorCode::InvalidTopicException, e))?;
        if self.topics.contains_key(name) {
            return Err((ErrorCode::TopicAlreadyExists, format!("topic {name} already exists")));
        }
        let partitions = if partitions == -1 {
            self.config.num_partitions
        } else {
            partitions
        };
        if partitions < 1 || partitions > self.config.partitions_per_topic_max {
            return Err((
                ErrorCode::InvalidPartitions,
                format!(
                    "partitions must be between 1 and {}, got {partitions}",
                    self.config.partitions_per_topic_max
                ),
            ));
        }
        if self.partitions.len() + partitions as usize > self.config.partitions_max {
            return Err((
                ErrorCode::InvalidPartitions,
                format!("this broker hosts at most {} partitions", self.config.partitions_max),
            ));
        }
        let replication_factor = if replication_factor == -1 {
            1
        } else {
            replication_factor
        };
        if replication_factor != 1 {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                format!("replication factor {replication_factor} is larger than the 1 available broker"),
            ));
        }
        let overrides: BTreeMap<String, String> = overrides.iter().cloned().collect();
        let (log_config, min_insync_replicas) = self
            .topic_config(&overrides)
            .map_err(|e| (ErrorCode::InvalidConfig, e))?;
        if validate_only {
            return Ok(());
        }
        let meta = TopicMeta {
            id,
            partitions,
            replication_factor,
            overrides,
            log_config,
            min_insync_replicas,
            replicated: false,
        };
        for p in 0..partitions {
            self.create_partition(disk, name, p, &meta)
                .map_err(|e| (ErrorCode::KafkaStorageError, e.to_string()))?;
        }
        self.topics.insert(name.to_string(), meta);
        Ok(())
    }

    fn create_partition<D: Disk>(
        &mut self,
        disk: &mut D,
        name: &str,
        p: i32,
        meta: &TopicMeta,
    ) -> Result<(), LogError> {
        let dir = topic::partition_dir(name, p);
        for stale in disk.list(&dir)? {
            disk.remove(&format!("{dir}/{stale}"))?;
        }
        let log = Log::open(disk, &dir, meta.log_config.clone())?;
        // The metadata goes last: a partition without it is removed at startup.
        disk.write_file_atomic(&format!("{dir}/{}", topic::METADATA_FILE), &metadata_bytes(meta))?;
        self.partitions.insert(
            name,
            p,
            PartitionState {
                log,
                leader_epoch: LeaderEpoch(0),
                high_watermark: Offset(0),
                producers: ProducerStateTable::default(),
                repl: None,
            },
        );
        Ok(())
    }

    /// Deletes a topic and its data.
    pub fn delete_topic<D: Disk>(&mut self, disk: &mut D, name: &str) -> Result<TopicId, (ErrorCode, String)> {
        let meta = self
            .topics
            .remove(name)
            .ok_or((ErrorCode::UnknownTopicOrPartition, format!("no topic {name}")))?;
        for p in 0..meta.partitions {
            self.partitions.remove(name, p);
            let dir = topic::partition_dir(name, p);
            let storage = |e: DiskError| (ErrorCode::KafkaStorageError, e.to_string());
            // Metadata first: a crash midway leaves a directory that startup cleans up.
            let metadata = format!("{dir}/{}", topic::METADATA_FILE);
            if disk.exists(&metadata) {
                disk.remove(&metadata).map_err(storage)?;
            }
            for file in disk.list(&dir).map_err(storage)? {
                disk.remove(&format!("{dir}/{file}")).map_err(storage)?;
            }
        }
        Ok(meta.id)
    }

    fn partition(&self, topic: &str, partition: i32) -> Result<&PartitionState, ErrorCode> {
        self.partitions
            .get(topic, partition)
            .ok_or(ErrorCode::UnknownTopicOrPartition)
    }

    /// The partition, if the request's `current_leader_epoch` allows (see [`check_epoch`]): one
    /// lookup serves the check and what the request does next.
    fn partition_in_epoch(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<&PartitionState, ErrorCode> {
        let part = self.partition(topic, partition)?;
        check_epoch(current_leader_epoch, part.leader_epoch)?;
        Ok(part)
    }

    /// Appends a producer's record set (rewritten in place with offsets) to a partition this
    /// broker leads, honouring `acks` and `min.insync.replicas`, and syncs when the flush
    /// policy asks.
    pub fn produce<D: Disk>(
        &mut self,
        disk: &mut D,
        topic: &str,
        partition: i32,
        records: &mut [u8],
        acks: i16,
        now_ms: i64,
    ) -> Result<ProduceOk, ErrorCode> {
        if !(-1..=1).contains(&acks) {
            return Err(ErrorCode::InvalidRequiredAcks);
        }
        let min_isr = self.topics.get(topic).map_or(1, |m| m.min_insync_replicas);
        let state = self
            .partitions
            .get_mut(topic, partition)
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        if state
            .repl
            .as_ref()
            .is_some_and(|r| !matches!(r.role, replica::Role::Leader { .. }))
        {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        let isr_size = Self::isr_size(state) as i64;
        if acks == -1 && isr_size < i64::from(min_isr) {
            tracing::debug!(target: "replication", %topic, partition, isr_size, min_insync_replicas = min_isr, "produce refused: NOT_ENOUGH_REPLICAS");
            return Err(ErrorCode::NotEnoughReplicas);
        }
        // Only sets naming a producer pay for the producer checks, and for validating the set
        // here first: a corrupt batch must be refused as corrupt, not judged by its sequence.
        let idempotent = producer_state::claims_producer(records);
        let validated = if idempotent {
            let headers = record::validate_record_set(records, state.log.config().max_message_bytes)
                .map_err(|e| log_error_code(&LogError::Batch(e)))?;
            if let Verdict::Duplicate { base_offset } = state.producers.check(&headers)? {
                // Kafka's answer to a retry of a batch already written: success, original offset.
                // It waits like the original would: until the HW passes the log end.
                return Ok(ProduceOk {
                    base_offset,
                    log_start_offset: state.log.log_start_offset(),
                    end_offset: state.log.log_end_offset(),
                    leader_epoch: state.leader_epoch,
                    high_watermark: state.high_watermark,
                });
            }
            Some(headers)
        } else {
            None
        };
        // Validated above (an idempotent set) or by the log: each batch's CRC is checked once.
        let appended = match &validated {
            Some(headers) => state
                .log
                .append_validated_as_leader(disk, records, headers, state.leader_epoch, now_ms),
            None => state.log.append_as_leader(disk, records, state.leader_epoch, now_ms),
        };
        let info = appended.map_err(|e| log_error_code(&e))?;
        if idempotent {
            // The log rewrote the offsets in place; record each batch where it landed.
            let mut at = 0;
            while at < records.len() {
                let h = BatchHeader::parse(&records[at..]).expect("the log validated and wrote this set");
                state.producers.record(&h);
                at += h.total_bytes();
            }
        }
        if info.flush_due {
            state.log.flush(disk).map_err(|e| log_error_code(&e))?;
        }
        if state.repl.is_none() {
            state.high_watermark = state.log.log_end_offset();
        } else if replica::maybe_advance_hw(state) {
            self.hw_checkpoint_dirty = true;
        }
        Ok(ProduceOk {
            base_offset: info.base_offset,
            log_start_offset: state.log.log_start_offset(),
            end_offset: info.last_offset.plus(1),
            leader_epoch: state.leader_epoch,
            high_watermark: state.high_watermark,
        })
    }

    /// InitProducerId for an idempotent producer: a producer id never handed out before by this
    /// broker (across restarts and crashes), at epoch 0, as Kafka answers a request without a
    /// transactional id (a fresh id every time, even when the producer passes its old one).
    pub fn allocate_producer_id<D: Disk>(&mut self, disk: &mut D) -> Result<(ProducerId, ProducerEpoch), ErrorCode> {
        match self.producer_ids.allocate(disk) {
            // Each broker hands out ids from its own range (broker id in the high bits), so two
            // brokers of a cluster never give two producers one id: with a shared id, one
            // producer's batch would be taken for a retry of the other's and answered with the
            // other's offset, never written (the simulator found this as lost writes, seed 1549).
            // A coordinator-claimed block (Kafka's /latest_producer_id_block) would do the same.
            Ok(id) if id.0 < PRODUCER_IDS_PER_BROKER && self.config.broker_id.0 >= 0 => Ok((
                ProducerId(i64::from(self.config.broker_id.0) * PRODUCER_IDS_PER_BROKER + id.0),
                ProducerEpoch(0),
            )),
            Ok(id) => {
                tracing::error!(
                    id = id.0,
                    broker = self.config.broker_id.0,
                    "producer id range of this broker used up"
                );
                Err(ErrorCode::KafkaStorageError)
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming a producer id block failed");
                Err(ErrorCode::KafkaStorageError)
            }
        }
    }

    /// The idempotent producers known to a partition.
    pub fn producer_state(&self, topic: &str, partition: i32) -> Result<&ProducerStateTable, ErrorCode> {
        Ok(&self.partition(topic, partition)?.producers)
    }

    /// Reads whole batches from `offset`, up to the high watermark, for a consumer that expects
    /// the partition's leader epoch to be `current_leader_epoch` (-1: any, see [`check_epoch`]).
    pub fn fetch<D: Disk>(
        &self,
        disk: &D,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        offset: Offset,
        max_bytes: u64,
    ) -> Result<FetchOk, ErrorCode> {
        let state = self.partition_in_epoch(topic, partition, current_leader_epoch)?;
        Self::check_leads(state)?;
        // As Kafka: out of range only outside [log start, log end]; between the high watermark
        // and the log end (a new leader whose HW has not caught up yet) the answer is empty.
        // Resetting a consumer there would send it back to the start of the log.
        let slice = state
            .log
            .read(disk, offset, max_bytes, Some(state.high_watermark))
            .map_err(|e| log_error_code(&e))?;
        Ok(FetchOk {
            high_watermark: state.high_watermark,
            last_stable_offset: state.high_watermark,
            log_start_offset: state.log.log_start_offset(),
            slice,
        })
    }

    /// ListOffsets: `-1` latest (the high watermark), `-2` earliest, else the first offset with
    /// a timestamp at least `timestamp`; `(-1, -1)` when there is none, as Kafka answers.
    pub fn list_offset<D: Disk>(
        &self,
        disk: &D,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<(Offset, i64), ErrorCode> {
        self.check_leader(topic, partition)?;
        let state = self.partition(topic, partition)?;
        match timestamp {
            LATEST_TIMESTAMP => Ok((state.high_watermark, -1)),
            EARLIEST_TIMESTAMP => Ok((state.log.log_start_offset(), -1)),
            MAX_TIMESTAMP => Ok(state
                .log
                .max_timestamp()
                .filter(|(o, _)| *o < state.high_watermark)
                .unwrap_or((Offset(-1), -1))),
            t if t < 0 => Err(ErrorCode::UnsupportedVersion),
            t => match state
                .log
                .offset_for_timestamp(disk, t)
                .map_err(|e| log_error_code(&e))?
            {
                Some((offset, ts)) if offset < state.high_watermark => Ok((offset, ts)),
                _ => Ok((Offset(-1), -1)),
            },
        }
    }

    /// (log start, high watermark, log end) of a partition.
    pub fn offsets(&self, topic: &str, partition: i32) -> Result<(Offset, Offset, Offset), ErrorCode> {
        let s = self.partition(topic, partition)?;
        Ok((s.log.log_start_offset(), s.high_watermark, s.log.log_end_offset()))
    }

    /// The leader epoch of a partition this broker leads.
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> Result<LeaderEpoch, ErrorCode> {
        Ok(self.partition(topic, partition)?.leader_epoch)
    }

    /// When [`Broker::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<i64> {
        let flush = self
            .partitions
            .values()
            .flat_map(|p| [p.log.flush_deadline_ms(), p.log.closed_sync_deadline_ms()])
            .flatten()
            .min();
        let mut next = flush.map_or(self.next_retention_check_ms, |f| f.min(self.next_retention_check_ms));
        if self.hw_checkpoint_dirty {
            next = next.min(self.next_hw_checkpoint_ms);
        }
        Some(self.groups.poll_timeout().map_or(next, |g| g.min(next)))
    }

    /// Time-driven work: syncs logs whose `flush.ms` elapsed; applies retention every
    /// `log.retention.check.interval.ms`. A disk failure takes that partition offline (its log
    /// refuses everything after) and is reported, the others carry on.
    pub fn handle_timeout<D: Disk>(&mut self, disk: &mut D, now_ms: i64) -> Vec<(String, i32, LogError)> {
        self.groups.handle_timeout(now_ms);
        let mut failures = Vec::new();
        if self.hw_checkpoint_dirty && now_ms >= self.next_hw_checkpoint_ms {
            self.next_hw_checkpoint_ms = now_ms.saturating_add(self.config.hw_checkpoint_interval_ms);
            if let Err(e) = self.checkpoint_high_watermarks(disk) {
                tracing::warn!(error = %e, "high watermark checkpoint failed; retried next interval");
            }
        }
        let retention_due = now_ms >= self.next_retention_check_ms;
        if retention_due {
            self.next_retention_check_ms = now_ms.saturating_add(self.config.retention_check_interval_ms);
        }
        for ((topic, p), state) in self.partitions.iter_mut() {
            let mut result = Ok(());
            if state.log.flush_due(now_ms) {
                result = state.log.flush(disk);
            } else if state.log.closed_sync_deadline_ms().is_some_and(|t| t <= now_ms) {
                result = state.log.sync_closed(disk);
            }
            if retention_due && result.is_ok() {
                result = state.log.apply_retention(disk, now_ms, state.high_watermark).map(|deleted| {
                    if deleted > 0 {
                        tracing::info!(target: "log", %topic, partition = *p, segments_deleted = deleted, "retention deleted segments");
                    }
                });
            }
            if let Err(e) = result {
                failures.push((topic.clone(), *p, e));
            }
        }
        failures
    }

    /// Syncs every partition and, when all of them synced, leaves the clean-shutdown marker
    /// (clean shutdown; the last disk write of the process).
    pub fn flush_all<D: Disk>(&mut self, disk: &mut D) -> Vec<(String, i32, LogError)> {
        let mut failures = Vec::new();
        for ((topic, p), state) in self.partitions.iter_mut() {
            if let Err(e) = state.log.flush(disk) {
                failures.push((topic.clone(), *p, e));
            }
        }
        if self.hw_checkpoint_dirty {
            if let Err(e) = self.checkpoint_high_watermarks(disk) {
                tracing::warn!(error = %e, "high watermark checkpoint failed at shutdown");
            }
        }
        // Every log synced: the next process may say its log is intact (a lower HW checkpoint
        // only costs a re-fetch). The caller writes nothing after this.
        if let (true, Some(since)) = (failures.is_empty(), self.intact_since) {
            if let Err(e) = clean_shutdown::write(disk, since) {
                tracing::warn!(error = %e, "clean-shutdown marker not written; the next start counts as unclean");
            }
        }
        failures
    }

    /// Since which registration (its creation index) this process's log is intact, if known.
    pub fn intact_since(&self) -> Option<u64> {
        self.intact_since
    }

    /// This process registered, and the registration was created at `czxid`: after an unclean
    /// start, the log is intact from there on. A value already known (a clean start's, or an
    /// earlier registration's of this process) stays.
    pub fn note_registered(&mut self, czxid: u64) {
        self.intact_since.get_or_insert(czxid);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod idempotence_tests;

#[cfg(test)]
mod replication_tests;

#[cfg(test)]
mod coordination_tests;
