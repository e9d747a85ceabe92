use std::collections::{BTreeMap, BTreeSet};

use super::elect::next_state;
use super::*;
use crate::broker::topic::TopicId;
use crate::cluster::{broker_path, partition_state_path, topic_path, CONTROLLER_PATH};
use crate::cluster::{next_elr, LogEndReport};
use crate::error_code::ErrorCode;
use crate::ids::LeaderEpoch;

pub(super) fn b(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|&i| BrokerId(i)).collect()
}

pub(super) fn controller() -> Controller {
    Controller::new(BrokerId(0), 7, 3, ControllerConfig::default())
}

pub(super) fn draw() -> CreateTopicDraw {
    CreateTopicDraw {
        topic_id: TopicId::from_random(1, 2),
        start_index: 0,
        replica_shift: 0,
    }
}

fn view(live: &[i32]) -> ClusterView {
    ClusterView {
        live_brokers: b(live).into_iter().collect(),
        ..ClusterView::default()
    }
}

/// A view with one topic `t` of one partition on `replicas`, in the given state.
fn one_partition(live: &[i32], replicas: &[i32], leader: Option<i32>, isr: &[i32], unclean: bool) -> ClusterView {
    let mut v = view(live);
    let mut configs = BTreeMap::new();
    if unclean {
        configs.insert("unclean.leader.election.enable".to_string(), "true".to_string());
    }
    let record = TopicRecord {
        topic_id_hex: TopicId::from_random(1, 2).to_hex(),
        assignment: [(0, b(replicas))].into(),
        reassigning: BTreeMap::new(),
        configs,
    };
    let state = PartitionState {
        leader: leader.map(BrokerId),
        leader_epoch: LeaderEpoch(4),
        isr: b(isr),
        controller_epoch: 6,
        elr: Vec::new(),
    };
    v.topics.insert(
        "t".to_string(),
        TopicView {
            record,
            record_version: 2,
            partitions: [(
                0,
                Versioned {
                    value: state,
                    version: 9,
                },
            )]
            .into(),
        },
    );
    v
}

pub(super) fn fenced(w: &Write) -> bool {
    w.ops.first()
        == Some(&Op::Check {
            path: CONTROLLER_EPOCH_PATH.to_string(),
            version: 3,
        })
}

#[test]
fn assignment_matches_kafka_round_robin_with_shift() {
    // Kafka's AdminUtilsTest: 5 brokers, 10 partitions, rf 3, fixed start index 0 and shift 0.
    let got = assign_replicas(&b(&[0, 1, 2, 3, 4]), 10, 3, 0, 0);
    let want: BTreeMap<i32, Vec<BrokerId>> = [
        (0, b(&[0, 1, 2])),
        (1, b(&[1, 2, 3])),
        (2, b(&[2, 3, 4])),
        (3, b(&[3, 4, 0])),
        (4, b(&[4, 0, 1])),
        (5, b(&[0, 2, 3])),
        (6, b(&[1, 3, 4])),
        (7, b(&[2, 4, 0])),
        (8, b(&[3, 0, 1])),
        (9, b(&[4, 1, 2])),
    ]
    .into();
    assert_eq!(got, want);
    // A start index rotates the first replicas; replicas of a partition are always distinct.
    let rotated = assign_replicas(&b(&[5, 1, 3]), 7, 3, 2, 1);
    assert_eq!(rotated[&0][0], BrokerId(5), "start index 2 of sorted [1,3,5]");
    for replicas in rotated.values() {
        assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 3, "{replicas:?}");
    }
    assert_eq!(assign_replicas(&b(&[4]), 2, 1, 9, 9)[&1], b(&[4]));
}

