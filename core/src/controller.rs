//! The controller as a pure decision-maker: it reads the cluster view (what it last read from the
//! coordinator) and answers with coordinator writes as values; it performs no I/O itself. The
//! integrator runs the reads, hands the view in, and sends each [`Write`] as one coordinator
//! multi (all ops or none).
//!
//! Contract:
//! - Every write starts with `Op::Check { path: CONTROLLER_EPOCH_PATH, version }`, the version of
//!   `/controller_epoch` this controller set when it was elected ([`election`]). A controller that
//!   lost its office (another bumped the epoch) has every write rejected by the coordinator.
//! - Writes to a partition's state compare-and-set on the state znode's version read in the view,
//!   so a concurrent ISR change by the leader makes one of the two fail; the loser re-reads.
//! - Decisions are idempotent: [`Controller::reconcile`] on a view that needs nothing returns no
//!   writes, so the integrator can call it after every watch without tracking what changed.
//!
//! Fault model: the view can be stale (a watch not yet delivered); the fencing above makes a write
//! based on a stale view fail rather than apply. Brokers die and return at any time; their
//! liveness is only what `/brokers/ids` (ephemeral, session-bound) says.

mod assign;
mod auto_balance;
pub mod balance;
mod elect;
pub mod election;
mod imbalance;
mod reassign;
mod topics;

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{broker_path, PartitionState, TopicRecord, CONTROLLER_EPOCH_PATH};
use crate::ids::BrokerId;

pub use assign::assign_replicas;
pub use auto_balance::AutoRebalance;
pub use imbalance::{
    ImbalanceSchedule, LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT, LEADER_IMBALANCE_PER_BROKER_PERCENTAGE_DEFAULT,
};
pub use reassign::ReassignError;
pub use topics::{CreateTopicDraw, CreateTopicError, PARTITIONS_PER_TOPIC_MAX};

/// The persistent parents the cluster's nodes hang under. Whoever starts a cluster creates each
/// (in this order, a NodeExists answer meaning "already there") before any controller writes.
pub const BOOTSTRAP_PATHS: [&str; 6] = [
    "/brokers",
    "/brokers/ids",
    "/brokers/topics",
    "/brokers/log_ends",
    "/admin",
    "/admin/delete_topics",
];

/// How a created node lives: a persistent node outlives its creator's session; an ephemeral one
/// is removed when the creating session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
}

/// One coordinator operation, independent of the coordinator client's own types (the integrator
/// maps it to the client's multi). `expected_version: None` means "any version" (ZooKeeper's -1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    Set {
        path: String,
        data: Vec<u8>,
        expected_version: Option<i32>,
    },
    Delete {
        path: String,
        expected_version: Option<i32>,
    },
    /// Fails the whole multi unless the node exists at exactly this version.
    Check { path: String, version: i32 },
    /// Fails the whole multi unless the node exists and was created at this index (its czxid):
    /// the node a view read, not one created again since ([`ClusterView::registration_checks`]).
    CheckCreated { path: String, czxid: u64 },
    /// Fails the whole multi if the node exists ([`ClusterView::registration_checks`]).
    CheckAbsent { path: String },
}

/// One atomic coordinator multi, and what it is for (for the replay trace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub ops: Vec<Op>,
    pub what: String,
}

/// A znode's decoded value with the version its compare-and-set must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    pub version: i32,
}

/// One topic as read from the coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicView {
    pub record: TopicRecord,
    /// The topic znode's version: a reassignment's write compares-and-sets on it.
    pub record_version: i32,
    /// Partition index -> its state; a partition without a state node is absent here.
    pub partitions: BTreeMap<i32, Versioned<PartitionState>>,
}

