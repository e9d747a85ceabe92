//! Kafka requests answered from the broker's state: one function per API, each turning a decoded
//! request into the response struct the codec encodes. Pure functions of (broker, disk, request,
//! now): no I/O but the disk handed in, so the simulator and realnet run exactly this.

pub mod delete_topics;
pub mod describe_configs;
pub mod groups;

use crate::broker::{Broker, TopicId};
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::ids::Offset;
use crate::log::{Log, LogError};
use crate::protocol::api::api_versions::{ApiVersion, ApiVersionsResponse};
use crate::protocol::api::create_topics::{CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse};
use crate::protocol::api::fetch::{FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopicResponse};
use crate::protocol::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use crate::protocol::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use crate::protocol::api::metadata::{
    MetadataBroker, MetadataPartition, MetadataRequest, MetadataResponse, MetadataTopic,
};
use crate::protocol::api::produce::{ProducePartitionResponse, ProduceRequest, ProduceResponse, ProduceTopicResponse};
use crate::protocol::api::{
    api_versions, create_topics, delete_topics as delete_topics_api, describe_configs as describe_configs_api, fetch,
    find_coordinator, heartbeat, init_producer_id, join_group, leave_group, list_offsets, metadata, offset_commit,
    offset_fetch, produce, sync_group,
};
use crate::protocol::{supported_versions, Uuid};

/// Where clients reach this broker, and the cluster it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertised {
    pub host: String,
    pub port: i32,
    pub cluster_id: String,
}

/// The APIs this node answers: ApiVersions advertises exactly these (intersected with what the
/// codec speaks), so a client never picks an API that would get no answer.
pub const HANDLED_API_KEYS: &[i16] = &[
    produce::API_KEY,
    fetch::API_KEY,
    list_offsets::API_KEY,
    metadata::API_KEY,
    api_versions::API_KEY,
    create_topics::API_KEY,
    init_producer_id::API_KEY,
    find_coordinator::API_KEY,
    join_group::API_KEY,
    sync_group::API_KEY,
    heartbeat::API_KEY,
    leave_group::API_KEY,
    offset_commit::API_KEY,
    offset_fetch::API_KEY,
    delete_topics_api::API_KEY,
    describe_configs_api::API_KEY,
];

pub fn api_versions() -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: 0,
        api_keys: supported_versions()
            .iter()
            .filter(|s| HANDLED_API_KEYS.contains(&s.api_key))
            .map(|s| ApiVersion {
                api_key: s.api_key,
                min_version: s.version_min,
                max_version: s.version_max,
            })
            .collect(),
        throttle_time_ms: 0,
    }
}

fn uuid(id: TopicId) -> Uuid {
    Uuid(id.0)
}

fn metadata_topic(broker: &Broker, name: &str, error: ErrorCode) -> MetadataTopic {
    let broker_id = broker.config().broker_id.0;
    let meta = broker.topic(name);
    MetadataTopic {
        error_code: error.code(),
        name: Some(name.to_string()),
        topic_id: meta.map_or(Uuid::ZERO, |m| uuid(m.id)),
        is_internal: false,
        partitions: meta
            .map(|m| {
                (0..m.partitions)
                    .map(|p| MetadataPartition {
                        error_code: 0,
                        partition_index: p,
                        leader_id: broker_id,
                        leader_epoch: broker.leader_epoch(name, p).map_or(0, |e| e.0),
                        replica_nodes: vec![broker_id],
                        isr_nodes: vec![broker_id],
                        offline_replicas: vec![],
                    })
                    .collect()
            })
            .unwrap_or_default(),
        topic_authorized_operations: i32::MIN,
    }
}

