//! ListOffsets (key 2), v1–v7: the offset for a timestamp, or the earliest (-2) / latest (-1) /
//! max-timestamp (-3, v7+) offset of a partition. Flexible from v6.
//!
//! v0's multi-offset form (`max_num_offsets`) is not supported: every client that speaks v1+
//! uses the single-offset form.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 2;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 7;
pub const FLEXIBLE_MIN: i16 = 6;

/// Special timestamps a request may ask for.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsRequest {
    pub replica_id: i32,
    /// v2+; 0 (read_uncommitted) before.
    pub isolation_level: i8,
    pub topics: Vec<ListOffsetsTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopic {
    pub name: String,
    pub partitions: Vec<ListOffsetsPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsPartition {
    pub partition_index: i32,
    /// v4+; -1 before.
    pub current_leader_epoch: i32,
    pub timestamp: i64,
}

impl ListOffsetsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let replica_id = r.i32()?;
        let isolation_level = if version >= 2 { r.i8()? } else { 0 };
        let part_min = 4 + 8 + min_bytes::tags(flex);
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + min_bytes::tags(flex);
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, part_min, |r| {
                let partition_index = r.i32()?;
                let current_leader_epoch = if version >= 4 { r.i32()? } else { -1 };
                let timestamp = r.i64()?;
                r.skip_tagged_fields(flex)?;
                Ok(ListOffsetsPartition {
                    partition_index,
                    current_leader_epoch,
                    timestamp,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ListOffsetsTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ListOffsetsRequest {
            replica_id,
            isolation_level,
            topics,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsResponse {
    /// v2+.
    pub throttle_time_ms: i32,
    pub topics: Vec<ListOffsetsTopicResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopicResponse {
    pub name: String,
    pub partitions: Vec<ListOffsetsPartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsPartitionResponse {
    pub partition_index: i32,
    pub error_code: i16,
    pub timestamp: i64,
    pub offset: i64,
    /// v4+.
    pub leader_epoch: i32,
}

impl ListOffsetsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 2 {
            w.i32(self.throttle_time_ms);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                w.i16(p.error_code);
                w.i64(p.timestamp);
                w.i64(p.offset);
                if version >= 4 {
                    w.i32(p.leader_epoch);
                }
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl ListOffsetsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.replica_id);
        if version >= 2 {
            w.i8(self.isolation_level);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                if version >= 4 {
                    w.i32(p.current_leader_epoch);
                }
                w.i64(p.timestamp);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl ListOffsetsResponse {
    /// Fields a version lacks take Kafka's defaults (leader epoch -1).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 2 { r.i32()? } else { 0 };
        let tags = min_bytes::tags(flex);
        let part_min = 4 + 2 + 8 + 8 + if version >= 4 { 4 } else { 0 } + tags;
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, part_min, |r| {
                let partition_index = r.i32()?;
                let error_code = r.i16()?;
                let timestamp = r.i64()?;
                let offset = r.i64()?;
                let leader_epoch = if version >= 4 { r.i32()? } else { -1 };
                r.skip_tagged_fields(flex)?;
                Ok(ListOffsetsPartitionResponse {
                    partition_index,
                    error_code,
                    timestamp,
                    offset,
                    leader_epoch,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ListOffsetsTopicResponse { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ListOffsetsResponse {
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
    use kafka_protocol::messages::list_offsets_request as klq;
    use kafka_protocol::messages::list_offsets_response as kls;

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::ListOffsetsRequest {
        let mut p = klq::ListOffsetsPartition::default();
        p.partition_index = 1;
        p.current_leader_epoch = if v >= 4 { 3 } else { -1 };
        p.timestamp = EARLIEST_TIMESTAMP;
        let mut t = klq::ListOffsetsTopic::default();
        t.name = kp::TopicName(s("orders"));
        t.partitions = vec![p];
        let mut sent = kp::ListOffsetsRequest::default();
        sent.replica_id = kp::BrokerId(-1);
        sent.isolation_level = if v >= 2 { 1 } else { 0 };
        sent.topics = vec![t];
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
            let Request::ListOffsets(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = ListOffsetsRequest {
                replica_id: -1,
                isolation_level: if v >= 2 { 1 } else { 0 },
                topics: vec![ListOffsetsTopic {
                    name: "orders".into(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: 1,
                        current_leader_epoch: if v >= 4 { 3 } else { -1 },
                        timestamp: EARLIEST_TIMESTAMP,
                    }],
                }],
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = ListOffsetsResponse {
            throttle_time_ms: 2,
            topics: vec![ListOffsetsTopicResponse {
                name: "orders".into(),
                partitions: vec![ListOffsetsPartitionResponse {
                    partition_index: 1,
                    error_code: 0,
                    timestamp: -1,
                    offset: 42,
                    leader_epoch: 3,
                }],
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::ListOffsetsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 2 { 2 } else { 0 });
            let t = &theirs.topics[0];
            assert_eq!(&*t.name.0, "orders");
            let p: &kls::ListOffsetsPartitionResponse = &t.partitions[0];
            assert_eq!((p.partition_index, p.error_code, p.timestamp, p.offset), (1, 0, -1, 42));
            assert_eq!(p.leader_epoch, if v >= 4 { 3 } else { -1 });
        }
    }

    pub(crate) fn client_request(v: i16) -> ListOffsetsRequest {
        ListOffsetsRequest {
            replica_id: -1,
            isolation_level: if v >= 2 { 1 } else { 0 },
            topics: vec![ListOffsetsTopic {
                name: "orders".into(),
                partitions: vec![
                    ListOffsetsPartition {
                        partition_index: 0,
                        current_leader_epoch: if v >= 4 { 3 } else { -1 },
                        timestamp: EARLIEST_TIMESTAMP,
                    },
                    ListOffsetsPartition {
                        partition_index: 1,
                        current_leader_epoch: -1,
                        timestamp: 1_700_000_000_000,
                    },
                ],
            }],
        }
    }

    pub(crate) fn client_response(v: i16) -> ListOffsetsResponse {
        ListOffsetsResponse {
            throttle_time_ms: if v >= 2 { 9 } else { 0 },
            topics: vec![ListOffsetsTopicResponse {
                name: "orders".into(),
                partitions: vec![ListOffsetsPartitionResponse {
                    partition_index: 1,
                    error_code: 0,
                    timestamp: 1_700_000_000_123,
                    offset: 42,
                    leader_epoch: if v >= 4 { 3 } else { -1 },
                }],
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::ListOffsetsRequest = client_round_trip(v, &req, req.encode(v), ListOffsetsRequest::decode);
            let p = &theirs.topics[0].partitions;
            assert_eq!((p[0].timestamp, p[1].partition_index), (EARLIEST_TIMESTAMP, 1));
            let resp = client_response(v);
            let theirs: kp::ListOffsetsResponse =
                client_round_trip(v, &resp, resp.encode(v), ListOffsetsResponse::decode);
            assert_eq!(theirs.topics[0].partitions[0].offset, 42);
        }
    }
}
