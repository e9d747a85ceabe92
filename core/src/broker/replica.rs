//! ISR replication of a partition across brokers (issue #4): the leader's view of its followers,
//! the high watermark, ISR change proposals, and the follower's truncate-then-fetch cycle.
//!
//! Owns: the per-partition [`Replication`] state kept next to each replicated partition's log,
//! and the [`Broker`] methods that drive it. A partition without `Replication` is a single-node
//! partition (ISR = this broker, HW = log end), exactly as before replication existed.
//!
//! Contract with the integrator (the node wiring the coordinator):
//! - inputs: [`Broker::apply_partition_state`] whenever the coordinator's partition state (or
//!   its znode version) changes, [`Broker::remove_replica`] when this broker stops hosting a
//!   partition, [`Broker::set_cluster_view`] for Metadata, [`Broker::isr_update_result`] with the
//!   outcome of each compare-and-set it was asked for;
//! - outputs: [`Broker::poll_isr_proposals`] (ISR changes to compare-and-set into
//!   `/brokers/topics/{t}/partitions/{p}/state` at the given version), and
//!   [`Broker::follower_tasks`] (what the replica fetcher should ask each leader).
//!
//! Fault model: any input may be stale or repeated. An older leader epoch than the one held is
//! ignored; a follower's fetch is fenced by its epoch (KIP-320); an ISR change is effective only
//! once the coordinator confirmed it, and until then the high watermark is computed over the
//! union of the old and proposed ISR ("maximal ISR", KIP-497), so neither an unconfirmed shrink
//! nor an unconfirmed expand can make HW pass a replica that may still be elected. The HW is
//! checkpointed per broker (`replication-offset-checkpoint`) so a restarted replica knows it.
//!
//! Truncation on becoming follower is by leader epoch (KIP-101/279): ask the leader for the end
//! offset of our latest epoch and cut to it. [`TruncationPolicy::HighWatermark`] is the pre-KIP-101
//! rule, kept only as a simulator mutant that must lose data: no config key parses to it, only
//! code constructs it (the realnet binary never does).

use std::collections::BTreeMap;

use super::followers::Followers;
use super::{
    check_epoch, log_error_code, topic, Broker, BrokerError, PartitionState as Part, ProducerStateTable, RoleChange,
    RoleObserver, TopicId, TopicMeta,
};
use crate::cluster::{next_elr, BrokerRegistration, LogEndReport, PartitionState, TopicRecord};
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::ids::{BrokerId, LeaderEpoch, Offset};
use crate::log::{Log, LogError};
use crate::record::BatchHeader;

/// The broker-wide high watermark checkpoint file.
pub const HW_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Checkpoint entries read at most (a bound on a corrupt file).
const HW_CHECKPOINT_ENTRIES_MAX: usize = 1_000_000;

/// How a follower cuts its log when it starts following a new leader epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TruncationPolicy {
    /// KIP-101/279: to the leader's end offset for the follower's latest epoch.
    #[default]
    LeaderEpoch,
    /// Pre-KIP-101: to the follower's own high watermark. A simulator-only mutant that loses
    /// acknowledged data; no configuration key maps to it.
    HighWatermark,
}

/// Live brokers and every partition's state, as the coordinator holds them, for Metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub brokers: Vec<BrokerRegistration>,
    pub controller: Option<BrokerId>,
    /// Topic name -> its record and each partition's state.
    pub topics: BTreeMap<String, (TopicRecord, BTreeMap<i32, PartitionState>)>,
}

/// An ISR change the leader wants written to the coordinator by compare-and-set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrProposal {
    pub topic: String,
    pub partition: i32,
    pub new_state: PartitionState,
    pub expected_zk_version: i32,
}

/// The coordinator's answer to an [`IsrProposal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsrUpdateResult {
    /// Written; the znode now has this version.
    Committed { zk_version: i32 },
    /// Not written (the version did not match, a check failed, or it was never sent): re-read
    /// the state and call [`Broker::apply_partition_state`]. Until that state is applied the
    /// proposal's ISR still counts for the high watermark (maximal ISR): a version that moved
    /// may be this leader's own earlier write of unknown outcome, which did apply.
    Conflict,
    /// The outcome is unknown (a timeout, a coordinator failover): the write may still apply.
    /// The proposal stays in flight, its ISR counting for the high watermark (maximal ISR), and
    /// [`Broker::poll_isr_proposals`] offers it again as it was, until an answer is definite or
    /// a newer state is applied (Kafka's leader keeps a pending AlterPartition the same way).
    /// Taken as not written, an expansion that did apply would name a replica in the ISR that
    /// the high watermark and acks=all no longer wait for, and that replica could be elected
    /// without records acknowledged meanwhile.
    Unknown,
}

/// What the replica fetcher should do next for one followed partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerTask {
    pub topic: String,
    pub topic_id: TopicId,
    pub partition: i32,
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub action: FollowerAction,
}

/// Whether the broker has the partition a follower's answer was for, as
/// [`Broker::follower_fetched`] and [`Broker::follower_truncate`] found it when they looked it up
/// (whatever they did with the answer): the replica fetcher pokes the node's waiters for it
/// without asking again (a poke of a partition no longer here wakes everyone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerHosted(pub bool);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowerAction {
    /// Send OffsetForLeaderEpoch for `epoch` (our latest), then [`Broker::follower_truncate`].
    Truncate { epoch: LeaderEpoch },
    /// Send Fetch from `offset`, then [`Broker::follower_fetched`].
    Fetch { offset: Offset },
}

/// An acks=all produce's state after its append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckWait {
    Pending,
    Done,
    Failed(ErrorCode),
}

