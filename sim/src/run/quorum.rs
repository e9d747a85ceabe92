//! `[quorum]` scenarios: a coordinator node replaced under load. The coordinators past
//! `initial_coordinators` are held back; at `replace_at_s` they start, and an admin adds each
//! as a learner and promotes it (KIP-853's AddVoter, through the coordinators' membership
//! request, retried until the learner caught up), then removes coordinator `remove` and stops
//! it. Meanwhile a probe client creates znodes one after another; at the end a synced read lists
//! them for the checker ([`crate::checker::coordinator`]).

use std::collections::BTreeSet;
use std::time::Duration;

use gregor_core::consensus::{MembershipChange, NodeId};
use gregor_core::coord::client::{CoordClient, CoordClientConfig};
use gregor_core::coord::tree::CreateMode;
use gregor_core::runtime::Runtime;

use super::monotonic_ms;
use crate::checker::coordinator::QuorumObservation;
use crate::runtime::SimRuntime;
use crate::scenario::Quorum;
use crate::world::{NodeIndex, World};

const PROBE_PARENT: &str = "/quorum-probe";
/// Between two probe creates, and between two membership steps that failed.
const PROBE_INTERVAL_MS: u64 = 50;
const RETRY_MS: u64 = 200;
/// Membership steps tried at most (each retried step counts).
const STEPS_MAX: usize = 2_000;
/// Attempts of the final read at most.
const READ_ATTEMPTS_MAX: usize = 40;

/// Holds back the coordinators that join later: called right after the nodes are added.
pub fn hold_back(world: &World, coordinators: &[NodeIndex], q: &Quorum) {
    for &c in coordinators.iter().skip(q.initial_coordinators as usize) {
        world.kill(c);
    }
}

/// The driver, run beside the nemesis; times are from `start_ms`. Returns the observation
/// without the final read (see [`read_back`]).
pub async fn drive(
    world: &World,
    coordinators: &[NodeIndex],
    admin: NodeIndex,
    q: &Quorum,
    addrs: Vec<String>,
    start_ms: u64,
    until_ms: u64,
) -> QuorumObservation {
    let probe = {
        let addrs = addrs.clone();
        world.spawn_on(admin, move |rt| probe(rt, addrs, until_ms))
    };
    let at_ms = start_ms + (q.replace_at_s * 1_000.0) as u64;
    madsim::time::sleep(Duration::from_millis(at_ms.saturating_sub(monotonic_ms()))).await;
    let initial = q.initial_coordinators as usize;
    for &c in coordinators.iter().skip(initial) {
        tracing::info!(target: "quorum", node = c.0, "coordinator starts, to join");
        world.restart(c);
    }
    let joiners: Vec<NodeId> = (initial + 1..=coordinators.len()).map(|i| NodeId(i as u64)).collect();
    let remove = NodeId(q.remove);
    let (changes, finished) = world
        .spawn_on(admin, move |rt| replace(rt, addrs, joiners, remove, until_ms))
        .await
        .expect("the admin node is never killed");
    if finished {
        let removed = coordinators[q.remove as usize - 1];
        tracing::info!(target: "quorum", node = removed.0, "removed coordinator stops");
        world.kill(removed);
    }
    let acked = probe.await.expect("the admin node is never killed");
    QuorumObservation {
        acked,
        read: None,
        changes,
        finished,
    }
}

