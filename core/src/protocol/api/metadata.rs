//! Metadata (key 3), v0–v12: brokers, controller, and each topic's partitions and leaders.
//! Flexible from v9; topic ids from v10 (a request topic may then name an id instead of a name,
//! and response topic names are nullable from v12).
//!
//! Request `topics`: `None` asks for every topic (v1+ sends null; v0 sends an empty array, which
//! we normalise to `None`); `Some(vec![])` (v1+) asks for none.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;
use crate::protocol::Uuid;

pub const API_KEY: i16 = 3;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 12;
pub const FLEXIBLE_MIN: i16 = 9;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    pub topics: Option<Vec<MetadataRequestTopic>>,
    /// v4+; true before (brokers auto-created then).
    pub allow_auto_topic_creation: bool,
    /// v8–v10.
    pub include_cluster_authorized_operations: bool,
    /// v8+.
    pub include_topic_authorized_operations: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataRequestTopic {
    /// v10+; zero when the topic is named.
    pub topic_id: Uuid,
    /// Null allowed from v10, when `topic_id` names the topic.
    pub name: Option<String>,
}

impl MetadataRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let topic_min = if version >= 10 { 16 } else { 0 } + min_bytes::string(flex) + min_bytes::tags(flex);
        let topics = r.nullable_array(flex, topic_min, |r| {
            let topic_id = if version >= 10 { r.uuid()? } else { Uuid::ZERO };
            let name = if version >= 10 {
                r.nullable_string(flex)?
            } else {
                Some(r.string(flex, "topics.name")?)
            };
            r.skip_tagged_fields(flex)?;
            Ok(MetadataRequestTopic { topic_id, name })
        })?;
        let topics = match topics {
            Some(t) if version == 0 && t.is_empty() => None,
            t => t,
        };
        let allow_auto_topic_creation = if version >= 4 { r.bool()? } else { true };
        let include_cluster_authorized_operations = if (8..=10).contains(&version) { r.bool()? } else { false };
        let include_topic_authorized_operations = if version >= 8 { r.bool()? } else { false };
        r.skip_tagged_fields(flex)?;
        Ok(MetadataRequest {
            topics,
            allow_auto_topic_creation,
            include_cluster_authorized_operations,
            include_topic_authorized_operations,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    /// v3+.
    pub throttle_time_ms: i32,
    pub brokers: Vec<MetadataBroker>,
    /// v2+.
    pub cluster_id: Option<String>,
    /// v1+; -1 when unknown.
    pub controller_id: i32,
    pub topics: Vec<MetadataTopic>,
    /// v8–v10; Kafka's "omitted" is i32::MIN.
    pub cluster_authorized_operations: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    /// v1+.
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataTopic {
    pub error_code: i16,
    /// Nullable from v12 (a topic asked for by an unknown id); required before.
    pub name: Option<String>,
    /// v10+.
    pub topic_id: Uuid,
    /// v1+.
    pub is_internal: bool,
    pub partitions: Vec<MetadataPartition>,
    /// v8+; Kafka's "omitted" is i32::MIN.
    pub topic_authorized_operations: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataPartition {
    pub error_code: i16,
    pub partition_index: i32,
    pub leader_id: i32,
    /// v7+.
    pub leader_epoch: i32,
    pub replica_nodes: Vec<i32>,
    pub isr_nodes: Vec<i32>,
    /// v5+.
    pub offline_replicas: Vec<i32>,
}

impl MetadataResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 3 {
            w.i32(self.throttle_time_ms);
        }
        w.array(flex, &self.brokers, |w, b| {
            w.i32(b.node_id);
            w.string(flex, &b.host);
            w.i32(b.port);
            if version >= 1 {
                w.nullable_string(flex, b.rack.as_deref());
            }
            w.no_tagged_fields(flex);
        });
        if version >= 2 {
            w.nullable_string(flex, self.cluster_id.as_deref());
        }
        if version >= 1 {
            w.i32(self.controller_id);
        }
        w.array(flex, &self.topics, |w, t| {
            w.i16(t.error_code);
            if version >= 12 {
                w.nullable_string(flex, t.name.as_deref());
            } else {
                w.string(flex, t.name.as_deref().unwrap_or_default());
            }
            if version >= 10 {
                w.uuid(t.topic_id);
            }
            if version >= 1 {
                w.bool(t.is_internal);
            }
            w.array(flex, &t.partitions, |w, p| {
                w.i16(p.error_code);
                w.i32(p.partition_index);
                w.i32(p.leader_id);
                if version >= 7 {
                    w.i32(p.leader_epoch);
                }
                let ids = |w: &mut Writer, v: &Vec<i32>| w.array(flex, v, |w, id| w.i32(*id));
                ids(w, &p.replica_nodes);
                ids(w, &p.isr_nodes);
                if version >= 5 {
                    ids(w, &p.offline_replicas);
                }
                w.no_tagged_fields(flex);
            });
            if version >= 8 {
                w.i32(t.topic_authorized_operations);
            }
            w.no_tagged_fields(flex);
        });
        if (8..=10).contains(&version) {
            w.i32(self.cluster_authorized_operations);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl MetadataRequest {
    /// v0 cannot ask for no topics: `Some(vec![])` is sent as v0's empty array, which means all.
    /// Before v10 topics are named: a `None` name is sent as "" (no topic has that name).
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        let topic = |w: &mut Writer, t: &MetadataRequestTopic| {
            if version >= 10 {
                w.uuid(t.topic_id);
                w.nullable_string(flex, t.name.as_deref());
            } else {
                w.string(flex, t.name.as_deref().unwrap_or_default());
            }
            w.no_tagged_fields(flex);
        };
        match (&self.topics, version) {
            (None, 0) => w.array(flex, &[], topic),
            (topics, _) => w.nullable_array(flex, topics.as_deref(), topic),
        }
        if version >= 4 {
            w.bool(self.allow_auto_topic_creation);
        }
        if (8..=10).contains(&version) {
            w.bool(self.include_cluster_authorized_operations);
        }
        if version >= 8 {
            w.bool(self.include_topic_authorized_operations);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl MetadataResponse {
    /// Fields a version lacks take Kafka's defaults: controller -1, leader epoch -1,
    /// authorized operations i32::MIN ("omitted").
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let array = min_bytes::array(flex);
        let tags = min_bytes::tags(flex);
        let throttle_time_ms = if version >= 3 { r.i32()? } else { 0 };
        let broker_min = 4 + string + 4 + if version >= 1 { string } else { 0 } + tags;
        let brokers = r.array(flex, broker_min, |r| {
            let node_id = r.i32()?;
            let host = r.string(flex, "brokers.host")?;
            let port = r.i32()?;
            let rack = if version >= 1 { r.nullable_string(flex)? } else { None };
            r.skip_tagged_fields(flex)?;
            Ok(MetadataBroker {
                node_id,
                host,
                port,
                rack,
            })
        })?;
        let cluster_id = if version >= 2 { r.nullable_string(flex)? } else { None };
        let controller_id = if version >= 1 { r.i32()? } else { -1 };
        let part_min = 2 + 4 + 4 + array * 2 + tags;
        let topic_min = 2 + string + array + tags;
        let topics = r.array(flex, topic_min, |r| {
            let error_code = r.i16()?;
            let name = if version >= 12 {
                r.nullable_string(flex)?
            } else {
                Some(r.string(flex, "topics.name")?)
            };
            let topic_id = if version >= 10 { r.uuid()? } else { Uuid::ZERO };
            let is_internal = if version >= 1 { r.bool()? } else { false };
            let partitions = r.array(flex, part_min, |r| {
                let error_code = r.i16()?;
                let partition_index = r.i32()?;
                let leader_id = r.i32()?;
                let leader_epoch = if version >= 7 { r.i32()? } else { -1 };
                let ids = |r: &mut Reader<'_>| r.array(flex, min_bytes::I32, |r| r.i32());
                let replica_nodes = ids(r)?;
                let isr_nodes = ids(r)?;
                let offline_replicas = if version >= 5 { ids(r)? } else { Vec::new() };
                r.skip_tagged_fields(flex)?;
                Ok(MetadataPartition {
                    error_code,
                    partition_index,
                    leader_id,
                    leader_epoch,
                    replica_nodes,
                    isr_nodes,
                    offline_replicas,
                })
            })?;
            let topic_authorized_operations = if version >= 8 { r.i32()? } else { i32::MIN };
            r.skip_tagged_fields(flex)?;
            Ok(MetadataTopic {
                error_code,
                name,
                topic_id,
                is_internal,
                partitions,
                topic_authorized_operations,
            })
        })?;
        let cluster_authorized_operations = if (8..=10).contains(&version) {
            r.i32()?
        } else {
            i32::MIN
        };
        r.skip_tagged_fields(flex)?;
        Ok(MetadataResponse {
            throttle_time_ms,
            brokers,
            cluster_id,
            controller_id,
            topics,
            cluster_authorized_operations,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::{decode_request, DecodeError, Limits, Request};
    use kafka_protocol::messages as kp;

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::MetadataRequest {
        let id = Uuid([7; 16]);
        let mut t = kp::metadata_request::MetadataRequestTopic::default();
        t.name = Some(kp::TopicName(s("orders")));
        if v >= 10 {
            t.topic_id = kp_uuid(id);
        }
        let mut sent = kp::MetadataRequest::default();
        sent.topics = Some(vec![t]);
        sent.allow_auto_topic_creation = v < 4;
        sent.include_cluster_authorized_operations = (8..=10).contains(&v);
        sent.include_topic_authorized_operations = v >= 8;
        if v >= FLEXIBLE_MIN {
            sent.unknown_tagged_fields = unknown_tags();
        }
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    #[test]
    fn request_round_trips_every_version() {
        let id = Uuid([7; 16]);
        for v in VERSION_MIN..=VERSION_MAX {
            let sent = sample(v);
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            let Request::Metadata(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let topics = req.topics.expect("one topic asked for");
            assert_eq!(topics.len(), 1);
            assert_eq!(topics[0].name.as_deref(), Some("orders"));
            assert_eq!(topics[0].topic_id, if v >= 10 { id } else { Uuid::ZERO });
            assert_eq!(req.allow_auto_topic_creation, v < 4);
            assert_eq!(req.include_cluster_authorized_operations, (8..=10).contains(&v));
            assert_eq!(req.include_topic_authorized_operations, v >= 8);
        }
    }

    #[test]
    fn all_topics_is_none_in_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let mut sent = kp::MetadataRequest::default();
            sent.topics = if v == 0 { Some(vec![]) } else { None };
            sent.allow_auto_topic_creation = true;
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            let Request::Metadata(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.topics, None, "v{v}");
        }
    }

    fn sample_response() -> MetadataResponse {
        MetadataResponse {
            throttle_time_ms: 3,
            brokers: vec![MetadataBroker {
                node_id: 1,
                host: "b1".into(),
                port: 9092,
                rack: Some("r1".into()),
            }],
            cluster_id: Some("c".into()),
            controller_id: 1,
            topics: vec![MetadataTopic {
                error_code: 0,
                name: Some("orders".into()),
                topic_id: Uuid([9; 16]),
                is_internal: false,
                partitions: vec![MetadataPartition {
                    error_code: 0,
                    partition_index: 0,
                    leader_id: 1,
                    leader_epoch: 5,
                    replica_nodes: vec![1, 2, 3],
                    isr_nodes: vec![1, 2],
                    offline_replicas: vec![3],
                }],
                topic_authorized_operations: 8,
            }],
            cluster_authorized_operations: 4,
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = sample_response();
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::MetadataResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 3 { 3 } else { 0 });
            let b = &theirs.brokers[0];
            assert_eq!((b.node_id.0, &*b.host, b.port), (1, "b1", 9092));
            assert_eq!(b.rack.as_deref(), if v >= 1 { Some("r1") } else { None });
            assert_eq!(theirs.cluster_id.as_deref(), if v >= 2 { Some("c") } else { None });
            assert_eq!(theirs.controller_id.0, if v >= 1 { 1 } else { -1 });
            let t = &theirs.topics[0];
            assert_eq!(t.name.as_ref().map(|n| &*n.0), Some("orders"));
            assert_eq!(our_uuid(t.topic_id), if v >= 10 { Uuid([9; 16]) } else { Uuid::ZERO });
            let p = &t.partitions[0];
            assert_eq!((p.partition_index, p.leader_id.0), (0, 1));
            assert_eq!(p.leader_epoch, if v >= 7 { 5 } else { -1 });
            assert_eq!(p.replica_nodes.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 2, 3]);
            assert_eq!(p.isr_nodes.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 2]);
            let offline: Vec<i32> = p.offline_replicas.iter().map(|b| b.0).collect();
            assert_eq!(offline, if v >= 5 { vec![3] } else { vec![] });
            assert_eq!(t.topic_authorized_operations, if v >= 8 { 8 } else { i32::MIN });
            let cluster_ops = if (8..=10).contains(&v) { 4 } else { i32::MIN };
            assert_eq!(theirs.cluster_authorized_operations, cluster_ops);
        }
    }

    /// The 6-byte body that makes kafka-protocol 0.18's decoder reserve i32::MAX topics (about
    /// 150 GB) and abort: our decoder refuses the count before allocating, at every version.
    #[test]
    fn six_byte_body_is_refused_at_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let body: &[u8] = if v >= FLEXIBLE_MIN {
                &[0xff, 0xff, 0xff, 0xff, 0x07, 0x00]
            } else {
                &[0x7f, 0xff, 0xff, 0xff, 0x00, 0x00]
            };
            let mut r = Reader::new(body, Limits::default());
            let err = MetadataRequest::decode(v, &mut r).expect_err("count is a lie");
            assert!(matches!(err, DecodeError::ArrayTooLong { .. }), "v{v}: {err:?}");
        }
    }

    /// The request that makes kafka-protocol 0.18 try to allocate ~150 GB: a v12 Metadata
    /// header with a compact topics count of u32::MAX - 1 and nothing after it.
    #[test]
    fn six_byte_metadata_body_with_huge_count_is_refused() {
        let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0];
        frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00]);
        let err = decode_request(&frame, Limits::default()).expect_err("count is a lie");
        assert!(matches!(err, DecodeError::ArrayTooLong { .. }), "{err:?}");
        // Below array_len_max, the bytes-present check catches it.
        let mut frame = vec![0, 3, 0, 4, 0, 0, 0, 1, 0xff, 0xff];
        frame.extend_from_slice(&[0x00, 0x0f, 0x42, 0x3f, 0x01]);
        let err = decode_request(&frame, Limits::default()).expect_err("count is a lie");
        assert!(
            matches!(err, DecodeError::ArrayOverrun { count: 999_999, .. }),
            "{err:?}"
        );
    }

    pub(crate) fn client_request(v: i16) -> MetadataRequest {
        let mut topics = vec![MetadataRequestTopic {
            topic_id: if v >= 10 { Uuid([7; 16]) } else { Uuid::ZERO },
            name: Some("orders".into()),
        }];
        if v >= 10 {
            topics.push(MetadataRequestTopic {
                topic_id: Uuid([8; 16]),
                name: None,
            });
        }
        MetadataRequest {
            topics: Some(topics),
            allow_auto_topic_creation: v < 4,
            include_cluster_authorized_operations: (8..=10).contains(&v),
            include_topic_authorized_operations: v >= 8,
        }
    }

    /// `sample_response` as version `v` carries it: absent fields at their decoded defaults.
    pub(crate) fn client_response(v: i16) -> MetadataResponse {
        let mut resp = sample_response();
        resp.throttle_time_ms = if v >= 3 { 3 } else { 0 };
        resp.brokers[0].rack = if v >= 1 { Some("r1".into()) } else { None };
        resp.cluster_id = if v >= 2 { Some("c".into()) } else { None };
        resp.controller_id = if v >= 1 { 1 } else { -1 };
        let t = &mut resp.topics[0];
        t.topic_id = if v >= 10 { Uuid([9; 16]) } else { Uuid::ZERO };
        t.is_internal = v >= 1;
        t.topic_authorized_operations = if v >= 8 { 8 } else { i32::MIN };
        let p = &mut t.partitions[0];
        p.leader_epoch = if v >= 7 { 5 } else { -1 };
        if v < 5 {
            p.offline_replicas.clear();
        }
        resp.cluster_authorized_operations = if (8..=10).contains(&v) { 4 } else { i32::MIN };
        if v >= 12 {
            resp.topics.push(MetadataTopic {
                error_code: crate::ErrorCode::UnknownTopicId.code(),
                name: None,
                topic_id: Uuid([8; 16]),
                topic_authorized_operations: i32::MIN,
                ..MetadataTopic::default()
            });
        }
        resp
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::MetadataRequest = client_round_trip(v, &req, req.encode(v), MetadataRequest::decode);
            let t = &theirs.topics.as_ref().expect("topics asked for")[0];
            assert_eq!(t.name.as_ref().map(|n| &*n.0), Some("orders"));
            assert_eq!(theirs.allow_auto_topic_creation, v < 4);
            let resp = client_response(v);
            let theirs: kp::MetadataResponse = client_round_trip(v, &resp, resp.encode(v), MetadataResponse::decode);
            assert_eq!(theirs.topics[0].partitions[0].isr_nodes.len(), 2);
        }
    }

    /// v0 has no null array: "all topics" and "no topics" both travel as the empty array,
    /// which means all; v1+ keeps the two apart.
    #[test]
    fn client_request_all_topics_and_none() {
        for v in VERSION_MIN..=VERSION_MAX {
            for topics in [None, Some(vec![])] {
                let req = MetadataRequest {
                    topics: topics.clone(),
                    allow_auto_topic_creation: true,
                    include_cluster_authorized_operations: false,
                    include_topic_authorized_operations: false,
                };
                let body = req.encode(v);
                let back = MetadataRequest::decode(v, &mut Reader::new(&body, Limits::default())).expect("ours");
                assert_eq!(back.topics, if v == 0 { None } else { topics }, "v{v}");
            }
        }
    }
}
