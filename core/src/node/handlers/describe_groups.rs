//! ListGroups and DescribeGroups answered from the broker's [`GroupCoordinator`]: what
//! `gregor groups list|describe` and `kafka-consumer-groups.sh` show. Read-only.
//!
//! A group known only by its committed offsets (after a restart, or once its members left) is
//! listed and described as Empty. An unknown group is described as Dead with no error, as Kafka
//! answers before DescribeGroups v6.

use crate::error_code::ErrorCode;
use crate::group::{GroupCoordinator, GroupState, GROUP_ID_BYTES_MAX};
use crate::protocol::api::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, DescribedGroup, DescribedMember,
};
use crate::protocol::api::list_groups::{ListGroupsRequest, ListGroupsResponse, ListedGroup};

/// KIP-848's name for the group protocol every Gregor group speaks.
pub const GROUP_TYPE_CLASSIC: &str = "classic";

/// Kafka's name for a group state, as ListGroups v4+ and DescribeGroups spell it.
pub fn state_name(state: GroupState) -> &'static str {
    match state {
        GroupState::Empty => "Empty",
        GroupState::PreparingRebalance => "PreparingRebalance",
        GroupState::CompletingRebalance => "CompletingRebalance",
        GroupState::Stable => "Stable",
        GroupState::Dead => "Dead",
    }
}

/// ListGroups: every group, filtered by state and type as asked (filters compare without case,
/// as Kafka's do).
pub fn list_groups(groups: &GroupCoordinator, req: &ListGroupsRequest) -> ListGroupsResponse {
    let wanted =
        |filter: &[String], value: &str| filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value));
    ListGroupsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        groups: groups
            .list_groups()
            .into_iter()
            .filter(|(_, state, _)| wanted(&req.states_filter, state_name(*state)))
            .filter(|_| wanted(&req.types_filter, GROUP_TYPE_CLASSIC))
            .map(|(group_id, state, protocol_type)| ListedGroup {
                group_id,
                protocol_type,
                group_state: state_name(state).to_string(),
                group_type: GROUP_TYPE_CLASSIC.to_string(),
            })
            .collect(),
    }
}

