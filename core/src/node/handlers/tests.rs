//! The handlers on decoded requests, without a network: what a client sees of the broker.

use super::*;
use crate::broker::BrokerConfig;
use crate::disk::mem::MemDisk;
use crate::protocol::api::create_topics::{CreatableTopic, ReplicaAssignment, TopicConfig};
use crate::protocol::api::fetch::{FetchPartition, FetchTopic};
use crate::protocol::api::list_offsets::{ListOffsetsPartition, ListOffsetsTopic};
use crate::protocol::api::metadata::MetadataRequestTopic;
use crate::protocol::api::produce::{ProducePartition, ProduceTopic};
use crate::record::{build_batch, records, NewRecord, ProducerFields};

fn advertised() -> Advertised {
    Advertised {
        host: "127.0.0.1".into(),
        port: 9092,
        cluster_id: "test-cluster".into(),
    }
}

fn ids() -> impl FnMut() -> TopicId {
    let mut n = 0;
    move || {
        n += 1;
        TopicId::from_random(n, n)
    }
}

fn produce_req(topic: &str, partition: i32, values: &[&str], acks: i16) -> ProduceRequest {
    let recs: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord {
            timestamp: 1_000,
            key: None,
            value: Some(v.as_bytes().to_vec()),
        })
        .collect();
    ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 1000,
        topics: vec![ProduceTopic {
            name: topic.into(),
            partitions: vec![ProducePartition {
                index: partition,
                records: Some(build_batch(&recs, ProducerFields::none()).into()),
            }],
        }],
    }
}

fn fetch_req(topic: &str, offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest {
        replica_id: -1,
        max_bytes,
        topics: vec![FetchTopic {
            topic: topic.into(),
            partitions: vec![FetchPartition {
                partition: 0,
                current_leader_epoch: -1,
                fetch_offset: offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: max_bytes,
            }],
            ..FetchTopic::default()
        }],
        ..FetchRequest::default()
    }
}

fn values(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = crate::record::BatchHeader::parse(&bytes[at..]).expect("batch");
        for r in records(&bytes[at..at + h.total_bytes()]).expect("uncompressed") {
            out.push(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
        }
        at += h.total_bytes();
    }
    out
}

#[test]
fn metadata_auto_creates_and_produce_fetch_round_trip() {
    let mut disk = MemDisk::new();
    let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    let req = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: Uuid::ZERO,
            name: Some("events".into()),
        }]),
        allow_auto_topic_creation: true,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    };
    let meta = metadata(&mut broker, &mut disk, &req, &advertised(), ids());
    assert_eq!(meta.brokers[0].host, "127.0.0.1");
    assert_eq!(meta.cluster_id.as_deref(), Some("test-cluster"));
    let topic = &meta.topics[0];
    assert_eq!((topic.error_code, topic.partitions.len()), (0, 1));
    assert_ne!(topic.topic_id, Uuid::ZERO, "topic ids must be non-zero");

    let resp = produce(&mut broker, &mut disk, &produce_req("events", 0, &["a", "b"], -1), 5).expect("acks=-1 answers");
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    assert_eq!(
        produce(&mut broker, &mut disk, &produce_req("events", 0, &["c"], 0), 5),
        None,
        "acks=0 has no response"
    );
    let (resp, n) = fetch(&broker, &disk, &fetch_req("events", 1, 1 << 20), 12);
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark, p.log_start_offset), (0, 3, 0));
    assert_eq!(
        values(p.records.as_ref().expect("records")),
        vec!["a", "b", "c"],
        "whole batches from the one holding offset 1"
    );
    assert_eq!(n, p.records.as_ref().map_or(0, |r| r.len() as u64));

    // By topic id (v13).
    let mut by_id = fetch_req("", 0, 1 << 20);
    by_id.topics[0].topic_id = topic.topic_id;
    let (resp, _) = fetch(&broker, &disk, &by_id, 13);
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    by_id.topics[0].topic_id = Uuid([9; 16]);
    let (resp, _) = fetch(&broker, &disk, &by_id, 13);
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::UnknownTopicId.code()
    );
}

