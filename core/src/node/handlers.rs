//! Kafka requests answered from the broker's state: one function per API, each turning a decoded
//! request into the response struct the codec encodes. Pure functions of (broker, disk, request,
//! now): no I/O but the disk handed in, so the simulator and realnet run exactly this.

pub mod acls;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod groups;
pub mod reassignments;
pub mod users;

use std::borrow::Cow;

use crate::broker::{AckWait, ClusterView};
use crate::broker::{Broker, TopicId};
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::ids::{BrokerId, LeaderEpoch, Offset};
use crate::log::{Log, LogError};
use crate::protocol::api::api_versions::{ApiVersion, ApiVersionsResponse};
use crate::protocol::api::create_topics::{CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse};
use crate::protocol::api::describe_groups as describe_groups_api;
use crate::protocol::api::fetch::{
    FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopic, FetchTopicResponse,
};
use crate::protocol::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use crate::protocol::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use crate::protocol::api::metadata::{
    MetadataBroker, MetadataPartition, MetadataRequest, MetadataResponse, MetadataTopic,
};
use crate::protocol::api::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use crate::protocol::api::produce::{ProducePartitionResponse, ProduceRequest, ProduceResponse, ProduceTopicResponse};
use crate::protocol::api::{
    alter_partition_reassignments, api_versions, create_topics, delete_topics as delete_topics_api,
    describe_configs as describe_configs_api, elect_leaders, fetch, find_coordinator, heartbeat, init_producer_id,
    join_group, leave_group, list_groups, list_offsets, list_partition_reassignments, metadata, offset_commit,
    offset_fetch, offset_for_leader_epoch as ofle, produce, sync_group,
};
use crate::protocol::{supported_versions, Uuid};
use crate::runtime::FileRegion;

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
    ofle::API_KEY,
    delete_topics_api::API_KEY,
    describe_configs_api::API_KEY,
    describe_groups_api::API_KEY,
    list_groups::API_KEY,
    crate::protocol::api::sasl_handshake::API_KEY,
    crate::protocol::api::sasl_authenticate::API_KEY,
    crate::protocol::api::describe_acls::API_KEY,
    crate::protocol::api::create_acls::API_KEY,
    crate::protocol::api::delete_acls::API_KEY,
    alter_partition_reassignments::API_KEY,
    list_partition_reassignments::API_KEY,
    elect_leaders::API_KEY,
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

/// Metadata from a cluster broker that has not read the cluster state yet (just started or
/// joined): only itself, no controller, and every topic asked for LEADER_NOT_AVAILABLE (clients
/// retry), rather than its local logs presented as single-node topics it would claim to lead.
pub fn metadata_not_ready(req: &MetadataRequest, advertised: &Advertised, me: BrokerId) -> MetadataResponse {
    let topics = req
        .topics
        .iter()
        .flatten()
        .map(|t| MetadataTopic {
            error_code: ErrorCode::LeaderNotAvailable.code(),
            name: t.name.clone(),
            topic_id: t.topic_id,
            is_internal: false,
            partitions: vec![],
            topic_authorized_operations: i32::MIN,
        })
        .collect();
    MetadataResponse {
        throttle_time_ms: 0,
        brokers: vec![MetadataBroker {
            node_id: me.0,
            host: advertised.host.clone(),
            port: advertised.port,
            rack: None,
        }],
        cluster_id: Some(advertised.cluster_id.clone()),
        controller_id: -1,
        topics,
        cluster_authorized_operations: i32::MIN,
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
    if let Some(view) = broker.cluster_view() {
        return cluster_metadata(view, req, advertised);
    }
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

/// An acks=all partition whose answer waits for the high watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAck {
    /// Where its answer is in the response. The topic's name is there too ([`Self::topic`]):
    /// a copy of it here was an allocation per acks=all partition.
    pub topic_index: usize,
    pub partition_index: usize,
    pub partition: i32,
    pub end_offset: Offset,
    pub leader_epoch: LeaderEpoch,
}

impl PendingAck {
    /// The topic it waits in, named by `resp`, the response it was parked with.
    pub fn topic<'a>(&self, resp: &'a ProduceResponse) -> &'a str {
        &resp.topics[self.topic_index].name
    }
}