/// One follower as the leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Its log end offset (its last fetch offset); -1 until it fetched in this epoch.
    pub leo: Offset,
    pub last_caught_up_ms: i64,
    pub last_fetch_ms: i64,
    pub last_fetch_leader_leo: Offset,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Leader {
        /// The log end when this epoch began.
        epoch_start: Offset,
        followers: Followers<Progress>,
        /// An ISR change proposed to the coordinator whose outcome is not known yet.
        in_flight: Option<Box<InFlight>>,
    },
    Follower {
        leader: BrokerId,
        phase: Phase,
    },
    /// Not serving: no leader, restarted without state yet, or not in the replica list.
    Offline,
}

/// A leader's ISR proposal in flight: its ISR counts for the high watermark (maximal ISR) until
/// the outcome is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InFlight {
    pub proposal: IsrProposal,
    /// Answered [`IsrUpdateResult::Unknown`]: to be sent again as it was.
    pub resend: bool,
    /// Answered [`IsrUpdateResult::Conflict`]: in flight until the next state is applied, even
    /// one of the version this leader already holds (then nothing was written).
    pub reread: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Truncating,
    Fetching,
    /// Fenced or told we are not following the right leader: wait for new partition state.
    AwaitingState,
}

/// A replicated partition's cluster state on this broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replication {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// The state's eligible leader replicas (KIP-966), carried into this leader's ISR changes.
    pub elr: Vec<BrokerId>,
    /// The topic's `min.insync.replicas`: below it (with at least that many replicas) the
    /// high watermark stands still (KIP-966).
    pub min_isr: i32,
    pub controller_epoch: i32,
    pub zk_version: i32,
    pub role: Role,
    /// No ISR change may be proposed: a member restarted since the state was written, and a
    /// write by this leader would hide that from the controller ([`Broker::hold_isr_changes`]).
    pub isr_changes_held: bool,
}

impl Replication {
    pub(crate) fn offline() -> Replication {
        Replication {
            replicas: Vec::new(),
            isr: Vec::new(),
            elr: Vec::new(),
            min_isr: 1,
            controller_epoch: -1,
            zk_version: -1,
            role: Role::Offline,
            isr_changes_held: false,
        }
    }

    fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader { .. })
    }
}

/// Parses the checkpoint: `0`, a count, then `topic partition hw` lines. `None` if malformed.
pub(crate) fn decode_hw_checkpoint(bytes: &[u8]) -> Option<BTreeMap<(String, i32), Offset>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let n: usize = lines.next()?.parse().ok()?;
    if n > HW_CHECKPOINT_ENTRIES_MAX {
        return None;
    }
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let mut parts = lines.next()?.split(' ');
        let (t, p, hw) = (parts.next()?, parts.next()?, parts.next()?);
        out.insert((t.to_string(), p.parse().ok()?), Offset(hw.parse().ok()?));
    }
    Some(out)
}

fn encode_hw_checkpoint(entries: &BTreeMap<(String, i32), Offset>) -> Vec<u8> {
    let mut s = format!("0\n{}\n", entries.len());
    for ((t, p), hw) in entries {
        s.push_str(&format!("{t} {p} {}\n", hw.0));
    }
    s.into_bytes()
}

/// Leader: the high watermark the (maximal) ISR allows, if the leader has appended in its epoch.
fn leader_hw_candidate(part: &Part) -> Option<Offset> {
    let repl = part.repl.as_ref()?;
    let Role::Leader {
        followers, in_flight, ..
    } = &repl.role
    else {
        return None;
    };
    // As Kafka: the HW is the lowest log end over the (maximal) ISR, whatever epoch wrote the
    // records below it. (Raft's "commit only entries of your own term" does not apply: any ISR
    // member may lead next, and each holds everything below the HW.) Requiring an append in the
    // new epoch first would deadlock a partition whose ISR is below min.insync.replicas: no
    // append is allowed, so the HW could never pass the new leader's epoch start, and no
    // follower could rejoin.
    // KIP-966: while the ISR is below min.insync.replicas the HW stands still. The replicas
    // that left it stay eligible to lead (the ELR) because no acks=all write is acknowledged
    // meanwhile; a HW moving over records only this small ISR holds would let consumers read
    // records that an eligible leader lacks, and that its election then truncates (a campaign
    // seed: a consumer read offset 247, the ELR member elected next had 246 records).
    let min_isr = usize::try_from(repl.min_isr).unwrap_or(1);
    if repl.isr.len() < min_isr && repl.replicas.len() >= min_isr {
        return None;
    }
    let leo = part.log.log_end_offset();
    let maximal = repl
        .isr
        .iter()
        .chain(in_flight.iter().flat_map(|f| &f.proposal.new_state.isr));
    let mut hw = leo;
    for id in maximal {
        if let Some(p) = followers.get(id) {
            hw = hw.min(p.leo);
        }
    }
    Some(hw)
}

/// Moves a leader's HW forward when its ISR allows (never back).
pub(super) fn maybe_advance_hw(part: &mut Part) -> bool {
    match leader_hw_candidate(part) {
        Some(hw) if hw > part.high_watermark => {
            part.high_watermark = hw;
            true
        }
        _ => false,
    }
}

impl Broker {
    /// Sets the live brokers and all partitions' states: Metadata answers from this view.
    pub fn set_cluster_view(&mut self, view: ClusterView) {
        self.cluster_view = Some(view);
    }

    pub fn cluster_view(&self) -> Option<&ClusterView> {
        self.cluster_view.as_ref()
    }

    /// Records whether this broker acts as controller, and in which controller epoch (set by
    /// the node's cluster task; read by tests and the simulator's one-controller-per-epoch
    /// check).
    pub fn set_acting_controller_epoch(&mut self, epoch: Option<i32>) {
        if let (Some(e), Some(observer)) = (epoch, &mut self.role_observer) {
            if self.acting_controller_epoch != epoch {
                observer(RoleChange::Controller { epoch: e });
            }
        }
        self.acting_controller_epoch = epoch;
    }

