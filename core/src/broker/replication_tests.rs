//! Replication between three [`Broker`]s on their own [`MemDisk`]s, driven by direct calls: the
//! test plays the coordinator (partition states, ISR compare-and-set) and the replica fetchers.

use super::*;
use crate::cluster::{PartitionState as ZkState, TopicRecord};
use crate::disk::mem::{CrashMode, MemDisk};
use crate::node::handlers;
use crate::protocol::api::fetch::FetchRequest;
use crate::record::{build_batch, NewRecord, ProducerFields};

const T: &str = "orders";

fn batch(marker: u8) -> Vec<u8> {
    build_batch(
        &[NewRecord {
            timestamp: 1_000,
            key: None,
            value: Some(vec![marker; 8]),
        }],
        ProducerFields::none(),
    )
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().map(|i| BrokerId(*i)).collect()
}

fn record(replicas: &[i32], min_isr: i32) -> TopicRecord {
    TopicRecord {
        topic_id_hex: TopicId::from_random(7, 7).to_hex(),
        assignment: [(0, ids(replicas))].into(),
        reassigning: Default::default(),
        configs: [("min.insync.replicas".to_string(), min_isr.to_string())].into(),
    }
}

fn zk(leader: i32, epoch: i32, isr: &[i32]) -> ZkState {
    ZkState {
        leader: (leader >= 0).then_some(BrokerId(leader)),
        leader_epoch: LeaderEpoch(epoch),
        isr: ids(isr),
        controller_epoch: 1,
        elr: Vec::new(),
    }
}

struct Node {
    broker: Broker,
    disk: MemDisk,
}

fn config(id: i32, policy: TruncationPolicy) -> BrokerConfig {
    BrokerConfig {
        broker_id: BrokerId(id),
        replica_lag_time_max_ms: 1_000,
        truncation: policy,
        ..BrokerConfig::default()
    }
}

fn nodes(n: i32, policy: TruncationPolicy) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut disk = MemDisk::new();
            let broker = Broker::open(&mut disk, config(i, policy), 0).expect("open");
            Node { broker, disk }
        })
        .collect()
}

fn apply(c: &mut [Node], who: &[usize], rec: &TopicRecord, state: &ZkState, version: i32, now: i64) {
    for &i in who {
        let n = &mut c[i];
        n.broker
            .apply_partition_state(&mut n.disk, T, rec, 0, state, version, now)
            .expect("apply");
    }
}

/// One step of broker `f`'s replica fetcher against broker `l`, as the node would run it (with
/// the handler's epoch fencing). Returns whether it did anything.
fn pump(c: &mut [Node], f: usize, l: usize, now: i64) -> bool {
    let tasks = c[f].broker.follower_tasks();
    let leaders: std::collections::BTreeSet<BrokerId> = tasks.iter().map(|t| t.leader).collect();
    assert_eq!(
        c[f].broker.followed_leaders(),
        leaders,
        "the fetcher's leaders are the tasks' leaders"
    );
    for leader in &leaders {
        let of: Vec<_> = tasks.iter().filter(|t| t.leader == *leader).cloned().collect();
        assert_eq!(c[f].broker.follower_tasks_of(Some(*leader)), of, "one leader's tasks");
        // A fetcher's list refilled in place, over stale entries (more of them than tasks, or
        // fewer), holds the same tasks.
        let stale = FollowerTask {
            topic: "a-longer-name-than-any-topic-here".into(),
            topic_id: TopicId([9; 16]),
            partition: 99,
            leader: BrokerId(77),
            leader_epoch: LeaderEpoch(5),
            action: FollowerAction::Truncate { epoch: LeaderEpoch(4) },
        };
        for held in [of.len() + 2, of.len().saturating_sub(1)] {
            let mut refilled = vec![stale.clone(); held];
            c[f].broker.follower_tasks_into(Some(*leader), &mut refilled);
            assert_eq!(refilled, of, "refilled over {held} stale entries");
        }
    }
    let Some(task) = tasks.into_iter().next() else {
        return false;
    };
    let me = c[f].broker.config().broker_id;
    // The follower names the epoch it follows in each request; the leader fences the others.
    let asked = task.leader_epoch.0;
    match task.action {
        FollowerAction::Truncate { epoch } => {
            let answer = c[l].broker.offset_for_leader_epoch(T, 0, asked, epoch);
            let n = &mut c[f];
            let hosted = n
                .broker
                .follower_truncate(&mut n.disk, T, 0, task.leader_epoch, epoch, answer)
                .expect("truncate");
            assert_eq!(hosted, FollowerHosted(true));
        }
        FollowerAction::Fetch { offset } => {
            let answer = {
                let leader = &mut c[l];
                let recorded = leader.broker.record_follower_fetch(T, 0, asked, me, offset, now);
                recorded.and_then(|_| {
                    let ok = leader
                        .broker
                        .replica_read(&leader.disk, T, 0, asked, me, offset, 1 << 20)?;
                    let bytes = Log::read_bytes(&leader.disk, ok.slice).expect("read");
                    Ok((bytes, ok.high_watermark))
                })
            };
            let leader_start = c[l].broker.offsets(T, 0).map_or(Offset(-1), |o| o.0);
            let n = &mut c[f];
            let result = answer.as_ref().map(|(b, hw)| (&b[..], *hw)).map_err(|e| *e);
            let hosted = n
                .broker
                .follower_fetched(&mut n.disk, T, 0, task.leader_epoch, offset, result, leader_start, now)
                .expect("append");
            assert_eq!(hosted, FollowerHosted(true));
        }
    }
    true
}

