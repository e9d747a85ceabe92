//! Authorization through the broker driver: frames from connections with a set principal (as
//! SASL will set it), answered by `handle_frame_from` on a single node with an authorizer. What
//! the realnet process test will show with authenticated clients, shown here at the core level:
//! a user without Write gets TOPIC_AUTHORIZATION_FAILED and nothing is appended; a prefixed Read
//! reads only matching topics; Metadata hides undescribable topics; ACLs are managed with
//! CreateAcls / DescribeAcls / DeleteAcls by a user allowed to, and a revocation applies to the
//! next request.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;

use super::authz::NodeAcls;
use super::driver_tests::{frame, run, TestRt};
use super::*;
use crate::disk::mem::MemDisk;
use crate::protocol::api::create_acls::{AclCreation, CreateAclsRequest};
use crate::protocol::api::create_topics::{CreatableTopic, CreateTopicsRequest};
use crate::protocol::api::delete_acls::DeleteAclsRequest;
use crate::protocol::api::describe_acls::{AclFilterWire, DescribeAclsRequest};
use crate::protocol::api::fetch::{FetchPartition, FetchRequest, FetchTopic};
use crate::protocol::api::init_producer_id::InitProducerIdRequest;
use crate::protocol::api::join_group::JoinGroupRequest;
use crate::protocol::api::list_offsets::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use crate::protocol::api::metadata::{MetadataRequest, MetadataRequestTopic};
use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use crate::protocol::client::decode_response;
use crate::protocol::{Request, Response, Uuid};
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::security::acl::{Authorizer, AuthorizerConfig};
use crate::security::Principal;

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ALLOW: i8 = 3;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ANY: i8 = 1;

struct Node {
    rt: TestRt,
    broker: SharedBroker,
    config: NodeConfig,
}

impl Node {
    /// A single node with topics `orders`, `pay.eu`, `pay.us` and the given authorizer.
    fn new(acls: Option<NodeAcls>) -> Node {
        let rt = TestRt {
            now_ms: Rc::new(Cell::new(1)),
            disk: Rc::new(RefCell::new(MemDisk::new())),
        };
        let broker = rt.with_disk(|d| Broker::open(d, BrokerConfig::default(), 0).expect("open"));
        let broker: SharedBroker = Rc::new(RefCell::new(broker));
        for (i, name) in ["orders", "pay.eu", "pay.us"].into_iter().enumerate() {
            rt.with_disk(|d| {
                let id = TopicId::from_random(i as u64 + 1, 7);
                broker
                    .borrow_mut()
                    .create_topic(d, name, 1, 1, &[], id, false)
                    .expect("create")
            });
        }
        let mut config = NodeConfig::single_node("x:1", "x", 1, "c");
        config.acls = acls;
        Node { rt, broker, config }
    }

    fn call(&self, user: &str, request: Request, version: i16) -> Response {
        let api_key = request.api_key();
        let mut ctx = ConnContext::new("10.1.1.1:40000");
        ctx.principal = Principal::user(user);
        let outcome = run(handle_frame_from(
            &self.rt,
            &self.broker,
            &self.config,
            &frame(request, version),
            &mut ctx,
        ));
        let Outcome::Reply(bytes) = outcome else {
            panic!("no reply to api {api_key}")
        };
        decode_response(api_key, version, &bytes, Limits::default())
            .expect("decodes")
            .1
    }

    fn grant(&self, user: &str, resource_type: i8, name: &str, pattern: i8, op: i8) {
        let resp = self.call(
            "admin",
            Request::CreateAcls(CreateAclsRequest {
                creations: vec![AclCreation {
                    resource_type,
                    resource_name: name.into(),
                    pattern_type: pattern,
                    principal: format!("User:{user}"),
                    host: "*".into(),
                    operation: op,
                    permission_type: ALLOW,
                }],
            }),
            2,
        );
        let Response::CreateAcls(resp) = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    }