    /// Sets the observer told of every role this broker takes from now on (see
    /// [`RoleObserver`]).
    pub fn set_role_observer(&mut self, observer: RoleObserver) {
        self.role_observer = Some(observer);
    }

    pub fn acting_controller_epoch(&self) -> Option<i32> {
        self.acting_controller_epoch
    }

    /// Applies the coordinator's state of one partition this broker is a replica of: creates
    /// the replica's log if absent and makes it leader or follower. A no-op when nothing
    /// changed; a state with an older leader epoch than held, or an older znode version in the
    /// same epoch, is ignored.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_partition_state<D: Disk>(
        &mut self,
        disk: &mut D,
        topic: &str,
        record: &TopicRecord,
        partition: i32,
        state: &PartitionState,
        zk_version: i32,
        now_ms: i64,
    ) -> Result<(), BrokerError> {
        let me = self.config.broker_id;
        let replicas = record.assignment.get(&partition).cloned().unwrap_or_default();
        self.ensure_replicated_topic(disk, topic, record)?;
        if !self.partitions.contains_key(topic, partition) {
            let meta = self.topics[topic].clone();
            self.create_partition(disk, topic, partition, &meta)
                .map_err(|source| BrokerError::Log {
                    dir: topic::partition_dir(topic, partition),
                    source,
                })?;
        }
        let policy = self.config.truncation;
        let min_isr = self.topics.get(topic).map_or(1, |m| m.min_insync_replicas);
        let part = self.partitions.get_mut(topic, partition).expect("created above");
        let repl = part.repl.get_or_insert_with(Replication::offline);
        let held = part.leader_epoch;
        let fresh = matches!(repl.role, Role::Offline) && repl.zk_version < 0;
        let stale = state.leader_epoch < held || (state.leader_epoch == held && zk_version <= repl.zk_version);
        // A reassignment writes the topic record and the state together, but a scan may read
        // the record after the state: the same state then arrives again with the new replicas.
        let replicas_moved = state.leader_epoch == held && zk_version == repl.zk_version && repl.replicas != replicas;
        if !fresh && stale && !replicas_moved {
            // A proposal answered Conflict waited for this read: the state is unchanged, so
            // nothing was written and the ISR held is the truth.
            if let Role::Leader { in_flight, .. } = &mut repl.role {
                if in_flight.as_ref().is_some_and(|f| f.reread) {
                    *in_flight = None;
                    maybe_advance_hw(part);
                }
            }
            return Ok(());
        }
        let same_role = !fresh
            && state.leader_epoch == held
            && match &repl.role {
                Role::Leader { .. } => state.leader == Some(me),
                Role::Follower { leader, .. } => state.leader == Some(*leader),
                Role::Offline => false,
            };
        repl.replicas = replicas.clone();
        repl.isr = state.isr.clone();
        repl.elr = state.elr.clone();
        repl.min_isr = min_isr;
        repl.controller_epoch = state.controller_epoch;
        repl.zk_version = zk_version;
        if same_role {
            if let Role::Leader {
                in_flight, followers, ..
            } = &mut repl.role
            {
                // The coordinator's state is the truth now; a proposal in flight was answered
                // (or overtaken) by it.
                *in_flight = None;
                // A reassignment added or removed replicas: new ones start as followers out of
                // the ISR (they join once caught up), removed ones stop counting.
                followers.retain(|r, _| replicas.contains(r));
                for r in replicas.iter().filter(|r| **r != me) {
                    followers.get_or_insert_with(*r, || Progress {
                        leo: Offset(-1),
                        last_caught_up_ms: if state.isr.contains(r) { now_ms } else { 0 },
                        last_fetch_ms: now_ms,
                        last_fetch_leader_leo: part.log.log_end_offset(),
                    });
                }
            }
            maybe_advance_hw(part);
            return Ok(());
        }
        part.leader_epoch = state.leader_epoch;
        let dir = part.log.dir().to_string();
        let log_err = |source| BrokerError::Log {
            dir: dir.clone(),
            source,
        };
        match state.leader {
            Some(l) if l == me && replicas.contains(&me) => {
                let leo = part.log.log_end_offset();
                let followers = replicas
                    .iter()
                    .filter(|r| **r != me)
                    .map(|r| {
                        let p = Progress {
                            leo: Offset(-1),
                            last_caught_up_ms: if state.isr.contains(r) { now_ms } else { 0 },
                            last_fetch_ms: now_ms,
                            last_fetch_leader_leo: leo,
                        };
                        (*r, p)
                    })
                    .collect();
                repl.role = Role::Leader {
                    epoch_start: leo,
                    followers,
                    in_flight: None,
                };
                part.high_watermark = part.high_watermark.min(leo);
                maybe_advance_hw(part);
                if let Some(observer) = &mut self.role_observer {
                    observer(RoleChange::PartitionLeader {
                        topic,
                        partition,
                        epoch: state.leader_epoch,
                    });
                }
            }
            Some(l) if replicas.contains(&me) => {
                let phase = match policy {
                    TruncationPolicy::HighWatermark => {
                        let hw = part.high_watermark;
                        part.log.truncate_to(disk, hw).map_err(log_err)?;
                        part.producers = ProducerStateTable::rebuild(disk, &part.log).map_err(log_err)?;
                        Phase::Fetching
                    }
                    TruncationPolicy::LeaderEpoch if part.log.latest_epoch().is_none() => Phase::Fetching,
                    TruncationPolicy::LeaderEpoch => Phase::Truncating,
                };
                repl.role = Role::Follower { leader: l, phase };
                part.high_watermark = part.high_watermark.min(part.log.log_end_offset());
            }
            _ => repl.role = Role::Offline,
        }
        self.hw_checkpoint_dirty = true;
        Ok(())
    }

    fn ensure_replicated_topic<D: Disk>(
        &mut self,
        _disk: &mut D,
        topic: &str,
        record: &TopicRecord,
    ) -> Result<(), BrokerError> {
        if self.topics.contains_key(topic) {
            return Ok(());
        }
        let overrides: BTreeMap<String, String> = record.configs.clone();
        let (log_config, min_insync_replicas) = self.topic_config(&overrides).unwrap_or_else(|why| {
            tracing::warn!(%topic, %why, "topic configs refused; using broker defaults");
            (self.config.log.clone(), self.config.min_insync_replicas)
        });
        let id = TopicId::from_hex(&record.topic_id_hex).unwrap_or(TopicId::from_random(0, 1));
        let meta = TopicMeta {
            id,
            partitions: i32::try_from(record.assignment.len()).unwrap_or(i32::MAX),
            replication_factor: record
                .assignment
                .values()
                .map(|r| i16::try_from(r.len()).unwrap_or(i16::MAX))
                .max()
                .unwrap_or(1),
            overrides,
            log_config,
            min_insync_replicas,
            replicated: true,
        };
        self.topics.insert(topic.to_string(), meta);
        Ok(())
    }

    /// Stops hosting a partition and deletes its files (a reassignment or topic deletion).
    pub fn remove_replica<D: Disk>(&mut self, disk: &mut D, topic: &str, partition: i32) -> Result<(), BrokerError> {
        self.partitions.remove(topic, partition);
        let dir = topic::partition_dir(topic, partition);
        let metadata = format!("{dir}/{}", topic::METADATA_FILE);
        if disk.exists(&metadata) {
            disk.remove(&metadata)?;
        }
        for file in disk.list(&dir)? {
            disk.remove(&format!("{dir}/{file}"))?;
        }
        if !self.partitions.has_topic(topic) {
            self.topics.remove(topic);
        }
        self.hw_checkpoint_dirty = true;
        Ok(())
    }

    /// Whether a produce/fetch/list-offsets may be served here: single-node partitions always,
    /// replicated ones only by their leader.
    pub(crate) fn check_leader(&self, topic: &str, partition: i32) -> Result<(), ErrorCode> {
        Self::check_leads(self.partition(topic, partition)?)
    }

    /// [`check_leader`](Self::check_leader) of a partition already looked up.
    pub(super) fn check_leads(part: &Part) -> Result<(), ErrorCode> {
        match &part.repl {
            Some(r) if !r.is_leader() => Err(ErrorCode::NotLeaderOrFollower),
            _ => Ok(()),
        }
    }

    /// The effective ISR size for acks=all (1 for a single-node partition).
    pub(super) fn isr_size(part: &Part) -> usize {
        part.repl.as_ref().map_or(1, |r| r.isr.len())
    }

    /// Whether an acks=all produce that ended at `end_offset` in `epoch` may be answered.
    pub fn acks_all_status(&self, topic: &str, partition: i32, end_offset: Offset, epoch: LeaderEpoch) -> AckWait {
        let Ok(part) = self.partition(topic, partition) else {
            return AckWait::Failed(ErrorCode::NotLeaderOrFollower);
        };
        if part.leader_epoch != epoch || part.repl.as_ref().is_some_and(|r| !r.is_leader()) {
            return AckWait::Failed(ErrorCode::NotLeaderOrFollower);
        }
        // Below min ISR first: the HW stands still there (KIP-966), so waiting would only end
        // in a timeout.
        let min_isr = self.topics.get(topic).map_or(1, |m| m.min_insync_replicas);
        if (Self::isr_size(part) as i64) < i64::from(min_isr) {
            return AckWait::Failed(ErrorCode::NotEnoughReplicasAfterAppend);
        }
        if part.high_watermark < end_offset {
            return AckWait::Pending;
        }
        AckWait::Done
    }

    /// A follower's Fetch (replica_id >= 0) at the leader, first half: records the follower's
    /// fetch offset as its log end and when it was last caught up (Kafka's rule: caught up when
    /// it fetched from at least the leader's log end as of this fetch, or of its previous one),
    /// and moves the HW. Then [`Broker::replica_read`] reads. Returns whether the HW moved (the
    /// only offset a waiting request watches that a follower's fetch can change).
    ///
    /// `current_leader_epoch` is the epoch the follower's request names for the partition (-1:
    /// none); another than ours refuses the fetch (see [`check_epoch`]) before anything is
    /// recorded.
    pub fn record_follower_fetch(
        &mut self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        replica: BrokerId,
        offset: Offset,
        now_ms: i64,
    ) -> Result<bool, ErrorCode> {
        let part = self
            .partitions
            .get_mut(topic, partition)
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        check_epoch(current_leader_epoch, part.leader_epoch)?;
        let leo = part.log.log_end_offset();
        let start = part.log.log_start_offset();
        let Some(Replication {
            role: Role::Leader { followers, .. },
            ..
        }) = &mut part.repl
        else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        let Some(p) = followers.get_mut(&replica) else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        if offset > leo || offset < start {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        p.leo = offset;
        if offset >= leo {
            p.last_caught_up_ms = now_ms;
        } else if offset >= p.last_fetch_leader_leo {
            p.last_caught_up_ms = p.last_caught_up_ms.max(p.last_fetch_ms);
        }
        p.last_fetch_leader_leo = leo;
        p.last_fetch_ms = now_ms;
        let advanced = maybe_advance_hw(part);
        if advanced {
            self.hw_checkpoint_dirty = true;
        }
        Ok(advanced)
    }

    /// Whether a Fetch of this partition from `offset` would answer no records and no error
    /// now, by `replica` (a follower) or by a consumer (`None`): the cheap test a waiting Fetch
    /// makes before it builds an answer. Only the plainly empty case says `true`: the epoch
    /// matches (or is not given), this broker leads the partition (and `replica` follows it) and
    /// `offset` is the log end, where a read touches no file. Anything else, the full read decides.
    pub fn fetch_is_empty(
        &self,
        topic: &str,
        partition: i32,
        replica: Option<BrokerId>,
        offset: Offset,
        current_leader_epoch: i32,
    ) -> bool {
        let Ok(part) = self.partition(topic, partition) else {
            return false;
        };
        if current_leader_epoch != -1 && current_leader_epoch != part.leader_epoch.0 {
            return false;
        }
        if offset != part.log.log_end_offset() || offset < part.log.log_start_offset() {
            return false;
        }
        match (replica, &part.repl) {
            (
                Some(r),
                Some(Replication {
                    role: Role::Leader { followers, .. },
                    ..
                }),
            ) => followers.contains_key(&r),
            (Some(_), _) => false,
            (None, repl) => repl.as_ref().is_none_or(|r| r.is_leader()),
        }
    }

    /// A follower's Fetch, second half: whole batches from `offset` up to the log end (not the
    /// HW), with the leader's HW and log start. Only the leader serves it, only to a replica,
    /// and only in the leader epoch the request names (`current_leader_epoch`, -1: any).
    #[allow(clippy::too_many_arguments)] // Kafka's fetch partition: who, which, where, how much
    pub fn replica_read<D: Disk>(
        &self,
        disk: &D,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        replica: BrokerId,
        offset: Offset,
        max_bytes: u64,
    ) -> Result<super::FetchOk, ErrorCode> {
        let part = self.partition_in_epoch(topic, partition, current_leader_epoch)?;
        match &part.repl {
            Some(Replication {
                role: Role::Leader { followers, .. },
                ..
            }) if followers.contains_key(&replica) => {}
            _ => return Err(ErrorCode::NotLeaderOrFollower),
        }
        if offset > part.log.log_end_offset() || offset < part.log.log_start_offset() {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        let slice = part
            .log
            .read(disk, offset, max_bytes, None)
            .map_err(|e| log_error_code(&e))?;
        Ok(super::FetchOk {
            high_watermark: part.high_watermark,
            last_stable_offset: part.high_watermark,
            log_start_offset: part.log.log_start_offset(),
            slice,
        })
    }

    /// OffsetForLeaderEpoch at the leader: the end offset of `epoch` in our log (KIP-279).
    pub fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        epoch: LeaderEpoch,
    ) -> Result<(LeaderEpoch, Offset), ErrorCode> {
        let part = self.partition_in_epoch(topic, partition, current_leader_epoch)?;
        Self::check_leads(part)?;
        Ok(part
            .log
            .end_offset_for_epoch(epoch)
            .unwrap_or((LeaderEpoch(-1), Offset(-1))))
    }

    /// Whether some partition this broker leads has an assigned replica outside its ISR (it
    /// may join at its next fetch) or an ISR change in flight. The cluster task polls
    /// [`Broker::poll_isr_proposals`] every 10 ms then; otherwise it looks at
    /// [`Broker::next_isr_check_ms`] (or sooner, when something else wakes it), as what is left
    /// is a shrink, which waits `replica.lag.time.max.ms` anyway (Kafka checks every half of it).
    pub fn isr_expansion_pending(&self) -> bool {
        self.partitions.values().any(|part| {
            part.repl.as_ref().is_some_and(|repl| match &repl.role {
                Role::Leader { in_flight, .. } => {
                    in_flight.is_some() || repl.replicas.iter().any(|r| !repl.isr.contains(r))
                }
                _ => false,
            })
        })
    }

    /// ISR changes this broker, as leader, wants written: shrinks for followers not caught up
    /// for `replica.lag.time.max.ms`, expands for followers that reached the HW in this epoch.
    /// At most one proposal per partition is in flight; answer each with
    /// [`Broker::isr_update_result`].
    pub fn poll_isr_proposals(&mut self, now_ms: i64) -> Vec<IsrProposal> {
        let me = self.config.broker_id;
        let lag_max = self.config.replica_lag_time_max_ms;
        // KIP-841: only registered brokers join an ISR. A broker in controlled shutdown has
        // deregistered and may still fetch; adding it back would undo the controller's shrink.
        // Without a cluster view (a single node) there is nobody to check against.
        let view = self.cluster_view.as_ref();
        let registered = |id: &BrokerId| view.is_none_or(|v| v.brokers.iter().any(|b| b.id == *id));
        let mut out = Vec::new();
        let topics = &self.topics;
        for ((topic, p), part) in self.partitions.iter_mut() {
            let hw = part.high_watermark;
            let epoch = part.leader_epoch;
            let Some(repl) = &mut part.repl else { continue };
            let Role::Leader {
                epoch_start,
                followers,
                in_flight,
            } = &mut repl.role
            else {
                continue;
            };
            if let Some(f) = in_flight {
                // Unanswered for sure, or answered Unknown: then sent again as it was (a hold
                // does not stop it: the first attempt may apply anyway).
                if f.resend {
                    f.resend = false;
                    out.push(f.proposal.clone());
                }
                continue;
            }
            if repl.isr_changes_held {
                continue;
            }
            // A member stays while it is this leader or has caught up within the lag bound.
            let in_sync = |id: &BrokerId| {
                *id == me
                    || followers
                        .get(id)
                        .is_some_and(|f| now_ms.saturating_sub(f.last_caught_up_ms) <= lag_max)
            };
            // A follower joins by Kafka's rule (isFollowerInSync: at the HW and past this epoch's
            // start offset), plus not lagging by the shrink rule (or it would flap in and out),
            // plus registered.
            let qualifies = |id: &BrokerId, f: &Progress| {
                f.leo >= hw
                    && f.leo >= *epoch_start
                    && now_ms.saturating_sub(f.last_caught_up_ms) <= lag_max
                    && registered(id)
            };
            // The usual case, no change, is found without building the new ISR. A member that
            // falls out cannot qualify again (it lags or is no follower), so either one here
            // changes the ISR.
            let shrinks = !repl.isr.iter().all(in_sync);
            let grows = followers
                .iter()
                .any(|(id, f)| !repl.isr.contains(id) && qualifies(id, f));
            if !shrinks && !grows {
                continue;
            }
            // Looked up only for a change (this runs for every partition at each of the
            // cluster task's looks, every 10 ms while an ISR may grow).
            let min_isr = topics.get(topic).map_or(1, |m| m.min_insync_replicas);
            let mut isr: Vec<BrokerId> = repl.isr.iter().copied().filter(in_sync).collect();
            for (id, f) in followers.iter() {
                if !isr.contains(id) && qualifies(id, f) {
                    isr.push(*id);
                }
            }
            isr.sort();
            // KIP-966: replicas leaving an ISR that is below min ISR stay eligible to lead.
            let elr = next_elr(
                &repl.isr,
                &repl.elr,
                &isr,
                usize::try_from(min_isr.max(1)).unwrap_or(1),
                &repl.replicas,
            );
            let proposal = IsrProposal {
                topic: topic.clone(),
                partition: *p,
                new_state: PartitionState {
                    leader: Some(me),
                    leader_epoch: epoch,
                    isr,
                    controller_epoch: repl.controller_epoch,
                    elr,
                },
                expected_zk_version: repl.zk_version,
            };
            *in_flight = Some(Box::new(InFlight {
                proposal: proposal.clone(),
                resend: false,
                reread: false,
            }));
            out.push(proposal);
        }
        out
    }

    /// Holds (or releases) this leader's ISR proposals for a partition while a member of its ISR
    /// or ELR restarted since the partition's state was written (the cluster integrator decides
    /// from its view after every scan, [`crate::controller::Controller::isr_restarted`]): a state
    /// written by this leader would then look newer than the restart, and the restarted
    /// replica, whose log may have lost unsynced records, would stay in the ISR or ELR, eligible
    /// to lead. The controller's next pass rewrites the state without it, releasing the hold.
    pub fn hold_isr_changes(&mut self, topic: &str, partition: i32, hold: bool) {
        if let Some(repl) = self
            .partitions
            .get_mut(topic, partition)
            .and_then(|part| part.repl.as_mut())
        {
            repl.isr_changes_held = hold;
        }
    }

    /// This replica's log end for the controller's offline recovery ([`LogEndReport`]): only once
    /// it applied the offline state of `offline_epoch` (it then neither leads nor follows, so its
    /// log stays as reported until a new state names a leader).
    pub fn offline_log_end(&self, topic: &str, partition: i32, offline_epoch: LeaderEpoch) -> Option<LogEndReport> {
        let part = self.partitions.get(topic, partition)?;
        let repl = part.repl.as_ref()?;
        if part.leader_epoch != offline_epoch || !matches!(repl.role, Role::Offline) {
            return None;
        }
        Some(LogEndReport {
            offline_epoch,
            last_epoch: part.log.latest_epoch().unwrap_or(LeaderEpoch(-1)),
            log_end: part.log.log_end_offset().0,
        })
    }

    /// The coordinator's answer to a proposal from [`Broker::poll_isr_proposals`].
    pub fn isr_update_result(&mut self, topic: &str, partition: i32, result: IsrUpdateResult) {
        let Some(part) = self.partitions.get_mut(topic, partition) else {
            return;
        };
        let Some(repl) = &mut part.repl else { return };
        let Role::Leader { in_flight, .. } = &mut repl.role else {
            return;
        };
        let Some(f) = in_flight else {
            return;
        };
        let zk_version = match result {
            IsrUpdateResult::Unknown => {
                // Still in flight, counted in the maximal ISR; offered again by the next poll.
                f.resend = true;
                return;
            }
            IsrUpdateResult::Conflict => {
                // Still counted until the state read next is applied.
                f.resend = false;
                f.reread = true;
                return;
            }
            IsrUpdateResult::Committed { zk_version } => zk_version,
        };
        if let Some(f) = in_flight.take() {
            let written = f.proposal.new_state;
            repl.isr = written.isr;
            repl.zk_version = zk_version;
            // The ELR written with it too: the state read back has this same version, so
            // applying it changes nothing here, and a stale ELR would be carried into the next
            // proposal (a campaign seed: ELR [1, 2] kept from an ISR [0] long since expanded,
            // so a shrink to [0] made 2 eligible without a record acknowledged after 2 left
            // the ISR; 2 was elected and the record lost).
            repl.elr = written.elr;
        }
        if maybe_advance_hw(part) {
            self.hw_checkpoint_dirty = true;
        }
    }

    /// The earliest time a follower may fall out of the ISR: when the integrator should next
    /// call [`Broker::poll_isr_proposals`] (besides after fetches). Partitions that propose
    /// nothing by time alone are left out: one with a change in flight or its changes held (the
    /// cluster task's round, not time, ends those). Not part of [`Broker::poll_timeout`]:
    /// `handle_timeout` does not act on it.
    pub fn next_isr_check_ms(&self) -> Option<i64> {
        let lag_max = self.config.replica_lag_time_max_ms;
        self.partitions
            .values()
            .filter_map(|part| match &part.repl {
                Some(Replication {
                    isr,
                    role:
                        Role::Leader {
                            followers,
                            in_flight: None,
                            ..
                        },
                    isr_changes_held: false,
                    ..
                }) => isr
                    .iter()
                    .filter_map(|id| followers.get(id))
                    .map(|f| f.last_caught_up_ms.saturating_add(lag_max).saturating_add(1))
                    .min(),
                _ => None,
            })
            .min()
    }

    /// What the replica fetcher should do for each partition this broker follows.
    pub fn follower_tasks(&self) -> Vec<FollowerTask> {
        self.follower_tasks_of(None)
    }

    /// The leaders [`Broker::follower_tasks`] names, without building the tasks.
    pub fn followed_leaders(&self) -> std::collections::BTreeSet<BrokerId> {
        self.partitions
            .values()
            .filter_map(|part| match &part.repl {
                Some(Replication {
                    role: Role::Follower { leader, phase },
                    ..
                }) if *phase != Phase::AwaitingState => Some(*leader),
                _ => None,
            })
            .collect()
    }

    /// [`Broker::follower_tasks`] of the partitions `leader` leads (all with `None`): what one
    /// leader's fetcher asks for, without copying the others' names.
    pub fn follower_tasks_of(&self, only: Option<BrokerId>) -> Vec<FollowerTask> {
        let mut out = Vec::new();
        self.follower_tasks_into(only, &mut out);
        out
    }

    /// [`Broker::follower_tasks_of`] into `out`, replacing what it held. A fetcher refills one
    /// list every round: its entries' topic names are overwritten in place (`clone_from` keeps
    /// the buffer), so a round in steady state allocates nothing, where a new list cost the list
    /// and a name per partition.
    pub fn follower_tasks_into(&self, only: Option<BrokerId>, out: &mut Vec<FollowerTask>) {
        let mut n = 0;
        for ((topic, p), part) in self.partitions.iter() {
            let Some(Replication {
                role: Role::Follower { leader, phase },
                ..
            }) = &part.repl
            else {
                continue;
            };
            if only.is_some_and(|l| l != *leader) {
                continue;
            }
            let action = match phase {
                Phase::Truncating => FollowerAction::Truncate {
                    epoch: part.log.latest_epoch().unwrap_or(LeaderEpoch(-1)),
                },
                Phase::Fetching => FollowerAction::Fetch {
                    offset: part.log.log_end_offset(),
                },
                Phase::AwaitingState => continue,
            };
            let topic_id = self.topics.get(topic).map_or(TopicId([0; 16]), |m| m.id);
            match out.get_mut(n) {
                Some(task) => {
                    task.topic.clone_from(topic);
                    task.topic_id = topic_id;
                    task.partition = *p;
                    task.leader = *leader;
                    task.leader_epoch = part.leader_epoch;
                    task.action = action;
                }
                None => out.push(FollowerTask {
                    topic: topic.clone(),
                    topic_id,
                    partition: *p,
                    leader: *leader,
                    leader_epoch: part.leader_epoch,
                    action,
                }),
            }
            n += 1;
        }
        out.truncate(n);
    }

    /// The partition (`None`: the broker does not have it), with its phase when it follows in
    /// `epoch` (`None` when it leads, or follows in another epoch).
    fn follower_part(&mut self, topic: &str, partition: i32, epoch: LeaderEpoch) -> Option<(&mut Part, Option<Phase>)> {
        let part = self.partitions.get_mut(topic, partition)?;
        let phase = match &part.repl {
            Some(Replication {
                role: Role::Follower { phase, .. },
                ..
            }) if part.leader_epoch == epoch => Some(*phase),
            _ => None,
        };
        Some((part, phase))
    }

    fn set_phase(part: &mut Part, new: Phase) {
        if let Some(Replication {
            role: Role::Follower { phase, .. },
            ..
        }) = &mut part.repl
        {
            *phase = new;
        }
    }

    /// A fetcher error from the leader. FENCED_LEADER_EPOCH (our state is stale) waits for new
    /// partition state. NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and UNKNOWN_TOPIC_OR_PARTITION
    /// mean the leader has not applied this epoch's state yet (states reach brokers at different
    /// times): the fetcher retries after its backoff, and new state replaces the task anyway.
    fn follower_error(part: &mut Part, code: ErrorCode) {
        match code {
            ErrorCode::FencedLeaderEpoch => Self::set_phase(part, Phase::AwaitingState),
            ErrorCode::OffsetOutOfRange => Self::set_phase(part, Phase::Truncating),
            _ => {}
        }
    }

    /// The leader's OffsetForLeaderEpoch answer for the epoch in [`FollowerAction::Truncate`]:
    /// cuts the log to the leader's end offset of that epoch (or of the largest epoch the
    /// leader has below it, bounded by our own end of that epoch), then starts fetching. A
    /// stale answer (the epoch moved on) is ignored. Whether this broker has the partition (see
    /// [`FollowerHosted`]).
    pub fn follower_truncate<D: Disk>(
        &mut self,
        disk: &mut D,
        topic: &str,
        partition: i32,
        leader_epoch: LeaderEpoch,
        asked: LeaderEpoch,
        answer: Result<(LeaderEpoch, Offset), ErrorCode>,
    ) -> Result<FollowerHosted, LogError> {
        let Some((part, phase)) = self.follower_part(topic, partition, leader_epoch) else {
            return Ok(FollowerHosted(false));
        };
        if phase == Some(Phase::Truncating) && Self::truncate_to_answer(part, disk, (topic, partition), asked, answer)?
        {
            self.hw_checkpoint_dirty = true;
        }
        Ok(FollowerHosted(true))
    }

    /// [`follower_truncate`](Self::follower_truncate) of a partition truncating in the answer's
    /// epoch; whether its HW checkpoint must be written again.
    fn truncate_to_answer<D: Disk>(
        part: &mut Part,
        disk: &mut D,
        (topic, partition): (&str, i32),
        asked: LeaderEpoch,
        answer: Result<(LeaderEpoch, Offset), ErrorCode>,
    ) -> Result<bool, LogError> {
        let (epoch, end) = match answer {
            Err(code) => {
                Self::follower_error(part, code);
                return Ok(false);
            }
            Ok(a) => a,
        };
        let target = if epoch.0 < 0 || end.0 < 0 {
            // The leader knows no epoch at or below ours: keep only what is known committed.
            part.high_watermark
        } else if epoch < asked {
            let own = part.log.end_offset_for_epoch(epoch).map_or(end, |(_, o)| o);
            end.min(own)
        } else {
            end
        };
        let target = target.min(part.log.log_end_offset());
        if target < part.log.log_end_offset() {
            tracing::info!(target: "replication", %topic, partition, truncated_from = part.log.log_end_offset().0, truncated_to = target.0, "follower truncated by leader epoch");
            part.log.truncate_to(disk, target)?;
            // Producer state may name batches that were cut: rebuild it from what is left.
            part.producers = ProducerStateTable::rebuild(disk, &part.log)?;
        }
        part.high_watermark = part.high_watermark.min(part.log.log_end_offset());
        Self::set_phase(part, Phase::Fetching);
        Ok(true)
    }

    /// The leader's Fetch answer for [`FollowerAction::Fetch`]: appends the batches as the
    /// leader wrote them and sets HW = min(leader HW, own log end). Stale answers are ignored.
    /// `leader_log_start` is the answer's log start offset (-1 if absent): a follower that
    /// fell below it (OFFSET_OUT_OF_RANGE) empties its log and starts there, as Kafka does.
    /// Whether this broker has the partition (see [`FollowerHosted`]).
    #[allow(clippy::too_many_arguments)]
    pub fn follower_fetched<D: Disk>(
        &mut self,
        disk: &mut D,
        topic: &str,
        partition: i32,
        leader_epoch: LeaderEpoch,
        fetched_from: Offset,
        result: Result<(&[u8], Offset), ErrorCode>,
        leader_log_start: Offset,
        now_ms: i64,
    ) -> Result<FollowerHosted, LogError> {
        let Some((part, phase)) = self.follower_part(topic, partition, leader_epoch) else {
            return Ok(FollowerHosted(false));
        };
        if phase == Some(Phase::Fetching)
            && Self::append_answer(part, disk, fetched_from, result, leader_log_start, now_ms)?
        {
            self.hw_checkpoint_dirty = true;
        }
        Ok(FollowerHosted(true))
    }

    /// [`follower_fetched`](Self::follower_fetched) of a partition fetching in the answer's
    /// epoch; whether its HW checkpoint must be written again.
    fn append_answer<D: Disk>(
        part: &mut Part,
        disk: &mut D,
        fetched_from: Offset,
        result: Result<(&[u8], Offset), ErrorCode>,
        leader_log_start: Offset,
        now_ms: i64,
    ) -> Result<bool, LogError> {
        if result == Err(ErrorCode::OffsetOutOfRange) && fetched_from < leader_log_start {
            part.log.truncate_fully_and_start_at(disk, leader_log_start)?;
            part.producers = ProducerStateTable::default();
            part.high_watermark = leader_log_start;
            return Ok(true);
        }
        let (records, leader_hw) = match result {
            Err(code) => {
                Self::follower_error(part, code);
                return Ok(false);
            }
            Ok(r) => r,
        };
        if fetched_from != part.log.log_end_offset() {
            return Ok(false);
        }
        if !records.is_empty() {
            let info = part.log.append_replicated(disk, records, now_ms)?;
            // Keep the idempotence state a new leader needs to dedupe producer retries.
            let mut at = 0;
            while at < records.len() {
                let h = BatchHeader::parse(&records[at..]).expect("the log validated and wrote this set");
                part.producers.record(&h);
                at += h.total_bytes();
            }
            if info.flush_due {
                part.log.flush(disk)?;
            }
        }
        let hw = leader_hw.min(part.log.log_end_offset());
        let moved = hw > part.high_watermark;
        if moved {
            part.high_watermark = hw;
        }
        Ok(moved)
    }

    /// Writes every replicated partition's HW to the checkpoint file (synced, atomic).
    pub fn checkpoint_high_watermarks<D: Disk>(&mut self, disk: &mut D) -> Result<(), BrokerError> {
        let entries: BTreeMap<(String, i32), Offset> = self
            .partitions
            .iter()
            .filter(|(_, part)| part.repl.is_some())
            .map(|((topic, p), part)| ((topic.clone(), *p), part.high_watermark))
            .collect();
        disk.write_file_atomic(HW_CHECKPOINT_FILE, &encode_hw_checkpoint(&entries))?;
        self.hw_checkpoint_dirty = false;
        Ok(())
    }

    /// The ISR, replicas and role of a replicated partition (for tests and Metadata).
    pub fn replica_state(&self, topic: &str, partition: i32) -> Option<(Vec<BrokerId>, Vec<BrokerId>, bool, i32)> {
        let part = self.partitions.get(topic, partition)?;
        let r = part.repl.as_ref()?;
        Some((r.replicas.clone(), r.isr.clone(), r.is_leader(), r.zk_version))
    }

    /// The leader epoch of `topic`/`partition` if this broker acts as its leader: what
    /// [`Broker::replica_state`] and [`Broker::leader_epoch`] tell together, without copying the
    /// replica lists (the simulator samples it every few milliseconds).
    pub fn leading_epoch(&self, topic: &str, partition: i32) -> Option<LeaderEpoch> {
        let part = self.partitions.get(topic, partition)?;
        part.repl.as_ref()?.is_leader().then_some(part.leader_epoch)
    }

    pub fn log(&self, topic: &str, partition: i32) -> Option<&Log> {
        self.partitions.get(topic, partition).map(|p| &p.log)
    }
}
