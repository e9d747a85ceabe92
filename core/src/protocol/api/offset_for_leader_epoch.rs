//! OffsetForLeaderEpoch (key 23), v2–v4: a follower asks the leader where an epoch of its log
//! ends, to truncate divergent data (KIP-101/279). v2 adds `current_leader_epoch` (KIP-320),
//! v3 `replica_id`; flexible from v4. The answer is the largest epoch at or below the one asked
//! and its end offset, or (-1, -1) when the leader knows none.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 23;
pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderEpochRequest {
    /// v3+; -2 (a debugging client) before.
    pub replica_id: i32,
    pub topics: Vec<OffsetForLeaderTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderTopic {
    pub topic: String,
    pub partitions: Vec<OffsetForLeaderPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderPartition {
    pub partition: i32,
    /// The epoch the asker believes the leader is in; -1 skips the check.
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is asked for.
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderEpochResponse {
    pub throttle_time_ms: i32,
    pub topics: Vec<OffsetForLeaderTopicResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderTopicResult {
    pub topic: String,
    pub partitions: Vec<EpochEndOffset>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpochEndOffset {
    pub error_code: i16,
    pub partition: i32,
    pub leader_epoch: i32,
    pub end_offset: i64,
}

impl OffsetForLeaderEpochRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let replica_id = if version >= 3 { r.i32()? } else { -2 };
        let tags = min_bytes::tags(flex);
        let part_min = 4 + 4 + 4 + tags;
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let topic = r.string(flex, "topics.topic")?;
            let partitions = r.array(flex, part_min, |r| {
                let partition = r.i32()?;
                let current_leader_epoch = r.i32()?;
                let leader_epoch = r.i32()?;
                r.skip_tagged_fields(flex)?;
                Ok(OffsetForLeaderPartition {
                    partition,
                    current_leader_epoch,
                    leader_epoch,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(OffsetForLeaderTopic { topic, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetForLeaderEpochRequest { replica_id, topics })
    }

    /// Client side (a follower asking its leader).
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 3 {
            w.i32(self.replica_id);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.topic);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition);
                w.i32(p.current_leader_epoch);
                w.i32(p.leader_epoch);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl OffsetForLeaderEpochResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.topic);
            w.array(flex, &t.partitions, |w, p| {
                w.i16(p.error_code);
                w.i32(p.partition);
                w.i32(p.leader_epoch);
                w.i64(p.end_offset);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    /// Client side: the leader's answer, from an untrusted peer.
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = r.i32()?;
        let tags = min_bytes::tags(flex);
        let part_min = 2 + 4 + 4 + 8 + tags;
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let topic = r.string(flex, "topics.topic")?;
            let partitions = r.array(flex, part_min, |r| {
                let error_code = r.i16()?;
                let partition = r.i32()?;
                let leader_epoch = r.i32()?;
                let end_offset = r.i64()?;
                r.skip_tagged_fields(flex)?;
                Ok(EpochEndOffset {
                    error_code,
                    partition,
                    leader_epoch,
                    end_offset,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(OffsetForLeaderTopicResult { topic, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetForLeaderEpochResponse {
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
    use kafka_protocol::messages::offset_for_leader_epoch_request as kq;
    use kafka_protocol::messages::offset_for_leader_epoch_response as ks;

    /// A populated request as a Kafka follower encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::OffsetForLeaderEpochRequest {
        let mut p = kq::OffsetForLeaderPartition::default();
        p.partition = 2;
        p.current_leader_epoch = 5;
        p.leader_epoch = 4;
        let mut t = kq::OffsetForLeaderTopic::default();
        t.topic = kp::TopicName(s("orders"));
        t.partitions = vec![p];
        let mut sent = kp::OffsetForLeaderEpochRequest::default();
        sent.replica_id = kp::BrokerId(if v >= 3 { 1 } else { -2 });
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

    pub(crate) fn client_request(v: i16) -> OffsetForLeaderEpochRequest {
        ours(v)
    }

    pub(crate) fn client_response(_v: i16) -> OffsetForLeaderEpochResponse {
        answer()
    }

    fn ours(v: i16) -> OffsetForLeaderEpochRequest {
        OffsetForLeaderEpochRequest {
            replica_id: if v >= 3 { 1 } else { -2 },
            topics: vec![OffsetForLeaderTopic {
                topic: "orders".into(),
                partitions: vec![OffsetForLeaderPartition {
                    partition: 2,
                    current_leader_epoch: 5,
                    leader_epoch: 4,
                }],
            }],
        }
    }

    fn answer() -> OffsetForLeaderEpochResponse {
        OffsetForLeaderEpochResponse {
            throttle_time_ms: 3,
            topics: vec![OffsetForLeaderTopicResult {
                topic: "orders".into(),
                partitions: vec![EpochEndOffset {
                    error_code: 0,
                    partition: 2,
                    leader_epoch: 4,
                    end_offset: 77,
                }],
            }],
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::OffsetForLeaderEpoch(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req, ours(v), "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::OffsetForLeaderEpochResponse = response_as(answer().encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 3);
            let p: &ks::EpochEndOffset = &theirs.topics[0].partitions[0];
            assert_eq!((p.error_code, p.partition, p.leader_epoch, p.end_offset), (0, 2, 4, 77));
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = ours(v);
            let theirs: kp::OffsetForLeaderEpochRequest =
                client_round_trip(v, &req, req.encode(v), OffsetForLeaderEpochRequest::decode);
            assert_eq!(theirs.topics[0].partitions[0].leader_epoch, 4);
            let resp = answer();
            let theirs: kp::OffsetForLeaderEpochResponse =
                client_round_trip(v, &resp, resp.encode(v), OffsetForLeaderEpochResponse::decode);
            assert_eq!(theirs.topics[0].partitions[0].end_offset, 77);
        }
    }
}
