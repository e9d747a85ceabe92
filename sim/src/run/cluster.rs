//! Replicated clusters in a run: coordinator nodes running the real coordinator server, broker
//! nodes running the cluster-mode node driver, and the harness's observers of them.
//!
//! A scenario with more than one broker runs this way. Node layout: brokers are nodes
//! `0..brokers` (broker id = node index, IP 10.0.0.{i+1}), coordinators the next `coordinators`
//! nodes, then the admin, producer and consumer nodes.
//!
//! Observation: the run holds one OS thread per seed and madsim runs every node on it, so each
//! broker node puts a weak handle to its broker in a thread-local registry, from which the
//! harness reads, at the end, every replica's log and high watermark (into
//! [`PartitionReplicas`]), and gives its broker a role observer that writes every leadership and
//! controller epoch it takes, as it takes it, into a thread-local journal ([`LeaderObservation`]s,
//! [`ControllerObservation`]s; a sampler would miss a role held shorter than its period, and
//! it cost 11% of an idle cluster's CPU polling every 5 ms). Reading is all the harness does: it
//! never changes a broker's state. A killed node's tasks drop its broker, so its weak handle
//! stops upgrading until its restart registers a new one; the journal stays.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use gregor_core::broker::{Broker, RoleChange, RoleObserver, TruncationPolicy};
use gregor_core::consensus::NodeId;
use gregor_core::coord::server::{start_coordinator, CoordNodeConfig, CoordTiming};
use gregor_core::group::Coordination;
use gregor_core::node::cluster::{start_cluster_broker, ClusterConfig};
use gregor_core::{BrokerId, LeaderEpoch};

use crate::checker::leaders::{ControllerObservation, LeaderObservation};
use crate::checker::replicas::{PartitionReplicas, ReplicaEntry, ReplicaLog};
use crate::runtime::SimRuntime;
use crate::scenario::Scenario;
use crate::world::{node_ip, NodeIndex, World};

/// The coordinators' port (ZooKeeper's).
pub const COORDINATOR_PORT: u16 = 2181;

thread_local! {
    /// The brokers of this run, by node index (see the module comment).
    static BROKERS: RefCell<BTreeMap<usize, Weak<RefCell<Broker>>>> = const { RefCell::new(BTreeMap::new()) };
}

/// What the brokers' role observers wrote (see the module comment).
#[derive(Default)]
struct RoleJournal {
    leaders: Vec<LeaderObservation>,
    controllers: Vec<ControllerObservation>,
}

thread_local! {
    static ROLES: RefCell<RoleJournal> = RefCell::new(RoleJournal::default());
}

/// Broker `index`'s observer: journals each role as the broker takes it.
fn role_observer(index: usize) -> RoleObserver {
    let broker = BrokerId(i32::try_from(index).expect("a few brokers"));
    Box::new(move |change| {
        let time_ms = super::monotonic_ms();
        ROLES.with(|r| {
            let mut r = r.borrow_mut();
            match change {
                RoleChange::PartitionLeader {
                    topic,
                    partition,
                    epoch,
                } => r.leaders.push(LeaderObservation {
                    broker,
                    topic: topic.to_string(),
                    partition,
                    leader_epoch: epoch,
                    time_ms,
                }),
                RoleChange::Controller { epoch } => r.controllers.push(ControllerObservation {
                    broker,
                    controller_epoch: epoch,
                    time_ms,
                }),
            }
        });
    })
}

/// Every leadership and controller epoch the brokers of this run took so far (the journal
/// empties).
pub fn take_role_observations() -> (Vec<LeaderObservation>, Vec<ControllerObservation>) {
    ROLES.with(|r| {
        let r = std::mem::take(&mut *r.borrow_mut());
        (r.leaders, r.controllers)
    })
}