/// (offset, marker) of every record in a broker's log.
fn contents(n: &Node) -> Vec<(i64, u8)> {
    let log = n.broker.log(T, 0).expect("hosted");
    let slice = log.read(&n.disk, log.log_start_offset(), u64::MAX, None).expect("read");
    let bytes = Log::read_bytes(&n.disk, slice).expect("bytes");
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = BatchHeader::parse(&bytes[at..]).expect("batch");
        for r in record::records(&bytes[at..at + h.total_bytes()]).expect("records") {
            out.push((r.offset.0, r.value.expect("value")[0]));
        }
        at += h.total_bytes();
    }
    out
}

fn hw(n: &Node) -> Offset {
    n.broker.offsets(T, 0).expect("offsets").1
}

fn leo(n: &Node) -> Offset {
    n.broker.offsets(T, 0).expect("offsets").2
}

fn produce(n: &mut Node, marker: u8, acks: i16, now: i64) -> Result<ProduceOk, ErrorCode> {
    n.broker.produce(&mut n.disk, T, 0, &mut batch(marker), acks, now)
}

fn three_in_sync() -> (Vec<Node>, TopicRecord) {
    let mut c = nodes(3, TruncationPolicy::LeaderEpoch);
    let rec = record(&[0, 1, 2], 2);
    apply(&mut c, &[0, 1, 2], &rec, &zk(0, 1, &[0, 1, 2]), 0, 0);
    (c, rec)
}

#[test]
fn leader_and_follower_high_watermarks() {
    let (mut c, _) = three_in_sync();
    produce(&mut c[0], 1, 1, 0).expect("acks=1");
    produce(&mut c[0], 2, 1, 0).expect("acks=1");
    assert_eq!(
        (hw(&c[0]), leo(&c[0])),
        (Offset(0), Offset(2)),
        "no follower has fetched yet"
    );
    assert_eq!(
        c[0].broker.list_offset(&c[0].disk, T, 0, LATEST_TIMESTAMP),
        Ok((Offset(0), -1))
    );
    // Follower 1 copies both, then reports it has them; follower 2 has not fetched: HW waits.
    pump(&mut c, 1, 0, 1);
    pump(&mut c, 1, 0, 2);
    assert_eq!(leo(&c[1]), Offset(2));
    assert_eq!(hw(&c[0]), Offset(0), "follower 2 is in the ISR and has nothing");
    pump(&mut c, 2, 0, 3);
    pump(&mut c, 2, 0, 4);
    assert_eq!(hw(&c[0]), Offset(2), "every ISR member has both records");
    let f = c[0]
        .broker
        .fetch(&c[0].disk, T, 0, -1, Offset(0), 1 << 20)
        .expect("consumer fetch");
    assert_eq!(f.high_watermark, Offset(2));
    // Followers learn the HW from their next fetch: min(leader HW, own LEO).
    assert_eq!(hw(&c[1]), Offset(0));
    pump(&mut c, 1, 0, 5);
    assert_eq!(hw(&c[1]), Offset(2));
    assert_eq!(contents(&c[1]), contents(&c[0]));
    assert_eq!(contents(&c[0]).len(), 2, "compared two records");
}

/// A follower's fetch names the partitions whose waiting requests may care: those whose HW it
/// moved, and those that refused it. The node pokes only these; a fetch that moves nothing
/// (the usual repeat at the log end) pokes nobody.
#[test]
fn a_follower_fetch_names_only_partitions_whose_hw_moved_or_that_refused_it() {
    let (mut c, _) = three_in_sync();
    produce(&mut c[0], 1, 1, 0).expect("acks=1");
    let named = |c: &mut [Node], replica: i32, offset: i64, epoch: i32| -> Vec<(String, i32)> {
        let req = FetchRequest::of_one(T, 0, replica, epoch, offset);
        let moved = handlers::record_follower_fetches(&mut c[0].broker, &req, 12, 1);
        moved.into_iter().map(|(t, p)| (t.into_owned(), p)).collect()
    };
    let none: Vec<(String, i32)> = Vec::new();
    let ours = vec![(T.to_string(), 0)];
    assert_eq!(
        named(&mut c, 1, 1, -1),
        none,
        "follower 1 has it; follower 2 holds the HW back"
    );
    assert_eq!(named(&mut c, 2, 0, -1), none, "follower 2 has nothing yet");
    assert_eq!(hw(&c[0]), Offset(0));
    assert_eq!(named(&mut c, 2, 1, -1), ours, "every ISR member has it: the HW moved");
    assert_eq!(hw(&c[0]), Offset(1));
    assert_eq!(named(&mut c, 2, 1, -1), none, "the same offset again moves nothing");
    assert_eq!(named(&mut c, 1, 1, 0), ours, "an older leader epoch is refused");
    assert_eq!(named(&mut c, 1, 5, -1), ours, "an offset past the log end is refused");
    let consumer = FetchRequest::of_one(T, 0, -1, -1, 0);
    assert!(handlers::record_follower_fetches(&mut c[0].broker, &consumer, 12, 1).is_empty());
}

#[test]
fn acks_all_waits_for_the_isr_and_completes() {
    let (mut c, _) = three_in_sync();
    let ok = produce(&mut c[0], 1, -1, 0).expect("acks=all appended");
    assert_eq!(ok.end_offset, Offset(1));
    let status = |c: &[Node]| c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch);
    assert_eq!(status(&c), AckWait::Pending);
    pump(&mut c, 1, 0, 1);
    pump(&mut c, 1, 0, 2);
    assert_eq!(status(&c), AckWait::Pending, "one of two followers has it");
    pump(&mut c, 2, 0, 3);
    assert_eq!(
        status(&c),
        AckWait::Pending,
        "follower 2 fetched it but has not reported it"
    );
    pump(&mut c, 2, 0, 4);
    assert_eq!(status(&c), AckWait::Done);
    // A leadership change while waiting answers NOT_LEADER_OR_FOLLOWER.
    let ok2 = produce(&mut c[0], 2, -1, 5).expect("appended");
    let rec = record(&[0, 1, 2], 2);
    apply(&mut c, &[0], &rec, &zk(1, 2, &[1, 2]), 1, 6);
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok2.end_offset, ok2.leader_epoch),
        AckWait::Failed(ErrorCode::NotLeaderOrFollower)
    );
}

