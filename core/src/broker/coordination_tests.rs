//! Group coordination over a replicated `__consumer_offsets` between two [`Broker`]s on their own
//! [`MemDisk`]s, driven by direct calls: the test plays the coordinator (partition states) and
//! the replica fetcher. One offsets partition, so every group maps to it.

use bytes::Bytes;

use super::*;
use crate::cluster::{PartitionState as ZkState, TopicRecord};
use crate::disk::mem::MemDisk;
use crate::group::{CommitEntry, Committed, Coordination, Reply, OFFSETS_TOPIC};
use crate::protocol::api::join_group::{JoinGroupProtocol, JoinGroupRequest};
use crate::protocol::api::sync_group::{SyncGroupAssignment, SyncGroupRequest};

const G: &str = "app";

struct Node {
    broker: Broker,
    disk: MemDisk,
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().map(|i| BrokerId(*i)).collect()
}

fn record(min_isr: i32) -> TopicRecord {
    TopicRecord {
        topic_id_hex: TopicId::from_random(5, 5).to_hex(),
        assignment: [(0, ids(&[0, 1]))].into(),
        reassigning: Default::default(),
        configs: [("min.insync.replicas".to_string(), min_isr.to_string())].into(),
    }
}

fn zk(leader: i32, epoch: i32, isr: &[i32]) -> ZkState {
    ZkState {
        leader: Some(BrokerId(leader)),
        leader_epoch: LeaderEpoch(epoch),
        isr: ids(isr),
        controller_epoch: 1,
        elr: Vec::new(),
    }
}

fn nodes() -> Vec<Node> {
    (0..2)
        .map(|i| {
            let mut disk = MemDisk::new();
            let mut config = BrokerConfig {
                broker_id: BrokerId(i),
                ..BrokerConfig::default()
            };
            config.group.coordination = Coordination::Partitioned {
                partitions: 1,
                replication_factor: 2,
            };
            let broker = Broker::open(&mut disk, config, 0).expect("open");
            Node { broker, disk }
        })
        .collect()
}

/// Both brokers take the offsets partition's state, then bring their groups in line with it.
fn apply(c: &mut [Node], rec: &TopicRecord, state: &ZkState, version: i32) {
    for n in c.iter_mut() {
        n.broker
            .apply_partition_state(&mut n.disk, OFFSETS_TOPIC, rec, 0, state, version, 0)
            .expect("apply");
        n.broker.sync_group_coordination(&mut n.disk);
    }
}

/// One fetch of follower `f` from leader `l` (the data, or the offset that moves the HW).
fn pump(c: &mut [Node], f: usize, l: usize) {
    let task = c[f]
        .broker
        .follower_tasks()
        .into_iter()
        .find(|t| t.topic == OFFSETS_TOPIC)
        .expect("a follower of the offsets partition");
    let FollowerAction::Fetch { offset } = task.action else {
        panic!("expected to fetch, got {:?}", task.action);
    };
    let me = c[f].broker.config().broker_id;
    let leader = &mut c[l];
    leader
        .broker
        .record_follower_fetch(OFFSETS_TOPIC, 0, -1, me, offset, 0)
        .expect("follower fetch");
    let ok = leader
        .broker
        .replica_read(&leader.disk, OFFSETS_TOPIC, 0, -1, me, offset, 1 << 20)
        .expect("read");
    let bytes = Log::read_bytes(&leader.disk, ok.slice).expect("read bytes");
    let start = c[l].broker.offsets(OFFSETS_TOPIC, 0).expect("offsets").0;
    let n = &mut c[f];
    n.broker
        .follower_fetched(
            &mut n.disk,
            OFFSETS_TOPIC,
            0,
            task.leader_epoch,
            offset,
            Ok((&bytes[..], ok.high_watermark)),
            start,
            0,
        )
        .expect("append");
}

fn entry(offset: i64) -> CommitEntry {
    CommitEntry {
        topic: "events".into(),
        partition: 3,
        committed: Committed {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        },
    }
}

/// A commit from outside any generation (allowed while the group has no members).
fn begin_commit(n: &mut Node, offset: i64) -> CommitStart {
    n.broker
        .begin_offset_commit(&mut n.disk, G, -1, "", vec![entry(offset)], 0)
}

fn committed(n: &Node) -> Option<i64> {
    n.broker.groups().committed(G, "events", 3).map(|c| c.offset)
}

fn join_req(member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: G.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"m"),
        }],
        reason: None,
    }
}

