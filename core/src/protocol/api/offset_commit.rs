//! OffsetCommit (key 8), v2–v8: a consumer group commits its positions. Flexible from v8.
//! `retention_time_ms` exists only in v2–v4 (later the broker's `offsets.retention.minutes`
//! rules); committed leader epochs from v6 (KIP-320), static members from v7.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 8;
pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 8;
pub const FLEXIBLE_MIN: i16 = 8;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    /// -1 for a commit from outside any generation (simple consumers).
    pub generation_id: i32,
    pub member_id: String,
    /// v7+.
    pub group_instance_id: Option<String>,
    /// v2–v4; -1 (broker default) otherwise.
    pub retention_time_ms: i64,
    pub topics: Vec<OffsetCommitTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopic {
    pub name: String,
    pub partitions: Vec<OffsetCommitPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitPartition {
    pub partition_index: i32,
    pub committed_offset: i64,
    /// v6+; -1 before.
    pub committed_leader_epoch: i32,
    pub committed_metadata: Option<String>,
}

impl OffsetCommitRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let group_id = r.string(flex, "group_id")?;
        let generation_id = r.i32()?;
        let member_id = r.string(flex, "member_id")?;
        let group_instance_id = if version >= 7 { r.nullable_string(flex)? } else { None };
        let retention_time_ms = if version <= 4 { r.i64()? } else { -1 };
        let tags = min_bytes::tags(flex);
        let part_min = 4 + 8 + min_bytes::string(flex) + tags;
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, part_min, |r| {
                let partition_index = r.i32()?;
                let committed_offset = r.i64()?;
                let committed_leader_epoch = if version >= 6 { r.i32()? } else { -1 };
                let committed_metadata = r.nullable_string(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(OffsetCommitPartition {
                    partition_index,
                    committed_offset,
                    committed_leader_epoch,
                    committed_metadata,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(OffsetCommitTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetCommitRequest {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            retention_time_ms,
            topics,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponse {
    /// v3+.
    pub throttle_time_ms: i32,
    pub topics: Vec<OffsetCommitTopicResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopicResponse {
    pub name: String,
    /// (partition_index, error_code)
    pub partitions: Vec<(i32, i16)>,
}

impl OffsetCommitResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 3 {
            w.i32(self.throttle_time_ms);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, &(index, error_code)| {
                w.i32(index);
                w.i16(error_code);
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

impl OffsetCommitRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.string(flex, &self.group_id);
        w.i32(self.generation_id);
        w.string(flex, &self.member_id);
        if version >= 7 {
            w.nullable_string(flex, self.group_instance_id.as_deref());
        }
        if version <= 4 {
            w.i64(self.retention_time_ms);
        }
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition_index);
                w.i64(p.committed_offset);
                if version >= 6 {
                    w.i32(p.committed_leader_epoch);
                }
                w.nullable_string(flex, p.committed_metadata.as_deref());
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl OffsetCommitResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 3 { r.i32()? } else { 0 };
        let tags = min_bytes::tags(flex);
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.string(flex, "topics.name")?;
            let partitions = r.array(flex, 4 + 2 + tags, |r| {
                let index = r.i32()?;
                let error_code = r.i16()?;
                r.skip_tagged_fields(flex)?;
                Ok((index, error_code))
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(OffsetCommitTopicResponse { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetCommitResponse {
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
    use kafka_protocol::messages::offset_commit_request as kq;

    pub(crate) fn sample(v: i16) -> kp::OffsetCommitRequest {
        let mut p = kq::OffsetCommitRequestPartition::default();
        p.partition_index = 1;
        p.committed_offset = 500;
        if v >= 6 {
            p.committed_leader_epoch = 4;
        }
        p.committed_metadata = Some(s("meta"));
        let mut t = kq::OffsetCommitRequestTopic::default();
        t.name = kp::TopicName(s("orders"));
        t.partitions = vec![p];
        let mut sent = kp::OffsetCommitRequest::default();
        sent.group_id = kp::GroupId(s("group-a"));
        sent.generation_id_or_member_epoch = 7;
        sent.member_id = s("m-1");
        if v >= 7 {
            sent.group_instance_id = Some(s("instance-1"));
        }
        if v <= 4 {
            sent.retention_time_ms = 86_400_000;
        }
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
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::OffsetCommit(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = OffsetCommitRequest {
                group_id: "group-a".into(),
                generation_id: 7,
                member_id: "m-1".into(),
                group_instance_id: if v >= 7 { Some("instance-1".into()) } else { None },
                retention_time_ms: if v <= 4 { 86_400_000 } else { -1 },
                topics: vec![OffsetCommitTopic {
                    name: "orders".into(),
                    partitions: vec![OffsetCommitPartition {
                        partition_index: 1,
                        committed_offset: 500,
                        committed_leader_epoch: if v >= 6 { 4 } else { -1 },
                        committed_metadata: Some("meta".into()),
                    }],
                }],
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = OffsetCommitResponse {
            throttle_time_ms: 6,
            topics: vec![OffsetCommitTopicResponse {
                name: "orders".into(),
                partitions: vec![(1, 0), (2, 22)],
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::OffsetCommitResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 3 { 6 } else { 0 });
            let t = &theirs.topics[0];
            assert_eq!(&*t.name.0, "orders");
            let parts: Vec<(i32, i16)> = t.partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
            assert_eq!(parts, [(1, 0), (2, 22)]);
        }
    }

    pub(crate) fn client_request(v: i16) -> OffsetCommitRequest {
        OffsetCommitRequest {
            group_id: "g".into(),
            generation_id: 5,
            member_id: "m".into(),
            group_instance_id: if v >= 7 { Some("i".into()) } else { None },
            retention_time_ms: if v <= 4 { 86_400_000 } else { -1 },
            topics: vec![OffsetCommitTopic {
                name: "orders".into(),
                partitions: vec![
                    OffsetCommitPartition {
                        partition_index: 0,
                        committed_offset: 100,
                        committed_leader_epoch: if v >= 6 { 4 } else { -1 },
                        committed_metadata: Some("meta".into()),
                    },
                    OffsetCommitPartition {
                        partition_index: 1,
                        committed_offset: 200,
                        committed_leader_epoch: -1,
                        committed_metadata: None,
                    },
                ],
            }],
        }
    }

    pub(crate) fn client_response(v: i16) -> OffsetCommitResponse {
        OffsetCommitResponse {
            throttle_time_ms: if v >= 3 { 2 } else { 0 },
            topics: vec![OffsetCommitTopicResponse {
                name: "orders".into(),
                partitions: vec![(0, 0), (1, crate::ErrorCode::NotCoordinator.code())],
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::OffsetCommitRequest =
                client_round_trip(v, &req, req.encode(v), OffsetCommitRequest::decode);
            let p = &theirs.topics[0].partitions;
            assert_eq!((p[0].committed_offset, p[1].committed_offset), (100, 200));
            let resp = client_response(v);
            let theirs: kp::OffsetCommitResponse =
                client_round_trip(v, &resp, resp.encode(v), OffsetCommitResponse::decode);
            assert_eq!(theirs.topics[0].partitions[1].error_code, 16);
        }
    }
}
