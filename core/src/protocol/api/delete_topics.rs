//! DeleteTopics (key 20), v1–v6: the controller deletes topics. Flexible from v4. Before v6
//! topics are named; from v6 each is a name or a topic id (either may be left empty). Both
//! forms decode to `topics`.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;
use crate::protocol::Uuid;

pub const API_KEY: i16 = 20;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 6;
pub const FLEXIBLE_MIN: i16 = 4;
/// First version naming topics by name or id.
pub const TOPIC_ID_MIN: i16 = 6;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopicsRequest {
    pub topics: Vec<DeleteTopic>,
    pub timeout_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopic {
    /// Always set before v6; from v6 `None` when named by id.
    pub name: Option<String>,
    /// v6+; zero when named by name.
    pub topic_id: Uuid,
}

impl DeleteTopicsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let topics = if version >= TOPIC_ID_MIN {
            r.array(flex, min_bytes::string(flex) + 16 + 1, |r| {
                let name = r.nullable_string(flex)?;
                let topic_id = r.uuid()?;
                r.skip_tagged_fields(flex)?;
                Ok(DeleteTopic { name, topic_id })
            })?
        } else {
            r.array(flex, min_bytes::string(flex), |r| {
                Ok(DeleteTopic {
                    name: Some(r.string(flex, "topic_names")?),
                    topic_id: Uuid::ZERO,
                })
            })?
        };
        let timeout_ms = r.i32()?;
        r.skip_tagged_fields(flex)?;
        Ok(DeleteTopicsRequest { topics, timeout_ms })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopicsResponse {
    pub throttle_time_ms: i32,
    pub responses: Vec<DeletableTopicResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeletableTopicResult {
    /// Nullable from v6; written as "" before when `None`.
    pub name: Option<String>,
    /// v6+.
    pub topic_id: Uuid,
    pub error_code: i16,
    /// v5+.
    pub error_message: Option<String>,
}

impl DeleteTopicsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.responses, |w, t| {
            if version >= TOPIC_ID_MIN {
                w.nullable_string(flex, t.name.as_deref());
                w.uuid(t.topic_id);
            } else {
                w.string(flex, t.name.as_deref().unwrap_or_default());
            }
            w.i16(t.error_code);
            if version >= 5 {
                w.nullable_string(flex, t.error_message.as_deref());
            }
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl DeleteTopicsRequest {
    /// Before v6 topics are named: a `None` name is sent as "" (no topic has that name).
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= TOPIC_ID_MIN {
            w.array(flex, &self.topics, |w, t| {
                w.nullable_string(flex, t.name.as_deref());
                w.uuid(t.topic_id);
                w.no_tagged_fields(flex);
            });
        } else {
            w.array(flex, &self.topics, |w, t| {
                w.string(flex, t.name.as_deref().unwrap_or_default());
            });
        }
        w.i32(self.timeout_ms);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl DeleteTopicsResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let throttle_time_ms = r.i32()?;
        let mut result_min = string + 2 + min_bytes::tags(flex);
        if version >= TOPIC_ID_MIN {
            result_min += 16;
        }
        if version >= 5 {
            result_min += string;
        }
        let responses = r.array(flex, result_min, |r| {
            let (name, topic_id) = if version >= TOPIC_ID_MIN {
                (r.nullable_string(flex)?, r.uuid()?)
            } else {
                (Some(r.string(flex, "responses.name")?), Uuid::ZERO)
            };
            let error_code = r.i16()?;
            let error_message = if version >= 5 { r.nullable_string(flex)? } else { None };
            r.skip_tagged_fields(flex)?;
            Ok(DeletableTopicResult {
                name,
                topic_id,
                error_code,
                error_message,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DeleteTopicsResponse {
            throttle_time_ms,
            responses,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::delete_topics_request as kq;

    pub(crate) fn sample(v: i16) -> kp::DeleteTopicsRequest {
        let mut sent = kp::DeleteTopicsRequest::default();
        if v >= TOPIC_ID_MIN {
            let mut by_name = kq::DeleteTopicState::default();
            by_name.name = Some(kp::TopicName(s("orders")));
            let mut by_id = kq::DeleteTopicState::default();
            by_id.name = None;
            by_id.topic_id = kp_uuid(Uuid([5; 16]));
            sent.topics = vec![by_name, by_id];
        } else {
            sent.topic_names = vec![kp::TopicName(s("orders")), kp::TopicName(s("audit"))];
        }
        sent.timeout_ms = 30_000;
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
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::DeleteTopics(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let named = |n: &str| DeleteTopic {
                name: Some(n.into()),
                topic_id: Uuid::ZERO,
            };
            let topics = if v >= TOPIC_ID_MIN {
                vec![
                    named("orders"),
                    DeleteTopic {
                        name: None,
                        topic_id: Uuid([5; 16]),
                    },
                ]
            } else {
                vec![named("orders"), named("audit")]
            };
            let want = DeleteTopicsRequest {
                topics,
                timeout_ms: 30_000,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = DeleteTopicsResponse {
            throttle_time_ms: 2,
            responses: vec![DeletableTopicResult {
                name: Some("orders".into()),
                topic_id: Uuid([5; 16]),
                error_code: 3,
                error_message: Some("unknown".into()),
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::DeleteTopicsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 2);
            let t = &theirs.responses[0];
            assert_eq!(t.name.as_ref().map(|n| &*n.0), Some("orders"));
            assert_eq!(t.error_code, 3);
            let id = if v >= TOPIC_ID_MIN { Uuid([5; 16]) } else { Uuid::ZERO };
            assert_eq!(our_uuid(t.topic_id), id);
            let msg = if v >= 5 { Some("unknown") } else { None };
            assert_eq!(t.error_message.as_deref(), msg);
        }
    }

    pub(crate) fn client_request(v: i16) -> DeleteTopicsRequest {
        let by_name = |name: &str| DeleteTopic {
            name: Some(name.into()),
            topic_id: Uuid::ZERO,
        };
        let second = if v >= TOPIC_ID_MIN {
            DeleteTopic {
                name: None,
                topic_id: Uuid([4; 16]),
            }
        } else {
            by_name("u")
        };
        DeleteTopicsRequest {
            topics: vec![by_name("t"), second],
            timeout_ms: 3000,
        }
    }

    pub(crate) fn client_response(v: i16) -> DeleteTopicsResponse {
        let mut responses = vec![DeletableTopicResult {
            name: Some("t".into()),
            topic_id: if v >= TOPIC_ID_MIN { Uuid([4; 16]) } else { Uuid::ZERO },
            error_code: 0,
            error_message: if v >= 5 { Some("m".into()) } else { None },
        }];
        if v >= TOPIC_ID_MIN {
            responses.push(DeletableTopicResult {
                name: None,
                topic_id: Uuid([5; 16]),
                error_code: crate::ErrorCode::UnknownTopicId.code(),
                error_message: None,
            });
        }
        DeleteTopicsResponse {
            throttle_time_ms: 1,
            responses,
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::DeleteTopicsRequest =
                client_round_trip(v, &req, req.encode(v), DeleteTopicsRequest::decode);
            assert_eq!(theirs.timeout_ms, 3000);
            let resp = client_response(v);
            let _: kp::DeleteTopicsResponse = client_round_trip(v, &resp, resp.encode(v), DeleteTopicsResponse::decode);
        }
    }
}
