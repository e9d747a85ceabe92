//! ElectLeaders (key 43), v0–v2, flexible from v2 (KIP-460): elect the preferred (first)
//! replica as leader of the named partitions, or of every partition (a null list). v1 adds the
//! election type (0 preferred, 1 unclean) and a top-level error code.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 43;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;
pub const FLEXIBLE_MIN: i16 = 2;
/// `election_type` values.
pub const ELECTION_PREFERRED: i8 = 0;
pub const ELECTION_UNCLEAN: i8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElectLeadersRequest {
    /// v1+; preferred (0) in v0.
    pub election_type: i8,
    /// `None`: every partition.
    pub topic_partitions: Option<Vec<ElectTopic>>,
    pub timeout_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElectTopic {
    pub topic: String,
    pub partitions: Vec<i32>,
}

impl ElectLeadersRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let election_type = if version >= 1 { r.i8()? } else { ELECTION_PREFERRED };
        let topic_partitions = r.nullable_array(flex, min_bytes::string(flex) + min_bytes::array(flex), |r| {
            let topic = r.string(flex, "topic_partitions.topic")?;
            let partitions = r.array(flex, 4, |r| r.i32())?;
            r.skip_tagged_fields(flex)?;
            Ok(ElectTopic { topic, partitions })
        })?;
        let timeout_ms = r.i32()?;
        r.skip_tagged_fields(flex)?;
        Ok(ElectLeadersRequest {
            election_type,
            topic_partitions,
            timeout_ms,
        })
    }

    /// Client side.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i8(self.election_type);
        }
        w.nullable_array(flex, self.topic_partitions.as_deref(), |w, t| {
            w.string(flex, &t.topic);
            w.array(flex, &t.partitions, |w, p| w.i32(*p));
            w.no_tagged_fields(flex);
        });
        w.i32(self.timeout_ms);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElectLeadersResponse {
    pub throttle_time_ms: i32,
    /// v1+.
    pub error_code: i16,
    pub replica_election_results: Vec<ReplicaElectionResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaElectionResult {
    pub topic: String,
    pub partition_result: Vec<PartitionResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionResult {
    pub partition_id: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl ElectLeadersResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        if version >= 1 {
            w.i16(self.error_code);
        }
        w.array(flex, &self.replica_election_results, |w, t| {
            w.string(flex, &t.topic);
            w.array(flex, &t.partition_result, |w, p| {
                w.i32(p.partition_id);
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
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = r.i32()?;
        let error_code = if version >= 1 { r.i16()? } else { 0 };
        let string = min_bytes::string(flex);
        let replica_election_results = r.array(flex, string + min_bytes::array(flex), |r| {
            let topic = r.string(flex, "replica_election_results.topic")?;
            let partition_result = r.array(flex, 4 + 2 + string, |r| {
                let partition_id = r.i32()?;
                let error_code = r.i16()?;
                let error_message = r.nullable_string(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(PartitionResult {
                    partition_id,
                    error_code,
                    error_message,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ReplicaElectionResult {
                topic,
                partition_result,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ElectLeadersResponse {
            throttle_time_ms,
            error_code,
            replica_election_results,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::elect_leaders_request as kq;

    pub(crate) fn sample(v: i16) -> kp::ElectLeadersRequest {
        let mut sent = kp::ElectLeadersRequest::default();
        if v >= 1 {
            sent.election_type = ELECTION_PREFERRED;
        }
        let mut topic = kq::TopicPartitions::default();
        topic.topic = kp::TopicName(s("orders"));
        topic.partitions = vec![0, 2];
        if v >= FLEXIBLE_MIN {
            topic.unknown_tagged_fields = unknown_tags();
        }
        sent.topic_partitions = Some(vec![topic]);
        sent.timeout_ms = 30_000;
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
            let Request::ElectLeaders(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = ElectLeadersRequest {
                election_type: ELECTION_PREFERRED,
                topic_partitions: Some(vec![ElectTopic {
                    topic: "orders".into(),
                    partitions: vec![0, 2],
                }]),
                timeout_ms: 30_000,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    pub(crate) fn client_request(_v: i16) -> ElectLeadersRequest {
        ElectLeadersRequest {
            election_type: ELECTION_PREFERRED,
            topic_partitions: None,
            timeout_ms: 3000,
        }
    }

    pub(crate) fn client_response(v: i16) -> ElectLeadersResponse {
        ElectLeadersResponse {
            throttle_time_ms: 0,
            error_code: 0,
            replica_election_results: vec![ReplicaElectionResult {
                topic: "t".into(),
                partition_result: vec![PartitionResult {
                    partition_id: 1,
                    error_code: crate::ErrorCode::ElectionNotNeeded.code(),
                    error_message: (v >= 0).then(|| "already the preferred leader".into()),
                }],
            }],
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::ElectLeadersResponse = response_as(client_response(v).encode(v), v);
            let p = &theirs.replica_election_results[0].partition_result[0];
            assert_eq!((p.partition_id, p.error_code), (1, 84), "v{v}");
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let _: kp::ElectLeadersRequest = client_round_trip(v, &req, req.encode(v), ElectLeadersRequest::decode);
            let resp = client_response(v);
            let _: kp::ElectLeadersResponse = client_round_trip(v, &resp, resp.encode(v), ElectLeadersResponse::decode);
        }
    }
}