#[test]
fn min_isr_rejection_leaves_the_log_unchanged() {
    let mut c = nodes(3, TruncationPolicy::LeaderEpoch);
    let rec = record(&[0, 1, 2], 2);
    apply(&mut c, &[0, 1, 2], &rec, &zk(0, 1, &[0]), 0, 0);
    let before = (leo(&c[0]), contents(&c[0]));
    assert_eq!(produce(&mut c[0], 1, -1, 0), Err(ErrorCode::NotEnoughReplicas));
    assert_eq!((leo(&c[0]), contents(&c[0])), before, "nothing appended");
    produce(&mut c[0], 2, 1, 0).expect("acks=1 does not need the ISR");
    assert_eq!(leo(&c[0]), Offset(1));
    // Below min ISR the HW stands still (KIP-966): before, the leader alone moved it.
    assert_eq!(hw(&c[0]), Offset(0));
}

#[test]
fn an_expansion_of_unknown_outcome_keeps_counting_and_is_sent_again() {
    // An ISR expansion whose write timed out may still apply: the coordinator's ISR would then
    // name follower 2. Taken as not written, the HW and acks=all would stop waiting for 2 while
    // the ISR says it holds everything below the HW: elected next, it would lack those records.
    let (mut c, rec) = three_in_sync();
    produce(&mut c[0], 1, -1, 100).expect("appended");
    pump(&mut c, 1, 0, 200);
    pump(&mut c, 1, 0, 1_500);
    let shrink = c[0].broker.poll_isr_proposals(1_500);
    assert_eq!(shrink[0].new_state.isr, ids(&[0, 1]));
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 1 });
    pump(&mut c, 2, 0, 1_600);
    pump(&mut c, 2, 0, 1_700);
    let expand = c[0].broker.poll_isr_proposals(1_700);
    assert_eq!(expand.len(), 1);
    assert_eq!(expand[0].new_state.isr, ids(&[0, 1, 2]));
    c[0].broker.isr_update_result(T, 0, IsrUpdateResult::Unknown);
    // 2 stays in the maximal ISR: a record only 0 and 1 hold is not below the HW.
    let before = hw(&c[0]);
    println!(
        "before: hw {before:?} leo {:?} f1 {:?} f2 {:?}",
        leo(&c[0]),
        leo(&c[1]),
        leo(&c[2])
    );
    let ok = produce(&mut c[0], 2, -1, 1_800).expect("appended");
    pump(&mut c, 1, 0, 1_900);
    pump(&mut c, 1, 0, 1_950);
    assert_eq!(
        hw(&c[0]),
        before,
        "the HW waited for 2, whose expansion may have applied"
    );
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Pending
    );
    // Offered again exactly as it was, once; nothing else meanwhile.
    let again = c[0].broker.poll_isr_proposals(1_950);
    println!("first: {expand:?}; again: {again:?}");
    assert_eq!(again, expand);
    assert!(c[0].broker.poll_isr_proposals(1_960).is_empty(), "in flight again");
    // The retry finds the first write applied (its version moved): the state read says so.
    c[0].broker.isr_update_result(T, 0, IsrUpdateResult::Conflict);
    apply(&mut c, &[0], &rec, &zk(0, 1, &[0, 1, 2]), 2, 2_000);
    let (_, isr, leader, version) = c[0].broker.replica_state(T, 0).expect("replicated");
    assert_eq!((isr, leader, version), (ids(&[0, 1, 2]), true, 2));
    println!(
        "after: hw {:?} leo {:?} f1 {:?} f2 {:?}",
        hw(&c[0]),
        leo(&c[0]),
        leo(&c[1]),
        leo(&c[2])
    );
    assert_eq!(hw(&c[0]), before, "still waiting for 2");
    pump(&mut c, 2, 0, 2_100);
    pump(&mut c, 2, 0, 2_200);
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Done
    );
}

#[test]
fn a_written_isr_change_carries_its_elr_into_the_next_proposal() {
    // The swarm campaign seed 1242235258432526988: the leader's ELR was set only from states it
    // applied, not from its own committed proposals (whose state, read back at the same version,
    // is not applied again). After ISR [0] (ELR [1, 2]) expanded to [0, 1, 2] and shrank to
    // [0, 1], a shrink to [0] carried the stale ELR [1, 2]: 2 eligible without the records
    // acknowledged after it left the ISR. It was elected and one was lost.
    let (mut c, rec) = three_in_sync();
    produce(&mut c[0], 1, -1, 100).expect("appended");
    // The controller's state: ISR [0] below min ISR 2, ELR [1, 2].
    let below = ZkState {
        elr: ids(&[1, 2]),
        ..zk(0, 1, &[0])
    };
    apply(&mut c, &[0], &rec, &below, 1, 1_500);
    let shrink = vec![below];
    // Both followers catch up: the ISR is full again, the ELR empty.
    for now in [1_600, 1_700] {
        pump(&mut c, 1, 0, now);
        pump(&mut c, 2, 0, now);
    }
    let expand = c[0].broker.poll_isr_proposals(1_700);
    assert_eq!(
        (expand[0].new_state.isr.clone(), expand[0].new_state.elr.clone()),
        (ids(&[0, 1, 2]), vec![])
    );
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 2 });
    // 2 falls behind, then 1 too.
    pump(&mut c, 1, 0, 2_500);
    let first = c[0].broker.poll_isr_proposals(2_800);
    assert_eq!(first[0].new_state.isr, ids(&[0, 1]));
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 3 });
    let second = c[0].broker.poll_isr_proposals(3_600);
    println!("proposals: {shrink:?} {expand:?} {first:?} {second:?}");
    assert_eq!(second[0].new_state.isr, ids(&[0]));
    assert_eq!(
        second[0].new_state.elr,
        ids(&[1]),
        "2 left an ISR at min ISR: not eligible"
    );
}