#[test]
fn create_topic_writes_record_and_initial_states_fenced() {
    let c = controller();
    let (record, w) = c
        .create_topic(&view(&[0, 1, 2]), "orders", 2, 3, &BTreeMap::new(), draw())
        .expect("valid");
    assert!(fenced(&w), "{w:?}");
    assert_eq!(record.assignment[&0], b(&[0, 1, 2]));
    assert_eq!(record.assignment[&1], b(&[1, 2, 0]));
    let creates: Vec<(&str, &[u8])> = w
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Create { path, data, mode } => {
                assert_eq!(*mode, CreateMode::Persistent);
                Some((path.as_str(), data.as_slice()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        creates.len(),
        2 + 2 * 2,
        "topic, partitions, and per partition node + state"
    );
    assert_eq!(creates[0], (topic_path("orders").as_str(), record.encode().as_slice()));
    let state_path = partition_state_path("orders", 1);
    let state = creates
        .iter()
        .find(|(p, _)| *p == state_path)
        .expect("state of partition 1");
    let state = PartitionState::decode(state.1).expect("decodes");
    assert_eq!(
        state,
        PartitionState {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(0),
            isr: b(&[1, 2, 0]),
            controller_epoch: 7,
            elr: Vec::new(),
        }
    );
}

#[test]
fn create_topic_refusals_carry_kafka_codes() {
    let c = controller();
    let v = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    let none = BTreeMap::new();
    let code = |name: &str, p: i32, rf: i32, configs: &BTreeMap<String, String>| {
        c.create_topic(&v, name, p, rf, configs, draw())
            .map(|_| ())
            .map_err(|e| e.code)
    };
    assert_eq!(code("x", 1, 4, &none), Err(ErrorCode::InvalidReplicationFactor));
    assert_eq!(code("x", 1, 0, &none), Err(ErrorCode::InvalidReplicationFactor));
    assert_eq!(code("x", 1, -1, &none), Err(ErrorCode::InvalidReplicationFactor));
    assert_eq!(code("x", 0, 1, &none), Err(ErrorCode::InvalidPartitions));
    assert_eq!(code("t", 1, 1, &none), Err(ErrorCode::TopicAlreadyExists));
    assert_eq!(code("a/b", 1, 1, &none), Err(ErrorCode::InvalidTopicException));
    assert_eq!(code("", 1, 1, &none), Err(ErrorCode::InvalidTopicException));
    let bad: BTreeMap<String, String> = [("unclean.leader.election.enable".into(), "yes".into())].into();
    assert_eq!(code("x", 1, 1, &bad), Err(ErrorCode::InvalidConfig));
    assert_eq!(code("x", 3, 3, &none), Ok(()));
    let mut deleting = v.clone();
    deleting.delete_requests.insert("gone".into());
    assert_eq!(
        c.create_topic(&deleting, "gone", 1, 1, &none, draw())
            .map_err(|e| e.code)
            .err(),
        Some(ErrorCode::TopicAlreadyExists)
    );
}

#[test]
fn dead_leader_replaced_by_first_live_isr_replica_epoch_bumped() {
    let v = one_partition(&[1, 2], &[0, 1, 2], Some(0), &[0, 2, 1], false);
    let changes = controller().reconcile(&v);
    assert_eq!(changes.len(), 1);
    let ch = &changes[0];
    assert_eq!(ch.after.leader, Some(BrokerId(1)), "assignment order, not ISR order");
    assert_eq!(ch.after.leader_epoch, LeaderEpoch(5));
    assert_eq!(ch.after.isr, b(&[2, 1]));
    assert_eq!(ch.after.controller_epoch, 7);
    assert!(!ch.unclean);
    assert!(fenced(&ch.write));
    assert_eq!(
        ch.write.ops[1],
        Op::Set {
            path: partition_state_path("t", 0),
            data: ch.after.encode(),
            expected_version: Some(9),
        }
    );
}

#[test]
fn live_replica_outside_isr_is_not_elected_when_unclean_is_off() {
    let v = one_partition(&[1], &[0, 1, 2], Some(0), &[0, 2], false);
    let ch = &controller().reconcile(&v)[0];
    assert_eq!(ch.after.leader, None, "offline rather than unclean");
    assert_eq!(ch.after.isr, b(&[0, 2]), "the ISR is kept while offline");
    assert_eq!(ch.after.leader_epoch, LeaderEpoch(5));
    // Nothing more to do while nobody eligible returns.
    let mut offline = v.clone();
    offline
        .topics
        .get_mut("t")
        .expect("t")
        .partitions
        .get_mut(&0)
        .expect("p0")
        .value = ch.after.clone();
    assert!(controller().reconcile(&offline).is_empty());
    // The old leader returns and reports its log: it waits for 2, which may hold more.
    offline.live_brokers.insert(BrokerId(0));
    report(&mut offline, 0, 5, 4, 100);
    assert!(controller().reconcile(&offline).is_empty(), "2 is away");
    // 2 returns with the same log: it waits for 1 too, live and outside the ISR, to report.
    offline.live_brokers.insert(BrokerId(2));
    report(&mut offline, 2, 5, 4, 100);
    assert!(controller().reconcile(&offline).is_empty(), "1 has not reported");
    // 1 holds less: 0 leads again, 2 in sync with it.
    report(&mut offline, 1, 5, 4, 60);
    let back = &controller().reconcile(&offline)[0];
    assert_eq!(back.after.leader, Some(BrokerId(0)));
    assert_eq!(back.after.isr, b(&[0, 2]));
    assert_eq!(back.after.leader_epoch, LeaderEpoch(6));
}

/// Broker `id`'s log end report for partition `t`-0, offline at `epoch`.
fn report(v: &mut ClusterView, id: i32, epoch: i32, last_epoch: i32, log_end: i64) {
    let r = LogEndReport {
        offline_epoch: LeaderEpoch(epoch),
        last_epoch: LeaderEpoch(last_epoch),
        log_end,
    };
    v.log_ends
        .entry(BrokerId(id))
        .or_default()
        .insert(("t".to_string(), 0), r);
}

/// Sets partition `t`-0's state in the view.
fn set_state(v: &mut ClusterView, state: &PartitionState) {
    v.topics
        .get_mut("t")
        .expect("topic")
        .partitions
        .get_mut(&0)
        .expect("partition")
        .value = state.clone();
}

#[test]
fn an_offline_partition_elects_the_longest_log_once_every_member_reported() {
    // The finding `elastic_all_isr_restarted_elects_the_replica_that_lost_power` (seed 23): all
    // of the ISR [2, 1, 0] restarted; 2 lost its unsynced tail in a power loss (log end 30), 1
    // and 0 kept theirs (34). The partition went offline; Kafka's ZooKeeper controller would
    // elect 2, the first in assignment order. The longest log leads instead.
    let mut v = one_partition(&[0, 1, 2], &[2, 1, 0], None, &[2, 1, 0], false);
    assert!(controller().reconcile(&v).is_empty(), "no reports yet: wait");
    report(&mut v, 2, 4, 3, 30);
    report(&mut v, 1, 4, 3, 34);
    assert!(controller().reconcile(&v).is_empty(), "0 has not reported: wait");
    // A report for an older offline epoch is not current.
    report(&mut v, 0, 3, 3, 40);
    assert!(controller().reconcile(&v).is_empty(), "0's report is stale: wait");
    report(&mut v, 0, 4, 3, 34);
    let changes = controller().reconcile(&v);
    println!(
        "reports 2:(3,30) 1:(3,34) 0:(3,34) -> {:?}",
        changes.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(changes.len(), 1);
    assert_eq!(
        changes[0].after.leader,
        Some(BrokerId(1)),
        "the first of the longest logs"
    );
    assert_eq!(
        changes[0].after.isr,
        b(&[1, 0]),
        "the replica that lost records is out of sync"
    );
    assert_eq!(changes[0].after.leader_epoch, LeaderEpoch(5));
    assert!(!changes[0].unclean);
    // A later leader epoch beats a longer log of an older one.
    report(&mut v, 2, 4, 4, 31);
    let changes = controller().reconcile(&v);
    assert_eq!(
        (changes[0].after.leader, changes[0].after.isr.clone()),
        (Some(BrokerId(2)), b(&[2]))
    );
    // With unclean election allowed, the live members suffice.
    let mut u = one_partition(&[1], &[2, 1, 0], None, &[2, 1, 0], true);
    report(&mut u, 1, 4, 3, 34);
    let changes = controller().reconcile(&u);
    assert_eq!(changes[0].after.leader, Some(BrokerId(1)));
}

#[test]
fn an_eligible_leader_replica_leads_when_the_isr_below_min_isr_lost_its_leader() {
    // Swarm seed 4791318359552059189: min ISR 2; the ISR shrank [0, 2] -> [0] (2 lagged), so 2
    // holds every acknowledged record. 0 then lost its unsynced tail in a power loss and
    // restarted; Kafka's ZooKeeper controller makes 0 lead again as the last ISR member.
    let mut v = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0, 2], false);
    v.topics
        .get_mut("t")
        .expect("topic")
        .record
        .configs
        .insert("min.insync.replicas".into(), "2".into());
    let shrunk = next_elr(&b(&[0, 2]), &[], &b(&[0]), 2, &b(&[0, 1, 2]));
    assert_eq!(
        shrunk,
        b(&[2]),
        "the replica leaving an ISR below min ISR stays eligible"
    );
    assert_eq!(
        next_elr(&b(&[0]), &b(&[2]), &b(&[0, 1]), 2, &b(&[0, 1, 2])),
        b(&[]),
        "back at min ISR"
    );
    let state = PartitionState {
        isr: b(&[0]),
        elr: shrunk,
        ..v.topics["t"].partitions[&0].value.clone()
    };
    set_state(&mut v, &state);
    assert_eq!(PartitionState::decode(&state.encode()), Some(state.clone()));
    v.registered_at.insert(BrokerId(0), 20);
    v.state_written_at.insert(("t".to_string(), 0), 10);
    let changes = controller().reconcile(&v);
    println!(
        "ISR [0] ELR [2], 0 restarted: {:?}",
        changes.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].after.leader, Some(BrokerId(2)));
    assert_eq!(changes[0].after.isr, b(&[2]));
    assert!(changes[0].after.elr.is_empty(), "0 restarted: not eligible");
    assert!(!changes[0].unclean);
    // The leader dying without a restart: it stays eligible beside the new leader.
    v.registered_at.clear();
    v.live_brokers.remove(&BrokerId(0));
    let changes = controller().reconcile(&v);
    assert_eq!(
        (changes[0].after.leader, changes[0].after.elr.clone()),
        (Some(BrokerId(2)), b(&[0]))
    );
    // An eligible replica that restarted is dropped while the leader is live.
    let mut w = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0], false);
    let state = PartitionState {
        elr: b(&[2]),
        ..w.topics["t"].partitions[&0].value.clone()
    };
    set_state(&mut w, &state);
    w.registered_at.insert(BrokerId(2), 20);
    w.state_written_at.insert(("t".to_string(), 0), 10);
    let changes = controller().reconcile(&w);
    assert_eq!(
        (changes[0].after.leader, changes[0].after.elr.clone()),
        (Some(BrokerId(0)), b(&[]))
    );
}

