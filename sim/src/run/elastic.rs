//! Elastic scenarios (`[elastic]`): brokers join and leave while the workload and the nemesis
//! run. The driver restarts the brokers that were held back (they "join": register, get
//! metadata through watches), then an admin submits the balancing planner's moves
//! ([`gregor_core::controller::balance::plan`]) over the target brokers through
//! AlterPartitionReassignments, exactly as `gregor brokers decommission` and an operator would,
//! re-planning from Metadata and ListPartitionReassignments until nothing is left to move. When
//! the target is smaller than the cluster, the brokers past it are stopped once no partition
//! names them (decommission). At the end the harness reads the final placement of the scenario's
//! topic from a live broker's view for the balance checker ([`crate::checker::balance`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gregor_core::client::METADATA_VERSION;
use gregor_core::controller::balance;
use gregor_core::protocol::api::alter_partition_reassignments::{
    AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic,
};
use gregor_core::protocol::api::list_partition_reassignments::ListPartitionReassignmentsRequest;
use gregor_core::protocol::api::metadata::MetadataRequest;
use gregor_core::protocol::{Request, Response};
use gregor_core::runtime::Runtime;
use gregor_core::BrokerId;

use super::{client, monotonic_ms};
use crate::checker::balance::BalanceObservation;
use crate::runtime::SimRuntime;
use crate::scenario::Elastic;
use crate::world::{NodeIndex, World};

/// How often the admin re-plans while moves are in progress.
const REPLAN_MS: u64 = 500;
/// Rounds in a row that must find nothing to move and nothing moving.
const DONE_ROUNDS: u32 = 4;
/// How long before the end of the heal the admin stops re-planning: the final read and the
/// balance observation follow the heal.
pub const FINAL_READ_MARGIN_MS: u64 = 1_000;
/// Moves one plan submits at most.
const MOVES_MAX: usize = 1_000;

/// Holds back the brokers that join later: called right after the nodes are added, before any
/// of them ran.
pub fn hold_back(world: &World, brokers: &[NodeIndex], e: &Elastic) {
    for &b in brokers.iter().skip(e.initial_brokers as usize) {
        world.kill(b);
    }
}

/// The driver, run beside the nemesis; times are from `start_ms` (when the nemesis starts).
/// Returns when the moves ran: (virtual ms the first plan was made, ms they were seen done, or
/// `until_ms` if never).
pub async fn drive(
    world: &World,
    brokers: &[NodeIndex],
    admin: NodeIndex,
    e: &Elastic,
    start_ms: u64,
    until_ms: u64,
) -> (u64, u64) {
    let at = |s: f64| start_ms + (s * 1_000.0) as u64;
    madsim::time::sleep(Duration::from_millis(at(e.join_at_s).saturating_sub(monotonic_ms()))).await;
    for &b in brokers.iter().skip(e.initial_brokers as usize) {
        tracing::info!(target: "elastic", broker = b.0, "broker joins");
        world.restart(b);
    }
    if e.auto_rebalance {
        // The controller balances by itself (`auto.rebalance.enable`): no admin, no moves window.
        tracing::info!(target: "elastic", "auto.rebalance.enable: the controller balances; no admin moves");
        let now = monotonic_ms();
        return (now, now);
    }
    madsim::time::sleep(Duration::from_millis(
        at(e.rebalance_at_s).saturating_sub(monotonic_ms()),
    ))
    .await;
    let (count, target) = (brokers.len(), e.target_brokers as usize);
    let moves_from_ms = monotonic_ms();
    let done = world
        .spawn_on(admin, move |rt| rebalance(rt, count, target, until_ms))
        .await
        .expect("the admin node is never killed");
    let moves_until_ms = monotonic_ms();
    tracing::info!(target: "elastic", done, "rebalance finished");
    if done {
        for &b in brokers.iter().skip(target) {
            tracing::info!(target: "elastic", broker = b.0, "decommissioned broker stops");
            world.kill(b);
        }
    }
    (moves_from_ms, moves_until_ms)
}

/// Producer acknowledgements per virtual second before the brokers join (from the first
/// acknowledgement) and while the moves run: what a replication throttle must not starve.
/// `None` when either window is empty.
pub fn producer_rates(acked_at_ms: &[u64], join_ms: u64, moves: (u64, u64)) -> Option<(f64, f64)> {
    let first = acked_at_ms.iter().copied().min()?;
    let rate = |from: u64, to: u64| {
        let n = acked_at_ms.iter().filter(|&&t| (from..to).contains(&t)).count();
        (to > from && n > 0).then(|| n as f64 * 1_000.0 / (to - from) as f64)
    };
    Some((rate(first, join_ms)?, rate(moves.0, moves.1)?))
}

/// Plans and submits moves until the placement over brokers `0..target` is balanced and no move
/// is in progress; `false` if `until_ms` passed first.
async fn rebalance(rt: SimRuntime, count: usize, target: usize, until_ms: u64) -> bool {
    let mut cluster = client(&rt, "rebalancer".into(), count);
    let want: BTreeSet<BrokerId> = (0..target as i32).map(BrokerId).collect();
    // Metadata and ListPartitionReassignments may come from brokers whose views lag: "done" must
    // be seen in several rounds in a row (each from any broker) before brokers are stopped.
    let mut done_rounds = 0;
    while rt.monotonic_ms() < until_ms {
        match rebalance_step(&mut cluster, &want).await {
            Some(true) => done_rounds += 1,
            _ => done_rounds = 0,
        }
        if done_rounds >= DONE_ROUNDS {
            return true;
        }
        rt.sleep(Duration::from_millis(REPLAN_MS)).await;
    }
    false
}

