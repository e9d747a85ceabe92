//! OffsetFetch (key 9), v1–v8: a consumer group reads its committed positions. Flexible from
//! v6. From v8 (KIP-709) one request covers many groups; before, one group at the top level.
//! Both forms decode to `groups` and encode from it, so callers handle one shape.
//! `topics: None` asks for every partition the group has committed (v2+).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 9;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 8;
pub const FLEXIBLE_MIN: i16 = 6;
/// First version with the batched `groups` form.
pub const GROUPS_MIN: i16 = 8;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchRequest {
    pub groups: Vec<OffsetFetchGroup>,
    /// v7+: wait out pending transactional commits (KIP-447).
    pub require_stable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchGroup {
    pub group_id: String,
    /// `None`: all topics (v2+).
    pub topics: Option<Vec<OffsetFetchTopic>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopic {
    pub name: String,
    pub partition_indexes: Vec<i32>,
}

fn decode_topics(version: i16, flex: bool, r: &mut Reader<'_>) -> Result<Option<Vec<OffsetFetchTopic>>> {
    let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + min_bytes::tags(flex);
    let topic = |r: &mut Reader<'_>| {
        let name = r.string(flex, "topics.name")?;
        let partition_indexes = r.array(flex, min_bytes::I32, |r| r.i32())?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetFetchTopic {
            name,
            partition_indexes,
        })
    };
    if version >= 2 {
        r.nullable_array(flex, topic_min, topic)
    } else {
        r.array(flex, topic_min, topic).map(Some)
    }
}