#[test]
fn a_held_leader_proposes_no_isr_change_until_released() {
    // The integrator holds a leader's ISR changes while a member restarted since the state was
    // written: a write by the leader would look newer than that restart to the controller.
    let (mut c, _) = three_in_sync();
    produce(&mut c[0], 1, -1, 100).expect("appended");
    pump(&mut c, 1, 0, 200);
    pump(&mut c, 1, 0, 1_500);
    c[0].broker.hold_isr_changes(T, 0, true);
    let held = c[0].broker.poll_isr_proposals(1_500);
    assert!(held.is_empty(), "held, yet proposed {held:?}");
    c[0].broker.hold_isr_changes(T, 0, false);
    let released = c[0].broker.poll_isr_proposals(1_500);
    println!("held: {held:?}; released: {released:?}");
    assert_eq!(released.len(), 1, "follower 2 fell behind: shrink once released");
    assert_eq!(released[0].new_state.isr, ids(&[0, 1]));
    // Holding an unknown partition changes nothing and does not panic.
    c[0].broker.hold_isr_changes("nope", 9, true);
}

/// `next_isr_check_ms` names the first ms at which `poll_isr_proposals` shrinks an ISR by time
/// alone: nothing the ms before, the shrink at it; and nothing while a change is in flight.
#[test]
fn the_next_isr_check_is_when_the_first_lagging_follower_falls_out() {
    let (mut c, _rec) = three_in_sync();
    produce(&mut c[0], 1, -1, 100).expect("appended");
    pump(&mut c, 1, 0, 200);
    pump(&mut c, 2, 0, 300);
    pump(&mut c, 1, 0, 400);
    let at = c[0].broker.next_isr_check_ms().expect("followers in the ISR");
    println!("next ISR check at {at} ms");
    assert!(
        c[0].broker.poll_isr_proposals(at - 1).is_empty(),
        "nobody out of sync at {}",
        at - 1
    );
    let shrink = c[0].broker.poll_isr_proposals(at);
    assert_eq!(shrink.len(), 1, "the first to lag falls out at {at}: {shrink:?}");
    assert_eq!(
        c[0].broker.next_isr_check_ms(),
        None,
        "a change in flight proposes nothing by time"
    );
}

#[test]
fn isr_shrinks_after_lag_and_expands_after_catching_up() {
    let (mut c, rec) = three_in_sync();
    let ok = produce(&mut c[0], 1, -1, 100).expect("appended");
    pump(&mut c, 1, 0, 200);
    pump(&mut c, 1, 0, 300);
    assert!(
        c[0].broker.poll_isr_proposals(900).is_empty(),
        "nobody lagged 1000 ms yet"
    );
    pump(&mut c, 1, 0, 1_500);
    let proposals = c[0].broker.poll_isr_proposals(1_500);
    assert_eq!(proposals.len(), 1, "follower 2 fell behind: {proposals:?}");
    let p = &proposals[0];
    assert_eq!((p.new_state.isr.clone(), p.expected_zk_version), (ids(&[0, 1]), 0));
    assert!(
        p.new_state.elr.is_empty(),
        "the ISR stays at min ISR 2: nobody needs to stay eligible"
    );
    assert!(
        c[0].broker.poll_isr_proposals(1_500).is_empty(),
        "one proposal in flight at a time"
    );
    // Unconfirmed, the shrink does not move the HW (maximal ISR).
    assert_eq!(hw(&c[0]), Offset(0));
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Pending
    );
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 1 });
    assert_eq!(hw(&c[0]), Offset(1), "confirmed: HW over {{0, 1}}");
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Done
    );
    let (_, isr, _, version) = c[0].broker.replica_state(T, 0).expect("replicated");
    assert_eq!((isr, version), (ids(&[0, 1]), 1));
    // Follower 2 comes back and reaches the HW: proposed for the ISR again.
    pump(&mut c, 2, 0, 1_600);
    pump(&mut c, 2, 0, 1_700);
    let proposals = c[0].broker.poll_isr_proposals(1_700);
    assert_eq!(proposals.len(), 1);
    assert_eq!(proposals[0].new_state.isr, ids(&[0, 1, 2]));
    assert_eq!(proposals[0].expected_zk_version, 1);
    // A conflict leaves the ISR as it was; the integrator re-reads and applies the state.
    c[0].broker.isr_update_result(T, 0, IsrUpdateResult::Conflict);
    assert_eq!(c[0].broker.replica_state(T, 0).expect("replicated").1, ids(&[0, 1]));
    apply(&mut c, &[0], &rec, &zk(0, 1, &[0, 1, 2]), 3, 1_800);
    let (_, isr, leader, version) = c[0].broker.replica_state(T, 0).expect("replicated");
    assert_eq!((isr, leader, version), (ids(&[0, 1, 2]), true, 3));
    // Shrunk below min ISR while an acks=all waits: NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    let ok = produce(&mut c[0], 2, -1, 1_900).expect("appended");
    let shrink = c[0].broker.poll_isr_proposals(3_500);
    assert_eq!(shrink[0].new_state.isr, ids(&[0]), "both followers silent since 1_700");
    // KIP-966: below min ISR, the followers that left hold everything acknowledged: eligible.
    assert_eq!(shrink[0].new_state.elr, ids(&[1, 2]));
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 4 });
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
    );
    // KIP-966: below min ISR the HW stands still, even for acks=1 records only the leader has
    // (an eligible leader replica lacks them; consumers must not read them).
    let frozen = hw(&c[0]);
    produce(&mut c[0], 3, 1, 3_600).expect("acks=1 appended");
    println!("ISR [0] below min ISR 2: HW {frozen:?}, log end {:?}", leo(&c[0]));
    assert!(leo(&c[0]) > frozen);
    assert_eq!(hw(&c[0]), frozen, "the HW moved over records only the leader holds");
}

