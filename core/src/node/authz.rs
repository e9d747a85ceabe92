//! Authorization at the broker: which part of each request the connection's principal may make,
//! with Kafka's error codes for the rest.
//!
//! Owns: [`NodeAcls`] (the authorizer's settings and the broker's cache of the ACLs, shared by
//! every connection of the node), and [`Gate`], one per request, which answers "may this
//! principal from this host do this". With no authorizer configured (`authorizer.class.name`
//! unset) the gate allows everything, so nothing changes for a broker without security.
//!
//! The per-API rules follow Kafka's `KafkaApis`: a request naming several topics is split, the
//! allowed part is served as usual and the refused part answered TOPIC_AUTHORIZATION_FAILED
//! (never touching the log); group APIs refuse whole with GROUP_AUTHORIZATION_FAILED; cluster
//! operations with CLUSTER_AUTHORIZATION_FAILED. Every check here reads the cache as it is when
//! the request arrives: a revocation applies to every request decoded after the cache took it.

use std::cell::RefCell;
use std::rc::Rc;

use crate::broker::{Broker, TopicId};
use crate::error_code::ErrorCode;
use crate::protocol::api::create_topics::{CreatableTopicResult, CreateTopicsRequest};
use crate::protocol::api::delete_topics::{DeletableTopicResult, DeleteTopicsRequest};
use crate::protocol::api::describe_groups::{DescribeGroupsResponse, DescribedGroup};
use crate::protocol::api::fetch::{FetchPartitionResponse, FetchRequest, FetchTopicResponse, TOPIC_ID_MIN};
use crate::protocol::api::find_coordinator::FindCoordinatorResponse;
use crate::protocol::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use crate::protocol::api::list_groups::ListGroupsResponse;
use crate::protocol::api::list_offsets::{ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsTopicResponse};
use crate::protocol::api::metadata::{MetadataRequest, MetadataResponse, MetadataTopic};
use crate::protocol::api::offset_commit::{OffsetCommitRequest, OffsetCommitTopicResponse};
use crate::protocol::api::offset_fetch::OffsetFetchResponse;
use crate::protocol::api::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderTopicResult,
};
use crate::protocol::api::produce::{ProducePartitionResponse, ProduceRequest, ProduceTopicResponse};
use crate::protocol::Uuid;
use crate::security::acl::{AclSet, Authorizer, Operation, Requester, ResourceType, CLUSTER_NAME};
use crate::security::ConnContext;

/// The node's authorizer: settings plus the ACL cache (filled from the coordinator in cluster
/// mode, by CreateAcls / DeleteAcls on a single node). Clones share the cache.
#[derive(Clone, Debug, Default)]
pub struct NodeAcls {
    pub authorizer: Authorizer,
    pub acls: Rc<RefCell<AclSet>>,
    /// Cluster mode: where CreateAcls / DeleteAcls go (the coordinator holds the ACLs and the
    /// cache follows it); `None` on a single node, whose cache is the store.
    pub admin: Option<super::acl_sync::AclAdmin>,
    /// Simulator-only negative control: the cache takes grants from the coordinator but never
    /// drops a binding (a broker that ignores revocations). Never set outside the simulator.
    pub mutant_ignore_revocations: bool,
}

impl NodeAcls {
    pub fn new(authorizer: Authorizer) -> NodeAcls {
        NodeAcls {
            authorizer,
            acls: Rc::default(),
            admin: None,
            mutant_ignore_revocations: false,
        }
    }
}

/// One request's authorization: its requester and the node's ACLs, or nothing to check.
pub struct Gate<'a> {
    checked: Option<(&'a NodeAcls, Requester)>,
}

