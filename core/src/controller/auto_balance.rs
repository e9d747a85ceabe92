//! `auto.rebalance.enable`: the controller balances replicas itself, one move at a time, with
//! the balancing planner ([`super::balance::plan`]) over the live brokers.
//!
//! Contract: [`Controller::auto_rebalance_step`] decides from the view alone. It waits (writes
//! nothing) while the cluster is not healthy: a reassignment in flight, a replica on a broker
//! that is not live (a crash must not trigger moves: the broker may return), a partition without
//! a leader, or an ISR member that restarted since its state was written (the election first).
//! When healthy it plans over the live brokers and submits the first move of the plan through
//! [`Controller::alter_reassignment`] (so every safety rule of a reassignment applies: targets
//! join the ISR before the old replicas leave). The integrator calls it after each scan while
//! the live set differs from the one it last saw balanced, so it runs when a broker registers
//! and after a decommissioned broker stops, and not while an operator drains a broker that is
//! still live. Preferred leaders follow through the preferred leader elections
//! (`auto.leader.rebalance.enable`), which the planner's leader stage relies on.

use std::collections::{BTreeMap, BTreeSet};

use super::balance;
use super::{ClusterView, Controller, Write};
use crate::ids::BrokerId;

/// Moves one plan may propose (the planner's bound; only the first is submitted per step).
const PLAN_MOVES_MAX: usize = 1_000;

/// What the controller does about balance after a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AutoRebalance {
    /// Not now: the reason (the cluster is not healthy, or a move was refused).
    Wait(String),
    /// The placement over the live brokers is as even as the planner makes it.
    Balanced,
    /// Submit this reassignment (one partition).
    Move(Write),
}

