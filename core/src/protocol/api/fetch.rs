//! Fetch (key 1), v4–v13: consumers and follower replicas read records. Flexible from v12;
//! topics are named by id instead of name from v13. A follower's fetch carries its broker id
//! in `replica_id` (-1 for consumers) and, from v9, the leader epoch it believes in (KIP-320).
//!
//! Response records are raw bytes (whole RecordBatch v2 batches as stored). From v12 a
//! partition may carry the tagged fields `diverging_epoch` (tag 0: the follower must truncate,
//! KIP-279/KIP-595) and `current_leader` (tag 1); they are written only when set. This encoder
//! copies records into the response; serving them with sendfile is the transport's business.

use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::{TaggedField, Writer};
use crate::protocol::Uuid;
use crate::runtime::{FileRegion, FramePart};

pub const API_KEY: i16 = 1;
pub const VERSION_MIN: i16 = 4;
pub const VERSION_MAX: i16 = 13;
pub const FLEXIBLE_MIN: i16 = 12;
/// First version naming topics by id.
pub const TOPIC_ID_MIN: i16 = 13;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchRequest {
    /// The fetching follower's broker id; -1 for a consumer.
    pub replica_id: i32,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    /// v7+ (KIP-227 fetch sessions); 0 before.
    pub session_id: i32,
    /// v7+; -1 before (no session).
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    /// v7+.
    pub forgotten_topics: Vec<ForgottenTopic>,
    /// v11+; empty before.
    pub rack_id: String,
}