/// KIP-841: a follower that caught up but is not registered (a broker in controlled shutdown,
/// which deregistered and still fetches) is not proposed for the ISR; once registered it is.
#[test]
fn isr_expands_only_with_registered_brokers() {
    let mut c = nodes(2, TruncationPolicy::LeaderEpoch);
    let rec = record(&[0, 1], 1);
    apply(&mut c, &[0, 1], &rec, &zk(0, 1, &[0]), 0, 0);
    let registration = |id: i32| crate::cluster::BrokerRegistration {
        id: BrokerId(id),
        host: "127.0.0.1".into(),
        port: 9092 + id,
        rack: None,
        intact_since: None,
    };
    let view = |ids: &[i32]| ClusterView {
        brokers: ids.iter().map(|i| registration(*i)).collect(),
        controller: Some(BrokerId(0)),
        topics: BTreeMap::new(),
    };
    c[0].broker.set_cluster_view(view(&[0]));
    produce(&mut c[0], 1, 1, 10).expect("acks=1");
    pump(&mut c, 1, 0, 20);
    pump(&mut c, 1, 0, 30);
    assert_eq!(leo(&c[1]), Offset(1), "the follower caught up");
    let proposals = c[0].broker.poll_isr_proposals(40);
    println!("unregistered follower: proposals {proposals:?}");
    assert!(proposals.is_empty(), "broker 1 is not registered: {proposals:?}");
    c[0].broker.set_cluster_view(view(&[0, 1]));
    let proposals = c[0].broker.poll_isr_proposals(50);
    println!("registered follower: proposals {proposals:?}");
    assert_eq!(proposals.len(), 1);
    assert_eq!(proposals[0].new_state.isr, ids(&[0, 1]));
}

fn fetch_req(replica_id: i32, epoch: i32) -> FetchRequest {
    FetchRequest::of_one(T, 0, replica_id, epoch, 0)
}

fn fetch_code(n: &mut Node, req: &FetchRequest) -> i16 {
    let (resp, _) = handlers::fetch_recording(&mut n.broker, &n.disk, req, 12, 0);
    resp.topics[0].partitions[0].error_code
}

#[test]
fn fencing_codes_and_rejections_change_nothing() {
    let (mut c, rec) = three_in_sync();
    apply(&mut c, &[0, 1, 2], &rec, &zk(0, 3, &[0, 1, 2]), 1, 0);
    produce(&mut c[0], 1, 1, 0).expect("leader appends");
    let follower = leo(&c[1]);
    assert_eq!(produce(&mut c[1], 9, 1, 0), Err(ErrorCode::NotLeaderOrFollower));
    assert_eq!(leo(&c[1]), follower, "the follower's log is unchanged");
    assert_eq!(
        c[1].broker.fetch(&c[1].disk, T, 0, -1, Offset(0), 100).map(|_| ()),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        c[1].broker.list_offset(&c[1].disk, T, 0, LATEST_TIMESTAMP),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        c[1].broker.offset_for_leader_epoch(T, 0, 3, LeaderEpoch(3)),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        fetch_code(&mut c[1], &fetch_req(-1, 3)),
        ErrorCode::NotLeaderOrFollower.code()
    );
    assert_eq!(
        fetch_code(&mut c[1], &fetch_req(2, 3)),
        ErrorCode::NotLeaderOrFollower.code()
    );
    // KIP-320 at the leader.
    assert_eq!(
        fetch_code(&mut c[0], &fetch_req(1, 2)),
        ErrorCode::FencedLeaderEpoch.code()
    );
    assert_eq!(
        fetch_code(&mut c[0], &fetch_req(1, 4)),
        ErrorCode::UnknownLeaderEpoch.code()
    );
    assert_eq!(
        fetch_code(&mut c[0], &fetch_req(7, 3)),
        ErrorCode::NotLeaderOrFollower.code(),
        "not a replica"
    );
    assert_eq!(
        c[0].broker.offset_for_leader_epoch(T, 0, 2, LeaderEpoch(2)),
        Err(ErrorCode::FencedLeaderEpoch)
    );
    assert_eq!(
        c[0].broker.offset_for_leader_epoch(T, 0, 4, LeaderEpoch(2)),
        Err(ErrorCode::UnknownLeaderEpoch)
    );
    assert_eq!(
        c[0].broker.offset_for_leader_epoch(T, 7, 3, LeaderEpoch(3)),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    assert_eq!(produce_to(&mut c[0], 7), Err(ErrorCode::UnknownTopicOrPartition));
    // None of the fenced fetches counted as progress: the HW has not moved, though both
    // followers asked from the leader's log end (recorded, those would have moved it), and no
    // refusal answered offsets.
    for (replica, epoch, code) in [
        (1, 2, ErrorCode::FencedLeaderEpoch),
        (2, 4, ErrorCode::UnknownLeaderEpoch),
    ] {
        let at_end = FetchRequest::of_one(T, 0, replica, epoch, 1);
        let n = &mut c[0];
        let (resp, _) = handlers::fetch_recording(&mut n.broker, &n.disk, &at_end, 12, 0);
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.high_watermark, p.log_start_offset),
            (code.code(), -1, -1)
        );
    }
    assert_eq!(hw(&c[0]), Offset(0));
    assert_eq!(fetch_code(&mut c[0], &fetch_req(1, 3)), 0, "the right epoch is served");
    // The same fetches in the right epoch move it.
    for replica in [1, 2] {
        assert_eq!(fetch_code(&mut c[0], &FetchRequest::of_one(T, 0, replica, 3, 1)), 0);
    }
    assert_eq!(
        hw(&c[0]),
        Offset(1),
        "the followers' fetches at the log end move the HW"
    );
    // An older epoch than held is ignored; the same state again is a no-op.
    apply(&mut c, &[0], &rec, &zk(1, 2, &[1]), 9, 0);
    assert!(c[0].broker.replica_state(T, 0).expect("replicated").2, "still leader");
    assert_eq!(c[0].broker.leader_epoch(T, 0), Ok(LeaderEpoch(3)));
}