impl<'a> Gate<'a> {
    pub fn new(acls: Option<&'a NodeAcls>, ctx: &ConnContext) -> Gate<'a> {
        Gate {
            checked: acls.map(|a| (a, Requester::new(&ctx.principal, &ctx.peer))),
        }
    }

    /// Whether authorization is on for this node.
    pub fn enabled(&self) -> bool {
        self.checked.is_some()
    }

    pub fn may(&self, op: Operation, resource_type: ResourceType, name: &str) -> bool {
        match &self.checked {
            None => true,
            Some((node, who)) => node
                .authorizer
                .authorize(&node.acls.borrow(), who, op, resource_type, name),
        }
    }

    pub fn may_topic(&self, op: Operation, topic: &str) -> bool {
        self.may(op, ResourceType::Topic, topic)
    }

    pub fn may_group(&self, op: Operation, group: &str) -> bool {
        self.may(op, ResourceType::Group, group)
    }

    pub fn may_cluster(&self, op: Operation) -> bool {
        self.may(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// KIP-679: whether `op` is allowed on at least one resource of the type.
    pub fn may_any(&self, op: Operation, resource_type: ResourceType) -> bool {
        match &self.checked {
            None => true,
            Some((node, who)) => node
                .authorizer
                .authorize_any(&node.acls.borrow(), who, op, resource_type),
        }
    }

    /// Produce: the topics the principal may not Write are taken out of `req` and answered
    /// TOPIC_AUTHORIZATION_FAILED; nothing of theirs reaches a log.
    pub fn split_produce(&self, req: &mut ProduceRequest) -> Vec<ProduceTopicResponse> {
        if !self.enabled() {
            return Vec::new();
        }
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|t| self.may_topic(Operation::Write, &t.name));
        req.topics = allowed;
        refused
            .into_iter()
            .map(|t| ProduceTopicResponse {
                name: t.name,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| ProducePartitionResponse {
                        index: p.index,
                        error_code: ErrorCode::TopicAuthorizationFailed.code(),
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        ..ProducePartitionResponse::default()
                    })
                    .collect(),
            })
            .collect()
    }

    /// Fetch: a follower needs ClusterAction on the Cluster and nothing more, as in Kafka (else
    /// every partition answers CLUSTER_AUTHORIZATION_FAILED, and no fetch offset is recorded, so
    /// the asker never joins an ISR); a consumer needs Read on each topic. Topics named by an id
    /// the broker does not know are left for the handler to answer UNKNOWN_TOPIC_ID.
    pub fn split_fetch(&self, broker: &Broker, req: &mut FetchRequest, version: i16) -> Vec<FetchTopicResponse> {
        if !self.enabled() {
            return Vec::new();
        }
        if req.replica_id >= 0 {
            // A replica's rights are the cluster's, not a topic's: Read on a topic makes a
            // consumer, never a follower, and ClusterAction alone lets a broker replicate.
            if self.may_cluster(Operation::ClusterAction) {
                return Vec::new();
            }
        }
        let follower_refused = req.replica_id >= 0;
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics).into_iter().partition(|t| {
            let name = if version >= TOPIC_ID_MIN {
                match broker.topic_by_id(TopicId(t.topic_id.0)) {
                    Some((n, _)) => n.as_str(),
                    None => return !follower_refused,
                }
            } else {
                &*t.topic
            };
            !follower_refused && self.may_topic(Operation::Read, name)
        });
        req.topics = allowed;
        let code = if follower_refused {
            ErrorCode::ClusterAuthorizationFailed
        } else {
            ErrorCode::TopicAuthorizationFailed
        };
        refused
            .into_iter()
            .map(|t| FetchTopicResponse {
                topic: t.topic,
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| FetchPartitionResponse {
                        partition_index: p.partition,
                        error_code: code.code(),
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        preferred_read_replica: -1,
                        ..FetchPartitionResponse::default()
                    })
                    .collect(),
            })
            .collect()
    }

    /// ListOffsets: Describe on each topic.
    pub fn split_list_offsets(&self, req: &mut ListOffsetsRequest) -> Vec<ListOffsetsTopicResponse> {
        if !self.enabled() {
            return Vec::new();
        }
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|t| self.may_topic(Operation::Describe, &t.name));
        req.topics = allowed;
        refused
            .into_iter()
            .map(|t| ListOffsetsTopicResponse {
                name: t.name,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: ErrorCode::TopicAuthorizationFailed.code(),
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                    })
                    .collect(),
            })
            .collect()
    }

    /// OffsetForLeaderEpoch: Describe on each topic (a follower's: ClusterAction on the Cluster).
    pub fn split_offset_for_leader_epoch(
        &self,
        req: &mut OffsetForLeaderEpochRequest,
    ) -> Vec<OffsetForLeaderTopicResult> {
        if !self.enabled() {
            return Vec::new();
        }
        let follower = req.replica_id >= 0;
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics).into_iter().partition(|t| {
            if follower {
                self.may_cluster(Operation::ClusterAction)
            } else {
                self.may_topic(Operation::Describe, &t.topic)
            }
        });
        req.topics = allowed;
        let code = if follower {
            ErrorCode::ClusterAuthorizationFailed
        } else {
            ErrorCode::TopicAuthorizationFailed
        };
        refused
            .into_iter()
            .map(|t| OffsetForLeaderTopicResult {
                topic: t.topic,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| EpochEndOffset {
                        error_code: code.code(),
                        partition: p.partition,
                        leader_epoch: -1,
                        end_offset: -1,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Metadata, before the handler: named topics the principal may not Describe are taken out
    /// (so they are neither described nor auto-created) and returned; auto-creation needs Create
    /// on the Cluster or on every named topic.
    pub fn screen_metadata(&self, req: &mut MetadataRequest) -> Vec<String> {
        if !self.enabled() {
            return Vec::new();
        }
        let Some(topics) = req.topics.as_mut() else {
            return Vec::new();
        };
        let mut refused = Vec::new();
        topics.retain(|t| match &t.name {
            Some(name) if !self.may_topic(Operation::Describe, name) => {
                refused.push(name.clone());
                false
            }
            _ => true,
        });
        if req.allow_auto_topic_creation && !self.may_cluster(Operation::Create) {
            let all_creatable = topics
                .iter()
                .all(|t| t.name.as_deref().is_some_and(|n| self.may_topic(Operation::Create, n)));
            req.allow_auto_topic_creation = all_creatable;
        }
        refused
    }

    /// Metadata, after the handler: topics the principal may not Describe are dropped (a listing
    /// of all topics hides them), and the named ones refused before answer
    /// TOPIC_AUTHORIZATION_FAILED, as Kafka does.
    pub fn finish_metadata(&self, resp: &mut MetadataResponse, refused: Vec<String>) {
        if !self.enabled() {
            return;
        }
        resp.topics
            .retain(|t| t.name.as_deref().is_none_or(|n| self.may_topic(Operation::Describe, n)));
        resp.topics.extend(refused.into_iter().map(|name| MetadataTopic {
            error_code: ErrorCode::TopicAuthorizationFailed.code(),
            name: Some(name),
            topic_id: Uuid::ZERO,
            is_internal: false,
            partitions: Vec::new(),
            topic_authorized_operations: i32::MIN,
        }));
    }

    /// CreateTopics: Create on the Cluster, or on the topic.
    pub fn split_create_topics(&self, req: &mut CreateTopicsRequest) -> Vec<CreatableTopicResult> {
        if !self.enabled() || self.may_cluster(Operation::Create) {
            return Vec::new();
        }
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|t| self.may_topic(Operation::Create, &t.name));
        req.topics = allowed;
        refused
            .into_iter()
            .map(|t| CreatableTopicResult {
                name: t.name,
                topic_id: Uuid::ZERO,
                error_code: ErrorCode::TopicAuthorizationFailed.code(),
                error_message: Some("Authorization failed.".into()),
                topic_config_error_code: 0,
                num_partitions: -1,
                replication_factor: -1,
                configs: None,
            })
            .collect()
    }

    /// DeleteTopics: Delete on each topic (named, or by an id the broker knows).
    pub fn split_delete_topics(&self, broker: &Broker, req: &mut DeleteTopicsRequest) -> Vec<DeletableTopicResult> {
        if !self.enabled() {
            return Vec::new();
        }
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics).into_iter().partition(|t| {
            let name = match &t.name {
                Some(n) => Some(n.clone()),
                None => broker.topic_by_id(TopicId(t.topic_id.0)).map(|(n, _)| n.clone()),
            };
            name.is_none_or(|n| self.may_topic(Operation::Delete, &n))
        });
        req.topics = allowed;
        refused
            .into_iter()
            .map(|t| DeletableTopicResult {
                name: t.name,
                topic_id: t.topic_id,
                error_code: ErrorCode::TopicAuthorizationFailed.code(),
                error_message: Some("Authorization failed.".into()),
            })
            .collect()
    }

    /// OffsetCommit: Read on the group, else every partition answers GROUP_AUTHORIZATION_FAILED;
    /// then Read on each topic.
    pub fn split_offset_commit(&self, req: &mut OffsetCommitRequest) -> Vec<OffsetCommitTopicResponse> {
        if !self.enabled() {
            return Vec::new();
        }
        let group_ok = self.may_group(Operation::Read, &req.group_id);
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|t| group_ok && self.may_topic(Operation::Read, &t.name));
        req.topics = allowed;
        let code = if group_ok {
            ErrorCode::TopicAuthorizationFailed
        } else {
            ErrorCode::GroupAuthorizationFailed
        };
        refused
            .into_iter()
            .map(|t| OffsetCommitTopicResponse {
                name: t.name,
                partitions: t.partitions.iter().map(|p| (p.partition_index, code.code())).collect(),
            })
            .collect()
    }

    /// OffsetFetch, after the handler: groups the principal may not Describe answer
    /// GROUP_AUTHORIZATION_FAILED with no offsets; topics it may not Describe are left out.
    pub fn finish_offset_fetch(&self, resp: &mut OffsetFetchResponse) {
        if !self.enabled() {
            return;
        }
        for g in &mut resp.groups {
            if !self.may_group(Operation::Describe, &g.group_id) {
                g.error_code = ErrorCode::GroupAuthorizationFailed.code();
                g.topics.clear();
            } else {
                g.topics.retain(|t| self.may_topic(Operation::Describe, &t.name));
            }
        }
    }

    /// FindCoordinator, after the handler: Describe on the group (or transactional id).
    pub fn finish_find_coordinator(&self, key_type: i8, resp: &mut FindCoordinatorResponse) {
        if !self.enabled() {
            return;
        }
        let (resource_type, code) = if key_type == 1 {
            (
                ResourceType::TransactionalId,
                ErrorCode::TransactionalIdAuthorizationFailed,
            )
        } else {
            (ResourceType::Group, ErrorCode::GroupAuthorizationFailed)
        };
        for c in &mut resp.coordinators {
            if !self.may(Operation::Describe, resource_type, &c.key) {
                c.node_id = -1;
                c.host = String::new();
                c.port = -1;
                c.error_code = code.code();
                c.error_message = Some("Authorization failed.".into());
            }
        }
    }

    /// DescribeGroups, after the handler: Describe on each group.
    pub fn finish_describe_groups(&self, resp: &mut DescribeGroupsResponse) {
        if !self.enabled() {
            return;
        }
        for g in &mut resp.groups {
            if !self.may_group(Operation::Describe, &g.group_id) {
                *g = DescribedGroup {
                    error_code: ErrorCode::GroupAuthorizationFailed.code(),
                    group_id: std::mem::take(&mut g.group_id),
                    authorized_operations: g.authorized_operations,
                    ..DescribedGroup::default()
                };
            }
        }
    }

    /// ListGroups, after the handler: Describe on the Cluster lists all; otherwise only the
    /// groups the principal may Describe.
    pub fn finish_list_groups(&self, resp: &mut ListGroupsResponse) {
        if !self.enabled() || self.may_cluster(Operation::Describe) {
            return;
        }
        resp.groups.retain(|g| self.may_group(Operation::Describe, &g.group_id));
    }

    /// InitProducerId: Write on the transactional id; without one, IdempotentWrite on the
    /// Cluster or Write on some topic (KIP-679). `Some` is the refusal to send.
    pub fn refuse_init_producer_id(&self, req: &InitProducerIdRequest) -> Option<InitProducerIdResponse> {
        if !self.enabled() {
            return None;
        }
        let code = match &req.transactional_id {
            Some(id) if !self.may(Operation::Write, ResourceType::TransactionalId, id) => {
                ErrorCode::TransactionalIdAuthorizationFailed
            }
            Some(_) => return None,
            None if self.may_cluster(Operation::IdempotentWrite)
                || self.may_any(Operation::Write, ResourceType::Topic) =>
            {
                return None
            }
            None => ErrorCode::ClusterAuthorizationFailed,
        };
        Some(InitProducerIdResponse {
            throttle_time_ms: 0,
            error_code: code.code(),
            producer_id: -1,
            producer_epoch: -1,
        })
    }
}