thread_local! {
    /// Coordinators (by index) whose process stopped itself (Raft failed: a disk error), in the
    /// order they stopped, until the supervisor restarts them.
    static STOPPED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The supervisor's part of the heal (systemd's `Restart=on-failure`, once the operator fixed
/// the disk): restarts every coordinator whose process stopped itself after a disk error. A
/// node the nemesis or a quorum change stopped is not among them (their `main` never returns).
/// Without it a run where two of three coordinators hit disk faults ends with no quorum, and
/// its final read reads nothing (swarm seed 4492179675094813738).
pub fn restart_stopped_coordinators(world: &World, coordinators: &[NodeIndex]) {
    for i in STOPPED.with(|s| std::mem::take(&mut *s.borrow_mut())) {
        let Some(&node) = coordinators.get(i) else { continue };
        tracing::info!(target: "nemesis", node = %world.name(node), "supervisor restarts a coordinator that stopped itself");
        world.restart_exited(node);
    }
}

/// Whether the scenario runs as a replicated cluster.
pub fn is_cluster(s: &Scenario) -> bool {
    s.cluster.brokers > 1
}

fn coordinator_addr(s: &Scenario, i: usize) -> String {
    format!(
        "{}:{COORDINATOR_PORT}",
        node_ip(NodeIndex(s.cluster.brokers as usize + i))
    )
}

pub(super) fn coordinator_addrs(s: &Scenario) -> Vec<String> {
    (0..s.cluster.coordinators as usize)
        .map(|i| coordinator_addr(s, i))
        .collect()
}

/// Adds the broker nodes then the coordinator nodes; returns (brokers, coordinators).
pub fn add_nodes(world: &World, scenario: &Scenario) -> (Vec<NodeIndex>, Vec<NodeIndex>) {
    BROKERS.with(|b| b.borrow_mut().clear());
    STOPPED.with(|s| s.borrow_mut().clear());
    let s = Arc::new(scenario.clone());
    let brokers = (0..scenario.cluster.brokers as usize)
        .map(|i| {
            let s = s.clone();
            world.add_node(&format!("broker-{i}"), move |rt| broker_main(rt, s.clone(), i))
        })
        .collect();
    let coordinators = (0..scenario.cluster.coordinators as usize)
        .map(|i| {
            let s = s.clone();
            world.add_node(&format!("coordinator-{i}"), move |rt| {
                coordinator_main(rt, s.clone(), i)
            })
        })
        .collect();
    (brokers, coordinators)
}

async fn coordinator_main(rt: SimRuntime, s: Arc<Scenario>, i: usize) {
    let peers = (0..s.cluster.coordinators as usize)
        .map(|j| (NodeId(j as u64 + 1), coordinator_addr(&s, j)))
        .collect();
    let config = CoordNodeConfig {
        id: NodeId(i as u64 + 1),
        peers,
        // `[quorum]`: the held-back coordinators are not voters; they join through the log.
        voters: s
            .quorum
            .as_ref()
            .map(|q| (1..=u64::from(q.initial_coordinators)).map(NodeId).collect()),
        listen: coordinator_addr(&s, i),
        dir: "coordinator".into(),
        timing: CoordTiming::default(),
        secret: None,
    };
    match start_coordinator(rt, config) {
        Ok(serve) => serve.await,
        Err(e) => tracing::error!(target: "coordinator", node = i, error = %e, "coordinator failed to start"),
    }
    STOPPED.with(|s| s.borrow_mut().push(i));
}

async fn broker_main(rt: SimRuntime, s: Arc<Scenario>, index: usize) {
    let mut config = super::broker_node_config(index);
    config.broker.replica_lag_time_max_ms = s.broker.replica_lag_time_max_ms as i64;
    config.broker.hw_checkpoint_interval_ms = 1_000;
    config.broker.min_insync_replicas = s.broker.min_insync_replicas;
    if let Some(ms) = s.broker.log_flush_interval_ms {
        config
            .broker
            .log
            .apply("flush.ms", &ms.to_string())
            .expect("validated when the scenario was parsed");
    }
    if s.broker.mutant_truncate_to_high_watermark {
        config.broker.truncation = TruncationPolicy::HighWatermark;
    }
    let mut cluster = ClusterConfig::new(coordinator_addrs(&s));
    cluster.detect_restarts = !s.broker.mutant_ignore_broker_restarts;
    cluster.controller.mutant_reuse_leader_epoch = s.broker.mutant_reuse_leader_epoch;
    cluster.follower_throttled_rate_bytes_per_s = s.broker.follower_replication_throttled_rate.filter(|&r| r > 0);
    if let Some(e) = &s.elastic {
        cluster.controller.auto_leader_rebalance = true;
        cluster.controller.leader_imbalance_check_interval_ms =
            e.leader_imbalance_check_interval_s.saturating_mul(1_000);
        cluster.controller.leader_imbalance_per_broker_percentage = e.leader_imbalance_per_broker_percentage;
        cluster.controller.mutant_switch_before_isr = e.mutant_switch_before_isr;
        cluster.controller.auto_rebalance = e.auto_rebalance;
    }
    cluster.group_coordination = if s.broker.mutant_every_broker_coordinates {
        Coordination::Local
    } else {
        Coordination::Partitioned {
            partitions: i32::try_from(s.broker.offsets_topic_num_partitions).expect("validated: 1..=1000"),
            replication_factor: i16::try_from(s.broker.offsets_topic_replication_factor).expect("validated: 1..=16"),
        }
    };
    if let Some(a) = &s.acl {
        let (sasl, acls, login) = super::acl::broker_security(&s, a);
        config.sasl = Some(sasl);
        config.acls = Some(acls);
        cluster.inter_broker_sasl = Some(login);
    }
    match start_cluster_broker(rt, config, cluster).await {
        Ok((broker, accept_loop)) => {
            // Before its cluster task first runs (it was spawned, not polled yet): no role missed.
            broker.borrow_mut().set_role_observer(role_observer(index));
            BROKERS.with(|b| b.borrow_mut().insert(index, Rc::downgrade(&broker)));
            accept_loop.await
        }
        Err(e) => tracing::error!(target: "broker", error = %e, "broker failed to start"),
    }
}

pub(super) fn live_brokers() -> Vec<(usize, Rc<RefCell<Broker>>)> {
    BROKERS.with(|b| {
        b.borrow()
            .iter()
            .filter_map(|(i, w)| w.upgrade().map(|rc| (*i, rc)))
            .collect()
    })
}

/// Every live broker that believes it leads `topic`/`partition`, with its epoch.
fn acting_leaders(topic: &str, partition: i32) -> Vec<(usize, LeaderEpoch)> {
    acting_leaders_among(&live_brokers(), topic, partition)
}

/// As [`acting_leaders`], among `brokers` (read once for many partitions).
fn acting_leaders_among(
    brokers: &[(usize, Rc<RefCell<Broker>>)],
    topic: &str,
    partition: i32,
) -> Vec<(usize, LeaderEpoch)> {
    brokers
        .iter()
        .filter_map(|(i, b)| b.borrow().leading_epoch(topic, partition).map(|e| (*i, e)))
        .collect()
}

/// The node of the current leader of `topic`/0 (the highest epoch claiming it), for the
/// nemesis's `leader` target.
pub fn current_leader(topic: &str) -> Option<NodeIndex> {
    acting_leaders(topic, 0)
        .into_iter()
        .max_by_key(|(_, e)| *e)
        .map(|(i, _)| NodeIndex(i))
}

/// A live in-sync follower of `topic`/0 under the current leader, for the nemesis's `follower`
/// target.
pub fn current_follower(topic: &str) -> Option<NodeIndex> {
    let leader = current_leader(topic)?;
    live_brokers()
        .into_iter()
        .filter(|(i, _)| NodeIndex(*i) != leader)
        .find(|(i, b)| {
            b.borrow()
                .replica_state(topic, 0)
                .is_some_and(|(_, isr, is_leader, _)| !is_leader && isr.contains(&BrokerId(*i as i32)))
        })
        .map(|(i, _)| NodeIndex(i))
}

/// The node of the controller, as the live brokers last read it.
pub fn current_controller() -> Option<NodeIndex> {
    live_brokers()
        .into_iter()
        .filter_map(|(_, b)| b.borrow().cluster_view().and_then(|v| v.controller))
        .max()
        .map(|id| NodeIndex(id.0 as usize))
}

/// Every live replica's batches (base offset, CRC, epoch) and high watermark, per partition.
pub fn collect_replicas(world: &World, topic: &str, partitions: u32) -> Vec<PartitionReplicas> {
    let brokers = live_brokers();
    (0..partitions as i32)
        .map(|p| {
            let mut replicas = Vec::new();
            let mut leader_high_watermark = None;
            for (i, b) in &brokers {
                let b = b.borrow();
                let Some((_, _, is_leader, _)) = b.replica_state(topic, p) else {
                    continue;
                };
                let Some(log) = b.log(topic, p) else { continue };
                let Ok((_, hw, _)) = b.offsets(topic, p) else { continue };
                let mut entries = Vec::new();
                let read = world.state(NodeIndex(*i)).with_disk(|disk| {
                    log.for_each_batch_header(disk, |h| {
                        entries.push(ReplicaEntry {
                            offset: h.base_offset.0,
                            hash: u64::from(h.crc),
                            leader_epoch: h.partition_leader_epoch,
                        })
                    })
                });
                if let Err(e) = read {
                    tracing::warn!(target: "checker", broker = i, partition = p, error = %e, "replica unreadable; left out");
                    continue;
                }
                if is_leader {
                    leader_high_watermark = Some(hw.0);
                }
                replicas.push(ReplicaLog {
                    broker: BrokerId(*i as i32),
                    entries,
                    high_watermark: hw.0,
                });
            }
            PartitionReplicas {
                topic: topic.to_string(),
                partition: p,
                replicas,
                leader_high_watermark,
            }
        })
        .collect()
}