#[test]
fn unclean_election_when_enabled_by_topic_or_default() {
    let v = one_partition(&[2, 1], &[0, 1, 2], Some(0), &[0], true);
    let ch = &controller().reconcile(&v)[0];
    assert_eq!(ch.after.leader, Some(BrokerId(1)));
    assert_eq!(ch.after.isr, b(&[1]));
    assert!(ch.unclean);
    assert!(ch.write.what.contains("UNCLEAN"), "{}", ch.write.what);
    // Off by topic config overrides a permissive default.
    let mut v2 = one_partition(&[1], &[0, 1], Some(0), &[0], false);
    let permissive = Controller::new(
        BrokerId(0),
        7,
        3,
        ControllerConfig {
            unclean_leader_election_default: true,
            ..ControllerConfig::default()
        },
    );
    assert!(
        permissive.reconcile(&v2)[0].unclean,
        "default applies without a topic config"
    );
    v2.topics
        .get_mut("t")
        .expect("t")
        .record
        .configs
        .insert("unclean.leader.election.enable".into(), "false".into());
    assert_eq!(permissive.reconcile(&v2)[0].after.leader, None);
}

#[test]
fn dead_followers_leave_isr_without_epoch_bump() {
    let v = one_partition(&[0, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    let ch = &controller().reconcile(&v)[0];
    assert_eq!(ch.after.leader, Some(BrokerId(0)));
    assert_eq!(ch.after.isr, b(&[0, 2]));
    assert_eq!(ch.after.leader_epoch, LeaderEpoch(4), "no leader change, no bump");
    // Nothing to do when all is well.
    let fine = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    assert!(controller().reconcile(&fine).is_empty());
}

#[test]
fn delete_topic_removes_children_first_and_preferred_election_moves_back() {
    let mut v = one_partition(&[0, 1], &[0, 1], Some(1), &[1, 0], false);
    v.delete_requests.insert("t".into());
    let w = controller().delete_topic(&v, "t").expect("known topic");
    assert!(fenced(&w));
    let paths: Vec<&str> = w
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Delete { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/brokers/topics/t/partitions/0/state",
            "/brokers/topics/t/partitions/0",
            "/brokers/topics/t/partitions",
            "/brokers/topics/t",
            "/admin/delete_topics/t"
        ]
    );
    assert!(controller().delete_topic(&v, "nope").is_none());
    assert!(
        controller().reconcile(&v).is_empty(),
        "a topic being deleted gets no elections"
    );
    v.delete_requests.clear();
    let pref = controller().preferred_leader_elections(&v);
    assert_eq!(pref.len(), 1);
    assert_eq!(pref[0].after.leader, Some(BrokerId(0)));
    assert_eq!(pref[0].after.leader_epoch, LeaderEpoch(5));
    // A preferred replica that restarted after the state was written may lack acknowledged
    // records: no election until it rejoined the ISR in a newer state (KIP-380).
    v.registered_at.insert(BrokerId(0), 10);
    v.state_written_at.insert(("t".to_string(), 0), 5);
    assert!(controller().preferred_leader_elections(&v).is_empty());
    v.state_written_at.insert(("t".to_string(), 0), 11);
    assert_eq!(controller().preferred_leader_elections(&v).len(), 1);
}

#[test]
fn a_restarted_follower_leaves_the_isr_while_its_leader_stays() {
    // Issue #9's stall: follower 1 restarted after the state was written, leader 2 stayed up.
    // The controller must write the ISR without 1 (same leader, same epoch); until some write
    // newer than 1's registration exists, reassignments of the partition are refused. The same
    // bug lost acknowledged records in campaign seeds (acl scenario 6973703470992011883, group
    // scenario 6215645171697418880): the stale ISR later let a leader that lost power lead again.
    let mut v = one_partition(&[0, 1, 2], &[2, 0, 1], Some(2), &[0, 1, 2], false);
    v.registered_at.insert(BrokerId(1), 81);
    v.state_written_at.insert(("t".to_string(), 0), 72);
    assert!(Controller::isr_restarted(
        &v,
        "t",
        0,
        &v.topics["t"].partitions[&0].value
    ));
    let changes = controller().reconcile(&v);
    println!(
        "restarted follower, leader live: {:?}",
        changes.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(
        changes.len(),
        1,
        "the restarted follower's removal is a change to write"
    );
    let after = &changes[0].after;
    assert_eq!(after.leader, Some(BrokerId(2)));
    assert_eq!(after.isr, b(&[0, 2]));
    assert_eq!(after.leader_epoch, LeaderEpoch(4), "no leader change, no bump");
    assert_eq!(after.controller_epoch, 7);
    assert!(fenced(&changes[0].write));
    // Once that state is written (newer than the registration) there is nothing left to do.
    let p0 = &mut v
        .topics
        .get_mut("t")
        .expect("topic")
        .partitions
        .get_mut(&0)
        .expect("partition")
        .value;
    *p0 = after.clone();
    v.state_written_at.insert(("t".to_string(), 0), 90);
    assert!(controller().reconcile(&v).is_empty());
}

#[test]
fn an_election_write_fails_if_a_named_broker_registered_again_since_the_view() {
    // The acl race campaign's seed 4623362752862586853: broker 2 restarted and registered anew
    // between the controller's read (its old registration, created at 41) and the controller's
    // write electing it; the write landed after the new registration, so it looked meant for
    // the new process, whose log had lost unsynced records. Each broker the new state names
    // is checked at the registration the view read (KIP-380's broker epoch).
    let mut v = one_partition(&[1, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    v.registered_at.insert(BrokerId(1), 40);
    v.registered_at.insert(BrokerId(2), 41);
    v.state_written_at.insert(("t".to_string(), 0), 45);
    let changes = controller().reconcile(&v);
    assert_eq!(changes.len(), 1);
    let checks: Vec<&Op> = changes[0]
        .write
        .ops
        .iter()
        .filter(|op| matches!(op, Op::CheckCreated { .. } | Op::CheckAbsent { .. }))
        .collect();
    println!("election {:?} carries {checks:?}", changes[0].after);
    assert_eq!(
        checks,
        vec![
            &Op::CheckAbsent {
                path: broker_path(BrokerId(0))
            },
            &Op::CheckCreated {
                path: broker_path(BrokerId(1)),
                czxid: 40
            },
            &Op::CheckCreated {
                path: broker_path(BrokerId(2)),
                czxid: 41
            },
        ]
    );
    assert!(fenced(&changes[0].write), "the controller fence stays first");
    // Dead broker 0 is checked to be still unregistered: had it registered since the view,
    // this decision (it leads no more, it may have lost unsynced records) would be unfounded.
    // A view that does not detect restarts checks nothing.
    let plain = one_partition(&[1, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    assert!(controller().reconcile(&plain)[0]
        .write
        .ops
        .iter()
        .all(|op| !matches!(op, Op::CheckCreated { .. } | Op::CheckAbsent { .. })));
    // Preferred leader elections carry them too.
    let mut back = one_partition(&[0, 1, 2], &[0, 1, 2], Some(1), &[0, 1, 2], false);
    back.registered_at.insert(BrokerId(0), 50);
    back.state_written_at.insert(("t".to_string(), 0), 60);
    let preferred = controller().preferred_leader_elections(&back);
    assert_eq!(preferred.len(), 1);
    assert!(preferred[0].write.ops.contains(&Op::CheckCreated {
        path: broker_path(BrokerId(0)),
        czxid: 50
    }));
}

#[test]
fn a_restarted_eligible_replica_holds_other_writes_like_a_restarted_isr_member() {
    // Leader 0 with ISR [0] below min ISR and 1 eligible (ELR); 1 restarts after the state.
    // Until the controller drops it from the ELR, nothing else may rewrite the state (nor may
    // the leader propose ISR changes): the new version would make 1's restart invisible.
    let mut v = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0], false);
    let mut state = v.topics["t"].partitions[&0].value.clone();
    state.elr = b(&[1]);
    set_state(&mut v, &state);
    v.state_written_at.insert(("t".to_string(), 0), 30);
    v.registered_at.insert(BrokerId(0), 10);
    v.registered_at.insert(BrokerId(1), 20);
    assert!(
        !Controller::isr_restarted(&v, "t", 0, &state),
        "1 registered before the state"
    );
    v.registered_at.insert(BrokerId(1), 40);
    assert!(Controller::isr_restarted(&v, "t", 0, &state), "1 restarted since");
    let changes = controller().reconcile(&v);
    assert_eq!(changes.len(), 1);
    assert!(
        changes[0].after.elr.is_empty(),
        "the controller drops it: {:?}",
        changes[0].after
    );
}

#[test]
fn a_dead_replica_made_eligible_is_checked_still_unregistered() {
    // The group-commit campaign seed 6952832580335106510: leader 1 (ISR [0, 1], min ISR 2) lost
    // power; the new controller's view had 1 dead and 0 live, so it elected 0 with ELR [1]. 1
    // registered again (its log missing an unsynced record) before that write landed, so the
    // state looked newer than its restart and 1 stayed eligible, and led once 0 restarted too.
    let mut v = one_partition(&[0, 2], &[0, 1, 2], Some(1), &[0, 1], false);
    v.topics
        .get_mut("t")
        .expect("topic")
        .record
        .configs
        .insert("min.insync.replicas".to_string(), "2".to_string());
    v.registered_at.insert(BrokerId(0), 10);
    v.registered_at.insert(BrokerId(2), 11);
    v.state_written_at.insert(("t".to_string(), 0), 20);
    let changes = controller().reconcile(&v);
    assert_eq!(changes.len(), 1);
    let after = &changes[0].after;
    assert_eq!(
        (after.leader, after.isr.clone(), after.elr.clone()),
        (Some(BrokerId(0)), b(&[0]), b(&[1]))
    );
    println!("{after:?} written with {:?}", changes[0].write.ops);
    assert!(
        changes[0].write.ops.contains(&Op::CheckAbsent {
            path: broker_path(BrokerId(1))
        }),
        "the write must fail if 1 registered since the view"
    );
}

#[test]
fn an_offline_partition_elects_a_longer_log_outside_the_isr() {
    // The acl race campaign's seed 6951782326422116578: ISR [0, 1]; 0 lost power and restarted
    // (so left the ISR), then 1, the only ISR member, lost power with nothing synced and the
    // partition went offline. 1 reports an empty log; 0 kept all 73 records. Electing from the
    // members alone made 1 leader and 0 truncated to nothing (73 acknowledged records lost).
    let mut v = one_partition(&[0, 1, 2], &[0, 1, 2], None, &[1], false);
    report(&mut v, 1, 4, -1, 0);
    assert!(
        controller().reconcile(&v).is_empty(),
        "0 and 2 are live and have not reported: wait"
    );
    report(&mut v, 0, 4, 3, 73);
    assert!(controller().reconcile(&v).is_empty(), "2 has not reported: wait");
    report(&mut v, 2, 4, 2, 80);
    let changes = controller().reconcile(&v);
    println!(
        "reports 1:(-1,0) 0:(3,73) 2:(2,80) -> {:?}",
        changes.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].after.leader, changes[0].after.isr.clone()),
        (Some(BrokerId(0)), b(&[0])),
        "the latest epoch's longest log, not the longer log of an older epoch (2)"
    );
    assert!(!changes[0].unclean, "it holds everything the members hold");
    // A live non-member that never reports is waited for; one that is dead is not.
    let mut w = one_partition(&[0, 1], &[0, 1, 2], None, &[1], false);
    report(&mut w, 1, 4, -1, 0);
    report(&mut w, 0, 4, 3, 73);
    let changes = controller().reconcile(&w);
    assert_eq!(changes[0].after.leader, Some(BrokerId(0)));
}

#[test]
fn a_restarted_leader_leaves_the_isr_even_when_its_followers_look_dead() {
    // The swarm campaign's finding: leader 0 lost an unsynced record in a power loss and came
    // back (registered after the state was written) while brokers 1 and 2, in the ISR with the
    // record, looked dead to a new controller. The partition goes offline without 0 in the ISR,
    // so the next pass does not make 0 leader again; 1 or 2 lead when they are live.
    let mut v = one_partition(&[0], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    v.registered_at.insert(BrokerId(0), 20);
    v.state_written_at.insert(("t".to_string(), 0), 10);
    let first = controller().reconcile(&v);
    println!(
        "restarted leader, followers dead: {:?}",
        first.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].after.leader, None);
    assert_eq!(first[0].after.isr, b(&[1, 2]), "the restarted broker left the ISR");
    // The next pass sees the rewritten state (newer than the registration): 0 is not eligible.
    let p0 = &mut v
        .topics
        .get_mut("t")
        .expect("topic")
        .partitions
        .get_mut(&0)
        .expect("partition")
        .value;
    *p0 = first[0].after.clone();
    v.state_written_at.insert(("t".to_string(), 0), 30);
    assert!(controller().reconcile(&v).is_empty(), "nobody eligible: stays offline");
    v.live_brokers.insert(BrokerId(2));
    report(&mut v, 2, 5, 4, 10);
    assert!(controller().reconcile(&v).is_empty(), "1 may hold more: wait");
    v.live_brokers.insert(BrokerId(1));
    report(&mut v, 1, 5, 4, 10);
    assert!(controller().reconcile(&v).is_empty(), "0 is live and has not reported");
    // 0 lost its unsynced record: shorter, it does not lead.
    report(&mut v, 0, 5, 4, 9);
    let back = controller().reconcile(&v);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].after.leader, Some(BrokerId(1)));
    assert_eq!(back[0].after.isr, b(&[1, 2]));
    assert!(!back[0].unclean);
    // The last ISR member restarting still leads again (nobody has more): Kafka's behaviour.
    let mut alone = one_partition(&[0], &[0, 1, 2], Some(0), &[0], false);
    alone.registered_at.insert(BrokerId(0), 20);
    alone.state_written_at.insert(("t".to_string(), 0), 10);
    let offline = controller().reconcile(&alone);
    assert_eq!(offline.len(), 1);
    assert_eq!((offline[0].after.leader, offline[0].after.isr.clone()), (None, b(&[0])));
}