    fn produce(&self, user: &str, topic: &str) -> i16 {
        let batch = build_batch(
            &[NewRecord {
                timestamp: 1,
                key: None,
                value: Some(b"v".to_vec()),
            }],
            ProducerFields::none(),
        );
        let resp = self.call(
            user,
            Request::Produce(ProduceRequest {
                transactional_id: None,
                acks: 1,
                timeout_ms: 1000,
                topics: vec![ProduceTopic {
                    name: topic.into(),
                    partitions: vec![ProducePartition {
                        index: 0,
                        records: Some(Bytes::from(batch)),
                    }],
                }],
            }),
            9,
        );
        let Response::Produce(resp) = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(resp.topics.len(), 1);
        resp.topics[0].partitions[0].error_code
    }

    /// The latest offset of partition 0, asked by a super user.
    fn log_end(&self, topic: &str) -> i64 {
        let resp = self.call(
            "admin",
            Request::ListOffsets(ListOffsetsRequest {
                replica_id: -1,
                isolation_level: 0,
                topics: vec![ListOffsetsTopic {
                    name: topic.into(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: 0,
                        current_leader_epoch: -1,
                        timestamp: -1,
                    }],
                }],
            }),
            7,
        );
        let Response::ListOffsets(resp) = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(resp.topics[0].partitions[0].error_code, 0);
        resp.topics[0].partitions[0].offset
    }

    fn fetch(&self, user: &str, topic: &str) -> i16 {
        let resp = self.call(
            user,
            Request::Fetch(FetchRequest {
                replica_id: -1,
                max_wait_ms: 0,
                min_bytes: 0,
                max_bytes: 1 << 20,
                topics: vec![FetchTopic {
                    topic: topic.into(),
                    topic_id: Uuid::ZERO,
                    partitions: vec![FetchPartition {
                        partition: 0,
                        current_leader_epoch: -1,
                        fetch_offset: 0,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: 1 << 20,
                    }],
                }],
                ..FetchRequest::default()
            }),
            11,
        );
        let Response::Fetch(resp) = resp else {
            panic!("{resp:?}")
        };
        resp.topics[0].partitions[0].error_code
    }

    fn metadata(&self, user: &str, topics: Option<&[&str]>) -> Vec<(String, i16)> {
        let resp = self.call(
            user,
            Request::Metadata(MetadataRequest {
                topics: topics.map(|ts| {
                    ts.iter()
                        .map(|t| MetadataRequestTopic {
                            topic_id: Uuid::ZERO,
                            name: Some(t.to_string()),
                        })
                        .collect()
                }),
                allow_auto_topic_creation: true,
                include_cluster_authorized_operations: false,
                include_topic_authorized_operations: false,
            }),
            9,
        );
        let Response::Metadata(resp) = resp else {
            panic!("{resp:?}")
        };
        let mut out: Vec<_> = resp
            .topics
            .into_iter()
            .map(|t| (t.name.unwrap_or_default(), t.error_code))
            .collect();
        out.sort();
        out
    }
}

fn secured() -> NodeAcls {
    NodeAcls::new(Authorizer::new(AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users("User:admin"),
        allow_everyone_if_no_acl_found: false,
    }))
}

const DENIED: i16 = 29;

#[test]
fn a_user_without_write_is_refused_and_nothing_is_appended() {
    let node = Node::new(Some(secured()));
    assert_eq!(node.log_end("orders"), 0);
    assert_eq!(node.produce("alice", "orders"), DENIED);
    assert_eq!(node.log_end("orders"), 0, "a refused produce appended");
    node.grant("alice", TOPIC, "orders", LITERAL, WRITE);
    assert_eq!(node.produce("alice", "orders"), 0);
    assert_eq!(node.log_end("orders"), 1);
    assert_eq!(node.produce("bob", "orders"), DENIED, "the grant was alice's");
    assert_eq!(node.produce("alice", "pay.eu"), DENIED, "literal is one topic");
    assert_eq!(node.log_end("orders"), 1);
    assert_eq!(node.log_end("pay.eu"), 0);
}

