//! Reassignment decisions applied to a model coordinator tree ([`Tree`]): the write sequence of
//! a move, its refusals, its replacement and cancel, and a controller failover midway.

use std::collections::BTreeMap;

use super::tests::{b, controller, draw, fenced, Tree};
use super::*;
use crate::cluster::{partition_state_path, topic_path, Reassignment};
use crate::error_code::ErrorCode;
use crate::ids::LeaderEpoch;

/// A tree holding topic `t` (1 partition, replicas [0, 1, 2], leader 0, min ISR 2) written by
/// [`controller`] (epoch version 3).
fn cluster() -> Tree {
    let mut tree = Tree::default();
    for path in BOOTSTRAP_PATHS {
        let create = Write {
            ops: vec![Op::Create {
                path: path.into(),
                data: vec![],
                mode: CreateMode::Persistent,
            }],
            what: "bootstrap".into(),
        };
        tree.apply(&create).expect("bootstrap");
    }
    tree.nodes.insert(CONTROLLER_EPOCH_PATH.into(), (b"7".to_vec(), 3));
    let configs: BTreeMap<String, String> = [("min.insync.replicas".to_string(), "2".to_string())].into();
    let (record, create) = controller()
        .create_topic(&tree.view(&[0, 1, 2, 3, 4]), "t", 1, 3, &configs, draw())
        .expect("valid");
    assert_eq!(record.assignment[&0], b(&[0, 1, 2]));
    tree.apply(&create).expect("created");
    tree
}

fn state(tree: &Tree) -> PartitionState {
    PartitionState::decode(&tree.nodes[&partition_state_path("t", 0)].0).expect("state")
}

fn record(tree: &Tree) -> TopicRecord {
    TopicRecord::decode(&tree.nodes[&topic_path("t")].0).expect("record")
}

/// The leader's ISR change (what `Broker::poll_isr_proposals` writes), by compare-and-set.
fn set_isr(tree: &mut Tree, isr: &[i32]) {
    let leader = state(tree).leader.map(|l| l.0);
    set_state(tree, leader, isr);
}

fn set_state(tree: &mut Tree, leader: Option<i32>, isr: &[i32]) {
    let version = tree.nodes[&partition_state_path("t", 0)].1;
    let after = PartitionState {
        leader: leader.map(BrokerId),
        isr: b(isr),
        ..state(tree)
    };
    tree.apply(&Write {
        ops: vec![Op::Set {
            path: partition_state_path("t", 0),
            data: after.encode(),
            expected_version: Some(version),
        }],
        what: "leader changes the ISR".into(),
    })
    .expect("ISR CAS");
}

fn alter(tree: &mut Tree, live: &[i32], target: Option<&[i32]>) -> Result<(), ReassignError> {
    let target = target.map(b);
    let write = controller().alter_reassignment(&tree.view(live), "t", 0, target.as_deref())?;
    let write = write.expect("something to write");
    assert!(fenced(&write));
    tree.apply(&write).expect("the decided write applies");
    Ok(())
}

#[test]
fn a_move_adds_waits_for_the_isr_then_switches_and_moves_leadership_across_a_failover() {
    let mut tree = cluster();
    let live = [0, 1, 2, 3, 4];
    alter(&mut tree, &live, Some(&[3, 4, 1])).expect("valid");
    let r = record(&tree);
    assert_eq!(r.assignment[&0], b(&[3, 4, 1, 0, 2]), "target first, then the removed");
    assert_eq!(
        r.reassigning[&0],
        Reassignment {
            adding: b(&[3, 4]),
            removing: b(&[0, 2])
        }
    );
    assert_eq!(
        (state(&tree).leader, state(&tree).isr.clone()),
        (Some(BrokerId(0)), b(&[0, 1, 2]))
    );
    // Nothing completes until every target replica is in the ISR.
    assert!(controller().reassignment_steps(&tree.view(&live)).is_empty());
    set_isr(&mut tree, &[0, 1, 2, 3]);
    assert!(controller().reassignment_steps(&tree.view(&live)).is_empty());
    set_isr(&mut tree, &[0, 1, 2, 3, 4]);
    // The controller fails over here: the old one's decision is fenced, the new one's applies.
    let stale = controller().reassignment_steps(&tree.view(&live));
    assert_eq!(stale.len(), 1);
    tree.nodes.get_mut(CONTROLLER_EPOCH_PATH).expect("epoch").1 = 4;
    assert!(tree.apply(&stale[0]).expect_err("fenced").contains("check failed"));
    let next = Controller::new(BrokerId(1), 8, 4, ControllerConfig::default());
    let steps = next.reassignment_steps(&tree.view(&live));
    println!("completion: {}", steps[0].what);
    tree.apply(&steps[0]).expect("the new controller completes it");
    let (r, s) = (record(&tree), state(&tree));
    assert_eq!(r.assignment[&0], b(&[3, 4, 1]));
    assert!(r.reassigning.is_empty());
    assert_eq!(s.leader, Some(BrokerId(3)), "leadership leaves the removed leader");
    assert_eq!(s.leader_epoch, LeaderEpoch(1), "a leader change bumps the epoch");
    assert_eq!(s.isr, b(&[1, 3, 4]), "the removed replicas leave the ISR");
    assert_eq!(s.controller_epoch, 8);
    assert!(next.reassignment_steps(&tree.view(&live)).is_empty(), "idempotent");
}

