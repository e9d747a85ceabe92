//! The group APIs through the handlers, as a client sees them, including a broker restart.

use bytes::Bytes;

use super::*;
use crate::broker::{BrokerConfig, TopicId};
use crate::disk::mem::{CrashMode, MemDisk};
use crate::protocol::api::find_coordinator::KEY_TYPE_GROUP;
use crate::protocol::api::join_group::JoinGroupProtocol;
use crate::protocol::api::leave_group::MemberIdentity;
use crate::protocol::api::offset_commit::{OffsetCommitPartition, OffsetCommitTopic};
use crate::protocol::api::offset_fetch::{OffsetFetchGroup, OffsetFetchTopic};
use crate::protocol::api::sync_group::SyncGroupAssignment;

fn advertised() -> Advertised {
    Advertised {
        host: "broker.example".into(),
        port: 9092,
        cluster_id: "c".into(),
    }
}

fn broker_with_topic(disk: &mut MemDisk) -> Broker {
    let mut b = Broker::open(disk, BrokerConfig::default(), 0).expect("open");
    b.create_topic(disk, "orders", 2, 1, &[], TopicId::from_random(1, 1), false)
        .expect("create");
    b
}

fn join_req(member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: "g".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"subscription"),
        }],
        reason: None,
    }
}

fn commit_req(generation_id: i32, member_id: &str, offsets: &[(&str, i32, i64)]) -> OffsetCommitRequest {
    OffsetCommitRequest {
        group_id: "g".into(),
        generation_id,
        member_id: member_id.into(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: offsets
            .iter()
            .map(|(t, p, o)| OffsetCommitTopic {
                name: t.to_string(),
                partitions: vec![OffsetCommitPartition {
                    partition_index: *p,
                    committed_offset: *o,
                    committed_leader_epoch: -1,
                    committed_metadata: Some("meta".into()),
                }],
            })
            .collect(),
    }
}

fn fetch_all(groups: &GroupCoordinator) -> Vec<(String, i32, i64)> {
    let req = OffsetFetchRequest {
        groups: vec![OffsetFetchGroup {
            group_id: "g".into(),
            topics: None,
        }],
        require_stable: false,
    };
    let resp = offset_fetch(groups, &req);
    resp.encode(8);
    resp.groups[0]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.clone(), p.partition_index, p.committed_offset))
        })
        .collect()
}

#[test]
fn find_coordinator_names_this_broker_for_groups_only() {
    let mut disk = MemDisk::new();
    let mut b = broker_with_topic(&mut disk);
    let req = FindCoordinatorRequest {
        key_type: KEY_TYPE_GROUP,
        keys: vec!["g1".into(), "g2".into()],
    };
    let resp = find_coordinator(&mut b, &req, &advertised());
    assert_eq!(resp.coordinators.len(), 2);
    assert!(resp
        .coordinators
        .iter()
        .all(|c| c.error_code == 0 && c.host == "broker.example" && c.port == 9092 && c.node_id == 0));
    resp.encode(4);
    let one = FindCoordinatorRequest {
        key_type: KEY_TYPE_GROUP,
        keys: vec!["g1".into()],
    };
    find_coordinator(&mut b, &one, &advertised()).encode(0);
    let tx = FindCoordinatorRequest {
        key_type: KEY_TYPE_TRANSACTION,
        keys: vec!["tx".into()],
    };
    assert_eq!(
        find_coordinator(&mut b, &tx, &advertised()).coordinators[0].error_code,
        ErrorCode::CoordinatorNotAvailable.code()
    );
}