#[test]
fn prefixed_read_fetches_only_matching_topics() {
    let node = Node::new(Some(secured()));
    node.grant("carol", TOPIC, "pay.", PREFIXED, READ);
    assert_eq!(node.fetch("carol", "pay.eu"), 0);
    assert_eq!(node.fetch("carol", "pay.us"), 0);
    assert_eq!(node.fetch("carol", "orders"), DENIED);
    assert_eq!(node.fetch("dave", "pay.eu"), DENIED);
}

#[test]
fn metadata_hides_topics_the_principal_may_not_describe() {
    let node = Node::new(Some(secured()));
    node.grant("carol", TOPIC, "pay.", PREFIXED, READ);
    let all = node.metadata("carol", None);
    assert_eq!(all, vec![("pay.eu".into(), 0), ("pay.us".into(), 0)]);
    assert!(node.metadata("dave", None).is_empty());
    assert_eq!(node.metadata("admin", None).len(), 3);
    // Named: refused, not auto-created (no Create anywhere), and not leaked.
    let named = node.metadata("carol", Some(&["orders", "pay.eu", "pay.new"]));
    assert_eq!(named[0], ("orders".into(), DENIED));
    assert_eq!(named[1], ("pay.eu".into(), 0));
    assert_eq!(named[2].0, "pay.new");
    assert_ne!(named[2].1, 0, "carol may not create pay.new");
    assert_eq!(node.metadata("admin", None).len(), 3, "nothing was auto-created");
}

#[test]
fn acl_apis_need_alter_or_describe_on_the_cluster_and_revocation_applies_at_once() {
    let node = Node::new(Some(secured()));
    // Not allowed: alice cannot grant herself.
    let resp = node.call(
        "alice",
        Request::CreateAcls(CreateAclsRequest {
            creations: vec![AclCreation {
                resource_type: TOPIC,
                resource_name: "orders".into(),
                pattern_type: LITERAL,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: WRITE,
                permission_type: ALLOW,
            }],
        }),
        1,
    );
    let Response::CreateAcls(resp) = resp else { panic!() };
    assert_eq!(resp.results[0].error_code, 31);
    let everything = AclFilterWire {
        resource_type: ANY,
        resource_name: None,
        pattern_type: ANY,
        principal: None,
        host: None,
        operation: ANY,
        permission_type: ANY,
    };
    let Response::DescribeAcls(d) = node.call(
        "alice",
        Request::DescribeAcls(DescribeAclsRequest {
            filter: everything.clone(),
        }),
        3,
    ) else {
        panic!()
    };
    assert_eq!((d.error_code, d.resources.len()), (31, 0));
    // An invalid creation (Any is a filter code) fails alone.
    let resp = node.call(
        "admin",
        Request::CreateAcls(CreateAclsRequest {
            creations: vec![
                AclCreation {
                    resource_type: ANY,
                    resource_name: "x".into(),
                    pattern_type: LITERAL,
                    principal: "User:a".into(),
                    host: "*".into(),
                    operation: READ,
                    permission_type: ALLOW,
                },
                AclCreation {
                    resource_type: TOPIC,
                    resource_name: "orders".into(),
                    pattern_type: LITERAL,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: WRITE,
                    permission_type: ALLOW,
                },
            ],
        }),
        3,
    );
    let Response::CreateAcls(resp) = resp else { panic!() };
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![42, 0]);
    node.grant("ops", CLUSTER, "kafka-cluster", LITERAL, 7);
    let Response::DescribeAcls(d) = node.call(
        "ops",
        Request::DescribeAcls(DescribeAclsRequest {
            filter: everything.clone(),
        }),
        1,
    ) else {
        panic!()
    };
    assert_eq!(d.error_code, 0, "Alter implies Describe");
    assert_eq!(d.resources.len(), 2, "{d:?}");
    assert_eq!(node.produce("alice", "orders"), 0);
    // ops (Alter on the cluster) revokes alice's Write; her next produce is refused.
    let mut alices = everything.clone();
    alices.principal = Some("User:alice".into());
    let Response::DeleteAcls(gone) = node.call(
        "ops",
        Request::DeleteAcls(DeleteAclsRequest { filters: vec![alices] }),
        2,
    ) else {
        panic!()
    };
    assert_eq!(gone.filter_results[0].error_code, 0);
    assert_eq!(gone.filter_results[0].matching_acls.len(), 1);
    assert_eq!(gone.filter_results[0].matching_acls[0].resource_name, "orders");
    let before = node.log_end("orders");
    assert_eq!(node.produce("alice", "orders"), DENIED);
    assert_eq!(node.log_end("orders"), before);
}

