//! AlterPartitionReassignments (key 45), v0–v1, flexible in every version (KIP-455): per
//! partition a new replica list, or null to cancel the reassignment in progress. v1 adds
//! `allow_replication_factor_change` (KIP-860; true in v0) to both request and response.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 45;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 1;
pub const FLEXIBLE_MIN: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionReassignmentsRequest {
    pub timeout_ms: i32,
    /// v1+; true in v0.
    pub allow_replication_factor_change: bool,
    pub topics: Vec<ReassignableTopic>,
}

impl Default for AlterPartitionReassignmentsRequest {
    fn default() -> Self {
        AlterPartitionReassignmentsRequest {
            timeout_ms: 60_000,
            allow_replication_factor_change: true,
            topics: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReassignableTopic {
    pub name: String,
    pub partitions: Vec<ReassignablePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReassignablePartition {
    pub partition_index: i32,
    /// The new replicas; `None` cancels.
    pub replicas: Option<Vec<i32>>,
}

impl AlterPartitionReassignmentsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let timeout_ms = r.i32()?;
        let allow_replication_factor_change = if version >= 1 { r.bool()? } else { true };
        let topics = r.array(flex, min_bytes::string(flex) + min_bytes::array(flex) + 1, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, 4 + 1 + 1, |r| {
                let partition_index = r.i32()?;
                let replicas = r.nullable_array(flex, 4, |r| r.i32())?;
                r.skip_tagged_fields(flex)?;
                Ok(ReassignablePartition {
                    partition_index,
                    replicas,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ReassignableTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(AlterPartitionReassignmentsRequest {
            timeout_ms,
            allow_replication_factor_change,
            topics,
        })
    }

    /// Client side.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.timeout_ms);
        if version >= 1 {
            w.bool(self.allow_replication_factor_change);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                w.nullable_array(flex, p.replicas.as_deref(), |w, r| w.i32(*r));
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterPartitionReassignmentsResponse {
    pub throttle_time_ms: i32,
    /// v1+.
    pub allow_replication_factor_change: bool,
    /// The top-level error (for the whole request, e.g. not authorized).
    pub error_code: i16,
    pub error_message: Option<String>,
    pub responses: Vec<ReassignableTopicResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReassignableTopicResponse {
    pub name: String,
    pub partitions: Vec<ReassignablePartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReassignablePartitionResponse {
    pub partition_index: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl AlterPartitionReassignmentsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        if version >= 1 {
            w.bool(self.allow_replication_factor_change);
        }
        w.i16(self.error_code);
        w.nullable_string(flex, self.error_message.as_deref());
        w.array(flex, &self.responses, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                w.i16(p.error_code);
                w.nullable_string(flex, p.error_message.as_deref());
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    /// Client side, from untrusted bytes.
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let throttle_time_ms = r.i32()?;
        let allow_replication_factor_change = if version >= 1 { r.bool()? } else { true };
        let error_code = r.i16()?;
        let error_message = r.nullable_string(flex)?;
        let responses = r.array(flex, min_bytes::string(flex) + min_bytes::array(flex) + 1, |r| {
            let name = r.string(flex, "responses.name")?;
            let partitions = r.array(flex, 4 + 2 + min_bytes::string(flex) + 1, |r| {
                let partition_index = r.i32()?;
                let error_code = r.i16()?;
                let error_message = r.nullable_string(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(ReassignablePartitionResponse {
                    partition_index,
                    error_code,
                    error_message,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ReassignableTopicResponse { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(AlterPartitionReassignmentsResponse {
            throttle_time_ms,
            allow_replication_factor_change,
            error_code,
            error_message,
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
    use kafka_protocol::messages::alter_partition_reassignments_request as kq;

    pub(crate) fn sample(v: i16) -> kp::AlterPartitionReassignmentsRequest {
        let mut sent = kp::AlterPartitionReassignmentsRequest::default();
        sent.timeout_ms = 30_000;
        if v >= 1 {
            sent.allow_replication_factor_change = false;
        }
        let mut move_it = kq::ReassignablePartition::default();
        move_it.partition_index = 2;
        move_it.replicas = Some(vec![kp::BrokerId(1), kp::BrokerId(2), kp::BrokerId(4)]);
        let mut cancel = kq::ReassignablePartition::default();
        cancel.partition_index = 0;
        cancel.replicas = None;
        cancel.unknown_tagged_fields = unknown_tags();
        let mut topic = kq::ReassignableTopic::default();
        topic.name = kp::TopicName(s("orders"));
        topic.partitions = vec![move_it, cancel];
        sent.topics = vec![topic];
        sent.unknown_tagged_fields = unknown_tags();
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
            let Request::AlterPartitionReassignments(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = AlterPartitionReassignmentsRequest {
                timeout_ms: 30_000,
                allow_replication_factor_change: v == 0,
                topics: vec![ReassignableTopic {
                    name: "orders".into(),
                    partitions: vec![
                        ReassignablePartition {
                            partition_index: 2,
                            replicas: Some(vec![1, 2, 4]),
                        },
                        ReassignablePartition {
                            partition_index: 0,
                            replicas: None,
                        },
                    ],
                }],
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    pub(crate) fn client_request(v: i16) -> AlterPartitionReassignmentsRequest {
        AlterPartitionReassignmentsRequest {
            timeout_ms: 3000,
            allow_replication_factor_change: v == 0,
            topics: vec![ReassignableTopic {
                name: "t".into(),
                partitions: vec![
                    ReassignablePartition {
                        partition_index: 0,
                        replicas: Some(vec![3, 1]),
                    },
                    ReassignablePartition {
                        partition_index: 1,
                        replicas: None,
                    },
                ],
            }],
        }
    }

    pub(crate) fn client_response(v: i16) -> AlterPartitionReassignmentsResponse {
        AlterPartitionReassignmentsResponse {
            throttle_time_ms: 1,
            allow_replication_factor_change: v == 0,
            error_code: 0,
            error_message: None,
            responses: vec![ReassignableTopicResponse {
                name: "t".into(),
                partitions: vec![ReassignablePartitionResponse {
                    partition_index: 0,
                    error_code: crate::ErrorCode::InvalidReplicaAssignment.code(),
                    error_message: Some("broker 9 is not registered".into()),
                }],
            }],
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::AlterPartitionReassignmentsResponse = response_as(client_response(v).encode(v), v);
            let p = &theirs.responses[0].partitions[0];
            assert_eq!((p.partition_index, p.error_code), (0, 39), "v{v}");
            assert_eq!(p.error_message.as_deref(), Some("broker 9 is not registered"));
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::AlterPartitionReassignmentsRequest =
                client_round_trip(v, &req, req.encode(v), AlterPartitionReassignmentsRequest::decode);
            assert_eq!(theirs.topics[0].partitions[1].replicas, None);
            let resp = client_response(v);
            let _: kp::AlterPartitionReassignmentsResponse =
                client_round_trip(v, &resp, resp.encode(v), AlterPartitionReassignmentsResponse::decode);
        }
    }
}