/// A v3 join (no MEMBER_ID_REQUIRED round): one member, so it completes at once.
fn join(n: &mut Node) -> (ErrorCode, String, i32) {
    let Reply::Now(r) = n.broker.groups_mut().handle_join(&join_req(""), 3, "c", 1, 0) else {
        panic!("a lone member's join parked");
    };
    (
        ErrorCode::from_code(r.error_code).expect("a known code"),
        r.member_id,
        r.generation_id,
    )
}

#[test]
fn a_broker_that_does_not_lead_the_groups_partition_answers_not_coordinator() {
    let mut c = nodes();
    apply(&mut c, &record(1), &zk(0, 0, &[0, 1]), 0);
    assert_eq!(c[0].broker.groups().check_coordinator(G), Ok(()));
    assert_eq!(
        c[1].broker.groups().check_coordinator(G),
        Err(ErrorCode::NotCoordinator)
    );
    let (code, _, _) = join(&mut c[1]);
    assert_eq!(code, ErrorCode::NotCoordinator, "JoinGroup on the follower");
    let describe = crate::protocol::api::describe_groups::DescribeGroupsRequest {
        groups: vec![G.to_string()],
        include_authorized_operations: false,
    };
    let described = crate::node::handlers::describe_groups::describe_groups(c[1].broker.groups(), &describe);
    assert_eq!(
        described.groups[0].error_code,
        ErrorCode::NotCoordinator.code(),
        "DescribeGroups on the follower"
    );
    let described = crate::node::handlers::describe_groups::describe_groups(c[0].broker.groups(), &describe);
    assert_eq!(described.groups[0].error_code, 0, "DescribeGroups on the leader");
    assert_eq!(
        c[1].broker.groups_mut().handle_heartbeat(G, 1, "m", 0),
        ErrorCode::NotCoordinator
    );
    assert_eq!(
        begin_commit(&mut c[1], 5),
        CommitStart::Done(vec![ErrorCode::NotCoordinator])
    );
    // The leader coordinates.
    let (code, member, generation) = join(&mut c[0]);
    assert_eq!((code, generation), (ErrorCode::None, 1), "JoinGroup on the leader");
    assert!(!member.is_empty());
}

#[test]
fn a_commit_is_acknowledged_only_once_the_high_watermark_passes_it() {
    let mut c = nodes();
    apply(&mut c, &record(2), &zk(0, 0, &[0, 1]), 0);
    let CommitStart::Pending(pending) = begin_commit(&mut c[0], 42) else {
        panic!("the commit should wait for the follower");
    };
    assert_eq!(
        c[0].broker.poll_offset_commit(&pending, false),
        None,
        "below the HW: no answer"
    );
    assert_eq!(committed(&c[0]), None, "not applied before the HW passes it");
    pump(&mut c, 1, 0); // the follower fetches the record
    assert_eq!(
        c[0].broker.poll_offset_commit(&pending, false),
        None,
        "the leader has not seen it held"
    );
    pump(&mut c, 1, 0); // its next fetch offset tells the leader it has it: the HW moves
    assert_eq!(
        c[0].broker.poll_offset_commit(&pending, false),
        Some(vec![ErrorCode::None])
    );
    assert_eq!(committed(&c[0]), Some(42));

    // A commit that never reaches the HW fails retriably when its time is up, unapplied.
    let CommitStart::Pending(pending) = begin_commit(&mut c[0], 50) else {
        panic!("the commit should wait");
    };
    assert_eq!(
        c[0].broker.poll_offset_commit(&pending, true),
        Some(vec![ErrorCode::CoordinatorNotAvailable])
    );
    assert_eq!(committed(&c[0]), Some(42));

    // Below min ISR (2) the commit is refused before it is written.
    apply(&mut c, &record(2), &zk(0, 0, &[0]), 1);
    assert_eq!(
        begin_commit(&mut c[0], 60),
        CommitStart::Done(vec![ErrorCode::CoordinatorNotAvailable])
    );
}

