//! The consumer group APIs answered from the broker's [`GroupCoordinator`]: FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch. JoinGroup and
//! SyncGroup may answer [`Reply::Parked`]; the driver then waits for the ticket.
//!
//! In a cluster ([`Coordination::Partitioned`]) FindCoordinator names the leader of the group's
//! `__consumer_offsets` partition (COORDINATOR_NOT_AVAILABLE while it has none, or while the
//! topic does not exist yet: the first such answer asks the cluster task to create it, as
//! Kafka's first FindCoordinator does), every other group API answers NOT_COORDINATOR on a
//! broker that does not lead the group's partition, and OffsetCommit is answered only after the
//! commit is replicated ([`Broker::begin_offset_commit`]).

use super::Advertised;
use crate::broker::Broker;
use crate::broker::CommitStart;
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::group::{CommitEntry, Committed, Coordination, GroupCoordinator, Reply, OFFSETS_TOPIC};
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

/// FindCoordinator. Local mode: this broker coordinates every group. Partitioned mode: the
/// leader of the group's offsets partition, as the coordinator's view last showed it.
/// Transactions have no coordinator here (see `init_producer_id`): COORDINATOR_NOT_AVAILABLE
/// with a message.
pub fn find_coordinator(
    broker: &mut Broker,
    req: &FindCoordinatorRequest,
    advertised: &Advertised,
) -> FindCoordinatorResponse {
    let mut wants_topic = false;
    let coordinators = req
        .keys
        .iter()
        .map(|key| {
            let found = match req.key_type {
                KEY_TYPE_GROUP => group_coordinator(broker, key, advertised, &mut wants_topic),
                KEY_TYPE_TRANSACTION => Err((ErrorCode::CoordinatorNotAvailable, "transactions are not supported")),
                _ => Err((ErrorCode::InvalidRequest, "unknown key type")),
            };
            match found {
                Ok((node_id, host, port)) => Coordinator {
                    key: key.clone(),
                    node_id,
                    host,
                    port,
                    error_code: 0,
                    error_message: None,
                },
                Err((code, why)) => Coordinator {
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
    if wants_topic {
        broker.want_offsets_topic();
    }
    FindCoordinatorResponse {
        throttle_time_ms: 0,
        coordinators,
    }
}

type Found = Result<(i32, String, i32), (ErrorCode, &'static str)>;

fn group_coordinator(broker: &Broker, group: &str, advertised: &Advertised, wants_topic: &mut bool) -> Found {
    let Some(p) = broker.groups().partition_of(group) else {
        return Ok((broker.config().broker_id.0, advertised.host.clone(), advertised.port));
    };
    let not_available = ErrorCode::CoordinatorNotAvailable;
    let Some(view) = broker.cluster_view() else {
        return Err((not_available, "the cluster state is not known yet"));
    };
    let Some((_, states)) = view.topics.get(OFFSETS_TOPIC) else {
        *wants_topic = true;
        return Err((not_available, "the offsets topic is being created"));
    };
    let leader = states
        .get(&p)
        .and_then(|s| s.leader)
        .ok_or((not_available, "the group's offsets partition has no leader"))?;
    let reg = view
        .brokers
        .iter()
        .find(|b| b.id == leader)
        .ok_or((not_available, "the group's coordinator is not registered"))?;
    Ok((leader.0, reg.host.clone(), reg.port))
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

/// An OffsetCommit taken apart: the entries to commit, where each sits in the request, and the
/// response with UNKNOWN_TOPIC_OR_PARTITION everywhere until filled in.
pub struct CommitRequest {
    pub entries: Vec<CommitEntry>,
    slots: Vec<(usize, usize)>,
    response: OffsetCommitResponse,
}

impl CommitRequest {
    /// Fills the response with one result per entry, in order.
    pub fn answer(mut self, results: &[ErrorCode]) -> OffsetCommitResponse {
        for ((ti, pi), code) in self.slots.into_iter().zip(results) {
            self.response.topics[ti].partitions[pi].1 = code.code();
        }
        self.response
    }
}

/// Partitions of topics the cluster (or this broker) does not know get
/// UNKNOWN_TOPIC_OR_PARTITION; the rest are entries to commit.
pub fn commit_request(broker: &Broker, req: &OffsetCommitRequest, now_ms: i64) -> CommitRequest {
    let partitions_of = |name: &str| -> Option<i32> {
        if let Some(m) = broker.topic(name) {
            return Some(m.partitions);
        }
        // A follower-less broker of a cluster may host none of the topic's replicas.
        let (record, _) = broker.cluster_view()?.topics.get(name)?;
        i32::try_from(record.assignment.len()).ok()
    };
    let mut entries = Vec::new();
    let mut slots = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let count = partitions_of(&t.name);
        for (pi, p) in t.partitions.iter().enumerate() {
            if count.is_some_and(|n| (0..n).contains(&p.partition_index)) {
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
    let topics: Vec<OffsetCommitTopicResponse> = req
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
    CommitRequest {
        entries,
        slots,
        response: OffsetCommitResponse {
            throttle_time_ms: 0,
            topics,
        },
    }
}

/// OffsetCommit in local mode: answered once the commit is synced to the local offsets log.
pub fn offset_commit<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &OffsetCommitRequest,
    now_ms: i64,
) -> OffsetCommitResponse {
    let mut request = commit_request(broker, req, now_ms);
    let entries = std::mem::take(&mut request.entries);
    let results =
        broker
            .groups_mut()
            .handle_commit(disk, &req.group_id, req.generation_id, &req.member_id, entries, now_ms);
    request.answer(&results)
}

/// OffsetCommit in partitioned mode, first half: the response if answered at once, else the
/// request and its pending commit (settle with [`Broker::poll_offset_commit`], then
/// [`CommitRequest::answer`]).
pub fn offset_commit_begin<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &OffsetCommitRequest,
    now_ms: i64,
) -> Result<OffsetCommitResponse, Box<(CommitRequest, crate::broker::PendingCommit)>> {
    let mut request = commit_request(broker, req, now_ms);
    let entries = std::mem::take(&mut request.entries);
    match broker.begin_offset_commit(disk, &req.group_id, req.generation_id, &req.member_id, entries, now_ms) {
        CommitStart::Done(results) => Ok(request.answer(&results)),
        CommitStart::Pending(pending) => Err(Box::new((request, pending))),
    }
}

/// Whether this broker's groups are partitioned (cluster mode).
pub fn partitioned(broker: &Broker) -> bool {
    matches!(broker.groups().coordination(), Coordination::Partitioned { .. })
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
            if let Err(code) = groups.check_coordinator(&g.group_id) {
                return OffsetFetchGroupResponse {
                    group_id: g.group_id.clone(),
                    topics: vec![],
                    error_code: code.code(),
                };
            }
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