#[test]
fn errors_reach_the_client_as_kafka_codes() {
    let mut disk = MemDisk::new();
    let mut broker = Broker::open(
        &mut disk,
        BrokerConfig {
            auto_create_topics: false,
            ..BrokerConfig::default()
        },
        0,
    )
    .expect("open");
    let req = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: Uuid::ZERO,
            name: Some("nope".into()),
        }]),
        allow_auto_topic_creation: true,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    };
    let meta = metadata(&mut broker, &mut disk, &req, &advertised(), ids());
    assert_eq!(
        meta.topics[0].error_code,
        ErrorCode::UnknownTopicOrPartition.code(),
        "auto-create is off"
    );
    let resp = produce(&mut broker, &mut disk, &produce_req("nope", 0, &["x"], 1), 0).expect("response");
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::UnknownTopicOrPartition.code()
    );

    let create = CreateTopicsRequest {
        topics: vec![
            CreatableTopic {
                name: "ok".into(),
                num_partitions: 2,
                replication_factor: 1,
                assignments: vec![],
                configs: vec![],
            },
            CreatableTopic {
                name: "rf3".into(),
                num_partitions: 1,
                replication_factor: 3,
                assignments: vec![],
                configs: vec![],
            },
            CreatableTopic {
                name: "elsewhere".into(),
                num_partitions: -1,
                replication_factor: -1,
                assignments: vec![ReplicaAssignment {
                    partition_index: 0,
                    broker_ids: vec![7],
                }],
                configs: vec![],
            },
            CreatableTopic {
                name: "badconf".into(),
                num_partitions: 1,
                replication_factor: 1,
                assignments: vec![],
                configs: vec![TopicConfig {
                    name: "retention.ms".into(),
                    value: Some("x".into()),
                }],
            },
        ],
        timeout_ms: 1000,
        validate_only: false,
    };
    let resp = create_topics(&mut broker, &mut disk, &create, ids());
    let codes: Vec<i16> = resp.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(
        codes,
        vec![
            0,
            ErrorCode::InvalidReplicationFactor.code(),
            ErrorCode::InvalidReplicaAssignment.code(),
            ErrorCode::InvalidConfig.code()
        ]
    );
    assert!(resp.topics[1]
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("replication factor")));
    assert_eq!(broker.topics().len(), 1, "refused topics were created");

    let (resp, _) = fetch(&broker, &disk, &fetch_req("ok", 5, 100), 12);
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::OffsetOutOfRange.code()
    );
    let mut stale = fetch_req("ok", 0, 100);
    stale.topics[0].partitions[0].current_leader_epoch = 3;
    let (resp, _) = fetch(&broker, &disk, &stale, 12);
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        ErrorCode::UnknownLeaderEpoch.code()
    );

    let lo = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: "ok".into(),
            partitions: vec![
                ListOffsetsPartition {
                    partition_index: 0,
                    current_leader_epoch: -1,
                    timestamp: -1,
                },
                ListOffsetsPartition {
                    partition_index: 9,
                    current_leader_epoch: -1,
                    timestamp: -2,
                },
            ],
        }],
    };
    let resp = list_offsets(&broker, &disk, &lo);
    let ps = &resp.topics[0].partitions;
    assert_eq!((ps[0].error_code, ps[0].offset), (0, 0));
    assert_eq!(ps[1].error_code, ErrorCode::UnknownTopicOrPartition.code());
}

#[test]
fn api_versions_advertise_only_what_is_answered() {
    let advertised: Vec<i16> = api_versions().api_keys.iter().map(|k| k.api_key).collect();
    assert!(!advertised.is_empty());
    for key in &advertised {
        assert!(
            HANDLED_API_KEYS.contains(key),
            "api key {key} advertised but not handled"
        );
    }
    for key in HANDLED_API_KEYS {
        assert!(advertised.contains(key), "api key {key} handled but not advertised");
    }
}

fn produce_as(topic: &str, producer_id: i64, producer_epoch: i16, base_sequence: i32, value: &str) -> ProduceRequest {
    let mut req = produce_req(topic, 0, &[value], -1);
    let rec = NewRecord {
        timestamp: 1_000,
        key: None,
        value: Some(value.as_bytes().to_vec()),
    };
    let fields = ProducerFields {
        producer_id,
        producer_epoch,
        base_sequence,
    };
    req.topics[0].partitions[0].records = Some(build_batch(&[rec], fields).into());
    req
}

#[test]
fn init_producer_id_gives_fresh_ids_and_idempotent_produce_uses_them() {
    use crate::protocol::api::init_producer_id::InitProducerIdRequest;
    let mut disk = MemDisk::new();
    let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    assert!(
        api_versions().api_keys.iter().any(|k| k.api_key == 22),
        "InitProducerId advertised"
    );
    let idempotent = InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    };
    let first = init_producer_id(&mut broker, &mut disk, &idempotent);
    let second = init_producer_id(&mut broker, &mut disk, &idempotent);
    assert_eq!((first.error_code, first.producer_epoch), (0, 0));
    assert_eq!((second.error_code, second.producer_epoch), (0, 0));
    assert_ne!(first.producer_id, second.producer_id);
    assert!(first.producer_id >= 0);

    let transactional = InitProducerIdRequest {
        transactional_id: Some("tx".into()),
        ..idempotent.clone()
    };
    let refused = init_producer_id(&mut broker, &mut disk, &transactional);
    assert_eq!(
        (refused.error_code, refused.producer_id, refused.producer_epoch),
        (ErrorCode::InvalidRequest.code(), -1, -1)
    );

    // The id works for Produce, and a retried request is answered with the first offset.
    broker
        .create_topic(&mut disk, "t", 1, 1, &[], TopicId::from_random(1, 1), false)
        .expect("create");
    let pid = first.producer_id;
    let mut offsets = Vec::new();
    for req in [
        produce_as("t", pid, 0, 0, "a"),
        produce_as("t", pid, 0, 1, "b"),
        produce_as("t", pid, 0, 1, "b"),
        produce_as("t", pid, 0, 3, "d"),
    ] {
        let resp = produce(&mut broker, &mut disk, &req, 0).expect("acks=-1 answers");
        let p = &resp.topics[0].partitions[0];
        offsets.push((p.error_code, p.base_offset));
    }
    assert_eq!(
        offsets,
        [(0, 0), (0, 1), (0, 1), (ErrorCode::OutOfOrderSequenceNumber.code(), -1)]
    );

    // After a restart the next id is still new.
    drop(broker);
    let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen");
    let third = init_producer_id(&mut broker, &mut disk, &idempotent);
    assert_eq!(third.error_code, 0);
    assert!(third.producer_id > second.producer_id, "{third:?}");
}