#[test]
fn groups_producer_ids_and_topic_creation_are_checked() {
    let node = Node::new(Some(secured()));
    let join = |user: &str| {
        let Response::JoinGroup(r) = node.call(
            user,
            Request::JoinGroup(JoinGroupRequest {
                group_id: "g".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 30_000,
                protocol_type: "consumer".into(),
                ..JoinGroupRequest::default()
            }),
            5,
        ) else {
            panic!()
        };
        r.error_code
    };
    assert_eq!(join("erin"), 30);
    node.grant("erin", GROUP, "g", LITERAL, READ);
    assert_ne!(join("erin"), 30);
    let init = |user: &str| {
        let Response::InitProducerId(r) = node.call(
            user,
            Request::InitProducerId(InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
            }),
            4,
        ) else {
            panic!()
        };
        r.error_code
    };
    assert_eq!(init("frank"), 31);
    node.grant("frank", TOPIC, "orders", LITERAL, WRITE);
    assert_eq!(
        init("frank"),
        0,
        "Write on some topic allows an idempotent producer (KIP-679)"
    );
    let create = |user: &str, name: &str| {
        let Response::CreateTopics(r) = node.call(
            user,
            Request::CreateTopics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: name.into(),
                    num_partitions: 1,
                    replication_factor: 1,
                    ..CreatableTopic::default()
                }],
                timeout_ms: 1000,
                validate_only: false,
            }),
            5,
        ) else {
            panic!()
        };
        r.topics[0].error_code
    };
    assert_eq!(create("gina", "new"), DENIED);
    node.grant("gina", TOPIC, "new", PREFIXED, 5);
    assert_eq!(create("gina", "new.one"), 0);
    assert_eq!(create("gina", "other"), DENIED);
}

#[test]
fn without_an_authorizer_nothing_is_checked_and_acl_apis_say_security_disabled() {
    let node = Node::new(None);
    assert_eq!(node.produce("anyone", "orders"), 0);
    assert_eq!(node.fetch("anyone", "orders"), 0);
    assert_eq!(node.metadata("anyone", None).len(), 3);
    let Response::CreateAcls(resp) = node.call("admin", Request::CreateAcls(CreateAclsRequest::default()), 1) else {
        panic!()
    };
    assert!(resp.results.is_empty());
    let Response::DescribeAcls(d) = node.call("admin", Request::DescribeAcls(DescribeAclsRequest::default()), 1) else {
        panic!()
    };
    assert_eq!(d.error_code, 54);
}

#[test]
fn allow_everyone_if_no_acl_found_opens_only_resources_without_acls() {
    let mut acls = secured();
    acls.authorizer.config.allow_everyone_if_no_acl_found = true;
    let node = Node::new(Some(acls));
    assert_eq!(node.produce("anyone", "orders"), 0);
    node.grant("alice", TOPIC, "orders", LITERAL, WRITE);
    assert_eq!(node.produce("anyone", "orders"), DENIED);
    assert_eq!(node.produce("anyone", "pay.eu"), 0);
}