#[test]
fn only_an_unclean_restart_counts_when_every_isr_member_re_registered() {
    // The swarm finding (seed 6181723348523371367): a clog expired every broker's session, all
    // three re-registered after the state was written, then leader 0 lost an unsynced record in
    // a power loss and restarted. 1 and 2 only re-registered (their logs intact since their
    // first registrations, 1 and 2, before the state at 10); 0's log is intact only since its
    // new registration at 30. 1 leads, 0 leaves the ISR.
    let mut v = one_partition(&[0, 1, 2], &[0, 1, 2], Some(0), &[0, 1, 2], false);
    v.state_written_at.insert(("t".to_string(), 0), 10);
    for (id, registered, intact) in [(0, 30, 30), (1, 20, 1), (2, 21, 2)] {
        v.registered_at.insert(BrokerId(id), registered);
        v.intact_since.insert(BrokerId(id), intact);
    }
    let changes = controller().reconcile(&v);
    println!(
        "all re-registered, 0 uncleanly: {:?}",
        changes.iter().map(|c| &c.after).collect::<Vec<_>>()
    );
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].after.leader, Some(BrokerId(1)));
    assert_eq!(changes[0].after.isr, b(&[1, 2]), "the unclean restart left the ISR");
    assert!(!changes[0].unclean);
    // Nothing else may write the state first (it would hide 0's restart), and 0 is not the
    // preferred leader again until a newer state has it back in the ISR.
    assert!(Controller::isr_restarted(
        &v,
        "t",
        0,
        &v.topics["t"].partitions[&0].value
    ));
    // Registrations without the claim (older brokers): every re-registration is a restart, as
    // before; nobody is eligible and the partition goes offline.
    v.intact_since.clear();
    let old = controller().reconcile(&v);
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].after.leader, None);
    // A claim later than the registration cannot make a broker look more restarted than it is,
    // nor can an absent registration make it restarted.
    v.intact_since.insert(BrokerId(1), 99);
    assert!(!v.restarted_since(BrokerId(1), 20));
    assert!(!v.restarted_since(BrokerId(7), 0));
}