/// One round: `Some(true)` when balanced with nothing moving, `Some(false)` after submitting
/// (or while moves are in progress), `None` when the cluster could not be read.
async fn rebalance_step(
    cluster: &mut gregor_core::client::Cluster<SimRuntime>,
    want: &BTreeSet<BrokerId>,
) -> Option<bool> {
    let meta = match cluster
        .call_any(
            &Request::Metadata(MetadataRequest {
                topics: None,
                allow_auto_topic_creation: false,
                include_cluster_authorized_operations: false,
                include_topic_authorized_operations: false,
            }),
            METADATA_VERSION,
        )
        .await
    {
        Ok(Response::Metadata(m)) => m,
        _ => return None,
    };
    let listed = match cluster
        .call_any(
            &Request::ListPartitionReassignments(ListPartitionReassignmentsRequest {
                timeout_ms: 10_000,
                topics: None,
            }),
            0,
        )
        .await
    {
        Ok(Response::ListPartitionReassignments(l)) => l,
        _ => return None,
    };
    let mut moving = BTreeSet::new();
    let mut placement: BTreeMap<balance::PartitionKey, Vec<BrokerId>> = BTreeMap::new();
    for t in &meta.topics {
        let Some(name) = &t.name else { continue };
        for p in &t.partitions {
            placement.insert(
                (name.clone(), p.partition_index),
                p.replica_nodes.iter().map(|&b| BrokerId(b)).collect(),
            );
        }
    }
    for t in &listed.topics {
        for p in &t.partitions {
            let key = (t.name.clone(), p.partition_index);
            let target = p
                .replicas
                .iter()
                .filter(|b| !p.removing_replicas.contains(b))
                .map(|&b| BrokerId(b))
                .collect();
            placement.insert(key.clone(), target);
            moving.insert(key);
        }
    }
    if placement.is_empty() {
        return None;
    }
    // One wave at a time: re-planning while moves are in flight would replace them.
    if !moving.is_empty() {
        return Some(false);
    }
    let moves = balance::plan(want, &placement, &BTreeMap::new(), MOVES_MAX);
    if moves.is_empty() {
        return Some(true);
    }
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for ((topic, p), replicas) in &moves {
        tracing::info!(target: "elastic", %topic, partition = p, replicas = ?replicas, "move submitted");
        let partition = ReassignablePartition {
            partition_index: *p,
            replicas: Some(replicas.iter().map(|b| b.0).collect()),
        };
        match topics.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(ReassignableTopic {
                name: topic.clone(),
                partitions: vec![partition],
            }),
        }
    }
    // KIP-860: a move never changes the replication factor; a plan made from a view that was
    // momentarily wrong is refused and re-planned.
    let request = Request::AlterPartitionReassignments(AlterPartitionReassignmentsRequest {
        topics,
        allow_replication_factor_change: false,
        ..AlterPartitionReassignmentsRequest::default()
    });
    if let Ok(Response::AlterPartitionReassignments(r)) = cluster.call_any(&request, 1).await {
        for t in &r.responses {
            for p in t.partitions.iter().filter(|p| p.error_code != 0) {
                tracing::info!(target: "elastic", topic = %t.name, partition = p.partition_index,
                    code = p.error_code, message = ?p.error_message, "move refused; re-planning");
            }
        }
    }
    Some(false)
}

/// The final placement of `topic` over brokers `0..target`, from the live broker whose view is
/// newest (highest leader epochs).
pub fn observe_balance(topic: &str, target: u32) -> Option<BalanceObservation> {
    let views: Vec<_> = super::cluster::live_brokers()
        .into_iter()
        .filter_map(|(_, b)| b.borrow().cluster_view().cloned())
        .collect();
    let newest = views.into_iter().max_by_key(|v| {
        v.topics.get(topic).map_or(0, |(_, states)| {
            states.values().map(|s| i64::from(s.leader_epoch.0)).sum::<i64>()
        })
    })?;
    let (record, states) = newest.topics.get(topic)?;
    let brokers: Vec<BrokerId> = (0..target as i32).map(BrokerId).collect();
    let mut obs = BalanceObservation {
        brokers: brokers.clone(),
        replicas: brokers.iter().map(|b| (*b, 0)).collect(),
        leaders: brokers.iter().map(|b| (*b, 0)).collect(),
        partitions: record.assignment.len(),
        outside: Vec::new(),
        moving: record.reassigning.keys().copied().collect(),
    };
    for (p, replicas) in &record.assignment {
        for r in replicas {
            match obs.replicas.get_mut(r) {
                Some(n) => *n += 1,
                None => obs.outside.push((*p, *r)),
            }
        }
        if let Some(n) = states
            .get(p)
            .and_then(|s| s.leader)
            .and_then(|l| obs.leaders.get_mut(&l))
        {
            *n += 1;
        }
    }
    Some(obs)
}
