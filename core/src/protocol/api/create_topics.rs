//! CreateTopics (key 19), v2–v7: the controller creates topics. Flexible from v5; from v5 the
//! response describes the created topic (partitions, replication factor, configs), from v7 it
//! carries the topic id.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;
use crate::protocol::Uuid;

pub const API_KEY: i16 = 19;
pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 7;
pub const FLEXIBLE_MIN: i16 = 5;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsRequest {
    pub topics: Vec<CreatableTopic>,
    pub timeout_ms: i32,
    pub validate_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopic {
    pub name: String,
    /// -1: the broker default (then `assignments` may be given instead).
    pub num_partitions: i32,
    /// -1: the broker default.
    pub replication_factor: i16,
    pub assignments: Vec<ReplicaAssignment>,
    pub configs: Vec<TopicConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaAssignment {
    pub partition_index: i32,
    pub broker_ids: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfig {
    pub name: String,
    pub value: Option<String>,
}

impl CreateTopicsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let tags = min_bytes::tags(flex);
        let string = min_bytes::string(flex);
        let array = min_bytes::array(flex);
        let topic_min = string + 4 + 2 + array + array + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let num_partitions = r.i32()?;
            let replication_factor = r.i16()?;
            let assignments = r.array(flex, 4 + array + tags, |r| {
                let partition_index = r.i32()?;
                let broker_ids = r.array(flex, min_bytes::I32, |r| r.i32())?;
                r.skip_tagged_fields(flex)?;
                Ok(ReplicaAssignment {
                    partition_index,
                    broker_ids,
                })
            })?;
            let configs = r.array(flex, string + string + tags, |r| {
                let name = r.string(flex, "configs.name")?;
                let value = r.nullable_string(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(TopicConfig { name, value })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(CreatableTopic {
                name,
                num_partitions,
                replication_factor,
                assignments,
                configs,
            })
        })?;
        let timeout_ms = r.i32()?;
        let validate_only = r.bool()?;
        r.skip_tagged_fields(flex)?;
        Ok(CreateTopicsRequest {
            topics,
            timeout_ms,
            validate_only,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsResponse {
    pub throttle_time_ms: i32,
    pub topics: Vec<CreatableTopicResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopicResult {
    pub name: String,
    /// v7+.
    pub topic_id: Uuid,
    pub error_code: i16,
    pub error_message: Option<String>,
    /// v5+ tag 0, written only when non-zero.
    pub topic_config_error_code: i16,
    /// v5+.
    pub num_partitions: i32,
    /// v5+.
    pub replication_factor: i16,
    /// v5+; `None` when the configs could not be described.
    pub configs: Option<Vec<CreatableTopicConfigs>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopicConfigs {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub config_source: i8,
    pub is_sensitive: bool,
}

impl CreateTopicsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            if version >= 7 {
                w.uuid(t.topic_id);
            }
            w.i16(t.error_code);
            w.nullable_string(flex, t.error_message.as_deref());
            if version >= 5 {
                w.i32(t.num_partitions);
                w.i16(t.replication_factor);
                w.nullable_array(flex, t.configs.as_deref(), |w, c| {
                    w.string(flex, &c.name);
                    w.nullable_string(flex, c.value.as_deref());
                    w.bool(c.read_only);
                    w.i8(c.config_source);
                    w.bool(c.is_sensitive);
                    w.no_tagged_fields(flex);
                });
            }
            let code = t.topic_config_error_code;
            if code != 0 {
                w.tagged_fields(flex, &[(0, &move |w: &mut Writer| w.i16(code))]);
            } else {
                w.no_tagged_fields(flex);
            }
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl CreateTopicsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.i32(t.num_partitions);
            w.i16(t.replication_factor);
            w.array(flex, &t.assignments, |w, a| {
                w.i32(a.partition_index);
                w.array(flex, &a.broker_ids, |w, id| w.i32(*id));
                w.no_tagged_fields(flex);
            });
            w.array(flex, &t.configs, |w, c| {
                w.string(flex, &c.name);
                w.nullable_string(flex, c.value.as_deref());
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.i32(self.timeout_ms);
        w.bool(self.validate_only);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl CreateTopicsResponse {
    /// Fields a version lacks take Kafka's defaults (partitions and replication factor -1, no
    /// configs).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let tags = min_bytes::tags(flex);
        let throttle_time_ms = r.i32()?;
        let mut topic_min = string + 2 + string + tags;
        if version >= 7 {
            topic_min += 16;
        }
        if version >= 5 {
            topic_min += 4 + 2 + min_bytes::array(flex);
        }
        let config_min = string + string + 3 + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let topic_id = if version >= 7 { r.uuid()? } else { Uuid::ZERO };
            let error_code = r.i16()?;
            let error_message = r.nullable_string(flex)?;
            let (num_partitions, replication_factor, configs) = if version >= 5 {
                let num_partitions = r.i32()?;
                let replication_factor = r.i16()?;
                let configs = r.nullable_array(flex, config_min, |r| {
                    let name = r.string(flex, "configs.name")?;
                    let value = r.nullable_string(flex)?;
                    let read_only = r.bool()?;
                    let config_source = r.i8()?;
                    let is_sensitive = r.bool()?;
                    r.skip_tagged_fields(flex)?;
                    Ok(CreatableTopicConfigs {
                        name,
                        value,
                        read_only,
                        config_source,
                        is_sensitive,
                    })
                })?;
                (num_partitions, replication_factor, configs)
            } else {
                (-1, -1, None)
            };
            let mut topic_config_error_code = 0;
            r.tagged_fields(flex, |tag, r| match tag {
                0 => {
                    topic_config_error_code = r.i16()?;
                    Ok(true)
                }
                _ => Ok(false),
            })?;
            Ok(CreatableTopicResult {
                name,
                topic_id,
                error_code,
                error_message,
                topic_config_error_code,
                num_partitions,
                replication_factor,
                configs,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(CreateTopicsResponse {
            throttle_time_ms,
            topics,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::create_topics_request as kcq;
    use kafka_protocol::messages::create_topics_response as kcs;

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::CreateTopicsRequest {
        let mut a = kcq::CreatableReplicaAssignment::default();
        a.partition_index = 0;
        a.broker_ids = vec![kp::BrokerId(1), kp::BrokerId(2)];
        let mut c = kcq::CreatableTopicConfig::default();
        c.name = s("retention.ms");
        c.value = Some(s("1000"));
        let mut t = kcq::CreatableTopic::default();
        t.name = kp::TopicName(s("orders"));
        t.num_partitions = -1;
        t.replication_factor = -1;
        t.assignments = vec![a];
        t.configs = vec![c];
        let mut sent = kp::CreateTopicsRequest::default();
        sent.topics = vec![t];
        sent.timeout_ms = 30_000;
        sent.validate_only = true;
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
        for v in VERSION_MIN..=VERSION_MAX {
            let sent = sample(v);
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            let Request::CreateTopics(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: "orders".into(),
                    num_partitions: -1,
                    replication_factor: -1,
                    assignments: vec![ReplicaAssignment {
                        partition_index: 0,
                        broker_ids: vec![1, 2],
                    }],
                    configs: vec![TopicConfig {
                        name: "retention.ms".into(),
                        value: Some("1000".into()),
                    }],
                }],
                timeout_ms: 30_000,
                validate_only: true,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = CreateTopicsResponse {
            throttle_time_ms: 5,
            topics: vec![CreatableTopicResult {
                name: "orders".into(),
                topic_id: Uuid([4; 16]),
                error_code: 36,
                error_message: Some("exists".into()),
                topic_config_error_code: 12,
                num_partitions: 3,
                replication_factor: 2,
                configs: Some(vec![CreatableTopicConfigs {
                    name: "retention.ms".into(),
                    value: Some("1000".into()),
                    read_only: false,
                    config_source: 1,
                    is_sensitive: false,
                }]),
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::CreateTopicsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 5);
            let t: &kcs::CreatableTopicResult = &theirs.topics[0];
            assert_eq!((&*t.name.0, t.error_code), ("orders", 36));
            assert_eq!(t.error_message.as_deref(), Some("exists"));
            let id = if v >= 7 { Uuid([4; 16]) } else { Uuid::ZERO };
            assert_eq!(our_uuid(t.topic_id), id);
            if v >= 5 {
                assert_eq!((t.num_partitions, t.replication_factor), (3, 2));
                assert_eq!(t.topic_config_error_code, 12);
                let c = &t.configs.as_ref().expect("sent")[0];
                assert_eq!(
                    (&*c.name, c.value.as_deref(), c.config_source),
                    ("retention.ms", Some("1000"), 1)
                );
            }
        }
    }

    pub(crate) fn client_request(_v: i16) -> CreateTopicsRequest {
        CreateTopicsRequest {
            topics: vec![
                CreatableTopic {
                    name: "t".into(),
                    num_partitions: 3,
                    replication_factor: 2,
                    assignments: vec![],
                    configs: vec![
                        TopicConfig {
                            name: "cleanup.policy".into(),
                            value: Some("compact".into()),
                        },
                        TopicConfig {
                            name: "retention.ms".into(),
                            value: None,
                        },
                    ],
                },
                CreatableTopic {
                    name: "u".into(),
                    num_partitions: -1,
                    replication_factor: -1,
                    assignments: vec![ReplicaAssignment {
                        partition_index: 0,
                        broker_ids: vec![1, 2],
                    }],
                    configs: vec![],
                },
            ],
            timeout_ms: 5000,
            validate_only: true,
        }
    }

    pub(crate) fn client_response(v: i16) -> CreateTopicsResponse {
        let described = v >= 5;
        CreateTopicsResponse {
            throttle_time_ms: 1,
            topics: vec![
                CreatableTopicResult {
                    name: "t".into(),
                    topic_id: if v >= 7 { Uuid([5; 16]) } else { Uuid::ZERO },
                    error_code: 0,
                    error_message: None,
                    topic_config_error_code: if described {
                        crate::ErrorCode::TopicAuthorizationFailed.code()
                    } else {
                        0
                    },
                    num_partitions: if described { 3 } else { -1 },
                    replication_factor: if described { 2 } else { -1 },
                    configs: described.then(|| {
                        vec![CreatableTopicConfigs {
                            name: "cleanup.policy".into(),
                            value: Some("compact".into()),
                            read_only: false,
                            config_source: 1,
                            is_sensitive: true,
                        }]
                    }),
                },
                CreatableTopicResult {
                    name: "u".into(),
                    error_code: crate::ErrorCode::TopicAlreadyExists.code(),
                    error_message: Some("exists".into()),
                    num_partitions: -1,
                    replication_factor: -1,
                    ..CreatableTopicResult::default()
                },
            ],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::CreateTopicsRequest =
                client_round_trip(v, &req, req.encode(v), CreateTopicsRequest::decode);
            assert_eq!(
                (theirs.topics[0].num_partitions, theirs.topics[0].replication_factor),
                (3, 2)
            );
            assert_eq!((theirs.timeout_ms, theirs.validate_only), (5000, true));
            let resp = client_response(v);
            let theirs: kp::CreateTopicsResponse =
                client_round_trip(v, &resp, resp.encode(v), CreateTopicsResponse::decode);
            assert_eq!(theirs.topics[1].error_code, 36);
        }
    }
}