/// Metadata: this broker, and the topics asked for (all when `None`). Unknown topics are created
/// when both the request and `auto.create.topics.enable` allow it.
pub fn metadata<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &MetadataRequest,
    advertised: &Advertised,
    new_topic_id: impl FnMut() -> TopicId,
) -> MetadataResponse {
    let mut new_topic_id = new_topic_id;
    let topics = match &req.topics {
        None => broker
            .topics()
            .keys()
            .map(|name| metadata_topic(broker, name, ErrorCode::None))
            .collect(),
        Some(asked) => asked
            .iter()
            .map(|t| {
                let name = match (&t.name, t.topic_id) {
                    (Some(name), _) => name.clone(),
                    (None, id) => match broker.topic_by_id(TopicId(id.0)) {
                        Some((name, _)) => name.clone(),
                        None => {
                            let mut topic = metadata_topic(broker, "", ErrorCode::UnknownTopicId);
                            topic.name = None;
                            topic.topic_id = id;
                            return topic;
                        }
                    },
                };
                if broker.topic(&name).is_some() {
                    return metadata_topic(broker, &name, ErrorCode::None);
                }
                if !(req.allow_auto_topic_creation && broker.config().auto_create_topics) {
                    return metadata_topic(broker, &name, ErrorCode::UnknownTopicOrPartition);
                }
                let partitions = broker.config().num_partitions;
                match broker.create_topic(disk, &name, partitions, 1, &[], new_topic_id(), false) {
                    Ok(()) => metadata_topic(broker, &name, ErrorCode::None),
                    Err((code, why)) => {
                        tracing::info!(topic = %name, %why, "auto-create refused");
                        metadata_topic(broker, &name, code)
                    }
                }
            })
            .collect(),
    };
    MetadataResponse {
        throttle_time_ms: 0,
        brokers: vec![MetadataBroker {
            node_id: broker.config().broker_id.0,
            host: advertised.host.clone(),
            port: advertised.port,
            rack: None,
        }],
        cluster_id: Some(advertised.cluster_id.clone()),
        controller_id: broker.config().broker_id.0,
        topics,
        cluster_authorized_operations: i32::MIN,
    }
}

/// Produce: appends each partition's record set. `None` for acks=0 (Kafka sends no response).
pub fn produce<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &ProduceRequest,
    now_ms: i64,
) -> Option<ProduceResponse> {
    let topics = req
        .topics
        .iter()
        .map(|t| ProduceTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| {
                    let result = match (&req.transactional_id, &p.records) {
                        (Some(_), _) => Err((ErrorCode::InvalidRequest, "transactions are not supported")),
                        (None, None) => Err((ErrorCode::InvalidRecord, "null record set")),
                        (None, Some(records)) => {
                            let mut records = records.to_vec();
                            broker
                                .produce(disk, &t.name, p.index, &mut records, req.acks, now_ms)
                                .map_err(|code| (code, ""))
                        }
                    };
                    match result {
                        Ok(ok) => ProducePartitionResponse {
                            index: p.index,
                            error_code: 0,
                            base_offset: ok.base_offset.0,
                            log_append_time_ms: -1,
                            log_start_offset: ok.log_start_offset.0,
                            record_errors: vec![],
                            error_message: None,
                        },
                        Err((code, message)) => ProducePartitionResponse {
                            index: p.index,
                            error_code: code.code(),
                            base_offset: -1,
                            log_append_time_ms: -1,
                            log_start_offset: -1,
                            record_errors: vec![],
                            error_message: (!message.is_empty()).then(|| message.to_string()),
                        },
                    }
                })
                .collect(),
        })
        .collect();
    (req.acks != 0).then_some(ProduceResponse {
        topics,
        throttle_time_ms: 0,
    })
}