#[test]
fn election_protocol_claims_bumps_and_fences() {
    let claim = election::claim(BrokerId(3));
    assert_eq!(
        claim.ops,
        [Op::Create {
            path: CONTROLLER_PATH.into(),
            data: b"3".to_vec(),
            mode: CreateMode::Ephemeral
        }]
    );
    assert_eq!(election::parse_controller(b"3"), Some(BrokerId(3)));
    assert_eq!(election::parse_controller(b"\xff"), None);
    let (first, epoch) = election::bump_epoch(None);
    assert_eq!(epoch, 1);
    assert!(matches!(&first.ops[0], Op::Create { path, .. } if path == CONTROLLER_EPOCH_PATH));
    let (bump, epoch) = election::bump_epoch(Some((4, 10)));
    assert_eq!(epoch, 5);
    assert_eq!(
        bump.ops,
        [Op::Set {
            path: CONTROLLER_EPOCH_PATH.into(),
            data: b"5".to_vec(),
            expected_version: Some(10)
        }]
    );
    assert_eq!(election::parse_epoch(b"5"), Some(5));
    let c = election::elected(BrokerId(3), Some((4, 10)), ControllerConfig::default());
    assert_eq!((c.epoch, c.epoch_version), (5, 11));
    assert_eq!(
        c.fence(),
        Op::Check {
            path: CONTROLLER_EPOCH_PATH.into(),
            version: 11
        }
    );
    assert_eq!(
        election::elected(BrokerId(3), None, ControllerConfig::default()).epoch_version,
        0
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        Die(i32),
        Return(i32),
        /// The leader shrinks the ISR to these members (filtered to replicas, leader kept).
        Shrink(Vec<i32>),
        /// The leader adds a live replica back (caught up).
        Expand(i32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..5i32).prop_map(Step::Die),
            (0..5i32).prop_map(Step::Return),
            proptest::collection::vec(0..5i32, 0..4).prop_map(Step::Shrink),
            (0..5i32).prop_map(Step::Expand),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn clean_elections_stay_in_isr_epochs_rise_isr_holds_leader(
            steps in proptest::collection::vec(step(), 1..40),
            unclean in any::<bool>(),
            min_isr in 1usize..4,
            log_ends in proptest::collection::vec(0i64..4, 5),
        ) {
            let replicas = b(&[0, 1, 2, 3, 4]);
            let mut live: BTreeSet<BrokerId> = replicas.iter().copied().collect();
            let mut state = PartitionState {
                leader: Some(BrokerId(0)),
                leader_epoch: LeaderEpoch(0),
                isr: replicas.clone(),
                controller_epoch: 7,
                elr: Vec::new(),
            };
            for s in steps {
                match s {
                    Step::Die(i) => { live.remove(&BrokerId(i)); }
                    Step::Return(i) => { live.insert(BrokerId(i)); }
                    // The leader's ISR changes, with the ELR as its proposals carry it.
                    Step::Shrink(keep) => {
                        if let Some(l) = state.leader {
                            let old = state.isr.clone();
                            state.isr.retain(|x| *x == l || keep.contains(&x.0));
                            state.elr = next_elr(&old, &state.elr, &state.isr, min_isr, &replicas);
                        }
                    }
                    Step::Expand(i) => {
                        if state.leader.is_some() && live.contains(&BrokerId(i)) && !state.isr.contains(&BrokerId(i)) {
                            let old = state.isr.clone();
                            state.isr.push(BrokerId(i));
                            state.elr = next_elr(&old, &state.elr, &state.isr, min_isr, &replicas);
                        }
                    }
                }
                let is_live = |x: BrokerId| live.contains(&x);
                // Every live replica reports its log end for the current epoch.
                let epoch_now = state.leader_epoch;
                let report = |x: BrokerId| {
                    live.contains(&x).then(|| LogEndReport {
                        offline_epoch: epoch_now,
                        last_epoch: LeaderEpoch(0),
                        log_end: log_ends[usize::try_from(x.0).unwrap_or(0)],
                    })
                };
                let Some((after, was_unclean)) = next_state(&state, &replicas, &is_live, unclean, 7, min_isr, &report) else {
                    // No change needed: the leader is live, or nobody is eligible while offline.
                    prop_assert!(state.leader.is_none_or(|l| live.contains(&l)));
                    continue;
                };
                if after.leader != state.leader {
                    prop_assert!(after.leader_epoch > state.leader_epoch, "epoch must rise: {state:?} -> {after:?}");
                    if let Some(l) = after.leader {
                        prop_assert!(live.contains(&l), "a dead leader was elected");
                        if was_unclean {
                            prop_assert!(unclean, "unclean election while disabled");
                            prop_assert!(!state.isr.contains(&l));
                        } else if state.leader.is_some() {
                            prop_assert!(
                                state.isr.contains(&l) || state.elr.contains(&l),
                                "clean election outside the ISR and ELR: {state:?} -> {after:?}"
                            );
                        }
                        if state.leader.is_none() && !was_unclean {
                            // Offline recovery: the longest log among the live replicas leads
                            // (a member or not), and only once every member is live unless
                            // unclean election is allowed.
                            let mut members = replicas.iter().filter(|x| state.isr.contains(x) || state.elr.contains(x));
                            prop_assert!(unclean || members.all(|x| live.contains(x)), "elected while a member is away");
                            let longest = replicas
                                .iter()
                                .filter(|x| live.contains(x))
                                .map(|x| log_ends[usize::try_from(x.0).unwrap_or(0)])
                                .max();
                            prop_assert_eq!(Some(log_ends[usize::try_from(l.0).unwrap_or(0)]), longest);
                        }
                    }
                } else {
                    prop_assert_eq!(after.leader_epoch, state.leader_epoch);
                }
                prop_assert!(after.elr.iter().all(|x| !after.isr.contains(x) && replicas.contains(x)), "ELR overlaps the ISR: {after:?}");
                prop_assert!(after.isr.len() < min_isr || after.elr.is_empty(), "ELR beside a full ISR: {after:?}");
                if let Some(l) = after.leader {
                    prop_assert!(after.isr.contains(&l), "ISR lacks the leader: {after:?}");
                }
                prop_assert!(!after.isr.is_empty(), "the ISR emptied: {state:?} -> {after:?}");
                prop_assert!(after.isr.iter().all(|x| replicas.contains(x)));
                // A second pass over the same liveness changes nothing: decisions are idempotent.
                let epoch_after = after.leader_epoch;
                let report_after = |x: BrokerId| {
                    live.contains(&x).then(|| LogEndReport {
                        offline_epoch: epoch_after,
                        last_epoch: LeaderEpoch(0),
                        log_end: log_ends[usize::try_from(x.0).unwrap_or(0)],
                    })
                };
                if after.leader.is_some() {
                    prop_assert!(next_state(&after, &replicas, &is_live, unclean, 7, min_isr, &report_after).is_none());
                }
                state = after;
            }
        }
    }
}