/// DescribeGroups: each group's state, chosen protocol and members in join order.
pub fn describe_groups(groups: &GroupCoordinator, req: &DescribeGroupsRequest) -> DescribeGroupsResponse {
    let describe = |id: &String| {
        let mut out = DescribedGroup {
            error_code: 0,
            group_id: id.clone(),
            group_state: state_name(GroupState::Dead).to_string(),
            protocol_type: String::new(),
            protocol_data: String::new(),
            members: vec![],
            // Gregor has no ACLs to report; Kafka's "not asked" value.
            authorized_operations: i32::MIN,
        };
        if id.is_empty() || id.len() > GROUP_ID_BYTES_MAX {
            out.error_code = ErrorCode::InvalidGroupId.code();
            return out;
        }
        // In a cluster only the leader of the group's `__consumer_offsets` partition knows it;
        // another broker's empty answer would read as "Dead" (Kafka answers NOT_COORDINATOR).
        if let Err(code) = groups.check_coordinator(id) {
            out.error_code = code.code();
            return out;
        }
        let Some(state) = groups.group_state(id) else {
            return out;
        };
        out.group_state = state_name(state).to_string();
        let Some(group) = groups.group(id) else {
            return out;
        };
        let protocol = group.protocol_name.clone().unwrap_or_default();
        out.protocol_type = group.protocol_type.clone().unwrap_or_default();
        let mut members: Vec<_> = group.members.values().collect();
        members.sort_by_key(|m| m.join_seq);
        out.members = members
            .into_iter()
            .map(|m| DescribedMember {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                member_metadata: m.metadata(&protocol),
                member_assignment: m.assignment.clone(),
            })
            .collect();
        out.protocol_data = protocol;
        out
    };
    DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups: req.groups.iter().map(describe).collect(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::disk::mem::MemDisk;
    use crate::group::{CommitEntry, Committed, GroupConfig, Reply};
    use crate::log::LogConfig;
    use crate::protocol::api::join_group::{JoinGroupProtocol, JoinGroupRequest};
    use crate::protocol::api::sync_group::{SyncGroupAssignment, SyncGroupRequest};

    fn join(groups: &mut GroupCoordinator, group: &str, member_id: &str) -> String {
        let req = JoinGroupRequest {
            group_id: group.into(),
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
        };
        match groups.handle_join(&req, 7, "client-a", 1, 0) {
            Reply::Now(r) => r.member_id,
            Reply::Parked(t) => panic!("a lone member is not parked: {t:?}"),
        }
    }

    /// One Stable group with a member (client id, host, assignment) and one Empty group known
    /// only by its committed offsets.
    fn coordinator(disk: &mut MemDisk) -> (GroupCoordinator, String) {
        let mut groups = GroupCoordinator::open(disk, GroupConfig::default(), LogConfig::default()).expect("open");
        let pending = join(&mut groups, "live", "");
        let member = join(&mut groups, "live", &pending);
        groups.set_client_host("live", &member, "/127.0.0.1");
        let sync = SyncGroupRequest {
            group_id: "live".into(),
            generation_id: 1,
            member_id: member.clone(),
            assignments: vec![SyncGroupAssignment {
                member_id: member.clone(),
                assignment: Bytes::from_static(b"assignment"),
            }],
            ..SyncGroupRequest::default()
        };
        assert!(matches!(groups.handle_sync(&sync, 0), Reply::Now(r) if r.error_code == 0));
        let entry = CommitEntry {
            topic: "t".into(),
            partition: 0,
            committed: Committed {
                offset: 5,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            },
        };
        let codes = groups.handle_commit(disk, "idle", -1, "", vec![entry], 0);
        assert_eq!(codes, vec![ErrorCode::None]);
        (groups, member)
    }

    #[test]
    fn list_shows_live_and_offsets_only_groups_filtered_by_state() {
        let mut disk = MemDisk::new();
        let (groups, _) = coordinator(&mut disk);
        let all = list_groups(&groups, &ListGroupsRequest::default());
        let seen: Vec<(&str, &str, &str)> = all
            .groups
            .iter()
            .map(|g| (g.group_id.as_str(), g.group_state.as_str(), g.protocol_type.as_str()))
            .collect();
        println!("listed: {seen:?}");
        assert_eq!(seen, vec![("idle", "Empty", ""), ("live", "Stable", "consumer")]);
        let stable = ListGroupsRequest {
            states_filter: vec!["stable".into()],
            types_filter: vec![],
        };
        let only: Vec<String> = list_groups(&groups, &stable)
            .groups
            .into_iter()
            .map(|g| g.group_id)
            .collect();
        assert_eq!(only, vec!["live".to_string()]);
        let consumer_type = ListGroupsRequest {
            states_filter: vec![],
            types_filter: vec!["consumer".into()],
        };
        assert!(list_groups(&groups, &consumer_type).groups.is_empty());
    }

    #[test]
    fn describe_shows_members_with_client_host_and_assignment() {
        let mut disk = MemDisk::new();
        let (groups, member) = coordinator(&mut disk);
        let req = DescribeGroupsRequest {
            groups: vec!["live".into(), "idle".into(), "nobody".into(), String::new()],
            include_authorized_operations: false,
        };
        let resp = describe_groups(&groups, &req);
        let live = &resp.groups[0];
        assert_eq!(
            (live.group_state.as_str(), live.protocol_data.as_str()),
            ("Stable", "range")
        );
        let m = &live.members[0];
        println!("member: {m:?}");
        assert_eq!(m.member_id, member);
        assert_eq!(
            (m.client_id.as_str(), m.client_host.as_str()),
            ("client-a", "/127.0.0.1")
        );
        assert_eq!(&m.member_assignment[..], b"assignment");
        assert_eq!(&m.member_metadata[..], b"subscription");
        let states: Vec<(&str, i16)> = resp.groups[1..]
            .iter()
            .map(|g| (g.group_state.as_str(), g.error_code))
            .collect();
        assert_eq!(
            states,
            vec![("Empty", 0), ("Dead", 0), ("Dead", ErrorCode::InvalidGroupId.code())]
        );
    }
}