/// What the controller read from the coordinator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// The children of `/brokers/ids`: brokers whose session is alive.
    pub live_brokers: BTreeSet<BrokerId>,
    pub topics: BTreeMap<String, TopicView>,
    /// When each live broker's current registration was created (its znode's creation index,
    /// ZooKeeper's czxid): a broker whose registration is newer than a partition's state has
    /// restarted (or lost its session) since that state was written — Kafka's broker epoch
    /// (KIP-380). Empty when unknown: no restart is then detected.
    pub registered_at: BTreeMap<BrokerId, u64>,
    /// Each live broker's `intact_since` claim ([`crate::cluster::BrokerRegistration`]): the
    /// creation index of the registration since which its log has lost nothing — a session that
    /// expired while the process ran, or a clean restart, does not move it; a start without a
    /// clean-shutdown marker does (Kafka's KIP-966 clean-shutdown report, reduced). Absent: the
    /// registration's own index counts (every re-registration is a restart, as before).
    pub intact_since: BTreeMap<BrokerId, u64>,
    /// When each partition's state was last written (the state znode's mzxid).
    pub state_written_at: BTreeMap<(String, i32), u64>,
    /// The children of `/admin/delete_topics`.
    pub delete_requests: BTreeSet<String>,
    /// What each live broker reported of its offline partitions' logs (`/brokers/log_ends`):
    /// an offline partition's leader is chosen from these ([`crate::cluster::LogEndReport`]).
    pub log_ends: BTreeMap<BrokerId, BTreeMap<(String, i32), crate::cluster::LogEndReport>>,
}

impl ClusterView {
    /// Whether broker `b` may have lost writes since a state written at `written` (KIP-380's
    /// broker epoch, narrowed by the clean-shutdown report): it registered after that state and
    /// its log is not known intact from before it. The claim can only narrow, never widen, what
    /// the registration's own index says.
    pub fn restarted_since(&self, b: BrokerId, written: u64) -> bool {
        let Some(&registered) = self.registered_at.get(&b) else {
            return false;
        };
        let intact = self.intact_since.get(&b).map_or(registered, |&i| i.min(registered));
        intact > written
    }

    /// KIP-380's broker epoch as a precondition of a write of `state`: for each broker of
    /// `replicas` and each broker the state names (leader, ISR, ELR), a check that its
    /// registration is still the one this view read: the same node (its creation index), or
    /// still none. A broker that restarted and registered again between the read and the write
    /// has a new registration, so the write fails and the controller re-reads and sees the
    /// restart. Without it the write would land after the new registration, look newer than it
    /// to [`ClusterView::restarted_since`], and hand a log that may have lost its unsynced
    /// writes the leadership or an ISR or ELR seat. Campaign seeds lost records both ways: the
    /// acl race seed 4623362752862586853 (22 records: a live broker re-registered and was
    /// elected) and the group-commit seed 6952832580335106510 (one record: a dead broker that
    /// lost power was made an eligible leader replica as it registered again, and led next). A
    /// restart registered after the write is caught by `restarted_since` itself. Empty when
    /// restarts are not detected (`registered_at` empty: the writer itself is registered
    /// otherwise).
    pub fn registration_checks(&self, replicas: &[BrokerId], state: &PartitionState) -> Vec<Op> {
        if self.registered_at.is_empty() {
            return Vec::new();
        }
        let named: BTreeSet<BrokerId> = replicas
            .iter()
            .chain(&state.leader)
            .chain(&state.isr)
            .chain(&state.elr)
            .copied()
            .collect();
        named
            .into_iter()
            .map(|b| match self.registered_at.get(&b) {
                Some(&czxid) => Op::CheckCreated {
                    path: broker_path(b),
                    czxid,
                },
                None => Op::CheckAbsent { path: broker_path(b) },
            })
            .collect()
    }
}

/// A partition's state change the controller decided, with the write that makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionChange {
    pub topic: String,
    pub partition: i32,
    pub before: PartitionState,
    pub after: PartitionState,
    /// The new leader was not in the ISR: data acknowledged by the old ISR may be lost.
    pub unclean: bool,
    pub write: Write,
}