/// A minimal coordinator tree applying [`Write`]s as ZooKeeper's multi does (all or nothing,
/// versions counting sets, parents must exist): enough to show the fencing end to end.
#[derive(Default)]
pub(super) struct Tree {
    pub(super) nodes: BTreeMap<String, (Vec<u8>, i32)>,
}

impl Tree {
    pub(super) fn apply(&mut self, w: &Write) -> Result<(), String> {
        let mut next = self.nodes.clone();
        for op in &w.ops {
            match op {
                Op::Create { path, data, .. } => {
                    let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
                    if !parent.is_empty() && !next.contains_key(parent) {
                        return Err(format!("no parent for {path}"));
                    }
                    if next.insert(path.clone(), (data.clone(), 0)).is_some() {
                        return Err(format!("node exists: {path}"));
                    }
                }
                Op::Set {
                    path,
                    data,
                    expected_version,
                } => {
                    let node = next.get_mut(path).ok_or(format!("no node {path}"))?;
                    if expected_version.is_some_and(|v| v != node.1) {
                        return Err(format!("bad version at {path}"));
                    }
                    *node = (data.clone(), node.1 + 1);
                }
                Op::Delete { path, expected_version } => {
                    let node = next.get(path).ok_or(format!("no node {path}"))?;
                    if expected_version.is_some_and(|v| v != node.1) {
                        return Err(format!("bad version at {path}"));
                    }
                    next.remove(path);
                }
                Op::Check { path, version } => {
                    if next.get(path).map(|n| n.1) != Some(*version) {
                        return Err(format!("check failed at {path}"));
                    }
                }
                // This model keeps no creation indexes (its views know no registrations).
                Op::CheckCreated { path, .. } => return Err(format!("no creation index in the model for {path}")),
                Op::CheckAbsent { path } => {
                    if next.contains_key(path) {
                        return Err(format!("{path} exists"));
                    }
                }
            }
        }
        self.nodes = next;
        Ok(())
    }

