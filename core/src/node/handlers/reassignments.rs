//! ListPartitionReassignments (key 46) answered from the broker's cluster view (the topic
//! records it last read, which hold the reassignments in progress); AlterPartitionReassignments
//! (key 45) and ElectLeaders (key 43) on a broker outside a cluster, which has no other replica.
//! In a cluster, those two go to the cluster task ([`crate::node::cluster::AdminQueue`]).

use crate::broker::Broker;
use crate::error_code::ErrorCode;
use crate::protocol::api::alter_partition_reassignments::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ReassignablePartitionResponse,
    ReassignableTopicResponse,
};
use crate::protocol::api::elect_leaders::{
    ElectLeadersRequest, ElectLeadersResponse, PartitionResult, ReplicaElectionResult,
};
use crate::protocol::api::list_partition_reassignments::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, OngoingPartitionReassignment,
    OngoingTopicReassignment,
};

fn ids(list: &[crate::ids::BrokerId]) -> Vec<i32> {
    list.iter().map(|b| b.0).collect()
}

/// The reassignments in progress, for the partitions asked (all when `topics` is null). A named
/// partition that is not moving (or unknown) is left out, as Kafka does.
pub fn list_partition_reassignments(
    broker: &Broker,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut topics = Vec::new();
    if let Some(view) = broker.cluster_view() {
        for (name, (record, _)) in &view.topics {
            let wanted: Option<&Vec<i32>> = match &req.topics {
                None => None,
                Some(list) => match list.iter().find(|t| t.name == *name) {
                    Some(t) => Some(&t.partition_indexes),
                    None => continue,
                },
            };
            let partitions: Vec<OngoingPartitionReassignment> = record
                .reassigning
                .iter()
                .filter(|(p, _)| wanted.is_none_or(|w| w.contains(p)))
                .map(|(&p, r)| OngoingPartitionReassignment {
                    partition_index: p,
                    replicas: ids(record.assignment.get(&p).map_or(&[][..], Vec::as_slice)),
                    adding_replicas: ids(&r.adding),
                    removing_replicas: ids(&r.removing),
                })
                .collect();
            if !partitions.is_empty() {
                topics.push(OngoingTopicReassignment {
                    name: name.clone(),
                    partitions,
                });
            }
        }
    }
    ListPartitionReassignmentsResponse {
        topics,
        ..ListPartitionReassignmentsResponse::default()
    }
}

/// A single broker: every partition refused with INVALID_REPLICA_ASSIGNMENT.
pub fn alter_refused_single_node(req: &AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse {
    AlterPartitionReassignmentsResponse {
        allow_replication_factor_change: req.allow_replication_factor_change,
        responses: req
            .topics
            .iter()
            .map(|t| ReassignableTopicResponse {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| ReassignablePartitionResponse {
                        partition_index: p.partition_index,
                        error_code: ErrorCode::InvalidReplicaAssignment.code(),
                        error_message: Some("a broker outside a cluster has no replicas to move".into()),
                    })
                    .collect(),
            })
            .collect(),
        ..AlterPartitionReassignmentsResponse::default()
    }
}

/// A single broker leads every partition it has: each named partition ELECTION_NOT_NEEDED.
pub fn elect_single_node(req: &ElectLeadersRequest) -> ElectLeadersResponse {
    ElectLeadersResponse {
        replica_election_results: req
            .topic_partitions
            .iter()
            .flatten()
            .map(|t| ReplicaElectionResult {
                topic: t.topic.clone(),
                partition_result: t
                    .partitions
                    .iter()
                    .map(|&p| PartitionResult {
                        partition_id: p,
                        error_code: ErrorCode::ElectionNotNeeded.code(),
                        error_message: None,
                    })
                    .collect(),
            })
            .collect(),
        ..ElectLeadersResponse::default()
    }
}