/// A follower's answer says whether the broker has the partition, whatever it did with the
/// answer: the replica fetcher's poke trusts it.
#[test]
fn a_followers_answer_says_whether_the_partition_is_here() {
    let (mut c, _) = three_in_sync();
    let n = &mut c[1];
    let answer = Ok((&[][..], Offset(0)));
    for (partition, epoch, hosted) in [(0, 1, true), (0, 9, true), (5, 1, false)] {
        let fetched = n.broker.follower_fetched(
            &mut n.disk,
            T,
            partition,
            LeaderEpoch(epoch),
            Offset(0),
            answer,
            Offset(0),
            0,
        );
        let truncated = n.broker.follower_truncate(
            &mut n.disk,
            T,
            partition,
            LeaderEpoch(epoch),
            LeaderEpoch(epoch),
            Err(ErrorCode::NotLeaderOrFollower),
        );
        assert_eq!(
            (fetched, truncated),
            (Ok(FollowerHosted(hosted)), Ok(FollowerHosted(hosted))),
            "partition {partition} epoch {epoch}"
        );
    }
    // On the leader, where the partition leads (no follower phase): hosted still.
    let n = &mut c[0];
    let fetched = n
        .broker
        .follower_fetched(&mut n.disk, T, 0, LeaderEpoch(1), Offset(0), answer, Offset(0), 0);
    assert_eq!(fetched, Ok(FollowerHosted(true)));
}

fn produce_to(n: &mut Node, partition: i32) -> Result<ProduceOk, ErrorCode> {
    n.broker.produce(&mut n.disk, T, partition, &mut batch(1), 1, 0)
}

/// Crashes a node after a clean flush (so only the protocol loses data) and reopens it.
fn restart(c: &mut [Node], i: usize, policy: TruncationPolicy) {
    let n = &mut c[i];
    assert!(n.broker.flush_all(&mut n.disk).is_empty());
    n.disk.crash(CrashMode::DropUnsynced);
    n.broker = Broker::open(&mut n.disk, config(i as i32, policy), 0).expect("reopen");
}

/// KIP-101's first scenario on two replicas. Returns (an acknowledged record lost, the logs
/// disagree below the HW, records compared).
fn kip101(policy: TruncationPolicy) -> (bool, bool, usize) {
    let mut c = nodes(2, policy);
    let rec = record(&[0, 1], 1);
    apply(&mut c, &[0, 1], &rec, &zk(0, 1, &[0, 1]), 0, 0);
    let mut acked = Vec::new();
    // m1 at A: B copies it, then reports it (A's HW moves, m1 is acknowledged), but B crashes
    // before reading the answer that carried the new HW.
    let ok = produce(&mut c[0], 1, -1, 0).expect("m1");
    pump(&mut c, 1, 0, 1);
    c[0].broker
        .record_follower_fetch(T, 0, -1, BrokerId(1), Offset(1), 2)
        .expect("B reports");
    assert_eq!(
        c[0].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Done
    );
    acked.push(1u8);
    assert_eq!((hw(&c[0]), hw(&c[1])), (Offset(1), Offset(0)));
    restart(&mut c, 1, policy);
    apply(&mut c, &[1], &rec, &zk(0, 1, &[0, 1]), 0, 3);
    // B asks A where epoch 1 ends (the mutant has already cut to its HW and asks nothing).
    let asks = c[1].broker.follower_tasks();
    assert_eq!(asks.len(), 1);
    if matches!(asks[0].action, FollowerAction::Truncate { .. }) {
        pump(&mut c, 1, 0, 4);
    }
    // A dies; B is elected (it is in the ISR) and takes m2.
    restart(&mut c, 0, policy);
    apply(&mut c, &[1], &rec, &zk(1, 2, &[1]), 1, 5);
    let ok = produce(&mut c[1], 2, -1, 6).expect("m2");
    assert_eq!(
        c[1].broker.acks_all_status(T, 0, ok.end_offset, ok.leader_epoch),
        AckWait::Done
    );
    acked.push(2);
    // A comes back as a follower of B and catches up.
    apply(&mut c, &[0], &rec, &zk(1, 2, &[1]), 1, 7);
    for now in 8..20 {
        pump(&mut c, 0, 1, now);
    }
    let (a, b) = (contents(&c[0]), contents(&c[1]));
    println!("{policy:?}: A {a:?} B {b:?} (HW {:?}, {:?})", hw(&c[0]), hw(&c[1]));
    let lost = acked.iter().any(|m| !b.iter().any(|(_, v)| v == m));
    let below = |log: &[(i64, u8)], hw: Offset| log.iter().filter(|(o, _)| *o < hw.0).copied().collect::<Vec<_>>();
    let diverged = below(&a, hw(&c[0])) != below(&b, hw(&c[0]));
    (lost, diverged, a.len().min(b.len()))
}

#[test]
fn kip101_leader_epoch_truncation_keeps_acknowledged_data_and_the_hw_mutant_loses_it() {
    let (lost, diverged, compared) = kip101(TruncationPolicy::LeaderEpoch);
    assert!(compared >= 2, "compared {compared} records");
    assert!(
        !lost && !diverged,
        "leader-epoch truncation: lost {lost}, diverged {diverged}"
    );
    // The negative control: the pre-KIP-101 rule must be caught by the same checks.
    let (lost, diverged, _) = kip101(TruncationPolicy::HighWatermark);
    assert!(lost || diverged, "the HW-truncation mutant went unnoticed");
    assert!(lost, "the acknowledged m1 is gone from the new leader");
}