    fn epoch(&self) -> Option<(i32, i32)> {
        let (data, version) = self.nodes.get(CONTROLLER_EPOCH_PATH)?;
        Some((election::parse_epoch(data)?, *version))
    }

    /// The controller's view of topic `t` (what the integrator reads).
    pub(super) fn view(&self, live: &[i32]) -> ClusterView {
        let mut v = view(live);
        if let Some((data, record_version)) = self.nodes.get(&topic_path("t")) {
            let record = TopicRecord::decode(data).expect("record");
            let partitions = record
                .assignment
                .keys()
                .map(|&p| {
                    let (data, version) = &self.nodes[&partition_state_path("t", p)];
                    let value = PartitionState::decode(data).expect("state");
                    (
                        p,
                        Versioned {
                            value,
                            version: *version,
                        },
                    )
                })
                .collect();
            v.topics.insert(
                "t".into(),
                TopicView {
                    record,
                    record_version: *record_version,
                    partitions,
                },
            );
        }
        v
    }
}

#[test]
fn a_replaced_controller_is_fenced_and_a_stale_partition_write_loses() {
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
    // Broker 0 wins the claim and sets epoch 1.
    tree.apply(&election::claim(BrokerId(0))).expect("first claim");
    assert!(
        tree.apply(&election::claim(BrokerId(1))).is_err(),
        "one controller at a time"
    );
    let read = tree.epoch();
    tree.apply(&election::bump_epoch(read).0).expect("epoch 1");
    let a = election::elected(BrokerId(0), read, ControllerConfig::default());
    let (_, create) = a
        .create_topic(&tree.view(&[0, 1, 2]), "t", 1, 3, &BTreeMap::new(), draw())
        .expect("valid");
    tree.apply(&create).expect("topic created");
    // Broker 0's session expires: /controller goes, broker 1 is elected with epoch 2.
    tree.nodes.remove(CONTROLLER_PATH);
    tree.apply(&election::claim(BrokerId(1))).expect("second claim");
    let read = tree.epoch();
    assert_eq!(read, Some((1, 0)));
    tree.apply(&election::bump_epoch(read).0).expect("epoch 2");
    let ctl_b = election::elected(BrokerId(1), read, ControllerConfig::default());
    assert_eq!(ctl_b.epoch, 2);
    // Broker 0 (still alive as a broker, believing it is controller) and broker 1 both react to
    // the same view in which the leader (broker 0) is gone: only the current controller applies.
    let after_death = tree.view(&[1, 2]);
    let stale = a.reconcile(&after_death);
    assert_eq!(stale.len(), 1);
    let e = tree
        .apply(&stale[0].write)
        .expect_err("a stale controller's write must fail");
    assert!(e.contains("check failed at /controller_epoch"), "{e}");
    let fresh = ctl_b.reconcile(&after_death);
    tree.apply(&fresh[0].write)
        .expect("the current controller's write applies");
    let state = &tree.view(&[1, 2]).topics["t"].partitions[&0];
    assert_eq!(state.value.leader, Some(BrokerId(1)));
    assert_eq!(state.value.controller_epoch, 2);
    // A decision made on a state version that has since moved (the leader shrank its ISR) loses.
    let before_shrink = tree.view(&[1]);
    let mut shrunk = state.value.clone();
    shrunk.isr = b(&[1]);
    let leader_cas = Write {
        ops: vec![Op::Set {
            path: partition_state_path("t", 0),
            data: shrunk.encode(),
            expected_version: Some(state.version),
        }],
        what: "leader shrinks the ISR".into(),
    };
    tree.apply(&leader_cas).expect("leader's CAS");
    let late = ctl_b.reconcile(&before_shrink);
    assert_eq!(late.len(), 1, "broker 2 died: the controller would remove it");
    assert!(tree
        .apply(&late[0].write)
        .expect_err("stale version")
        .contains("bad version"));
    // Re-read, re-decide: nothing left to do, the ISR already lacks broker 2.
    assert!(ctl_b.reconcile(&tree.view(&[1])).is_empty());
    // Deletion removes every node of the topic.
    tree.apply(&ctl_b.delete_topic(&tree.view(&[1]), "t").expect("known"))
        .expect("deleted");
    assert!(!tree.nodes.keys().any(|p| p.starts_with("/brokers/topics/t")));
}