/// InitProducerId: a fresh producer id at epoch 0 for an idempotent producer. A transactional
/// id gets INVALID_REQUEST: Gregor has no transaction coordinator, and Produce already answers
/// a transactional request that way; the code is fatal in every client, where NOT_COORDINATOR or
/// COORDINATOR_NOT_AVAILABLE would have them retry forever, and TRANSACTIONAL_ID_AUTHORIZATION_
/// FAILED would blame permissions. (InitProducerId has no error message field to say more.)
pub fn init_producer_id<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let result = match &req.transactional_id {
        Some(_) => Err(ErrorCode::InvalidRequest),
        None => broker.allocate_producer_id(disk),
    };
    let (error, (producer_id, producer_epoch)) = match result {
        Ok((id, epoch)) => (ErrorCode::None, (id.0, epoch.0)),
        Err(code) => (code, (-1, -1)),
    };
    InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code: error.code(),
        producer_id,
        producer_epoch,
    }
}

/// Fetch: whole batches from each partition up to its high watermark, within the request's
/// byte limits (the first batch always, as KIP-74). Returns the response and the bytes of
/// records in it, so the driver can wait for data when there was none (`max_wait_ms`).
pub fn fetch<D: Disk>(broker: &Broker, disk: &D, req: &FetchRequest, version: i16) -> (FetchResponse, u64) {
    let mut remaining = u64::try_from(req.max_bytes.max(0)).unwrap_or(0);
    let mut total = 0u64;
    let mut first = true;
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let name = if version >= fetch::TOPIC_ID_MIN {
                broker.topic_by_id(TopicId(t.topic_id.0)).map(|(n, _)| n.clone())
            } else {
                Some(t.topic.clone())
            };
            FetchTopicResponse {
                topic: t.topic.clone(),
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut resp = FetchPartitionResponse {
                            partition_index: p.partition,
                            error_code: 0,
                            high_watermark: -1,
                            last_stable_offset: -1,
                            log_start_offset: -1,
                            diverging_epoch: None,
                            current_leader: None,
                            aborted_transactions: None,
                            preferred_read_replica: -1,
                            records: None,
                        };
                        let Some(name) = &name else {
                            resp.error_code = ErrorCode::UnknownTopicId.code();
                            return resp;
                        };
                        if let Err(code) = check_leader_epoch(broker, name, p.partition, p.current_leader_epoch) {
                            resp.error_code = code.code();
                            return resp;
                        }
                        let max = u64::try_from(p.partition_max_bytes.max(0)).unwrap_or(0).min(remaining);
                        let limit = if first { max.max(1) } else { max };
                        if limit == 0 {
                            if let Ok((start, hw, _)) = broker.offsets(name, p.partition) {
                                (resp.high_watermark, resp.last_stable_offset, resp.log_start_offset) = (hw.0, hw.0, start.0);
                            }
                            return resp;
                        }
                        match broker.fetch(disk, name, p.partition, Offset(p.fetch_offset), limit) {
                            Ok(ok) => {
                                resp.high_watermark = ok.high_watermark.0;
                                resp.last_stable_offset = ok.last_stable_offset.0;
                                resp.log_start_offset = ok.log_start_offset.0;
                                match Log::read_bytes(disk, &ok.slice) {
                                    Ok(bytes) => {
                                        let n = bytes.len() as u64;
                                        if n > 0 {
                                            first = false;
                                        }
                                        total += n;
                                        remaining = remaining.saturating_sub(n);
                                        resp.records = Some(bytes.into());
                                    }
                                    Err(LogError::Disk(e)) => {
                                        tracing::warn!(topic = %name, partition = p.partition, error = %e, "fetch read failed");
                                        resp.error_code = ErrorCode::KafkaStorageError.code();
                                    }
                                    Err(_) => resp.error_code = ErrorCode::KafkaStorageError.code(),
                                }
                            }
                            Err(code) => {
                                resp.error_code = code.code();
                                if let Ok((start, hw, _)) = broker.offsets(name, p.partition) {
                                    (resp.high_watermark, resp.last_stable_offset, resp.log_start_offset) = (hw.0, hw.0, start.0);
                                }
                            }
                        }
                        resp
                    })
                    .collect(),
            }
        })
        .collect();
    (
        FetchResponse {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics,
        },
        total,
    )
}