/// The controller's settings that are not per topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `unclean.leader.election.enable` for topics that do not set it (Kafka's default: false).
    pub unclean_leader_election_default: bool,
    /// `auto.leader.rebalance.enable`: every `leader_imbalance_check_interval_ms`, the
    /// leaderships of each broker whose leader imbalance exceeds
    /// `leader_imbalance_per_broker_percentage` go back to their preferred (first) replica when
    /// it is live, in the ISR and not restarted since the state was written
    /// ([`Controller::leader_imbalance_elections`]). Kafka's default is true; off here unless
    /// configured.
    pub auto_leader_rebalance: bool,
    /// `leader.imbalance.per.broker.percentage` (Kafka's default 10): a broker's preferred
    /// leaderships move back only when more than this share of them is led elsewhere.
    pub leader_imbalance_per_broker_percentage: u32,
    /// `leader.imbalance.check.interval.seconds`, in ms (Kafka's default 300 s).
    pub leader_imbalance_check_interval_ms: u64,
    /// `auto.rebalance.enable`: the controller moves replicas itself with the balancing planner
    /// when the live brokers change ([`Controller::auto_rebalance_step`]). Off unless configured.
    pub auto_rebalance: bool,
    /// Simulator-only mutant (a negative control): a reassignment switches to its target at
    /// once, the target declared in sync and its first replica leader, without waiting for the
    /// new replicas to catch up. Loses acknowledged records.
    pub mutant_switch_before_isr: bool,
    /// Simulator-only mutant (a negative control): an election keeps the partition's leader
    /// epoch instead of bumping it, so two brokers lead one partition in one epoch (KIP-101's
    /// fencing gone).
    pub mutant_reuse_leader_epoch: bool,
    /// The brokers' `min.insync.replicas` for topics that do not set it: whether an ISR change
    /// makes the replicas that left eligible leader replicas (KIP-966). 0 reads as 1.
    pub min_insync_replicas_default: i32,
}

impl Default for ControllerConfig {
    /// Kafka's defaults, except the two switches that are off unless configured (see above).
    fn default() -> ControllerConfig {
        ControllerConfig {
            unclean_leader_election_default: false,
            auto_leader_rebalance: false,
            leader_imbalance_per_broker_percentage: LEADER_IMBALANCE_PER_BROKER_PERCENTAGE_DEFAULT,
            leader_imbalance_check_interval_ms: LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT,
            auto_rebalance: false,
            mutant_switch_before_isr: false,
            mutant_reuse_leader_epoch: false,
            min_insync_replicas_default: 1,
        }
    }
}

/// The elected controller: its broker id, its epoch and the `/controller_epoch` version that
/// fences its writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    pub id: BrokerId,
    pub epoch: i32,
    pub epoch_version: i32,
    pub config: ControllerConfig,
}

impl Controller {
    pub fn new(id: BrokerId, epoch: i32, epoch_version: i32, config: ControllerConfig) -> Controller {
        Controller {
            id,
            epoch,
            epoch_version,
            config,
        }
    }

    /// The fence every write of this controller carries.
    pub fn fence(&self) -> Op {
        Op::Check {
            path: CONTROLLER_EPOCH_PATH.to_string(),
            version: self.epoch_version,
        }
    }

    fn write(&self, ops: Vec<Op>, what: String) -> Write {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(self.fence());
        all.extend(ops);
        Write { ops: all, what }
    }

    /// Whether a member of the partition's ISR or ELR restarted since its state was written
    /// (KIP-380, see [`elect`]): until the controller's election rewrites the state, no other
    /// write may touch it, or the new version would hide the restart (a restarted leader would
    /// resume with a log that lost unsynced records, a restarted follower or eligible replica
    /// would stay eligible to lead with one). The partition's leader obeys it too: it holds its
    /// ISR changes meanwhile ([`crate::broker::Broker::hold_isr_changes`]).
    pub fn isr_restarted(view: &ClusterView, topic: &str, partition: i32, state: &PartitionState) -> bool {
        let Some(written) = view.state_written_at.get(&(topic.to_string(), partition)) else {
            return false;
        };
        state
            .isr
            .iter()
            .chain(&state.elr)
            .any(|&b| view.restarted_since(b, *written))
    }

    /// A topic's `min.insync.replicas`: its config, else the brokers' default (at least 1).
    pub fn min_isr(&self, record: &TopicRecord) -> usize {
        let configured = record
            .configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse::<i32>().ok());
        usize::try_from(configured.unwrap_or(self.config.min_insync_replicas_default).max(1)).unwrap_or(1)
    }

    /// Whether unclean leader election is allowed for a topic: its config, else the default.
    pub fn unclean_allowed(&self, record: &TopicRecord) -> bool {
        match record.configs.get("unclean.leader.election.enable").map(String::as_str) {
            Some("true") => true,
            Some(_) => false,
            None => self.config.unclean_leader_election_default,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod reassign_tests;