#[cfg(test)]
impl FetchRequest {
    /// Tests' fetch of one partition from `offset` as `replica_id` (-1: a consumer), at
    /// `current_leader_epoch` (-1: unchecked), with no last fetched epoch or log start, 1 MiB
    /// limits and no wait.
    pub(crate) fn of_one(topic: &str, partition: i32, replica_id: i32, current_leader_epoch: i32, offset: i64) -> Self {
        FetchRequest {
            replica_id,
            max_bytes: 1 << 20,
            topics: vec![FetchTopic {
                topic: topic.into(),
                partitions: vec![FetchPartition {
                    partition,
                    current_leader_epoch,
                    fetch_offset: offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                }],
                ..FetchTopic::default()
            }],
            ..FetchRequest::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopic {
    /// v4–v12; empty from v13.
    pub topic: Arc<str>,
    /// v13+; zero before.
    pub topic_id: Uuid,
    pub partitions: Vec<FetchPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchPartition {
    pub partition: i32,
    /// v9+; -1 before (unknown).
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    /// v12+; -1 before.
    pub last_fetched_epoch: i32,
    /// v5+ (followers only); -1 before.
    pub log_start_offset: i64,
    pub partition_max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForgottenTopic {
    /// v7–v12.
    pub topic: Arc<str>,
    /// v13+.
    pub topic_id: Uuid,
    pub partitions: Vec<i32>,
}

/// Reads a topic's identity: its name before v13, its id from v13.
fn topic_ident(version: i16, flex: bool, r: &mut Reader<'_>) -> Result<(Arc<str>, Uuid)> {
    if version >= TOPIC_ID_MIN {
        Ok((Arc::default(), r.uuid()?))
    } else {
        Ok((r.topic_name(flex, "topic")?, Uuid::ZERO))
    }
}

fn topic_ident_min(version: i16, flex: bool) -> usize {
    if version >= TOPIC_ID_MIN {
        16
    } else {
        min_bytes::string(flex)
    }
}

impl FetchRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let replica_id = r.i32()?;
        let max_wait_ms = r.i32()?;
        let min_bytes = r.i32()?;
        let max_bytes = r.i32()?;
        let isolation_level = r.i8()?;
        let (session_id, session_epoch) = if version >= 7 { (r.i32()?, r.i32()?) } else { (0, -1) };
        let part_min = 4 + 8 + 4 + min_bytes::tags(flex);
        let topic_min = topic_ident_min(version, flex) + min_bytes::array(flex) + min_bytes::tags(flex);
        let topics = r.array(flex, topic_min, |r| {
            let (topic, topic_id) = topic_ident(version, flex, r)?;
            let partitions = r.array(flex, part_min, |r| {
                let partition = r.i32()?;
                let current_leader_epoch = if version >= 9 { r.i32()? } else { -1 };
                let fetch_offset = r.i64()?;
                let last_fetched_epoch = if version >= 12 { r.i32()? } else { -1 };
                let log_start_offset = if version >= 5 { r.i64()? } else { -1 };
                let partition_max_bytes = r.i32()?;
                r.skip_tagged_fields(flex)?;
                Ok(FetchPartition {
                    partition,
                    current_leader_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    log_start_offset,
                    partition_max_bytes,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(FetchTopic {
                topic,
                topic_id,
                partitions,
            })
        })?;
        let forgotten_topics = if version >= 7 {
            r.array(flex, topic_min, |r| {
                let (topic, topic_id) = topic_ident(version, flex, r)?;
                let partitions = r.array(flex, min_bytes::I32, |r| r.i32())?;
                r.skip_tagged_fields(flex)?;
                Ok(ForgottenTopic {
                    topic,
                    topic_id,
                    partitions,
                })
            })?
        } else {
            Vec::new()
        };
        let rack_id = if version >= 11 {
            r.string(flex, "rack_id")?
        } else {
            String::new()
        };
        // Tag 0 (cluster_id) and later tags are not used by Gregor.
        r.skip_tagged_fields(flex)?;
        Ok(FetchRequest {
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
            topics,
            forgotten_topics,
            rack_id,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchResponse {
    pub throttle_time_ms: i32,
    /// v7+: a session-level error.
    pub error_code: i16,
    /// v7+.
    pub session_id: i32,
    pub topics: Vec<FetchTopicResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopicResponse {
    /// v4–v12.
    pub topic: Arc<str>,
    /// v13+.
    pub topic_id: Uuid,
    pub partitions: Vec<FetchPartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchPartitionResponse {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// v5+.
    pub log_start_offset: i64,
    /// v12+ tag 0: where the follower's log diverges from the leader's.
    pub diverging_epoch: Option<EpochEndOffset>,
    /// v12+ tag 1: the leader as this broker knows it (on NOT_LEADER / FENCED errors).
    pub current_leader: Option<LeaderIdAndEpoch>,
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// v11+; -1 when there is none.
    pub preferred_read_replica: i32,
    pub records: Option<Bytes>,
    /// Broker side, instead of `records`: the batches as a region of a segment file, sent from
    /// the file without a copy by [`FetchResponse::encode_parts`] (`encode` cannot carry it).
    pub records_file: Option<FileRegion>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderIdAndEpoch {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

impl FetchResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        let mut w = Writer::with_capacity(self.size_hint());
        self.write(version, &mut w);
        w.finish()
    }

    /// As `encode`, with each `records_file` left as a file region to send from the file.
    pub fn encode_parts(&self, version: i16) -> Vec<FramePart> {
        let mut w = Writer::new();
        self.write(version, &mut w);
        w.finish_parts()
    }

    /// About the bytes of the encoded answer: its records' and room for the fields around them
    /// (room to start a writer with, so that it does not grow record by record).
    pub fn size_hint(&self) -> usize {
        let partitions = self.topics.iter().map(|t| t.partitions.len()).sum::<usize>();
        let records = self
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum::<usize>();
        let names = self.topics.iter().map(|t| t.topic.len() + 24).sum::<usize>();
        64 + names + partitions * 64 + records
    }

    pub(crate) fn write(&self, version: i16, w: &mut Writer) {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        w.i32(self.throttle_time_ms);
        if version >= 7 {
            w.i16(self.error_code);
            w.i32(self.session_id);
        }
        w.array(flex, &self.topics, |w, t| {
            if version >= TOPIC_ID_MIN {
                w.uuid(t.topic_id);
            } else {
                w.string(flex, &t.topic);
            }
            w.array(flex, &t.partitions, |w, p| encode_partition(w, version, flex, p));
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
    }
}

fn encode_partition(w: &mut Writer, version: i16, flex: bool, p: &FetchPartitionResponse) {
    w.i32(p.partition_index);
    w.i16(p.error_code);
    w.i64(p.high_watermark);
    w.i64(p.last_stable_offset);
    if version >= 5 {
        w.i64(p.log_start_offset);
    }
    w.nullable_array(flex, p.aborted_transactions.as_deref(), |w, a| {
        w.i64(a.producer_id);
        w.i64(a.first_offset);
        w.no_tagged_fields(flex);
    });
    if version >= 11 {
        w.i32(p.preferred_read_replica);
    }
    // The schema allows null, but Kafka's broker always writes a record set (empty on errors) and
    // librdkafka rejects a null one ("invalid MessageSetSize -1") and refetches in a tight loop.
    match &p.records_file {
        Some(region) => w.file_region(flex, region.clone()),
        None => w.nullable_bytes(flex, Some(p.records.as_deref().unwrap_or(&[]))),
    }
    let diverging = p.diverging_epoch.map(|d| {
        move |w: &mut Writer| {
            w.i32(d.epoch);
            w.i64(d.end_offset);
            w.no_tagged_fields(true);
        }
    });
    let leader = p.current_leader.map(|l| {
        move |w: &mut Writer| {
            w.i32(l.leader_id);
            w.i32(l.leader_epoch);
            w.no_tagged_fields(true);
        }
    });
    let mut tags: Vec<TaggedField<'_>> = Vec::new();
    if let Some(f) = &diverging {
        tags.push((0, f));
    }
    if let Some(f) = &leader {
        tags.push((1, f));
    }
    w.tagged_fields(flex, &tags);
}

// Client side (consumers and the follower's replica fetcher): the request we send and the
// response we read from an untrusted server, each the mirror image of the broker side above.

fn encode_topic_ident(w: &mut Writer, version: i16, flex: bool, topic: &str, topic_id: Uuid) {
    if version >= TOPIC_ID_MIN {
        w.uuid(topic_id);
    } else {
        w.string(flex, topic);
    }
}

impl FetchRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        let mut w = Writer::with_capacity(self.size_hint());
        self.write(version, &mut w);
        w.finish()
    }

    /// About how many bytes the body takes (at most 48 a partition, 48 a topic beyond its name),
    /// so that a frame built with [`FetchRequest::write`] is allocated once.
    pub fn size_hint(&self) -> usize {
        let topics: usize = self
            .topics
            .iter()
            .map(|t| (t.topic.len(), t.partitions.len()))
            .chain(
                self.forgotten_topics
                    .iter()
                    .map(|t| (t.topic.len(), t.partitions.len())),
            )
            .map(|(name, partitions)| 48 + name + 48 * partitions)
            .sum();
        64 + self.rack_id.len() + topics
    }

    /// The body at `version`, written into `w` (a client's frame, behind the request header).
    pub(crate) fn write(&self, version: i16, w: &mut Writer) {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        w.i32(self.replica_id);
        w.i32(self.max_wait_ms);
        w.i32(self.min_bytes);
        w.i32(self.max_bytes);
        w.i8(self.isolation_level);
        if version >= 7 {
            w.i32(self.session_id);
            w.i32(self.session_epoch);
        }
        w.array(flex, &self.topics, |w, t| {
            encode_topic_ident(w, version, flex, &t.topic, t.topic_id);
            w.array(flex, &t.partitions, |w, p| {
                w.i32(p.partition);
                if version >= 9 {
                    w.i32(p.current_leader_epoch);
                }
                w.i64(p.fetch_offset);
                if version >= 12 {
                    w.i32(p.last_fetched_epoch);
                }
                if version >= 5 {
                    w.i64(p.log_start_offset);
                }
                w.i32(p.partition_max_bytes);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        if version >= 7 {
            w.array(flex, &self.forgotten_topics, |w, t| {
                encode_topic_ident(w, version, flex, &t.topic, t.topic_id);
                w.array(flex, &t.partitions, |w, p| w.i32(*p));
                w.no_tagged_fields(flex);
            });
        }
        if version >= 11 {
            w.string(flex, &self.rack_id);
        }
        w.no_tagged_fields(flex);
    }
}

impl FetchResponse {
    /// Fields a version lacks take Kafka's defaults (log start offset and preferred read replica
    /// -1); record sets are sliced from the frame when the reader shares it.
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = r.i32()?;
        let (error_code, session_id) = if version >= 7 { (r.i16()?, r.i32()?) } else { (0, 0) };
        let array = min_bytes::array(flex);
        let tags = min_bytes::tags(flex);
        let mut part_min = 4 + 2 + 8 + 8 + array + array + tags;
        if version >= 5 {
            part_min += 8;
        }
        if version >= 11 {
            part_min += 4;
        }
        let topic_min = topic_ident_min(version, flex) + array + tags;
        let topics = r.array(flex, topic_min, |r| {
            let (topic, topic_id) = topic_ident(version, flex, r)?;
            let partitions = r.array(flex, part_min, |r| decode_partition(r, version, flex))?;
            r.skip_tagged_fields(flex)?;
            Ok(FetchTopicResponse {
                topic,
                topic_id,
                partitions,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(FetchResponse {
            throttle_time_ms,
            error_code,
            session_id,
            topics,
        })
    }
}

fn decode_partition(r: &mut Reader<'_>, version: i16, flex: bool) -> Result<FetchPartitionResponse> {
    let partition_index = r.i32()?;
    let error_code = r.i16()?;
    let high_watermark = r.i64()?;
    let last_stable_offset = r.i64()?;
    let log_start_offset = if version >= 5 { r.i64()? } else { -1 };
    let aborted_transactions = r.nullable_array(flex, 16 + min_bytes::tags(flex), |r| {
        let producer_id = r.i64()?;
        let first_offset = r.i64()?;
        r.skip_tagged_fields(flex)?;
        Ok(AbortedTransaction {
            producer_id,
            first_offset,
        })
    })?;
    let preferred_read_replica = if version >= 11 { r.i32()? } else { -1 };
    let records = r.nullable_bytes(flex)?;
    let mut diverging_epoch = None;
    let mut current_leader = None;
    // Tag 2 (snapshot id, KIP-630) is for KRaft followers: skipped as unknown.
    r.tagged_fields(flex, |tag, r| match tag {
        0 => {
            let epoch = r.i32()?;
            let end_offset = r.i64()?;
            r.skip_tagged_fields(true)?;
            diverging_epoch = Some(EpochEndOffset { epoch, end_offset });
            Ok(true)
        }
        1 => {
            let leader_id = r.i32()?;
            let leader_epoch = r.i32()?;
            r.skip_tagged_fields(true)?;
            current_leader = Some(LeaderIdAndEpoch {
                leader_id,
                leader_epoch,
            });
            Ok(true)
        }
        _ => Ok(false),
    })?;
    Ok(FetchPartitionResponse {
        partition_index,
        error_code,
        high_watermark,
        last_stable_offset,
        log_start_offset,
        diverging_epoch,
        current_leader,
        aborted_transactions,
        preferred_read_replica,
        records,
        records_file: None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::fetch_request as kfq;

    /// A response whose batches are file regions, flattened from the file, is byte for byte the
    /// response carrying the same batches as bytes, in every version (the zero-copy contract).
    #[test]
    fn file_region_parts_flatten_to_the_copied_response() {
        use crate::disk::mem::MemDisk;
        use crate::disk::Disk;
        let mut disk = MemDisk::new();
        disk.create("seg.log").expect("create");
        let batches: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        disk.append("seg.log", &[7; 10]).expect("append");
        disk.append("seg.log", &batches).expect("append");
        let file: Vec<u8> = [&[7u8; 10][..], &batches[..]].concat();
        let partition = |index: i32, region: Option<(u64, u64)>| FetchPartitionResponse {
            partition_index: index,
            high_watermark: 9,
            last_stable_offset: 9,
            log_start_offset: 0,
            preferred_read_replica: -1,
            records: region.map(|(at, len)| Bytes::copy_from_slice(&file[at as usize..(at + len) as usize])),
            ..FetchPartitionResponse::default()
        };
        let copied = |regions: &[Option<(u64, u64)>]| FetchResponse {
            topics: vec![FetchTopicResponse {
                topic: "t".into(),
                topic_id: Uuid([3; 16]),
                partitions: regions
                    .iter()
                    .enumerate()
                    .map(|(i, r)| partition(i as i32, *r))
                    .collect(),
            }],
            ..FetchResponse::default()
        };
        let regions = [Some((10, 300)), None, Some((10, 120)), Some((130, 0))];
        let mut zero_copy = copied(&regions);
        for (p, r) in zero_copy.topics[0].partitions.iter_mut().zip(regions) {
            p.records = None;
            p.records_file = r.map(|(position, len)| FileRegion {
                path: "seg.log".into(),
                position,
                len,
            });
        }
        for v in VERSION_MIN..=VERSION_MAX {
            let parts = zero_copy.encode_parts(v);
            let files = parts.iter().filter(|p| matches!(p, FramePart::File(_))).count();
            let flat = crate::runtime::flatten_parts(&disk, parts).expect("regions exist");
            assert_eq!(flat, copied(&regions).encode(v), "v{v}");
            assert_eq!(files, 2, "v{v}: the empty region is no file part");
        }
        println!("compared zero-copy and copied Fetch responses in v{VERSION_MIN}..=v{VERSION_MAX}");
    }

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(v: i16) -> kp::FetchRequest {
        let id = Uuid([3; 16]);
        let mut p = kfq::FetchPartition::default();
        p.partition = 4;
        p.fetch_offset = 1234;
        p.partition_max_bytes = 1 << 20;
        p.current_leader_epoch = if v >= 9 { 6 } else { -1 };
        p.last_fetched_epoch = if v >= 12 { 5 } else { -1 };
        p.log_start_offset = if v >= 5 { 10 } else { -1 };
        let mut t = kfq::FetchTopic::default();
        if v >= TOPIC_ID_MIN {
            t.topic_id = kp_uuid(id);
        } else {
            t.topic = kp::TopicName(s("orders"));
        }
        t.partitions = vec![p];
        let mut sent = kp::FetchRequest::default();
        sent.replica_id = kp::BrokerId(2);
        sent.max_wait_ms = 500;
        sent.min_bytes = 1;
        sent.max_bytes = 50 << 20;
        sent.isolation_level = 1;
        sent.topics = vec![t];
        if v >= 7 {
            sent.session_id = 77;
            sent.session_epoch = 3;
            let mut f = kfq::ForgottenTopic::default();
            if v >= TOPIC_ID_MIN {
                f.topic_id = kp_uuid(id);
            } else {
                f.topic = kp::TopicName(s("old"));
            }
            f.partitions = vec![0, 1];
            sent.forgotten_topics_data = vec![f];
        }
        if v >= 11 {
            sent.rack_id = s("rack-a");
        }
        if v >= FLEXIBLE_MIN {
            sent.cluster_id = Some(s("cluster"));
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
        let id = Uuid([3; 16]);
        for v in VERSION_MIN..=VERSION_MAX {
            let sent = sample(v);
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            let Request::Fetch(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let named = |name: &str| -> (Arc<str>, Uuid) {
                if v >= TOPIC_ID_MIN {
                    (Arc::default(), id)
                } else {
                    (name.into(), Uuid::ZERO)
                }
            };
            let (topic, topic_id) = named("orders");
            let want = FetchRequest {
                replica_id: 2,
                max_wait_ms: 500,
                min_bytes: 1,
                max_bytes: 50 << 20,
                isolation_level: 1,
                session_id: if v >= 7 { 77 } else { 0 },
                session_epoch: if v >= 7 { 3 } else { -1 },
                topics: vec![FetchTopic {
                    topic,
                    topic_id,
                    partitions: vec![FetchPartition {
                        partition: 4,
                        current_leader_epoch: if v >= 9 { 6 } else { -1 },
                        fetch_offset: 1234,
                        last_fetched_epoch: if v >= 12 { 5 } else { -1 },
                        log_start_offset: if v >= 5 { 10 } else { -1 },
                        partition_max_bytes: 1 << 20,
                    }],
                }],
                forgotten_topics: if v >= 7 {
                    let (topic, topic_id) = named("old");
                    vec![ForgottenTopic {
                        topic,
                        topic_id,
                        partitions: vec![0, 1],
                    }]
                } else {
                    vec![]
                },
                rack_id: if v >= 11 { "rack-a".into() } else { String::new() },
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let records = Bytes::from_static(b"batch bytes as stored");
        let ours = FetchResponse {
            throttle_time_ms: 1,
            error_code: 0,
            session_id: 77,
            topics: vec![FetchTopicResponse {
                topic: "orders".into(),
                topic_id: Uuid([3; 16]),
                partitions: vec![FetchPartitionResponse {
                    partition_index: 4,
                    error_code: 0,
                    high_watermark: 100,
                    last_stable_offset: 90,
                    log_start_offset: 5,
                    diverging_epoch: Some(EpochEndOffset {
                        epoch: 4,
                        end_offset: 80,
                    }),
                    current_leader: Some(LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 6,
                    }),
                    aborted_transactions: Some(vec![AbortedTransaction {
                        producer_id: 9,
                        first_offset: 50,
                    }]),
                    preferred_read_replica: -1,
                    records: Some(records.clone()),
                    records_file: None,
                }],
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::FetchResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 1);
            assert_eq!(theirs.session_id, if v >= 7 { 77 } else { 0 });
            let t = &theirs.responses[0];
            if v >= TOPIC_ID_MIN {
                assert_eq!(our_uuid(t.topic_id), Uuid([3; 16]));
            } else {
                assert_eq!(&*t.topic.0, "orders");
            }
            let p = &t.partitions[0];
            assert_eq!(
                (p.partition_index, p.high_watermark, p.last_stable_offset),
                (4, 100, 90)
            );
            assert_eq!(p.log_start_offset, if v >= 5 { 5 } else { -1 });
            let aborted = p.aborted_transactions.as_ref().expect("sent");
            assert_eq!((aborted[0].producer_id.0, aborted[0].first_offset), (9, 50));
            assert_eq!(p.records.as_ref(), Some(&records));
            if v >= 12 {
                assert_eq!((p.diverging_epoch.epoch, p.diverging_epoch.end_offset), (4, 80));
                assert_eq!((p.current_leader.leader_id.0, p.current_leader.leader_epoch), (1, 6));
            } else {
                assert_eq!(p.diverging_epoch.epoch, -1);
            }
        }
    }

    fn ident(v: i16, name: &str, id: u8) -> (Arc<str>, Uuid) {
        if v >= TOPIC_ID_MIN {
            (Arc::default(), Uuid([id; 16]))
        } else {
            (name.into(), Uuid::ZERO)
        }
    }

    /// A follower's fetch (replica id 2) as version `v` carries it.
    pub(crate) fn client_request(v: i16) -> FetchRequest {
        let (topic, topic_id) = ident(v, "orders", 3);
        FetchRequest {
            replica_id: 2,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 50 << 20,
            isolation_level: 1,
            session_id: if v >= 7 { 77 } else { 0 },
            session_epoch: if v >= 7 { 3 } else { -1 },
            topics: vec![FetchTopic {
                topic,
                topic_id,
                partitions: vec![FetchPartition {
                    partition: 4,
                    current_leader_epoch: if v >= 9 { 6 } else { -1 },
                    fetch_offset: 1234,
                    last_fetched_epoch: if v >= 12 { 5 } else { -1 },
                    log_start_offset: if v >= 5 { 10 } else { -1 },
                    partition_max_bytes: 1 << 20,
                }],
            }],
            forgotten_topics: if v >= 7 {
                let (topic, topic_id) = ident(v, "old", 4);
                vec![ForgottenTopic {
                    topic,
                    topic_id,
                    partitions: vec![0, 1],
                }]
            } else {
                vec![]
            },
            rack_id: if v >= 11 { "rack-a".into() } else { String::new() },
        }
    }

    pub(crate) fn client_response(v: i16) -> FetchResponse {
        let (topic, topic_id) = ident(v, "orders", 3);
        let flex = v >= FLEXIBLE_MIN;
        FetchResponse {
            throttle_time_ms: 1,
            error_code: 0,
            session_id: if v >= 7 { 77 } else { 0 },
            topics: vec![FetchTopicResponse {
                topic,
                topic_id,
                partitions: vec![
                    FetchPartitionResponse {
                        partition_index: 4,
                        error_code: 0,
                        high_watermark: 100,
                        last_stable_offset: 90,
                        log_start_offset: if v >= 5 { 5 } else { -1 },
                        diverging_epoch: flex.then_some(EpochEndOffset {
                            epoch: 4,
                            end_offset: 80,
                        }),
                        current_leader: flex.then_some(LeaderIdAndEpoch {
                            leader_id: 1,
                            leader_epoch: 6,
                        }),
                        aborted_transactions: Some(vec![AbortedTransaction {
                            producer_id: 9,
                            first_offset: 50,
                        }]),
                        preferred_read_replica: if v >= 11 { 2 } else { -1 },
                        records: Some(Bytes::from_static(b"batch bytes as stored")),
                        records_file: None,
                    },
                    FetchPartitionResponse {
                        partition_index: 5,
                        error_code: crate::ErrorCode::OffsetOutOfRange.code(),
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        diverging_epoch: None,
                        current_leader: None,
                        aborted_transactions: None,
                        preferred_read_replica: -1,
                        records: Some(Bytes::new()),
                        records_file: None,
                    },
                ],
            }],
        }
    }

    #[test]
    fn a_response_framed_in_one_buffer_equals_the_body_framed_after() {
        for v in VERSION_MIN..=VERSION_MAX {
            let resp = client_response(v);
            let body = resp.encode(v);
            let response = crate::protocol::Response::Fetch(resp.clone());
            crate::protocol::testing::assert_response_framed_in_place(v, response, &body, resp.size_hint(), |w| {
                resp.write(v, w)
            });
        }
    }

    /// The client writes a Fetch request's body straight behind its header (`request_frame`).
    #[test]
    fn a_request_framed_in_one_buffer_equals_the_body_framed_after() {
        for v in VERSION_MIN..=VERSION_MAX {
            let mut req = client_request(v);
            // Several partitions and topics, as a follower's fetch names them.
            let mut more = req.topics[0].clone();
            more.topic = if v < 13 { "payments".into() } else { Arc::default() };
            more.topic_id = if v >= 13 { Uuid([9; 16]) } else { Uuid::default() };
            more.partitions = (0..6)
                .map(|i| FetchPartition {
                    partition: i,
                    ..more.partitions[0]
                })
                .collect();
            req.topics.push(more);
            let body = req.encode(v);
            let hint = req.size_hint();
            crate::protocol::testing::assert_request_framed_in_place(
                v,
                crate::protocol::Request::Fetch(req),
                &body,
                hint,
            );
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::FetchRequest = client_round_trip(v, &req, req.encode(v), FetchRequest::decode);
            assert_eq!(
                (theirs.replica_id.0, theirs.max_wait_ms, theirs.max_bytes),
                (2, 500, 50 << 20)
            );
            let p = &theirs.topics[0].partitions[0];
            assert_eq!((p.partition, p.fetch_offset, p.partition_max_bytes), (4, 1234, 1 << 20));
            assert_eq!(p.current_leader_epoch, if v >= 9 { 6 } else { -1 });
            assert_eq!(p.last_fetched_epoch, if v >= 12 { 5 } else { -1 });
            let resp = client_response(v);
            let theirs: kp::FetchResponse = client_round_trip(v, &resp, resp.encode(v), FetchResponse::decode);
            let p = &theirs.responses[0].partitions[0];
            assert_eq!((p.high_watermark, p.last_stable_offset), (100, 90));
        }
    }

    /// An error partition carries an empty record set, never a null one: librdkafka fails to parse
    /// a null MessageSetSize (found by the process-level failover test against a restarted leader).
    #[test]
    fn error_partitions_carry_empty_records_not_null() {
        for v in VERSION_MIN..=VERSION_MAX {
            let mut unset = client_response(v);
            unset.topics[0].partitions[1].records = None;
            let body = unset.encode(v);
            let resp = FetchResponse::decode(v, &mut Reader::from_bytes(&body, crate::protocol::Limits::default()))
                .expect("ours");
            let p = &resp.topics[0].partitions[1];
            assert_eq!(p.error_code, crate::ErrorCode::OffsetOutOfRange.code());
            assert_eq!(p.records.as_deref(), Some(&[][..]), "version {v}");
        }
    }

    /// A consumer's records are slices of the response frame, as the broker's are of the request.
    #[test]
    fn client_records_share_the_frame() {
        let v = VERSION_MAX;
        let body = client_response(v).encode(v);
        let resp =
            FetchResponse::decode(v, &mut Reader::from_bytes(&body, crate::protocol::Limits::default())).expect("ours");
        let records = resp.topics[0].partitions[0].records.as_ref().expect("sent");
        assert!(body.as_ptr_range().contains(&records.as_ptr()));
    }

    /// A Fetch answer as kafka-protocol's broker side writes it, with a KRaft snapshot id (tag
    /// 2) and tags no schema defines at every level: our client skips them and reads the rest.
    #[test]
    fn client_reads_a_reference_answer_with_unknown_tags() {
        use kp::fetch_response as kfr;
        for v in FLEXIBLE_MIN..=VERSION_MAX {
            let mut p = kfr::PartitionData::default()
                .with_partition_index(4)
                .with_high_watermark(100)
                .with_last_stable_offset(90)
                .with_log_start_offset(5)
                .with_preferred_read_replica(kp::BrokerId(2))
                .with_aborted_transactions(None)
                .with_records(Some(Bytes::from_static(b"records")));
            p.diverging_epoch = kfr::EpochEndOffset::default().with_epoch(4).with_end_offset(80);
            p.snapshot_id = kfr::SnapshotId::default().with_epoch(3).with_end_offset(70);
            p.unknown_tagged_fields = unknown_tags();
            let mut t = kfr::FetchableTopicResponse::default().with_partitions(vec![p]);
            if v >= TOPIC_ID_MIN {
                t.topic_id = kp_uuid(Uuid([3; 16]));
            } else {
                t.topic = kp::TopicName(s("orders"));
            }
            t.unknown_tagged_fields = unknown_tags();
            let mut theirs = kp::FetchResponse::default()
                .with_throttle_time_ms(1)
                .with_session_id(77)
                .with_responses(vec![t]);
            theirs.unknown_tagged_fields = unknown_tags();
            let got = ours(v, &reference_body(&theirs, v), FetchResponse::decode);
            let (topic, topic_id) = ident(v, "orders", 3);
            let want = FetchResponse {
                throttle_time_ms: 1,
                error_code: 0,
                session_id: 77,
                topics: vec![FetchTopicResponse {
                    topic,
                    topic_id,
                    partitions: vec![FetchPartitionResponse {
                        partition_index: 4,
                        error_code: 0,
                        high_watermark: 100,
                        last_stable_offset: 90,
                        log_start_offset: 5,
                        diverging_epoch: Some(EpochEndOffset {
                            epoch: 4,
                            end_offset: 80,
                        }),
                        current_leader: None,
                        aborted_transactions: None,
                        preferred_read_replica: 2,
                        records: Some(Bytes::from_static(b"records")),
                        records_file: None,
                    }],
                }],
            };
            assert_eq!(got, want, "v{v}");
        }
    }
}