#[test]
fn a_topic_record_written_alone_gets_its_partition_states() {
    let mut v = one_partition(&[1, 2], &[0, 1, 2], None, &[], false);
    let t = v.topics.get_mut("t").expect("t");
    t.partitions.clear();
    t.record.assignment.insert(1, b(&[2, 0, 1]));
    let writes = controller().missing_partition_states(&v);
    assert_eq!(writes.len(), 1);
    let w = &writes[0];
    assert!(fenced(w));
    assert_eq!(
        w.ops.len(),
        1 + 1 + 2 * 2,
        "fence, partitions node, node + state per partition"
    );
    let state_of = |p: i32| {
        w.ops.iter().find_map(|op| match op {
            Op::Create { path, data, .. } if *path == partition_state_path("t", p) => PartitionState::decode(data),
            _ => None,
        })
    };
    let p0 = state_of(0).expect("state 0");
    assert_eq!(
        (p0.leader, p0.isr.clone(), p0.leader_epoch),
        (Some(BrokerId(1)), b(&[1, 2]), LeaderEpoch(0))
    );
    assert_eq!(state_of(1).expect("state 1").leader, Some(BrokerId(2)));
    // A topic with a partition whose replicas are all down waits; one with states is left alone.
    assert!(controller()
        .missing_partition_states(&one_partition(&[1], &[0, 1], Some(1), &[1], false))
        .is_empty());
    v.live_brokers = [BrokerId(0)].into();
    v.topics
        .get_mut("t")
        .expect("t")
        .record
        .assignment
        .insert(2, b(&[1, 2]));
    assert!(controller().missing_partition_states(&v).is_empty());
}