/// KIP-320: a client that knows a newer epoch than ours is ahead of us (UNKNOWN_LEADER_EPOCH,
/// retry); one that knows an older epoch must refresh metadata (FENCED_LEADER_EPOCH). `-1`
/// skips the check.
fn check_leader_epoch(broker: &Broker, topic: &str, partition: i32, current: i32) -> Result<(), ErrorCode> {
    let ours = broker.leader_epoch(topic, partition)?.0;
    match current {
        -1 => Ok(()),
        c if c < ours => Err(ErrorCode::FencedLeaderEpoch),
        c if c > ours => Err(ErrorCode::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

pub fn list_offsets<D: Disk>(broker: &Broker, disk: &D, req: &ListOffsetsRequest) -> ListOffsetsResponse {
    ListOffsetsResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| ListOffsetsTopicResponse {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let result = check_leader_epoch(broker, &t.name, p.partition_index, p.current_leader_epoch)
                            .and_then(|()| broker.list_offset(disk, &t.name, p.partition_index, p.timestamp));
                        let epoch = broker.leader_epoch(&t.name, p.partition_index).map_or(-1, |e| e.0);
                        match result {
                            Ok((offset, timestamp)) => ListOffsetsPartitionResponse {
                                partition_index: p.partition_index,
                                error_code: 0,
                                timestamp,
                                offset: offset.0,
                                leader_epoch: epoch,
                            },
                            Err(code) => ListOffsetsPartitionResponse {
                                partition_index: p.partition_index,
                                error_code: code.code(),
                                timestamp: -1,
                                offset: -1,
                                leader_epoch: -1,
                            },
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn create_topics<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &CreateTopicsRequest,
    mut new_topic_id: impl FnMut() -> TopicId,
) -> CreateTopicsResponse {
    let broker_id = broker.config().broker_id.0;
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let mut partitions = t.num_partitions;
            let mut replication_factor = t.replication_factor;
            let mut result = Ok(());
            if !t.assignments.is_empty() {
                if partitions != -1 || replication_factor != -1 {
                    result = Err((
                        ErrorCode::InvalidRequest,
                        "give either assignments or partitions and replication factor".to_string(),
                    ));
                } else if t.assignments.iter().any(|a| a.broker_ids != [broker_id]) {
                    result = Err((
                        ErrorCode::InvalidReplicaAssignment,
                        format!("replicas must be [{broker_id}]: this cluster has one broker"),
                    ));
                }
                partitions = t.assignments.len() as i32;
                replication_factor = 1;
            }
            let overrides: Vec<(String, String)> = t
                .configs
                .iter()
                .filter_map(|c| c.value.clone().map(|v| (c.name.clone(), v)))
                .collect();
            let id = new_topic_id();
            let result = result.and_then(|()| {
                broker.create_topic(
                    disk,
                    &t.name,
                    partitions,
                    replication_factor,
                    &overrides,
                    id,
                    req.validate_only,
                )
            });
            let meta = broker.topic(&t.name);
            match result {
                Ok(()) => CreatableTopicResult {
                    name: t.name.clone(),
                    topic_id: meta.map_or(Uuid::ZERO, |m| uuid(m.id)),
                    error_code: 0,
                    error_message: None,
                    topic_config_error_code: 0,
                    num_partitions: meta.map_or(partitions, |m| m.partitions),
                    replication_factor: 1,
                    configs: Some(describe_configs::created_topic_configs(broker, &t.name)),
                },
                Err((code, message)) => CreatableTopicResult {
                    name: t.name.clone(),
                    topic_id: Uuid::ZERO,
                    error_code: code.code(),
                    error_message: Some(message),
                    topic_config_error_code: 0,
                    num_partitions: -1,
                    replication_factor: -1,
                    configs: None,
                },
            }
        })
        .collect();
    CreateTopicsResponse {
        throttle_time_ms: 0,
        topics,
    }
}

#[cfg(test)]
mod tests;
