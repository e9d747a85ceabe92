//! The consumer group APIs answered from the broker's [`GroupCoordinator`]: FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch. JoinGroup and
//! SyncGroup may answer [`Reply::Parked`]; the driver then waits for the ticket.

use super::Advertised;
use crate::broker::Broker;
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::group::{CommitEntry, Committed, GroupCoordinator, Reply};
use crate::protocol::api::find_coordinator::{
    Coordinator, FindCoordinatorRequest, FindCoordinatorResponse, KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION,
};
use crate::protocol::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::protocol::api::join_group::{JoinGroupRequest, JoinGroupResponse};
use crate::protocol::api::leave_group::{LeaveGroupRequest, LeaveGroupResponse, MemberResponse};
use crate::protocol::api::offset_commit::{OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopicResponse};
use crate::protocol::api::offset_fetch::{
    OffsetFetchGroupResponse, OffsetFetchPartitionResponse, OffsetFetchRequest, OffsetFetchResponse,
    OffsetFetchTopicResponse,
};
use crate::protocol::api::sync_group::{SyncGroupRequest, SyncGroupResponse};

/// FindCoordinator: this broker coordinates every group. Transactions have no coordinator here
/// (see `init_producer_id`): COORDINATOR_NOT_AVAILABLE with a message.
pub fn find_coordinator(
    broker: &Broker,
    req: &FindCoordinatorRequest,
    advertised: &Advertised,
) -> FindCoordinatorResponse {
    let coordinators = req
        .keys
        .iter()
        .map(|key| {
            let error = match req.key_type {
                KEY_TYPE_GROUP => None,
                KEY_TYPE_TRANSACTION => Some((ErrorCode::CoordinatorNotAvailable, "transactions are not supported")),
                _ => Some((ErrorCode::InvalidRequest, "unknown key type")),
            };
            match error {
                None => Coordinator {
                    key: key.clone(),
                    node_id: broker.config().broker_id.0,
                    host: advertised.host.clone(),
                    port: advertised.port,
                    error_code: 0,
                    error_message: None,
                },
                Some((code, why)) => Coordinator {
                    key: key.clone(),
                    node_id: -1,
                    host: String::new(),
                    port: -1,
                    error_code: code.code(),
                    error_message: Some(why.to_string()),
                },
            }
        })
        .collect();
    FindCoordinatorResponse {
        throttle_time_ms: 0,
        coordinators,
    }
}

pub fn join_group(
    groups: &mut GroupCoordinator,
    req: &JoinGroupRequest,
    version: i16,
    client_id: &str,
    nonce: u64,
    now_ms: i64,
) -> Reply<JoinGroupResponse> {
    groups.handle_join(req, version, client_id, nonce, now_ms)
}

pub fn sync_group(groups: &mut GroupCoordinator, req: &SyncGroupRequest, now_ms: i64) -> Reply<SyncGroupResponse> {
    groups.handle_sync(req, now_ms)
}

pub fn heartbeat(groups: &mut GroupCoordinator, req: &HeartbeatRequest, now_ms: i64) -> HeartbeatResponse {
    HeartbeatResponse {
        throttle_time_ms: 0,
        error_code: groups
            .handle_heartbeat(&req.group_id, req.generation_id, &req.member_id, now_ms)
            .code(),
    }
}

/// LeaveGroup: v0–v2 name one member and carry its error at the top level; v3+ answer per member.
pub fn leave_group(
    groups: &mut GroupCoordinator,
    req: &LeaveGroupRequest,
    version: i16,
    now_ms: i64,
) -> LeaveGroupResponse {
    let ids: Vec<String> = req.members.iter().map(|m| m.member_id.clone()).collect();
    let results = groups.handle_leave(&req.group_id, &ids, now_ms);
    let members: Vec<MemberResponse> = req
        .members
        .iter()
        .zip(&results)
        .map(|(m, code)| MemberResponse {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            error_code: code.code(),
        })
        .collect();
    let error_code = if version <= 2 {
        members.first().map_or(0, |m| m.error_code)
    } else {
        0
    };
    LeaveGroupResponse {
        throttle_time_ms: 0,
        error_code,
        members,
    }
}

/// OffsetCommit: partitions of topics this broker does not host get UNKNOWN_TOPIC_OR_PARTITION;
/// the rest go to the coordinator, which answers only after they are synced.
pub fn offset_commit<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &OffsetCommitRequest,
    now_ms: i64,
) -> OffsetCommitResponse {
    let mut entries = Vec::new();
    let mut slots = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        for (pi, p) in t.partitions.iter().enumerate() {
            let known = broker
                .topic(&t.name)
                .is_some_and(|m| (0..m.partitions).contains(&p.partition_index));
            if known {
                slots.push((ti, pi));
                entries.push(CommitEntry {
                    topic: t.name.clone(),
                    partition: p.partition_index,
                    committed: Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.clone().unwrap_or_default(),
                        commit_timestamp_ms: now_ms,
                    },
                });
            }
        }
    }
    let mut topics: Vec<OffsetCommitTopicResponse> = req
        .topics
        .iter()
        .map(|t| OffsetCommitTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| (p.partition_index, ErrorCode::UnknownTopicOrPartition.code()))
                .collect(),
        })
        .collect();
    let results =
        broker
            .groups_mut()
            .handle_commit(disk, &req.group_id, req.generation_id, &req.member_id, entries, now_ms);
    for ((ti, pi), code) in slots.into_iter().zip(results) {
        topics[ti].partitions[pi].1 = code.code();
    }
    OffsetCommitResponse {
        throttle_time_ms: 0,
        topics,
    }
}

/// OffsetFetch: committed offsets (-1 where none), for the partitions asked or all of a group.
pub fn offset_fetch(groups: &GroupCoordinator, req: &OffsetFetchRequest) -> OffsetFetchResponse {
    let partition = |index: i32, c: Option<&Committed>| OffsetFetchPartitionResponse {
        partition_index: index,
        committed_offset: c.map_or(-1, |c| c.offset),
        committed_leader_epoch: c.map_or(-1, |c| c.leader_epoch),
        metadata: Some(c.map(|c| c.metadata.clone()).unwrap_or_default()),
        error_code: 0,
    };
    let groups_out = req
        .groups
        .iter()
        .map(|g| {
            let topics = match &g.topics {
                Some(asked) => asked
                    .iter()
                    .map(|t| OffsetFetchTopicResponse {
                        name: t.name.clone(),
                        partitions: t
                            .partition_indexes
                            .iter()
                            .map(|p| partition(*p, groups.committed(&g.group_id, &t.name, *p)))
                            .collect(),
                    })
                    .collect(),
                None => {
                    let mut out: Vec<OffsetFetchTopicResponse> = Vec::new();
                    for (topic, p, c) in groups.offsets().group(&g.group_id) {
                        if out.last().is_none_or(|t| t.name != topic) {
                            out.push(OffsetFetchTopicResponse {
                                name: topic.to_string(),
                                partitions: vec![],
                            });
                        }
                        out.last_mut()
                            .expect("pushed above")
                            .partitions
                            .push(partition(p, Some(c)));
                    }
                    out
                }
            };
            OffsetFetchGroupResponse {
                group_id: g.group_id.clone(),
                topics,
                error_code: 0,
            }
        })
        .collect();
    OffsetFetchResponse {
        throttle_time_ms: 0,
        groups: groups_out,
    }
}

#[cfg(test)]
#[path = "groups_tests.rs"]
mod tests;