async fn connect(rt: &SimRuntime, addrs: &[String], until_ms: u64) -> Option<CoordClient<SimRuntime>> {
    while rt.monotonic_ms() < until_ms {
        match CoordClient::connect(rt.clone(), CoordClientConfig::new(addrs.to_vec())).await {
            Ok(c) => return Some(c),
            Err(_) => rt.sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
    None
}

/// Adds each joiner as a learner and promotes it, then removes `remove`: one step per round,
/// chosen from the membership the leader reports (so an answer lost in a crash is re-read,
/// not guessed). Returns the steps and whether the target membership was reached.
async fn replace(
    rt: SimRuntime,
    addrs: Vec<String>,
    joiners: Vec<NodeId>,
    remove: NodeId,
    until_ms: u64,
) -> (Vec<String>, bool) {
    let mut steps = Vec::new();
    let mut client = None;
    for _ in 0..STEPS_MAX {
        if rt.monotonic_ms() >= until_ms {
            break;
        }
        if client.as_ref().is_none_or(|c: &CoordClient<SimRuntime>| c.is_expired()) {
            client = connect(&rt, &addrs, until_ms).await;
        }
        let Some(c) = client.as_ref() else { break };
        let (voters, learners) = match c.membership(None).await {
            Ok(m) => m,
            Err(_) => {
                rt.sleep(Duration::from_millis(RETRY_MS)).await;
                continue;
            }
        };
        let member = |id: &NodeId| voters.contains(id) || learners.contains(id);
        let next = if let Some(j) = joiners.iter().find(|j| !member(j)) {
            MembershipChange::AddLearner(*j)
        } else if let Some(j) = joiners.iter().find(|j| learners.contains(j)) {
            MembershipChange::PromoteLearner(*j)
        } else if member(&remove) {
            MembershipChange::Remove(remove)
        } else {
            let ids = |v: &[NodeId]| v.iter().map(|n| n.0).collect::<Vec<_>>();
            steps.push(format!(
                "{} ms: voters {:?}, learners {:?}",
                rt.monotonic_ms(),
                ids(&voters),
                ids(&learners)
            ));
            return (steps, true);
        };
        let result = c.membership(Some(next)).await;
        tracing::info!(target: "quorum", ?next, ?result, "membership change");
        let ok = result.is_ok();
        // Retried steps (a learner not caught up yet) are counted, not all listed.
        if ok || steps.len() < 40 {
            steps.push(format!(
                "{} ms {next:?}: {}",
                rt.monotonic_ms(),
                if ok { "ok" } else { "retry" }
            ));
        }
        if !ok {
            rt.sleep(Duration::from_millis(RETRY_MS)).await;
        }
    }
    (steps, false)
}

/// Creates `/quorum-probe/p<k>` for k = 0, 1, ... until `until_ms`; returns the acknowledged k.
async fn probe(rt: SimRuntime, addrs: Vec<String>, until_ms: u64) -> BTreeSet<u64> {
    let mut acked = BTreeSet::new();
    let mut client: Option<CoordClient<SimRuntime>> = None;
    let mut parent = false;
    let mut k = 0u64;
    while rt.monotonic_ms() < until_ms && k < 1_000_000 {
        if client.as_ref().is_none_or(|c| c.is_expired()) {
            client = connect(&rt, &addrs, until_ms).await;
        }
        let Some(c) = client.as_ref() else { break };
        if !parent {
            let _ = c.create(PROBE_PARENT, b"", CreateMode::Persistent).await;
            parent = matches!(c.exists(PROBE_PARENT, false, true).await, Ok(Some(_)));
        } else {
            // A create whose answer was lost is not acknowledged: it may or may not be there.
            if c.create(&format!("{PROBE_PARENT}/p{k}"), b"", CreateMode::Persistent)
                .await
                .is_ok()
            {
                acked.insert(k);
            }
            k += 1;
        }
        rt.sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
    acked
}

/// The probe znodes a synced read finds at the end, or `None` if no read succeeded.
pub async fn read_back(rt: SimRuntime, addrs: Vec<String>) -> Option<BTreeSet<u64>> {
    let until_ms = rt.monotonic_ms() + 30_000;
    for _ in 0..READ_ATTEMPTS_MAX {
        let c = connect(&rt, &addrs, until_ms).await?;
        if let Ok(names) = c.children(PROBE_PARENT, false, true).await {
            let _ = c.close().await;
            return Some(
                names
                    .iter()
                    .filter_map(|n| n.strip_prefix('p').and_then(|k| k.parse().ok()))
                    .collect(),
            );
        }
        rt.sleep(Duration::from_millis(RETRY_MS)).await;
    }
    None
}