fn view_topic(view: &ClusterView, name: &str) -> MetadataTopic {
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    let Some((record, states)) = view.topics.get(name) else {
        return MetadataTopic {
            error_code: ErrorCode::UnknownTopicOrPartition.code(),
            name: Some(name.to_string()),
            topic_id: Uuid::ZERO,
            is_internal: false,
            partitions: vec![],
            topic_authorized_operations: i32::MIN,
        };
    };
    let live = |b: &BrokerId| view.brokers.iter().any(|r| r.id == *b);
    MetadataTopic {
        error_code: 0,
        name: Some(name.to_string()),
        topic_id: TopicId::from_hex(&record.topic_id_hex).map_or(Uuid::ZERO, uuid),
        // As Kafka marks it: clients leave it out of pattern subscriptions.
        is_internal: name == crate::group::OFFSETS_TOPIC,
        partitions: record
            .assignment
            .iter()
            .map(|(p, replicas)| {
                let state = states.get(p);
                let leader = state.and_then(|s| s.leader);
                MetadataPartition {
                    error_code: if leader.is_some() {
                        0
                    } else {
                        ErrorCode::LeaderNotAvailable.code()
                    },
                    partition_index: *p,
                    leader_id: leader.map_or(-1, |l| l.0),
                    leader_epoch: state.map_or(-1, |s| s.leader_epoch.0),
                    replica_nodes: ids(replicas),
                    isr_nodes: state.map_or(vec![], |s| ids(&s.isr)),
                    offline_replicas: replicas.iter().filter(|r| !live(r)).map(|r| r.0).collect(),
                }
            })
            .collect(),
        topic_authorized_operations: i32::MIN,
    }
}

/// Metadata in cluster mode: every live broker and every partition, from the coordinator's
/// state as last handed to the broker. Topics are not auto-created here (the controller
/// creates topics).
fn cluster_metadata(view: &ClusterView, req: &MetadataRequest, advertised: &Advertised) -> MetadataResponse {
    let topics = match &req.topics {
        None => view.topics.keys().map(|name| view_topic(view, name)).collect(),
        Some(asked) => asked
            .iter()
            .map(|t| match &t.name {
                Some(name) => view_topic(view, name),
                None => {
                    let found = view
                        .topics
                        .iter()
                        .find(|(_, (r, _))| TopicId::from_hex(&r.topic_id_hex).map(|i| i.0) == Some(t.topic_id.0));
                    match found {
                        Some((name, _)) => view_topic(view, name),
                        None => MetadataTopic {
                            error_code: ErrorCode::UnknownTopicId.code(),
                            name: None,
                            topic_id: t.topic_id,
                            is_internal: false,
                            partitions: vec![],
                            topic_authorized_operations: i32::MIN,
                        },
                    }
                }
            })
            .collect(),
    };
    MetadataResponse {
        throttle_time_ms: 0,
        brokers: view
            .brokers
            .iter()
            .map(|b| MetadataBroker {
                node_id: b.id.0,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
            })
            .collect(),
        cluster_id: Some(advertised.cluster_id.clone()),
        controller_id: view.controller.map_or(-1, |c| c.0),
        topics,
        cluster_authorized_operations: i32::MIN,
    }
}

/// Produce: appends each partition's record set. `None` for acks=0 (Kafka sends no response).
/// An acks=all produce to a replicated partition is answered as if its HW were reached; the
/// node uses [`produce_parked`] instead, which says which answers must wait.
pub fn produce<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &ProduceRequest,
    now_ms: i64,
) -> Option<ProduceResponse> {
    let (resp, _) = produce_parked(broker, disk, req, now_ms);
    (req.acks != 0).then_some(resp)
}

/// Settles parked acks=all answers: done ones stay as they are, failed ones get their code,
/// and with `timed_out` the rest get REQUEST_TIMED_OUT. Returns whether none is left waiting.
pub fn settle_acks(
    broker: &Broker,
    resp: &mut ProduceResponse,
    pending: &mut Vec<PendingAck>,
    timed_out: bool,
) -> bool {
    pending.retain(|w| {
        let code = match broker.acks_all_status(w.topic(resp), w.partition, w.end_offset, w.leader_epoch) {
            AckWait::Done => return false,
            AckWait::Pending if !timed_out => return true,
            AckWait::Pending => ErrorCode::RequestTimedOut,
            AckWait::Failed(code) => code,
        };
        let p = &mut resp.topics[w.topic_index].partitions[w.partition_index];
        p.error_code = code.code();
        p.base_offset = -1;
        p.log_start_offset = -1;
        false
    });
    pending.is_empty()
}