#[test]
fn one_consumer_joins_syncs_commits_fetches_and_leaves() {
    let mut disk = MemDisk::new();
    let mut b = broker_with_topic(&mut disk);
    let Reply::Now(first) = join_group(b.groups_mut(), &join_req(""), 6, "app", 1, 0) else {
        panic!("parked");
    };
    assert_eq!(first.error_code, ErrorCode::MemberIdRequired.code());
    assert!(first.member_id.starts_with("app-"));
    let id = first.member_id;
    let Reply::Now(joined) = join_group(b.groups_mut(), &join_req(&id), 6, "app", 1, 0) else {
        panic!("a lone member waits for nobody");
    };
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    joined.encode(6);
    let sync = SyncGroupRequest {
        group_id: "g".into(),
        generation_id: 1,
        member_id: id.clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![SyncGroupAssignment {
            member_id: id.clone(),
            assignment: Bytes::from_static(b"orders:0,1"),
        }],
    };
    let Reply::Now(synced) = sync_group(b.groups_mut(), &sync, 1) else {
        panic!("the leader's sync completes at once");
    };
    assert_eq!(synced.assignment, Bytes::from_static(b"orders:0,1"));
    let hb = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: 1,
        member_id: id.clone(),
        group_instance_id: None,
    };
    assert_eq!(heartbeat(b.groups_mut(), &hb, 2).error_code, 0);

    let resp = offset_commit(
        &mut b,
        &mut disk,
        &commit_req(1, &id, &[("orders", 1, 42), ("nope", 0, 1)]),
        3,
    );
    assert_eq!(resp.topics[0].partitions, vec![(1, 0)]);
    assert_eq!(
        resp.topics[1].partitions,
        vec![(0, ErrorCode::UnknownTopicOrPartition.code())]
    );
    let stale = offset_commit(&mut b, &mut disk, &commit_req(0, &id, &[("orders", 1, 99)]), 4);
    assert_eq!(
        stale.topics[0].partitions,
        vec![(1, ErrorCode::IllegalGeneration.code())]
    );
    stale.encode(8);
    assert_eq!(fetch_all(b.groups()), vec![("orders".to_string(), 1, 42)]);
    let asked = OffsetFetchRequest {
        groups: vec![OffsetFetchGroup {
            group_id: "g".into(),
            topics: Some(vec![OffsetFetchTopic {
                name: "orders".into(),
                partition_indexes: vec![0, 1],
            }]),
        }],
        require_stable: false,
    };
    let fetched = offset_fetch(b.groups(), &asked);
    let offsets: Vec<i64> = fetched.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect();
    assert_eq!(offsets, vec![-1, 42]);
    fetched.encode(1);

    let leave = LeaveGroupRequest {
        group_id: "g".into(),
        members: vec![
            MemberIdentity {
                member_id: id.clone(),
                ..MemberIdentity::default()
            },
            MemberIdentity {
                member_id: "ghost".into(),
                ..MemberIdentity::default()
            },
        ],
    };
    let left = leave_group(b.groups_mut(), &leave, 3, 5);
    assert_eq!(left.error_code, 0);
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![0, ErrorCode::UnknownMemberId.code()]);
    left.encode(3);
    assert_eq!(
        heartbeat(b.groups_mut(), &hb, 6).error_code,
        ErrorCode::UnknownMemberId.code()
    );
    // v0–v2: one member, its error at the top level.
    let old = LeaveGroupRequest {
        group_id: "g".into(),
        members: vec![MemberIdentity {
            member_id: id,
            ..MemberIdentity::default()
        }],
    };
    assert_eq!(
        leave_group(b.groups_mut(), &old, 0, 7).error_code,
        ErrorCode::UnknownMemberId.code()
    );
}

#[test]
fn acknowledged_commits_survive_a_broker_crash_and_restart() {
    let mut disk = MemDisk::new();
    let mut b = broker_with_topic(&mut disk);
    for i in 0..10 {
        let resp = offset_commit(
            &mut b,
            &mut disk,
            &commit_req(-1, "", &[("orders", i % 2, i64::from(i))]),
            1,
        );
        assert_eq!(resp.topics[0].partitions, vec![(i % 2, 0)], "acknowledged");
    }
    for mode in [
        CrashMode::DropUnsynced,
        CrashMode::Torn { seed: 3 },
        CrashMode::Torn { seed: 4 },
    ] {
        let mut crashed = disk.clone();
        crashed.crash(mode);
        let reopened = Broker::open(&mut crashed, BrokerConfig::default(), 10).expect("reopen");
        assert_eq!(
            fetch_all(reopened.groups()),
            vec![("orders".to_string(), 0, 8), ("orders".to_string(), 1, 9)],
            "{mode:?}"
        );
        assert!(reopened.startup_warnings.is_empty(), "{:?}", reopened.startup_warnings);
    }
}

#[test]
fn api_versions_advertises_the_group_apis() {
    let keys: Vec<i16> = crate::node::handlers::api_versions()
        .api_keys
        .iter()
        .map(|k| k.api_key)
        .collect();
    for key in [8, 9, 10, 11, 12, 13, 14] {
        assert!(keys.contains(&key), "api key {key} missing from {keys:?}");
    }
}