impl Controller {
    /// One step of `auto.rebalance.enable` (see the module comment).
    pub fn auto_rebalance_step(&self, view: &ClusterView) -> AutoRebalance {
        let live: BTreeSet<BrokerId> = view.live_brokers.clone();
        let mut placement: BTreeMap<balance::PartitionKey, Vec<BrokerId>> = BTreeMap::new();
        for (name, t) in &view.topics {
            if view.delete_requests.contains(name) {
                continue;
            }
            if let Some(p) = t.record.reassigning.keys().next() {
                return AutoRebalance::Wait(format!("{name}-{p} is being reassigned"));
            }
            for (&p, replicas) in &t.record.assignment {
                if let Some(b) = replicas.iter().find(|b| !live.contains(b)) {
                    return AutoRebalance::Wait(format!("{name}-{p} has a replica on broker {}, not live", b.0));
                }
                let Some(state) = t.partitions.get(&p) else {
                    return AutoRebalance::Wait(format!("{name}-{p} has no state yet"));
                };
                if state.value.leader.is_none() {
                    return AutoRebalance::Wait(format!("{name}-{p} is offline"));
                }
                if Controller::isr_restarted(view, name, p, &state.value) {
                    return AutoRebalance::Wait(format!("{name}-{p}: an ISR member restarted"));
                }
                placement.insert((name.clone(), p), replicas.clone());
            }
        }
        let plan = balance::plan(&live, &placement, &BTreeMap::new(), PLAN_MOVES_MAX);
        let Some(((topic, p), target)) = plan.into_iter().next() else {
            return AutoRebalance::Balanced;
        };
        match self.alter_reassignment(view, &topic, p, Some(&target)) {
            Ok(Some(write)) => AutoRebalance::Move(write),
            Ok(None) => AutoRebalance::Wait(format!("{topic}-{p}: the plan's move changes nothing")),
            Err(e) => AutoRebalance::Wait(e.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::topic::TopicId;
    use crate::cluster::{topic_path, PartitionState, Reassignment, TopicRecord};
    use crate::controller::tests::{b, controller, fenced};
    use crate::controller::{Op, TopicView, Versioned};
    use crate::ids::LeaderEpoch;

    /// Topic `t`: six partitions over brokers 0..3 (rotated), each led by its first replica
    /// with all three in the ISR; `live` brokers registered.
    fn three_brokers_view(live: &[i32]) -> ClusterView {
        let assignment: BTreeMap<i32, Vec<BrokerId>> =
            (0..6).map(|p| (p, b(&[p % 3, (p + 1) % 3, (p + 2) % 3]))).collect();
        let partitions = assignment
            .iter()
            .map(|(&p, r)| {
                let state = PartitionState {
                    leader: Some(r[0]),
                    leader_epoch: LeaderEpoch(1),
                    isr: r.clone(),
                    controller_epoch: 6,
                    elr: Vec::new(),
                };
                (
                    p,
                    Versioned {
                        value: state,
                        version: 2,
                    },
                )
            })
            .collect();
        let record = TopicRecord {
            topic_id_hex: TopicId::from_random(1, 2).to_hex(),
            assignment,
            reassigning: BTreeMap::new(),
            configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
        };
        ClusterView {
            live_brokers: b(live).into_iter().collect(),
            topics: [(
                "t".to_string(),
                TopicView {
                    record,
                    record_version: 3,
                    partitions,
                },
            )]
            .into(),
            ..ClusterView::default()
        }
    }

    #[test]
    fn joined_brokers_get_a_move_and_a_balanced_cluster_gets_none() {
        let step = controller().auto_rebalance_step(&three_brokers_view(&[0, 1, 2, 3, 4]));
        println!("two empty brokers joined: {step:?}");
        let AutoRebalance::Move(write) = step else {
            panic!("expected a move, got {step:?}");
        };
        assert!(fenced(&write));
        let record = write
            .ops
            .iter()
            .find_map(|op| match op {
                Op::Set { path, data, .. } if *path == topic_path("t") => TopicRecord::decode(data),
                _ => None,
            })
            .expect("the move writes the topic record");
        assert_eq!(record.reassigning.len(), 1, "one partition per step");
        let adding: Vec<&Reassignment> = record.reassigning.values().collect();
        assert!(
            adding[0].adding.iter().all(|r| [3, 4].contains(&r.0)) && !adding[0].adding.is_empty(),
            "the move adds the joined brokers: {adding:?}"
        );
        let balanced = controller().auto_rebalance_step(&three_brokers_view(&[0, 1, 2]));
        println!("three brokers, even: {balanced:?}");
        assert_eq!(balanced, AutoRebalance::Balanced);
    }

    #[test]
    fn waits_while_a_replica_broker_is_down_or_a_move_is_in_flight() {
        // Broker 2 crashed (not live) while 3 and 4 are up: its replicas must not be moved off
        // (it may come back), so nothing is planned until it does.
        let crashed = controller().auto_rebalance_step(&three_brokers_view(&[0, 1, 3, 4]));
        println!("broker 2 down: {crashed:?}");
        assert!(matches!(crashed, AutoRebalance::Wait(_)), "got {crashed:?}");
        let mut moving = three_brokers_view(&[0, 1, 2, 3, 4]);
        let t = moving.topics.get_mut("t").expect("topic");
        t.record.reassigning.insert(
            0,
            Reassignment {
                adding: b(&[3]),
                removing: b(&[2]),
            },
        );
        let step = controller().auto_rebalance_step(&moving);
        println!("a move in flight: {step:?}");
        assert!(matches!(step, AutoRebalance::Wait(_)), "got {step:?}");
        let mut offline = three_brokers_view(&[0, 1, 2, 3, 4]);
        let p0 = &mut offline
            .topics
            .get_mut("t")
            .expect("topic")
            .partitions
            .get_mut(&0)
            .expect("p0")
            .value;
        p0.leader = None;
        let step = controller().auto_rebalance_step(&offline);
        println!("a partition offline: {step:?}");
        assert!(matches!(step, AutoRebalance::Wait(_)), "got {step:?}");
    }
}
