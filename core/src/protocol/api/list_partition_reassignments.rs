//! ListPartitionReassignments (key 46), v0, flexible (KIP-455): the reassignments in progress,
//! for the named partitions or (a null topic list) all of them, each with its full replica set
//! and the replicas being added and removed.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 46;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;
pub const FLEXIBLE_MIN: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPartitionReassignmentsRequest {
    pub timeout_ms: i32,
    /// `None`: every partition being reassigned.
    pub topics: Option<Vec<ListTopic>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTopic {
    pub name: String,
    pub partition_indexes: Vec<i32>,
}

impl ListPartitionReassignmentsRequest {
    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let timeout_ms = r.i32()?;
        let topics = r.nullable_array(flex, min_bytes::string(flex) + min_bytes::array(flex) + 1, |r| {
            let name = r.string(flex, "topics.name")?;
            let partition_indexes = r.array(flex, 4, |r| r.i32())?;
            r.skip_tagged_fields(flex)?;
            Ok(ListTopic {
                name,
                partition_indexes,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ListPartitionReassignmentsRequest { timeout_ms, topics })
    }

    /// Client side.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.timeout_ms);
        w.nullable_array(flex, self.topics.as_deref(), |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partition_indexes, |w, p| w.i32(*p));
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPartitionReassignmentsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub topics: Vec<OngoingTopicReassignment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OngoingTopicReassignment {
    pub name: String,
    pub partitions: Vec<OngoingPartitionReassignment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OngoingPartitionReassignment {
    pub partition_index: i32,
    /// The full replica set (target first, then the replicas being removed).
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl ListPartitionReassignmentsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code);
        w.nullable_string(flex, self.error_message.as_deref());
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                for list in [&p.replicas, &p.adding_replicas, &p.removing_replicas] {
                    w.array(flex, list, |w, b| w.i32(*b));
                }
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    /// Client side, from untrusted bytes.
    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let throttle_time_ms = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.nullable_string(flex)?;
        let topics = r.array(flex, min_bytes::string(flex) + min_bytes::array(flex) + 1, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, 4 + 3 * min_bytes::array(flex) + 1, |r| {
                let partition_index = r.i32()?;
                let replicas = r.array(flex, 4, |r| r.i32())?;
                let adding_replicas = r.array(flex, 4, |r| r.i32())?;
                let removing_replicas = r.array(flex, 4, |r| r.i32())?;
                r.skip_tagged_fields(flex)?;
                Ok(OngoingPartitionReassignment {
                    partition_index,
                    replicas,
                    adding_replicas,
                    removing_replicas,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(OngoingTopicReassignment { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ListPartitionReassignmentsResponse {
            throttle_time_ms,
            error_code,
            error_message,
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
    use kafka_protocol::messages::list_partition_reassignments_request as kq;

    pub(crate) fn sample(_v: i16) -> kp::ListPartitionReassignmentsRequest {
        let mut sent = kp::ListPartitionReassignmentsRequest::default();
        sent.timeout_ms = 30_000;
        let mut topic = kq::ListPartitionReassignmentsTopics::default();
        topic.name = kp::TopicName(s("orders"));
        topic.partition_indexes = vec![0, 3];
        topic.unknown_tagged_fields = unknown_tags();
        sent.topics = Some(vec![topic]);
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        let mut all = kp::ListPartitionReassignmentsRequest::default();
        all.topics = None;
        vec![request_frame(API_KEY, 0, &sample(0)), request_frame(API_KEY, 0, &all)]
    }

    #[test]
    fn request_round_trips_named_and_all() {
        let (_, req) = decode_frame(&request_frame(API_KEY, 0, &sample(0)));
        let Request::ListPartitionReassignments(req) = req else {
            panic!("wrong api: {req:?}")
        };
        let want = ListPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics: Some(vec![ListTopic {
                name: "orders".into(),
                partition_indexes: vec![0, 3],
            }]),
        };
        assert_eq!(req, want);
        let (_, all) = decode_frame(&sample_frames()[1]);
        let Request::ListPartitionReassignments(all) = all else {
            panic!("wrong api")
        };
        assert_eq!(all.topics, None, "null means every reassignment");
    }

    pub(crate) fn client_request(_v: i16) -> ListPartitionReassignmentsRequest {
        ListPartitionReassignmentsRequest {
            timeout_ms: 3000,
            topics: None,
        }
    }

    pub(crate) fn client_response(_v: i16) -> ListPartitionReassignmentsResponse {
        ListPartitionReassignmentsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            topics: vec![OngoingTopicReassignment {
                name: "t".into(),
                partitions: vec![OngoingPartitionReassignment {
                    partition_index: 1,
                    replicas: vec![3, 1, 2, 0],
                    adding_replicas: vec![3],
                    removing_replicas: vec![0],
                }],
            }],
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let theirs: kp::ListPartitionReassignmentsResponse = response_as(client_response(0).encode(0), 0);
        let p = &theirs.topics[0].partitions[0];
        assert_eq!(p.partition_index, 1);
        assert_eq!(p.adding_replicas, vec![kp::BrokerId(3)]);
        assert_eq!(p.removing_replicas, vec![kp::BrokerId(0)]);
    }

    #[test]
    fn client_codec_round_trips() {
        let req = client_request(0);
        let _: kp::ListPartitionReassignmentsRequest =
            client_round_trip(0, &req, req.encode(0), ListPartitionReassignmentsRequest::decode);
        let resp = client_response(0);
        let _: kp::ListPartitionReassignmentsResponse =
            client_round_trip(0, &resp, resp.encode(0), ListPartitionReassignmentsResponse::decode);
    }
}
