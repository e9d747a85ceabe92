//! The cluster task's ISR writes ([`write_isr_proposals`]) against a scripted coordinator: every
//! proposal the broker made is answered, also when the session expires part-way through.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::*;
use crate::broker::{Broker, BrokerConfig};
use crate::disk::mem::MemDisk;

const T: &str = "events";

/// Broker 0 leading partitions 0 and 1 of `T` (replicas 0 and 1, ISR [0]), follower 1 caught
/// up on both: each partition has an ISR expansion to propose.
fn leader_with_two_expansions() -> SharedBroker {
    let mut disk = MemDisk::new();
    let config = BrokerConfig {
        broker_id: BrokerId(0),
        ..BrokerConfig::default()
    };
    let mut broker = Broker::open(&mut disk, config, 0).expect("open");
    let replicas = vec![BrokerId(0), BrokerId(1)];
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 4).to_hex(),
        assignment: [(0, replicas.clone()), (1, replicas)].into(),
        reassigning: Default::default(),
        configs: Default::default(),
    };
    let state = PartitionState {
        leader: Some(BrokerId(0)),
        leader_epoch: crate::ids::LeaderEpoch(1),
        isr: vec![BrokerId(0)],
        controller_epoch: 1,
        elr: Vec::new(),
    };
    for p in 0..2 {
        broker
            .apply_partition_state(&mut disk, T, &record, p, &state, 0, 0)
            .expect("apply");
        broker
            .record_follower_fetch(T, p, -1, BrokerId(1), crate::ids::Offset(0), 10)
            .expect("follower 1 fetches at the log end");
    }
    Rc::new(RefCell::new(broker))
}

/// Runs a future that never waits (the scripted writes answer at once).
fn now<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the scripted coordinator answers at once"),
    }
}

fn proposed(broker: &SharedBroker, now_ms: i64) -> Vec<IsrProposal> {
    broker.borrow_mut().poll_isr_proposals(now_ms)
}

#[test]
fn a_session_expiry_answers_the_proposals_not_sent_yet() {
    let broker = leader_with_two_expansions();
    let first = proposed(&broker, 20);
    println!(
        "proposed: {:?}",
        first
            .iter()
            .map(|p| (p.partition, &p.new_state.isr))
            .collect::<Vec<_>>()
    );
    assert_eq!(first.iter().map(|p| p.partition).collect::<Vec<_>>(), [0, 1]);
    // The first write fails on the expired session: the second is never sent.
    let sent = RefCell::new(Vec::new());
    let ended = now(write_isr_proposals(&broker, &PartitionWatch::default(), first, |p| {
        sent.borrow_mut().push(p.partition);
        async { Err(CoordError::SessionExpired) }
    }));
    assert!(matches!(ended, Err(End::Expired)));
    assert_eq!(*sent.borrow(), [0], "nothing is sent after the session expired");
    // Neither proposal is left unanswered: in the next session both are sent again (an
    // unanswered one would block its partition's ISR changes until a newer state arrived), as
    // they were, since the first may have applied before the session ended.
    let again = proposed(&broker, 30);
    println!(
        "proposed again: {:?}",
        again.iter().map(|p| p.partition).collect::<Vec<_>>()
    );
    assert_eq!(again.iter().map(|p| p.partition).collect::<Vec<_>>(), [0, 1]);
    // Both written this time: both ISRs are [0, 1] at the versions the writes returned.
    let written = now(write_isr_proposals(&broker, &PartitionWatch::default(), again, |p| {
        let version = 5 + p.partition;
        async move { Ok(version) }
    }));
    assert!(written.is_ok());
    for p in 0..2 {
        let (_, isr, leader, version) = broker.borrow().replica_state(T, p).expect("hosted");
        assert_eq!((isr, leader, version), (vec![BrokerId(0), BrokerId(1)], true, 5 + p));
    }
    assert!(proposed(&broker, 40).is_empty(), "nothing left to change");
}