impl OffsetFetchRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let groups = if version >= GROUPS_MIN {
            let group_min = min_bytes::string(flex) + min_bytes::array(flex) + 1;
            r.array(flex, group_min, |r| {
                let group_id = r.string(flex, "groups.group_id")?;
                let topics = decode_topics(version, flex, r)?;
                r.skip_tagged_fields(flex)?;
                Ok(OffsetFetchGroup { group_id, topics })
            })?
        } else {
            let group_id = r.string(flex, "group_id")?;
            let topics = decode_topics(version, flex, r)?;
            vec![OffsetFetchGroup { group_id, topics }]
        };
        let require_stable = if version >= 7 { r.bool()? } else { false };
        r.skip_tagged_fields(flex)?;
        Ok(OffsetFetchRequest { groups, require_stable })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponse {
    /// v3+.
    pub throttle_time_ms: i32,
    /// One per requested group; before v8 exactly one, written at the top level.
    pub groups: Vec<OffsetFetchGroupResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchGroupResponse {
    pub group_id: String,
    pub topics: Vec<OffsetFetchTopicResponse>,
    /// Group-level error: v2+ (v0–v1 carry errors per partition only).
    pub error_code: i16,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopicResponse {
    pub name: String,
    pub partitions: Vec<OffsetFetchPartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchPartitionResponse {
    pub partition_index: i32,
    /// -1 when nothing is committed.
    pub committed_offset: i64,
    /// v5+.
    pub committed_leader_epoch: i32,
    pub metadata: Option<String>,
    pub error_code: i16,
}

fn encode_topics(w: &mut Writer, version: i16, flex: bool, topics: &[OffsetFetchTopicResponse]) {
    w.array(flex, topics, |w, t| {
        w.string(flex, &t.name);
        w.array(flex, &t.partitions, |w, p| {
            w.i32(p.partition_index);
            w.i64(p.committed_offset);
            if version >= 5 {
                w.i32(p.committed_leader_epoch);
            }
            w.nullable_string(flex, p.metadata.as_deref());
            w.i16(p.error_code);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
    });
}

impl OffsetFetchResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 3 {
            w.i32(self.throttle_time_ms);
        }
        if version >= GROUPS_MIN {
            w.array(flex, &self.groups, |w, g| {
                w.string(flex, &g.group_id);
                encode_topics(w, version, flex, &g.topics);
                w.i16(g.error_code);
                w.no_tagged_fields(flex);
            });
        } else {
            assert_eq!(self.groups.len(), 1, "v1-v7 answer exactly one group");
            let g = &self.groups[0];
            encode_topics(&mut w, version, flex, &g.topics);
            if version >= 2 {
                w.i16(g.error_code);
            }
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

/// v1 cannot ask for all topics (null): `topics: None` there is a programmer error.
fn encode_request_topics(w: &mut Writer, version: i16, flex: bool, topics: Option<&[OffsetFetchTopic]>) {
    assert!(version >= 2 || topics.is_some(), "v1 cannot ask for all topics");
    w.nullable_array(flex, topics, |w, t| {
        w.string(flex, &t.name);
        w.array(flex, &t.partition_indexes, |w, p| w.i32(*p));
        w.no_tagged_fields(flex);
    });
}

impl OffsetFetchRequest {
    /// Before v8 exactly one group: another count is a programmer error.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= GROUPS_MIN {
            w.array(flex, &self.groups, |w, g| {
                w.string(flex, &g.group_id);
                encode_request_topics(w, version, flex, g.topics.as_deref());
                w.no_tagged_fields(flex);
            });
        } else {
            assert_eq!(self.groups.len(), 1, "v1-v7 ask for exactly one group");
            let g = &self.groups[0];
            w.string(flex, &g.group_id);
            encode_request_topics(&mut w, version, flex, g.topics.as_deref());
        }
        if version >= 7 {
            w.bool(self.require_stable);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

fn decode_response_topics(version: i16, flex: bool, r: &mut Reader<'_>) -> Result<Vec<OffsetFetchTopicResponse>> {
    let string = min_bytes::string(flex);
    let tags = min_bytes::tags(flex);
    let part_min = 4 + 8 + if version >= 5 { 4 } else { 0 } + string + 2 + tags;
    let topic_min = string + min_bytes::array(flex) + tags;
    r.array(flex, topic_min, |r| {
        let name = r.string(flex, "topics.name")?;
        let partitions = r.array(flex, part_min, |r| {
            let partition_index = r.i32()?;
            let committed_offset = r.i64()?;
            let committed_leader_epoch = if version >= 5 { r.i32()? } else { -1 };
            let metadata = r.nullable_string(flex)?;
            let error_code = r.i16()?;
            r.skip_tagged_fields(flex)?;
            Ok(OffsetFetchPartitionResponse {
                partition_index,
                committed_offset,
                committed_leader_epoch,
                metadata,
                error_code,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(OffsetFetchTopicResponse { name, partitions })
    })
}

impl OffsetFetchResponse {
    /// Before v8 the one answer becomes one group whose `group_id` is empty (the wire does not
    /// repeat it: it is the group the request asked about).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 3 { r.i32()? } else { 0 };
        let groups = if version >= GROUPS_MIN {
            let group_min = min_bytes::string(flex) + min_bytes::array(flex) + 2 + min_bytes::tags(flex);
            r.array(flex, group_min, |r| {
                let group_id = r.string(flex, "groups.group_id")?;
                let topics = decode_response_topics(version, flex, r)?;
                let error_code = r.i16()?;
                r.skip_tagged_fields(flex)?;
                Ok(OffsetFetchGroupResponse {
                    group_id,
                    topics,
                    error_code,
                })
            })?
        } else {
            let topics = decode_response_topics(version, flex, r)?;
            let error_code = if version >= 2 { r.i16()? } else { 0 };
            vec![OffsetFetchGroupResponse {
                group_id: String::new(),
                topics,
                error_code,
            }]
        };
        r.skip_tagged_fields(flex)?;
        Ok(OffsetFetchResponse {
            throttle_time_ms,
            groups,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::offset_fetch_request as kq;

    pub(crate) fn sample(v: i16) -> kp::OffsetFetchRequest {
        let mut sent = kp::OffsetFetchRequest::default();
        if v >= GROUPS_MIN {
            let mut t = kq::OffsetFetchRequestTopics::default();
            t.name = kp::TopicName(s("orders"));
            t.partition_indexes = vec![0, 1];
            let mut g = kq::OffsetFetchRequestGroup::default();
            g.group_id = kp::GroupId(s("group-a"));
            g.topics = Some(vec![t]);
            let mut all = kq::OffsetFetchRequestGroup::default();
            all.group_id = kp::GroupId(s("group-b"));
            all.topics = None;
            sent.groups = vec![g, all];
        } else {
            let mut t = kq::OffsetFetchRequestTopic::default();
            t.name = kp::TopicName(s("orders"));
            t.partition_indexes = vec![0, 1];
            sent.group_id = kp::GroupId(s("group-a"));
            sent.topics = Some(vec![t]);
        }
        sent.require_stable = v >= 7;
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
            let Request::OffsetFetch(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let mut groups = vec![OffsetFetchGroup {
                group_id: "group-a".into(),
                topics: Some(vec![OffsetFetchTopic {
                    name: "orders".into(),
                    partition_indexes: vec![0, 1],
                }]),
            }];
            if v >= GROUPS_MIN {
                groups.push(OffsetFetchGroup {
                    group_id: "group-b".into(),
                    topics: None,
                });
            }
            let want = OffsetFetchRequest {
                groups,
                require_stable: v >= 7,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn all_topics_is_null_from_v2() {
        for v in 2..GROUPS_MIN {
            let mut sent = kp::OffsetFetchRequest::default();
            sent.group_id = kp::GroupId(s("group-a"));
            sent.topics = None;
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            let Request::OffsetFetch(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.groups[0].topics, None, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = OffsetFetchResponse {
            throttle_time_ms: 8,
            groups: vec![OffsetFetchGroupResponse {
                group_id: "group-a".into(),
                topics: vec![OffsetFetchTopicResponse {
                    name: "orders".into(),
                    partitions: vec![OffsetFetchPartitionResponse {
                        partition_index: 1,
                        committed_offset: 500,
                        committed_leader_epoch: 4,
                        metadata: Some("meta".into()),
                        error_code: 0,
                    }],
                }],
                error_code: 16,
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::OffsetFetchResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 3 { 8 } else { 0 });
            let epoch = if v >= 5 { 4 } else { -1 };
            if v >= GROUPS_MIN {
                let g = &theirs.groups[0];
                assert_eq!((&*g.group_id.0, g.error_code), ("group-a", 16));
                let p = &g.topics[0].partitions[0];
                assert_eq!((p.partition_index, p.committed_offset), (1, 500));
                assert_eq!(p.committed_leader_epoch, epoch);
                assert_eq!(p.metadata.as_deref(), Some("meta"));
            } else {
                assert_eq!(theirs.error_code, if v >= 2 { 16 } else { 0 });
                let t = &theirs.topics[0];
                assert_eq!(&*t.name.0, "orders");
                let p = &t.partitions[0];
                assert_eq!((p.partition_index, p.committed_offset), (1, 500));
                assert_eq!(p.committed_leader_epoch, epoch);
                assert_eq!(p.metadata.as_deref(), Some("meta"));
            }
        }
    }

    pub(crate) fn client_request(v: i16) -> OffsetFetchRequest {
        let orders = OffsetFetchTopic {
            name: "orders".into(),
            partition_indexes: vec![0, 1],
        };
        let mut groups = vec![OffsetFetchGroup {
            group_id: "g1".into(),
            topics: Some(vec![orders]),
        }];
        if v >= GROUPS_MIN {
            groups.push(OffsetFetchGroup {
                group_id: "g2".into(),
                topics: None,
            });
        }
        OffsetFetchRequest {
            groups,
            require_stable: v >= 7,
        }
    }

    pub(crate) fn client_response(v: i16) -> OffsetFetchResponse {
        let topics = vec![OffsetFetchTopicResponse {
            name: "orders".into(),
            partitions: vec![
                OffsetFetchPartitionResponse {
                    partition_index: 0,
                    committed_offset: 100,
                    committed_leader_epoch: if v >= 5 { 4 } else { -1 },
                    metadata: Some("meta".into()),
                    error_code: 0,
                },
                OffsetFetchPartitionResponse {
                    partition_index: 1,
                    committed_offset: -1,
                    committed_leader_epoch: -1,
                    metadata: None,
                    error_code: crate::ErrorCode::UnknownTopicOrPartition.code(),
                },
            ],
        }];
        let groups = if v >= GROUPS_MIN {
            vec![
                OffsetFetchGroupResponse {
                    group_id: "g1".into(),
                    topics,
                    error_code: 0,
                },
                OffsetFetchGroupResponse {
                    group_id: "g2".into(),
                    topics: vec![],
                    error_code: crate::ErrorCode::NotCoordinator.code(),
                },
            ]
        } else {
            vec![OffsetFetchGroupResponse {
                group_id: String::new(),
                topics,
                error_code: if v >= 2 {
                    crate::ErrorCode::CoordinatorNotAvailable.code()
                } else {
                    0
                },
            }]
        };
        OffsetFetchResponse {
            throttle_time_ms: if v >= 3 { 5 } else { 0 },
            groups,
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::OffsetFetchRequest = client_round_trip(v, &req, req.encode(v), OffsetFetchRequest::decode);
            if v < GROUPS_MIN {
                assert_eq!(&*theirs.group_id.0, "g1");
            } else {
                assert_eq!(theirs.groups.len(), 2);
            }
            let resp = client_response(v);
            let _: kp::OffsetFetchResponse = client_round_trip(v, &resp, resp.encode(v), OffsetFetchResponse::decode);
        }
    }
}