/// Inter-broker authorization (issue #7 item 4): a replica Fetch (replica_id >= 0) and a
/// follower's OffsetForLeaderEpoch need ClusterAction on the Cluster, as in Kafka. A principal
/// without it, even one allowed to Read the topic, gets CLUSTER_AUTHORIZATION_FAILED, its fetch
/// offset is never recorded, and the leader proposes no ISR expansion for it; the broker's
/// inter-broker principal (a super user, or one granted ClusterAction) is served and joins.
#[test]
fn a_replica_fetch_needs_cluster_action_and_a_refused_one_never_joins_the_isr() {
    use crate::cluster::{PartitionState, TopicRecord};
    use crate::ids::{BrokerId, LeaderEpoch};
    use crate::protocol::api::offset_for_leader_epoch::{
        OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
    };

    const CLUSTER_ACTION: i8 = 9;
    const REFUSED: i16 = 31;
    let node = Node::new(Some(secured()));
    let me = node.broker.borrow().config().broker_id;
    let follower = BrokerId(me.0 + 2);
    let record = TopicRecord {
        topic_id_hex: TopicId::from_random(9, 9).to_hex(),
        assignment: [(0, vec![me, follower])].into(),
        reassigning: Default::default(),
        configs: Default::default(),
    };
    let state = PartitionState {
        leader: Some(me),
        leader_epoch: LeaderEpoch(1),
        isr: vec![me],
        controller_epoch: 1,
        elr: Vec::new(),
    };
    node.rt.with_disk(|d| {
        node.broker
            .borrow_mut()
            .apply_partition_state(d, "repl", &record, 0, &state, 0, 1)
            .expect("apply")
    });
    assert_eq!(node.produce("admin", "repl"), 0);
    assert_eq!(node.log_end("repl"), 1);

    let replica_fetch = |user: &str| -> i16 {
        let resp = node.call(
            user,
            Request::Fetch(FetchRequest {
                replica_id: follower.0,
                max_wait_ms: 0,
                min_bytes: 0,
                max_bytes: 1 << 20,
                topics: vec![FetchTopic {
                    topic: "repl".into(),
                    topic_id: Uuid::ZERO,
                    partitions: vec![FetchPartition {
                        partition: 0,
                        current_leader_epoch: 1,
                        fetch_offset: 1,
                        last_fetched_epoch: 1,
                        log_start_offset: 0,
                        partition_max_bytes: 1 << 20,
                    }],
                }],
                ..FetchRequest::default()
            }),
            11,
        );
        let Response::Fetch(resp) = resp else {
            panic!("{resp:?}")
        };
        resp.topics[0].partitions[0].error_code
    };
    let follower_epoch_query = |user: &str| -> i16 {
        let resp = node.call(
            user,
            Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
                replica_id: follower.0,
                topics: vec![OffsetForLeaderTopic {
                    topic: "repl".into(),
                    partitions: vec![OffsetForLeaderPartition {
                        partition: 0,
                        current_leader_epoch: 1,
                        leader_epoch: 1,
                    }],
                }],
            }),
            4,
        );
        let Response::OffsetForLeaderEpoch(resp) = resp else {
            panic!("{resp:?}")
        };
        resp.topics[0].partitions[0].error_code
    };
    let proposals = |now: i64| node.broker.borrow_mut().poll_isr_proposals(now);

    // Not a cluster member: refused, even with Read on the topic, and nothing joins the ISR.
    assert_eq!(replica_fetch("mallory"), REFUSED);
    assert_eq!(follower_epoch_query("mallory"), REFUSED);
    node.grant("mallory", TOPIC, "repl", LITERAL, READ);
    assert_eq!(
        replica_fetch("mallory"),
        REFUSED,
        "Read on the topic is a consumer's right, not a replica's"
    );
    assert_eq!(node.fetch("mallory", "repl"), 0, "as a consumer mallory may read");
    let refused = proposals(2);
    println!("after refused replica fetches: {refused:?}");
    assert!(refused.is_empty(), "a refused replica fetch moved the ISR: {refused:?}");

    // The inter-broker principal, granted ClusterAction on the Cluster: served, and it joins.
    node.grant("broker-2", CLUSTER, "kafka-cluster", LITERAL, CLUSTER_ACTION);
    assert_eq!(follower_epoch_query("broker-2"), 0);
    assert_eq!(replica_fetch("broker-2"), 0);
    let joined = proposals(3);
    println!("after broker-2's replica fetch: {joined:?}");
    assert_eq!(joined.len(), 1, "{joined:?}");
    assert_eq!(joined[0].new_state.isr, vec![me, follower]);
}
