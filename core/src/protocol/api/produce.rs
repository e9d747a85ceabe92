//! Produce (key 0), v3–v9: record sets in, base offsets out. Flexible from v9.
//!
//! The record set of each partition is kept as the raw bytes the producer sent (RecordBatch v2
//! for v3+); `record::` validates it, the log stores it as is. When the frame was decoded with
//! `decode_request_bytes`, these `Bytes` share the frame's allocation.

use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 0;
pub const VERSION_MIN: i16 = 3;
pub const VERSION_MAX: i16 = 9;
pub const FLEXIBLE_MIN: i16 = 9;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<ProduceTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopic {
    pub name: Arc<str>,
    pub partitions: Vec<ProducePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartition {
    pub index: i32,
    /// The record set exactly as sent; `None` if the producer sent null.
    pub records: Option<Bytes>,
}

impl ProduceRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let transactional_id = r.nullable_string(flex)?;
        let acks = r.i16()?;
        let timeout_ms = r.i32()?;
        let part_min = 4 + min_bytes::array(flex) + min_bytes::tags(flex);
        let topic_min = min_bytes::string(flex) + min_bytes::array(flex) + min_bytes::tags(flex);
        let topics = r.array(flex, topic_min, |r| {
            let name = r.topic_name(flex, "topic_data.name")?;
            let partitions = r.array(flex, part_min, |r| {
                let index = r.i32()?;
                let records = r.nullable_bytes(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(ProducePartition { index, records })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ProduceTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ProduceRequest {
            transactional_id,
            acks,
            timeout_ms,
            topics,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceResponse {
    pub topics: Vec<ProduceTopicResponse>,
    pub throttle_time_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopicResponse {
    pub name: Arc<str>,
    pub partitions: Vec<ProducePartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartitionResponse {
    pub index: i32,
    pub error_code: i16,
    pub base_offset: i64,
    /// -1 unless the topic uses LogAppendTime.
    pub log_append_time_ms: i64,
    /// v5+.
    pub log_start_offset: i64,
    /// v8+: the batches that caused the error.
    pub record_errors: Vec<BatchIndexError>,
    /// v8+.
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchIndexError {
    pub batch_index: i32,
    pub batch_index_error_message: Option<String>,
}

impl ProduceResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        let mut w = Writer::with_capacity(self.size_hint());
        self.write(version, &mut w);
        w.finish()
    }

    /// At least the bytes the body takes (48 a partition and 16 a topic beyond their strings),
    /// so that a frame built with [`ProduceResponse::write`] is allocated once.
    pub fn size_hint(&self) -> usize {
        let message = |m: &Option<String>| 5 + m.as_ref().map_or(0, String::len);
        let partition = |p: &ProducePartitionResponse| {
            let errors: usize = p
                .record_errors
                .iter()
                .map(|e| 16 + message(&e.batch_index_error_message))
                .sum();
            48 + message(&p.error_message) + errors
        };
        let topics: usize = self
            .topics
            .iter()
            .map(|t| 16 + t.name.len() + t.partitions.iter().map(partition).sum::<usize>())
            .sum();
        16 + topics
    }

    /// The body at `version`, written into `w` (the broker's frame, behind the response header).
    pub(crate) fn write(&self, version: i16, w: &mut Writer) {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.index);
                w.i16(p.error_code);
                w.i64(p.base_offset);
                w.i64(p.log_append_time_ms);
                if version >= 5 {
                    w.i64(p.log_start_offset);
                }
                if version >= 8 {
                    w.array(flex, &p.record_errors, |w, e| {
                        w.i32(e.batch_index);
                        w.nullable_string(flex, e.batch_index_error_message.as_deref());
                        w.no_tagged_fields(flex);
                    });
                    w.nullable_string(flex, p.error_message.as_deref());
                }
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.i32(self.throttle_time_ms);
        w.no_tagged_fields(flex);
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl ProduceRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        let mut w = Writer::with_capacity(self.size_hint());
        self.write(version, &mut w);
        w.finish()
    }

    /// About the bytes of the encoded request: its record batches' and room for the fields
    /// around them (room to start a writer with, so that it does not grow batch by batch).
    pub fn size_hint(&self) -> usize {
        let batches = self.topics.iter().flat_map(|t| &t.partitions);
        let records = batches
            .map(|p| 16 + p.records.as_ref().map_or(0, |r| r.len()))
            .sum::<usize>();
        let names = self.topics.iter().map(|t| t.name.len() + 8).sum::<usize>();
        32 + self.transactional_id.as_ref().map_or(0, String::len) + names + records
    }

    pub(crate) fn write(&self, version: i16, w: &mut Writer) {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        w.nullable_string(flex, self.transactional_id.as_deref());
        w.i16(self.acks);
        w.i32(self.timeout_ms);
        w.array(flex, &self.topics, |w, t| {
            w.string(flex, &t.name);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.index);
                w.nullable_bytes(flex, p.records.as_deref());
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
    }
}

impl ProduceResponse {
    /// Fields a version lacks take Kafka's defaults (log start offset -1).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let tags = min_bytes::tags(flex);
        let error_min = 4 + string + tags;
        let mut part_min = 4 + 2 + 8 + 8 + tags;
        if version >= 5 {
            part_min += 8;
        }
        if version >= 8 {
            part_min += min_bytes::array(flex) + string;
        }
        let topic_min = string + min_bytes::array(flex) + tags;
        let topics = r.array(flex, topic_min, |r| {
            let name = r.topic_name(flex, "responses.name")?;
            let partitions = r.array(flex, part_min, |r| {
                let index = r.i32()?;
                let error_code = r.i16()?;
                let base_offset = r.i64()?;
                let log_append_time_ms = r.i64()?;
                let log_start_offset = if version >= 5 { r.i64()? } else { -1 };
                let (record_errors, error_message) = if version >= 8 {
                    let record_errors = r.array(flex, error_min, |r| {
                        let batch_index = r.i32()?;
                        let batch_index_error_message = r.nullable_string(flex)?;
                        r.skip_tagged_fields(flex)?;
                        Ok(BatchIndexError {
                            batch_index,
                            batch_index_error_message,
                        })
                    })?;
                    (record_errors, r.nullable_string(flex)?)
                } else {
                    (Vec::new(), None)
                };
                r.skip_tagged_fields(flex)?;
                Ok(ProducePartitionResponse {
                    index,
                    error_code,
                    base_offset,
                    log_append_time_ms,
                    log_start_offset,
                    record_errors,
                    error_message,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(ProduceTopicResponse { name, partitions })
        })?;
        let throttle_time_ms = r.i32()?;
        r.skip_tagged_fields(flex)?;
        Ok(ProduceResponse {
            topics,
            throttle_time_ms,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::{decode_request_bytes, Limits, Request};
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::produce_request as kpr;

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::ProduceRequest {
        let batch = Bytes::from_static(b"\x00\x00\x00\x00\x00\x00\x00\x00 raw record batch");
        let mut p = kpr::PartitionProduceData::default();
        p.index = 2;
        p.records = Some(batch.clone());
        let mut empty = kpr::PartitionProduceData::default();
        empty.index = 3;
        empty.records = None;
        let mut t = kpr::TopicProduceData::default();
        t.name = kp::TopicName(s("orders"));
        t.partition_data = vec![p, empty];
        let mut sent = kp::ProduceRequest::default();
        sent.transactional_id = Some(kp::TransactionalId(s("tx")));
        sent.acks = -1;
        sent.timeout_ms = 1500;
        sent.topic_data = vec![t];
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
    fn request_round_trips_every_version_and_records_are_untouched() {
        let batch = Bytes::from_static(b"\x00\x00\x00\x00\x00\x00\x00\x00 raw record batch");
        for v in VERSION_MIN..=VERSION_MAX {
            let sent = sample(v);
            let frame = Bytes::from(request_frame(API_KEY, v, &sent));
            let (_, req) = decode_request_bytes(&frame, Limits::default()).expect("valid");
            let Request::Produce(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = ProduceRequest {
                transactional_id: Some("tx".into()),
                acks: -1,
                timeout_ms: 1500,
                topics: vec![ProduceTopic {
                    name: "orders".into(),
                    partitions: vec![
                        ProducePartition {
                            index: 2,
                            records: Some(batch.clone()),
                        },
                        ProducePartition {
                            index: 3,
                            records: None,
                        },
                    ],
                }],
            };
            assert_eq!(req, want, "v{v}");
            let records = req.topics[0].partitions[0].records.as_ref().expect("sent");
            let frame_range = frame.as_ptr_range();
            assert!(
                frame_range.contains(&records.as_ptr()),
                "records are sliced, not copied"
            );
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = ProduceResponse {
            topics: vec![ProduceTopicResponse {
                name: "orders".into(),
                partitions: vec![ProducePartitionResponse {
                    index: 2,
                    error_code: 0,
                    base_offset: 100,
                    log_append_time_ms: -1,
                    log_start_offset: 7,
                    record_errors: vec![BatchIndexError {
                        batch_index: 0,
                        batch_index_error_message: Some("bad".into()),
                    }],
                    error_message: Some("oops".into()),
                }],
            }],
            throttle_time_ms: 11,
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::ProduceResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 11);
            let t = &theirs.responses[0];
            assert_eq!(&*t.name.0, "orders");
            let p = &t.partition_responses[0];
            assert_eq!((p.index, p.error_code, p.base_offset), (2, 0, 100));
            assert_eq!(p.log_append_time_ms, -1);
            assert_eq!(p.log_start_offset, if v >= 5 { 7 } else { -1 });
            if v >= 8 {
                assert_eq!(p.record_errors.len(), 1);
                assert_eq!(p.record_errors[0].batch_index_error_message.as_deref(), Some("bad"));
                assert_eq!(p.error_message.as_deref(), Some("oops"));
            } else {
                assert!(p.record_errors.is_empty());
                assert_eq!(p.error_message, None);
            }
        }
    }

    pub(crate) fn client_request(_v: i16) -> ProduceRequest {
        ProduceRequest {
            transactional_id: Some("tx".into()),
            acks: -1,
            timeout_ms: 1500,
            topics: vec![ProduceTopic {
                name: "orders".into(),
                partitions: vec![
                    ProducePartition {
                        index: 2,
                        records: Some(Bytes::from_static(b"\x00\x00\x00\x00\x00\x00\x00\x00 raw record batch")),
                    },
                    ProducePartition {
                        index: 3,
                        records: None,
                    },
                ],
            }],
        }
    }

    pub(crate) fn client_response(v: i16) -> ProduceResponse {
        let (record_errors, error_message) = if v >= 8 {
            (
                vec![
                    BatchIndexError {
                        batch_index: 1,
                        batch_index_error_message: Some("bad".into()),
                    },
                    BatchIndexError {
                        batch_index: 4,
                        batch_index_error_message: None,
                    },
                ],
                Some("oops".into()),
            )
        } else {
            (vec![], None)
        };
        ProduceResponse {
            topics: vec![ProduceTopicResponse {
                name: "orders".into(),
                partitions: vec![ProducePartitionResponse {
                    index: 2,
                    error_code: crate::ErrorCode::NotLeaderOrFollower.code(),
                    base_offset: 100,
                    log_append_time_ms: 1_700_000_000_000,
                    log_start_offset: if v >= 5 { 7 } else { -1 },
                    record_errors,
                    error_message,
                }],
            }],
            throttle_time_ms: 11,
        }
    }

    #[test]
    fn a_request_framed_in_one_buffer_equals_the_body_framed_after() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let body = req.encode(v);
            let hint = req.size_hint();
            crate::protocol::testing::assert_request_framed_in_place(
                v,
                crate::protocol::Request::Produce(req),
                &body,
                hint,
            );
        }
    }

    /// The broker writes a Produce answer straight behind its header.
    #[test]
    fn a_response_framed_in_one_buffer_equals_the_body_framed_after() {
        for v in VERSION_MIN..=VERSION_MAX {
            let resp = client_response(v);
            let body = resp.encode(v);
            let response = crate::protocol::Response::Produce(resp.clone());
            crate::protocol::testing::assert_response_framed_in_place(v, response, &body, resp.size_hint(), |w| {
                resp.write(v, w)
            });
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::ProduceRequest = client_round_trip(v, &req, req.encode(v), ProduceRequest::decode);
            assert_eq!(theirs.acks, -1);
            assert_eq!(theirs.timeout_ms, 1500);
            let p = &theirs.topic_data[0].partition_data;
            assert_eq!((p[0].index, p[1].index), (2, 3));
            assert_eq!(p[0].records, req.topics[0].partitions[0].records);
            assert_eq!(p[1].records, None);
            let resp = client_response(v);
            let theirs: kp::ProduceResponse = client_round_trip(v, &resp, resp.encode(v), ProduceResponse::decode);
            let p = &theirs.responses[0].partition_responses[0];
            assert_eq!((p.base_offset, p.log_append_time_ms), (100, 1_700_000_000_000));
        }
    }
}