#[test]
fn offsets_and_generations_are_reloaded_where_leadership_moves() {
    let mut c = nodes();
    apply(&mut c, &record(2), &zk(0, 0, &[0, 1]), 0);
    // Generation 1 stored at broker 0: the leader's SyncGroup waits for the store.
    let (_, member, generation) = join(&mut c[0]);
    let sync = SyncGroupRequest {
        group_id: G.into(),
        generation_id: generation,
        member_id: member.clone(),
        group_instance_id: None,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![SyncGroupAssignment {
            member_id: member.clone(),
            assignment: Bytes::from_static(b"all"),
        }],
    };
    let Reply::Parked(ticket) = c[0].broker.groups_mut().handle_sync(&sync, 0) else {
        panic!("the leader's sync must wait for the generation to be stored");
    };
    let n = &mut c[0];
    let store = n.broker.begin_group_store(&mut n.disk, G, 0).expect("a store");
    assert!(!c[0].broker.poll_group_store(&store, false, 0), "not yet replicated");
    assert_eq!(
        c[0].broker.groups_mut().take_sync(ticket),
        None,
        "no assignment before the store"
    );
    pump(&mut c, 1, 0);
    pump(&mut c, 1, 0);
    assert!(c[0].broker.poll_group_store(&store, false, 0));
    let answer = c[0]
        .broker
        .groups_mut()
        .take_sync(ticket)
        .expect("answered once stored");
    assert_eq!((answer.error_code, &answer.assignment[..]), (0, &b"all"[..]));

    // A commit by the member, acknowledged at broker 0.
    let n = &mut c[0];
    let start = n
        .broker
        .begin_offset_commit(&mut n.disk, G, generation, &member, vec![entry(77)], 0);
    let CommitStart::Pending(pending) = start else {
        panic!("the commit should wait");
    };
    pump(&mut c, 1, 0);
    pump(&mut c, 1, 0);
    assert_eq!(
        c[0].broker.poll_offset_commit(&pending, false),
        Some(vec![ErrorCode::None])
    );

    // Leadership moves to broker 1.
    apply(&mut c, &record(2), &zk(1, 1, &[0, 1]), 2);
    assert_eq!(committed(&c[1]), Some(77), "the new coordinator replayed the commit");
    assert_eq!(
        committed(&c[0]),
        None,
        "the old coordinator dropped the partition's offsets"
    );
    assert_eq!(
        c[0].broker.groups().check_coordinator(G),
        Err(ErrorCode::NotCoordinator)
    );
    assert!(c[0].broker.groups().group(G).is_none(), "and its groups");
    // The old member is unknown at the new coordinator, and the group's generations go on.
    assert_eq!(
        c[1].broker.groups_mut().handle_heartbeat(G, generation, &member, 0),
        ErrorCode::UnknownMemberId
    );
    let (code, _, next) = join(&mut c[1]);
    assert_eq!((code, next), (ErrorCode::None, generation + 1), "generations continue");
}

#[test]
fn find_coordinator_names_the_leader_of_the_groups_partition_and_asks_for_the_topic() {
    use crate::cluster::BrokerRegistration;
    use crate::node::handlers::groups::find_coordinator;
    use crate::node::handlers::Advertised;
    use crate::protocol::api::find_coordinator::{FindCoordinatorRequest, KEY_TYPE_GROUP};
    let mut c = nodes();
    let advertised = Advertised {
        host: "self".into(),
        port: 1,
        cluster_id: "c".into(),
    };
    let req = FindCoordinatorRequest {
        key_type: KEY_TYPE_GROUP,
        keys: vec![G.into()],
    };
    let registration = |id: i32| BrokerRegistration {
        id: BrokerId(id),
        host: format!("broker-{id}"),
        port: 9092,
        rack: None,
        intact_since: None,
    };
    let mut view = ClusterView {
        brokers: vec![registration(0), registration(1)],
        controller: Some(BrokerId(0)),
        topics: BTreeMap::new(),
    };
    c[1].broker.set_cluster_view(view.clone());
    let r = find_coordinator(&mut c[1].broker, &req, &advertised);
    assert_eq!(r.coordinators[0].error_code, ErrorCode::CoordinatorNotAvailable.code());
    assert!(
        c[1].broker.take_offsets_topic_wanted(),
        "no offsets topic yet: asks for it"
    );
    view.topics
        .insert(OFFSETS_TOPIC.into(), (record(1), [(0, zk(0, 0, &[0, 1]))].into()));
    c[1].broker.set_cluster_view(view);
    let r = find_coordinator(&mut c[1].broker, &req, &advertised);
    let found = &r.coordinators[0];
    assert_eq!(
        (found.error_code, found.node_id, found.host.as_str(), found.port),
        (0, 0, "broker-0", 9092),
        "the leader of the partition, not this broker"
    );
    assert!(!c[1].broker.take_offsets_topic_wanted());
}