#[test]
fn hw_checkpoint_survives_a_restart_and_open_keeps_replicas_offline_until_told() {
    let (mut c, rec) = three_in_sync();
    produce(&mut c[0], 1, 1, 0).expect("m1");
    for now in 1..5 {
        pump(&mut c, 1, 0, now);
        pump(&mut c, 2, 0, now);
    }
    assert_eq!(hw(&c[1]), Offset(1));
    restart(&mut c, 1, TruncationPolicy::LeaderEpoch);
    assert_eq!(hw(&c[1]), Offset(1), "the HW came back from the checkpoint");
    assert_eq!(
        produce(&mut c[1], 2, 1, 0),
        Err(ErrorCode::NotLeaderOrFollower),
        "offline until told"
    );
    assert!(c[1].broker.follower_tasks().is_empty());
    apply(&mut c, &[1], &rec, &zk(0, 1, &[0, 1, 2]), 0, 10);
    assert_eq!(c[1].broker.follower_tasks().len(), 1);
}

#[test]
fn metadata_answers_from_the_cluster_view() {
    use crate::cluster::BrokerRegistration;
    use crate::protocol::api::metadata::{MetadataRequest, MetadataRequestTopic};
    let (mut c, rec) = three_in_sync();
    let state = zk(2, 4, &[2, 0]);
    let view = ClusterView {
        brokers: [0, 2]
            .iter()
            .map(|i| BrokerRegistration {
                id: BrokerId(*i),
                host: format!("h{i}"),
                port: 9000 + i,
                rack: None,
                intact_since: None,
            })
            .collect(),
        controller: Some(BrokerId(2)),
        topics: [(T.to_string(), (rec.clone(), [(0, state)].into()))].into(),
    };
    c[1].broker.set_cluster_view(view);
    let advertised = handlers::Advertised {
        host: "h1".into(),
        port: 9001,
        cluster_id: "c".into(),
    };
    let req = MetadataRequest {
        topics: Some(vec![
            MetadataRequestTopic {
                name: Some(T.into()),
                ..MetadataRequestTopic::default()
            },
            MetadataRequestTopic {
                name: Some("nope".into()),
                ..MetadataRequestTopic::default()
            },
        ]),
        allow_auto_topic_creation: true,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    };
    let n = &mut c[1];
    let resp = handlers::metadata(&mut n.broker, &mut n.disk, &req, &advertised, || {
        TopicId::from_random(1, 2)
    });
    let brokers: Vec<(i32, String, i32)> = resp
        .brokers
        .iter()
        .map(|b| (b.node_id, b.host.clone(), b.port))
        .collect();
    assert_eq!(brokers, vec![(0, "h0".into(), 9000), (2, "h2".into(), 9002)]);
    assert_eq!(resp.controller_id, 2);
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.leader_id, p.leader_epoch), (2, 4));
    assert_eq!(
        (p.replica_nodes.clone(), p.isr_nodes.clone()),
        (vec![0, 1, 2], vec![2, 0])
    );
    assert_eq!(p.offline_replicas, vec![1], "broker 1 is not registered in the view");
    assert_eq!(resp.topics[1].error_code, ErrorCode::UnknownTopicOrPartition.code());
    assert!(n.broker.topic("nope").is_none(), "no auto-create in cluster mode");
}

#[test]
fn a_parked_acks_all_times_out_or_fails_with_its_code() {
    use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
    let (mut c, rec) = three_in_sync();
    let req = ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 100,
        topics: vec![ProduceTopic {
            name: T.into(),
            partitions: vec![ProducePartition {
                index: 0,
                records: Some(batch(1).into()),
            }],
        }],
    };
    let n = &mut c[0];
    let (mut resp, mut pending) = handlers::produce_parked(&mut n.broker, &mut n.disk, &req, 0);
    assert_eq!(pending.len(), 1, "waits for the followers");
    assert!(!handlers::settle_acks(&n.broker, &mut resp, &mut pending, false));
    assert!(handlers::settle_acks(&n.broker, &mut resp, &mut pending, true));
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::RequestTimedOut.code()
    );
    // Leadership lost while parked: NOT_LEADER_OR_FOLLOWER.
    let (mut resp, mut pending) = handlers::produce_parked(&mut n.broker, &mut n.disk, &req, 0);
    apply(&mut c, &[0], &rec, &zk(1, 2, &[1, 2]), 1, 1);
    assert!(handlers::settle_acks(&c[0].broker, &mut resp, &mut pending, false));
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::NotLeaderOrFollower.code()
    );
    // A single-node broker answers acks=all at once, as before.
    let mut disk = MemDisk::new();
    let mut single = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    single
        .create_topic(&mut disk, T, 1, 1, &[], TopicId::from_random(1, 1), false)
        .expect("create");
    let (resp, pending) = handlers::produce_parked(&mut single, &mut disk, &req, 0);
    assert!(pending.is_empty());
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
}