/// Produce, with the acks=all answers that must wait for the HW listed (see [`settle_acks`]).
pub fn produce_parked<D: Disk>(
    broker: &mut Broker,
    disk: &mut D,
    req: &ProduceRequest,
    now_ms: i64,
) -> (ProduceResponse, Vec<PendingAck>) {
    // Room for every partition of an acks=all request (each waits for the HW unless it failed).
    let parts = if req.acks == -1 {
        req.topics.iter().map(|t| t.partitions.len()).sum()
    } else {
        0
    };
    let mut pending = Vec::with_capacity(parts);
    let topics = req
        .topics
        .iter()
        .enumerate()
        .map(|(ti, t)| ProduceTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .enumerate()
                .map(|(pi, p)| {
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
                    // An acks=all answer waits while the HW is below the append's end. Nothing
                    // else can fail it yet: the append was made as leader in this epoch, with the
                    // ISR at least `min.insync.replicas` (checked before it, and unchanged by it),
                    // so `settle_acks` would find it pending or done, and is not asked here (a
                    // partition lookup an acks=all produce).
                    match &result {
                        Ok(ok) if req.acks == -1 && ok.high_watermark < ok.end_offset => pending.push(PendingAck {
                            topic_index: ti,
                            partition_index: pi,
                            partition: p.index,
                            end_offset: ok.end_offset,
                            leader_epoch: ok.leader_epoch,
                        }),
                        _ => {}
                    }
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
    let resp = ProduceResponse {
        topics,
        throttle_time_ms: 0,
    };
    (resp, pending)
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
    fetch_with(broker, disk, req, version, false, None)
}

/// Whether a follower's fetch of this partition counts against the leader's
/// `leader.replication.throttled.rate`: the follower is a replica a reassignment is adding and
/// is not in the ISR yet (Kafka throttles only out-of-sync replicas of moving partitions).
/// Replicas in the ISR carry the producers' acks=all and are never throttled.
pub fn throttled_replica(broker: &Broker, topic: &str, partition: i32, replica: BrokerId) -> bool {
    let Some((record, states)) = broker.cluster_view().and_then(|v| v.topics.get(topic)) else {
        return false;
    };
    record
        .reassigning
        .get(&partition)
        .is_some_and(|r| r.adding.contains(&replica))
        && !states.get(&partition).is_some_and(|s| s.isr.contains(&replica))
}

/// As [`fetch`]; with `zero_copy` the batches are left in their segment files as
/// `records_file` regions, for [`FetchResponse::encode_parts`] and the runtime to send from the
/// file. Regions are whole batches below the high watermark, which only an unclean leader
/// change truncates; a region that shrank by send time fails the send (the connection closes and
/// the client fetches again).
///
/// `leader_quota` (the bucket of `leader.replication.throttled.rate` and the monotonic `now`):
/// a follower's fetch of a [`throttled_replica`] asks at most what the bucket holds, and while
/// the bucket is in debt that partition answers no records (its offsets only), as Kafka's leader
/// does when the quota is exceeded; the bytes served are charged to the bucket. Consumers'
/// fetches and replicas in the ISR are never throttled.
pub fn fetch_with<D: Disk>(
    broker: &Broker,
    disk: &D,
    req: &FetchRequest,
    version: i16,
    zero_copy: bool,
    mut leader_quota: Option<(&mut super::throttle::Throttle, u64)>,
) -> (FetchResponse, u64) {
    let mut remaining = u64::try_from(req.max_bytes.max(0)).unwrap_or(0);
    let mut total = 0u64;
    let mut first = true;
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let name = fetch_topic_name(broker, t, version);
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
                            records_file: None,
                        };
                        let Some(name) = &name else {
                            resp.error_code = ErrorCode::UnknownTopicId.code();
                            return resp;
                        };
                        let max = u64::try_from(p.partition_max_bytes.max(0)).unwrap_or(0).min(remaining);
                        let mut limit = if first { max.max(1) } else { max };
                        let throttled = req.replica_id >= 0
                            && leader_quota.is_some()
                            && throttled_replica(broker, name, p.partition, BrokerId(req.replica_id));
                        if let Some((bucket, now_ms)) = leader_quota.as_mut().filter(|_| throttled) {
                            if bucket.wait_ms(*now_ms) > 0 {
                                limit = 0; // over the quota: no records this time
                            } else {
                                limit = limit.min(u64::try_from(bucket.fetch_bytes_max(*now_ms)).unwrap_or(1));
                            }
                        }
                        if limit == 0 {
                            if let Err(code) = check_leader_epoch(broker, name, p.partition, p.current_leader_epoch) {
                                resp.error_code = code.code();
                                return resp;
                            }
                            if let Ok((start, hw, _)) = broker.offsets(name, p.partition) {
                                (resp.high_watermark, resp.last_stable_offset, resp.log_start_offset) = (hw.0, hw.0, start.0);
                            }
                            return resp;
                        }
                        // The reads check the request's leader epoch in the lookup they make
                        // anyway (a refusal below answers no offsets, as one before the read did).
                        let (epoch, offset) = (p.current_leader_epoch, Offset(p.fetch_offset));
                        let read = if req.replica_id >= 0 {
                            broker.replica_read(disk, name, p.partition, epoch, BrokerId(req.replica_id), offset, limit)
                        } else {
                            broker.fetch(disk, name, p.partition, epoch, offset, limit)
                        };
                        match read {
                            Ok(ok) => {
                                if let Some((bucket, now_ms)) = leader_quota.as_mut().filter(|_| throttled) {
                                    bucket.fetched(*now_ms, ok.slice.len);
                                }
                                resp.high_watermark = ok.high_watermark.0;
                                resp.last_stable_offset = ok.last_stable_offset.0;
                                resp.log_start_offset = ok.log_start_offset.0;
                                if zero_copy {
                                    let n = ok.slice.len;
                                    if n > 0 {
                                        first = false;
                                        resp.records_file = Some(FileRegion {
                                            path: ok.slice.path.to_string(),
                                            position: ok.slice.position,
                                            len: n,
                                        });
                                    }
                                    total += n;
                                    remaining = remaining.saturating_sub(n);
                                    return resp;
                                }
                                match Log::read_bytes(disk, ok.slice) {
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
                                if let Some(Ok((start, hw, _))) =
                                    (!is_epoch_refusal(code)).then(|| broker.offsets(name, p.partition))
                                {
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

/// Fetch from a follower or a consumer: a follower's (replica_id >= 0) fetch offsets are
/// recorded first (its progress, the HW), then everything is read as [`fetch`] does.
pub fn fetch_recording<D: Disk>(
    broker: &mut Broker,
    disk: &D,
    req: &FetchRequest,
    version: i16,
    now_ms: i64,
) -> (FetchResponse, u64) {
    record_follower_fetches(broker, req, version, now_ms);
    fetch_with(broker, disk, req, version, false, None)
}

/// The topic a Fetch names: by id from v13 on (copied: callers go on to change the broker),
/// else by name (borrowed from the request). `None`: no topic has that id.
pub(crate) fn fetch_topic_name<'r>(broker: &Broker, t: &'r FetchTopic, version: i16) -> Option<Cow<'r, str>> {
    if version >= fetch::TOPIC_ID_MIN {
        broker
            .topic_by_id(TopicId(t.topic_id.0))
            .map(|(n, _)| Cow::Owned(n.clone()))
    } else {
        Some(Cow::Borrowed(&t.topic))
    }
}

/// The first half of [`fetch_recording`]: a follower's (replica_id >= 0) fetch offsets
/// recorded (its progress, the HW); nothing for a consumer's fetch. Returns the partitions a
/// waiting request may now care about, in the request's order: those whose HW moved, and those
/// the record refused (gone, not led here, another epoch: whoever waits on them must look).
/// Any other partition's watched offsets are as they were (a follower's fetch moves no log end).
pub fn record_follower_fetches<'r>(
    broker: &mut Broker,
    req: &'r FetchRequest,
    version: i16,
    now_ms: i64,
) -> Vec<(Cow<'r, str>, i32)> {
    let mut moved = Vec::new();
    if req.replica_id >= 0 {
        for t in &req.topics {
            let Some(name) = fetch_topic_name(broker, t, version) else {
                continue;
            };
            for p in &t.partitions {
                // A refusal shows again, as the partition's error, when it is read.
                let advanced = broker.record_follower_fetch(
                    &name,
                    p.partition,
                    p.current_leader_epoch,
                    BrokerId(req.replica_id),
                    Offset(p.fetch_offset),
                    now_ms,
                );
                if advanced != Ok(false) {
                    moved.push((name.clone(), p.partition));
                }
            }
        }
    }
    moved
}

/// OffsetForLeaderEpoch: where each asked epoch ends in the leader's log (KIP-279).
pub fn offset_for_leader_epoch(broker: &Broker, req: &OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    OffsetForLeaderEpochResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| OffsetForLeaderTopicResult {
                topic: t.topic.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let result = broker.offset_for_leader_epoch(
                            &t.topic,
                            p.partition,
                            p.current_leader_epoch,
                            LeaderEpoch(p.leader_epoch),
                        );
                        match result {
                            Ok((epoch, end)) => EpochEndOffset {
                                error_code: 0,
                                partition: p.partition,
                                leader_epoch: epoch.0,
                                end_offset: end.0,
                            },
                            Err(code) => EpochEndOffset {
                                error_code: code.code(),
                                partition: p.partition,
                                leader_epoch: -1,
                                end_offset: -1,
                            },
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// KIP-320: a client that knows a newer epoch than ours is ahead of us (UNKNOWN_LEADER_EPOCH,
/// retry); one that knows an older epoch must refresh metadata (FENCED_LEADER_EPOCH). `-1`
/// skips the check.
fn check_leader_epoch(broker: &Broker, topic: &str, partition: i32, current: i32) -> Result<(), ErrorCode> {
    crate::broker::check_epoch(current, broker.leader_epoch(topic, partition)?)
}

/// Whether a partition's error is [`crate::broker::check_epoch`]'s refusal.
fn is_epoch_refusal(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::FencedLeaderEpoch | ErrorCode::UnknownLeaderEpoch)
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