#[test]
fn bad_reassignments_are_refused_with_kafkas_codes_and_write_nothing() {
    let tree = cluster();
    let view = tree.view(&[0, 1, 2, 3]);
    let c = controller();
    let code = |topic: &str, p: i32, target: Option<&[i32]>| {
        let target = target.map(b);
        let e = c
            .alter_reassignment(&view, topic, p, target.as_deref())
            .expect_err("refused");
        println!("{topic}-{p} {target:?}: {:?} {}", e.code, e.message);
        e.code
    };
    let invalid = ErrorCode::InvalidReplicaAssignment;
    assert_eq!(code("t", 0, Some(&[0, 1, 9])), invalid, "unknown broker");
    assert_eq!(code("t", 0, Some(&[0, 1, 1])), invalid, "duplicate");
    assert_eq!(code("t", 0, Some(&[])), invalid, "empty");
    assert_eq!(code("t", 0, Some(&[3])), invalid, "fewer than min ISR 2");
    assert_eq!(code("t", 0, Some(&[4, 1])), invalid, "broker 4 is not registered");
    assert_eq!(code("nope", 0, Some(&[0, 1])), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(code("t", 7, Some(&[0, 1])), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(code("t", 0, None), ErrorCode::NoReassignmentInProgress);
    // The same replica set again is no write at all.
    assert_eq!(c.alter_reassignment(&view, "t", 0, Some(&b(&[0, 1, 2]))), Ok(None));
}

#[test]
fn a_second_reassignment_replaces_the_first_and_a_cancel_reverts() {
    let mut tree = cluster();
    let live = [0, 1, 2, 3, 4];
    alter(&mut tree, &live, Some(&[3, 1, 2])).expect("valid");
    set_isr(&mut tree, &[0, 1, 2, 3]);
    // Replaced relative to the original [0, 1, 2]: 3 is no longer wanted and leaves the ISR.
    alter(&mut tree, &live, Some(&[4, 1, 2])).expect("valid");
    let r = record(&tree);
    assert_eq!(r.assignment[&0], b(&[4, 1, 2, 0]));
    assert_eq!(
        r.reassigning[&0],
        Reassignment {
            adding: b(&[4]),
            removing: b(&[0])
        }
    );
    assert_eq!(state(&tree).isr, b(&[0, 1, 2]));
    // Cancel: back to the original replicas, the added replica out. As in Kafka, the kept
    // replicas keep the target's order (the full set is target first), so the preferred leader
    // may differ from before the move; the leader itself does not change.
    set_isr(&mut tree, &[0, 1, 2, 4]);
    alter(&mut tree, &live, None).expect("cancel");
    let r = record(&tree);
    assert_eq!(r.assignment[&0], b(&[1, 2, 0]));
    assert!(r.reassigning.is_empty());
    assert_eq!(
        (state(&tree).leader, state(&tree).isr.clone()),
        (Some(BrokerId(0)), b(&[0, 1, 2]))
    );
    // A cancel that would leave no original replica in sync is refused (the data is only on
    // the added replicas).
    alter(&mut tree, &live, Some(&[3, 4])).expect("valid");
    set_state(&mut tree, Some(3), &[3]);
    let e = controller()
        .alter_reassignment(&tree.view(&live), "t", 0, None)
        .expect_err("nothing in sync would remain");
    assert_eq!(e.code, ErrorCode::InvalidReplicaAssignment);
}

#[test]
fn a_restarted_isr_member_blocks_moves_until_the_controller_reelects() {
    let mut tree = cluster();
    let live = [0, 1, 2, 3, 4];
    alter(&mut tree, &live, Some(&[3, 1, 2])).expect("valid");
    set_isr(&mut tree, &[0, 1, 2, 3]);
    // Broker 0 (the leader) restarted after the state was written: a write now would give the
    // state a newer version than its registration and hide the restart (KIP-380).
    let mut view = tree.view(&live);
    view.state_written_at.insert(("t".to_string(), 0), 5);
    view.registered_at.insert(BrokerId(0), 9);
    assert!(controller().reassignment_steps(&view).is_empty(), "completion waits");
    let e = controller()
        .alter_reassignment(&view, "t", 0, Some(&b(&[4, 1, 2])))
        .expect_err("refused");
    assert_eq!(e.code, ErrorCode::LeaderNotAvailable);
    assert!(controller().preferred_leader_elections(&view).is_empty());
    // Once the election rewrote the state (newer than the registration), the move completes.
    view.state_written_at.insert(("t".to_string(), 0), 10);
    assert_eq!(controller().reassignment_steps(&view).len(), 1);
}