#[test]
fn a_reassignment_adds_a_follower_that_catches_up_joins_the_isr_and_the_removed_one_leaves() {
    let mut c = nodes(4, TruncationPolicy::LeaderEpoch);
    let rec = record(&[0, 1, 2], 2);
    apply(&mut c, &[0, 1, 2], &rec, &zk(0, 1, &[0, 1, 2]), 0, 0);
    for m in 1..=3 {
        produce(&mut c[0], m, 1, 0).expect("acks=1");
    }
    for now in 1..=4 {
        pump(&mut c, 1, 0, now);
        pump(&mut c, 2, 0, now);
    }
    assert_eq!(hw(&c[0]), Offset(3));
    // The move [0, 1, 2] -> [0, 1, 3] begins: the full set [0, 1, 3, 2], the state rewritten
    // (version 1) with the ISR unchanged. The leader sees the new record with the state it had
    // already applied first (a scan reading the record after the state): the same version.
    let moving = TopicRecord {
        assignment: [(0, ids(&[0, 1, 3, 2]))].into(),
        ..rec.clone()
    };
    apply(&mut c, &[0], &rec, &zk(0, 1, &[0, 1, 2]), 1, 5);
    apply(&mut c, &[0], &moving, &zk(0, 1, &[0, 1, 2]), 1, 5);
    apply(&mut c, &[1, 2, 3], &moving, &zk(0, 1, &[0, 1, 2]), 1, 5);
    assert!(
        c[0].broker.poll_isr_proposals(6).is_empty(),
        "broker 3 has not caught up"
    );
    for now in 6..=8 {
        pump(&mut c, 3, 0, now);
    }
    assert_eq!(contents(&c[3]), contents(&c[0]), "the new replica copied the log");
    let proposals = c[0].broker.poll_isr_proposals(9);
    assert_eq!(proposals.len(), 1, "the leader knows broker 3 as a follower");
    assert_eq!(proposals[0].new_state.isr, ids(&[0, 1, 2, 3]));
    c[0].broker
        .isr_update_result(T, 0, IsrUpdateResult::Committed { zk_version: 2 });
    // Completion: assignment [0, 1, 3], ISR without 2; the leader stops counting broker 2.
    let done = TopicRecord {
        assignment: [(0, ids(&[0, 1, 3]))].into(),
        ..rec.clone()
    };
    apply(&mut c, &[0, 1, 3], &done, &zk(0, 1, &[0, 1, 3]), 3, 10);
    let (replicas, isr, leader, _) = c[0].broker.replica_state(T, 0).expect("hosted");
    assert_eq!((replicas, isr, leader), (ids(&[0, 1, 3]), ids(&[0, 1, 3]), true));
    assert_eq!(
        c[0].broker.record_follower_fetch(T, 0, -1, BrokerId(2), Offset(3), 11),
        Err(ErrorCode::NotLeaderOrFollower),
        "a removed replica is no follower any more"
    );
}

/// KIP-966's unclean recovery reads each replica's log end once it applied the offline state:
/// not before (it may still be following), and for that offline epoch only.
#[test]
fn an_offline_replica_reports_its_log_end_for_the_offline_epoch_only() {
    let (mut c, rec) = three_in_sync();
    produce(&mut c[0], 1, -1, 100).expect("appended");
    produce(&mut c[0], 2, -1, 110).expect("appended");
    pump(&mut c, 1, 0, 200);
    assert_eq!(
        c[1].broker.offline_log_end(T, 0, LeaderEpoch(1)),
        None,
        "following, not offline"
    );
    let offline = ZkState {
        leader: None,
        ..zk(0, 2, &[0, 1, 2])
    };
    apply(&mut c, &[1, 2], &rec, &offline, 1, 300);
    let r = c[1]
        .broker
        .offline_log_end(T, 0, LeaderEpoch(2))
        .expect("offline at epoch 2");
    println!(
        "follower 1 offline: {r:?}; follower 2: {:?}",
        c[2].broker.offline_log_end(T, 0, LeaderEpoch(2))
    );
    assert_eq!((r.last_epoch, r.log_end), (LeaderEpoch(1), leo(&c[1]).0));
    assert!(r.log_end > 0, "follower 1 fetched the records");
    let r2 = c[2]
        .broker
        .offline_log_end(T, 0, LeaderEpoch(2))
        .expect("offline at epoch 2");
    assert!(r2.log_end < r.log_end, "follower 2 never fetched: the shorter log");
    assert_eq!(c[1].broker.offline_log_end(T, 0, LeaderEpoch(3)), None, "another epoch");
}

/// `fetch_is_empty` (a waiting Fetch's shortcut) says empty only where the full read answers no
/// bytes and no error: every reader (followers, a broker that does not follow, a consumer),
/// offset (below, at and past the log end) and epoch (none, current, stale, future), on the
/// leader and on a follower.
#[test]
fn fetch_is_empty_only_where_the_full_read_is() {
    let (mut c, _) = three_in_sync();
    produce(&mut c[0], 1, 1, 0).expect("acks=1");
    produce(&mut c[0], 2, 1, 0).expect("acks=1");
    pump(&mut c, 1, 0, 1); // follower 1 has both records, follower 2 none: HW 0
    let (mut empties, mut compared) = (0, 0);
    for node in [0, 1] {
        for reader in [Some(1), Some(2), Some(7), None] {
            for offset in [0, 1, 2, 3] {
                for epoch in [-1, 0, 1, 2] {
                    let n = &c[node];
                    let replica = reader.map(BrokerId);
                    let shortcut = n.broker.fetch_is_empty(T, 0, replica, Offset(offset), epoch);
                    let req = FetchRequest {
                        max_wait_ms: 500,
                        min_bytes: 1,
                        ..FetchRequest::of_one(T, 0, reader.unwrap_or(-1), epoch, offset)
                    };
                    let (resp, bytes) = handlers::fetch(&n.broker, &n.disk, &req, 12);
                    let error = resp.topics[0].partitions[0].error_code;
                    compared += 1;
                    if shortcut {
                        empties += 1;
                        assert_eq!(
                            (bytes, error),
                            (0, 0),
                            "node {node} reader {reader:?} offset {offset} epoch {epoch}: the shortcut said empty"
                        );
                    }
                }
            }
        }
    }
    // Leader, at its log end 2: followers 1 and 2 with epoch -1 or 1, and the consumer (its
    // offset 2 is past the HW 0, an empty answer too).
    println!("fetch_is_empty: {empties} of {compared} cases empty, each confirmed by the full read");
    assert_eq!(empties, 6, "the shortcut must hold in the plainly empty cases");
}
