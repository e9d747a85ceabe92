//! Committed consumer offsets, kept durably in an internal log (Kafka's `__consumer_offsets`
//! design, reduced to one broker).
//!
//! Contract: [`OffsetStore::append`] returns `Ok` only after the records are appended *and
//! synced*; only then is the in-memory map updated and the commit acknowledged. So an
//! acknowledged commit survives any crash the [`Disk`] model allows, and [`OffsetStore::open`]
//! rebuilds the map by replaying the log (last record for a key wins).
//!
//! Records use Kafka's own layouts: key = OffsetCommitKey v1 (i16 version 1, group, topic,
//! i32 partition), value = OffsetCommitValue v3 (i16 version 3, i64 offset, i32 leader epoch,
//! metadata, i64 commit timestamp), strings as i16 length + UTF-8.
//!
//! In a cluster the same records go to the replicated `__consumer_offsets` partitions (see
//! [`crate::broker::coordination`]), together with one more of Kafka's layouts: a group's
//! generation, written when its leader's SyncGroup completes a rebalance: key = GroupMetadataKey
//! v2 (i16 version 2, group), value = GroupMetadataValue v3 (i16 version 3, protocol type,
//! i32 generation, nullable protocol, nullable leader, i64 timestamp, i32 member count) written
//! with no members. A coordinator that takes a group over continues its generations from the
//! last one stored, so a generation number never names two different assignments.
//!
//! What differs from Kafka: in single-node mode the log lives in its own directory
//! (`__consumer_offsets`, one partition, not a topic clients can fetch) and is not replicated;
//! logs are never compacted or deleted by retention (they grow by one record per committed
//! partition); members are not persisted (they rejoin after a restart or a coordinator move).

use std::collections::BTreeMap;

use crate::disk::Disk;
use crate::ids::{LeaderEpoch, Offset};
use crate::log::{Log, LogConfig, LogError};
use crate::record::{self, BatchHeader, NewRecord, ProducerFields};

/// The directory of the offsets log. It has no `-<partition>` suffix, so the broker's partition
/// scan at startup leaves it alone.
pub const OFFSETS_DIR: &str = "__consumer_offsets";

/// The longest string (group, topic, metadata) a record can hold: i16 length.
pub const STRING_BYTES_MAX: usize = i16::MAX as usize;

/// Bytes read per step while replaying the log at open.
const REPLAY_BYTES_MAX: u64 = 1 << 20;

/// One committed offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// A commit of one partition, as asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitEntry {
    pub topic: String,
    pub partition: i32,
    pub committed: Committed,
}

/// (group, topic, partition)
pub type OffsetKey = (String, String, i32);

pub struct OffsetStore {
    /// Created on the first commit: a broker whose clients never commit has no offsets files.
    log: Option<Log>,
    config: LogConfig,
    committed: BTreeMap<OffsetKey, Committed>,
    /// Records that did not decode at open (CRC-valid but foreign): reported, skipped.
    pub skipped_records: u64,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let len = i16::try_from(s.len()).expect("the coordinator refuses strings over STRING_BYTES_MAX");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn take<const N: usize>(b: &[u8], at: &mut usize) -> Option<[u8; N]> {
    let end = at.checked_add(N)?;
    let out = b.get(*at..end)?.try_into().ok()?;
    *at = end;
    Some(out)
}

fn take_str(b: &[u8], at: &mut usize) -> Option<String> {
    let len = usize::try_from(i16::from_be_bytes(take::<2>(b, at)?)).ok()?;
    let end = at.checked_add(len)?;
    let s = std::str::from_utf8(b.get(*at..end)?).ok()?.to_string();
    *at = end;
    Some(s)
}

pub fn encode_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = 1i16.to_be_bytes().to_vec();
    put_str(&mut out, group);
    put_str(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

pub fn encode_value(c: &Committed) -> Vec<u8> {
    let mut out = 3i16.to_be_bytes().to_vec();
    out.extend_from_slice(&c.offset.to_be_bytes());
    out.extend_from_slice(&c.leader_epoch.to_be_bytes());
    put_str(&mut out, &c.metadata);
    out.extend_from_slice(&c.commit_timestamp_ms.to_be_bytes());
    out
}

/// GroupMetadataKey v2.
pub fn encode_group_key(group: &str) -> Vec<u8> {
    let mut out = 2i16.to_be_bytes().to_vec();
    put_str(&mut out, group);
    out
}

fn put_nullable_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

/// GroupMetadataValue v3 without members: what a successor coordinator needs to continue the
/// group's generations.
/// Strings off the wire longer than a record can hold are stored as absent (the successor needs
/// only the generation).
pub fn encode_group_value(g: &StoredGroup, now_ms: i64) -> Vec<u8> {
    let fits = |s: &&str| s.len() <= STRING_BYTES_MAX;
    let mut out = 3i16.to_be_bytes().to_vec();
    put_str(&mut out, Some(g.protocol_type.as_str()).filter(fits).unwrap_or(""));
    out.extend_from_slice(&g.generation.to_be_bytes());
    put_nullable_str(&mut out, g.protocol.as_deref().filter(fits));
    put_nullable_str(&mut out, g.leader.as_deref().filter(fits));
    out.extend_from_slice(&now_ms.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out
}

/// A group's stored generation (the members are not stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredGroup {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
}

pub fn decode_group_key(b: &[u8]) -> Option<String> {
    let mut at = 0;
    if i16::from_be_bytes(take::<2>(b, &mut at)?) != 2 {
        return None;
    }
    let group = take_str(b, &mut at)?;
    (at == b.len()).then_some(group)
}

fn take_nullable_str(b: &[u8], at: &mut usize) -> Option<Option<String>> {
    let len = i16::from_be_bytes(b.get(*at..*at + 2)?.try_into().ok()?);
    if len == -1 {
        *at += 2;
        return Some(None);
    }
    take_str(b, at).map(Some)
}

/// Decodes the fields a successor needs; the members (Kafka's own records may have some) are
/// not read.
pub fn decode_group_value(b: &[u8]) -> Option<StoredGroup> {
    let mut at = 0;
    let version = i16::from_be_bytes(take::<2>(b, &mut at)?);
    if !(0..=3).contains(&version) {
        return None;
    }
    let protocol_type = take_str(b, &mut at)?;
    let generation = i32::from_be_bytes(take::<4>(b, &mut at)?);
    let protocol = take_nullable_str(b, &mut at)?;
    let leader = take_nullable_str(b, &mut at)?;
    Some(StoredGroup {
        protocol_type,
        generation,
        protocol,
        leader,
    })
}

/// One record of an offsets log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replayed {
    Commit(OffsetKey, Committed),
    Group(String, StoredGroup),
}

pub fn decode_key(b: &[u8]) -> Option<OffsetKey> {
    let mut at = 0;
    if i16::from_be_bytes(take::<2>(b, &mut at)?) != 1 {
        return None;
    }
    let group = take_str(b, &mut at)?;
    let topic = take_str(b, &mut at)?;
    let partition = i32::from_be_bytes(take::<4>(b, &mut at)?);
    (at == b.len()).then_some((group, topic, partition))
}

pub fn decode_value(b: &[u8]) -> Option<Committed> {
    let mut at = 0;
    if i16::from_be_bytes(take::<2>(b, &mut at)?) != 3 {
        return None;
    }
    let offset = i64::from_be_bytes(take::<8>(b, &mut at)?);
    let leader_epoch = i32::from_be_bytes(take::<4>(b, &mut at)?);
    let metadata = take_str(b, &mut at)?;
    let commit_timestamp_ms = i64::from_be_bytes(take::<8>(b, &mut at)?);
    (at == b.len()).then_some(Committed {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

impl OffsetStore {
    /// A store without a local log: in a cluster the offsets live in the replicated
    /// `__consumer_offsets` partitions, and this map holds what the partitions this broker
    /// leads have loaded and committed since.
    pub fn detached(config: LogConfig) -> OffsetStore {
        OffsetStore {
            log: None,
            config,
            committed: BTreeMap::new(),
            skipped_records: 0,
        }
    }

    /// Opens (recovering) the offsets log and replays it into the committed map.
    pub fn open<D: Disk>(disk: &mut D, config: LogConfig) -> Result<OffsetStore, LogError> {
        let mut store = OffsetStore::detached(config);
        if disk.list(OFFSETS_DIR)?.is_empty() {
            return Ok(store);
        }
        let log = Log::open(disk, OFFSETS_DIR, store.config.clone())?;
        let (records, skipped) = replay(disk, &log, log.log_end_offset())?;
        store.committed.extend(records.into_iter().filter_map(|r| match r {
            Replayed::Commit(key, value) => Some((key, value)),
            Replayed::Group(..) => None,
        }));
        store.skipped_records = skipped;
        store.log = Some(log);
        Ok(store)
    }

    /// Applies commits whose records are durable (synced, or replicated below the HW).
    pub fn apply(&mut self, group: &str, entries: &[CommitEntry]) {
        for e in entries {
            self.committed
                .insert((group.to_string(), e.topic.clone(), e.partition), e.committed.clone());
        }
    }

    /// Applies replayed records (the last for a key wins).
    pub fn extend(&mut self, records: impl IntoIterator<Item = (OffsetKey, Committed)>) {
        self.committed.extend(records);
    }

    /// Forgets the offsets of every group `keep` refuses (an offsets partition no longer led).
    pub fn retain_groups(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.committed.retain(|(g, _, _), _| keep(g));
    }

    /// Appends the commits of one group as one batch, syncs, and only then applies them.
    pub fn append<D: Disk>(
        &mut self,
        disk: &mut D,
        group: &str,
        entries: &[CommitEntry],
        now_ms: i64,
    ) -> Result<(), LogError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut batch = commit_batch(group, entries, now_ms);
        let log = match &mut self.log {
            Some(log) => log,
            None => self.log.insert(Log::open(disk, OFFSETS_DIR, self.config.clone())?),
        };
        log.append_as_leader(disk, &mut batch, LeaderEpoch(0), now_ms)?;
        log.flush(disk)?;
        self.apply(group, entries);
        Ok(())
    }

    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&Committed> {
        self.committed.get(&(group.to_string(), topic.to_string(), partition))
    }

    /// Every committed offset of a group, by (topic, partition).
    pub fn group<'a>(&'a self, group: &'a str) -> impl Iterator<Item = (&'a str, i32, &'a Committed)> + 'a {
        let from = (group.to_string(), String::new(), i32::MIN);
        self.committed
            .range(from..)
            .take_while(move |((g, _, _), _)| g == group)
            .map(|((_, t, p), c)| (t.as_str(), *p, c))
    }

    /// Whether a group has any committed offset (such a group exists, Empty, after a restart).
    pub fn has_group(&self, group: &str) -> bool {
        self.group(group).next().is_some()
    }

    /// Every group with a committed offset, in id order, each once.
    pub fn group_ids(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (g, _, _) in self.committed.keys() {
            if out.last() != Some(g) {
                out.push(g.clone());
            }
        }
        out
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log.as_ref().map_or(Offset(0), |l| l.log_end_offset())
    }
}

/// One group's commits as one record batch (no producer id), as both the local log and the
/// replicated `__consumer_offsets` partitions store them.
pub fn commit_batch(group: &str, entries: &[CommitEntry], now_ms: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = entries
        .iter()
        .map(|e| NewRecord {
            timestamp: now_ms,
            key: Some(encode_key(group, &e.topic, e.partition)),
            value: Some(encode_value(&e.committed)),
        })
        .collect();
    record::build_batch(&records, ProducerFields::none())
}

/// Reads `log` from its start up to `to` (its end, usually) and decodes every commit record, in
/// log order (so the last for a key wins when applied in turn). Returns the records and how many
/// did not decode (CRC-valid but foreign: skipped). Bounded by the log: every step moves forward.
pub fn replay<D: Disk>(disk: &mut D, log: &Log, to: Offset) -> Result<(Vec<Replayed>, u64), LogError> {
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut at = log.log_start_offset();
    while at < to.min(log.log_end_offset()) {
        let slice = log.read(disk, at, REPLAY_BYTES_MAX, None)?;
        if slice.len == 0 || slice.next_offset <= at {
            break;
        }
        let next = slice.next_offset;
        let bytes = Log::read_bytes(disk, slice)?;
        let mut pos = 0;
        while pos < bytes.len() {
            let h = BatchHeader::parse(&bytes[pos..]).map_err(LogError::Batch)?;
            let Some(batch) = bytes.get(pos..pos + h.total_bytes()) else {
                break;
            };
            for r in record::records(batch).unwrap_or_default() {
                if let (Some(key), Some(value)) = (r.key.and_then(decode_key), r.value.and_then(decode_value)) {
                    out.push(Replayed::Commit(key, value));
                } else if let (Some(group), Some(stored)) =
                    (r.key.and_then(decode_group_key), r.value.and_then(decode_group_value))
                {
                    out.push(Replayed::Group(group, stored));
                } else {
                    skipped += 1;
                }
            }
            pos += h.total_bytes();
        }
        at = next;
    }
    Ok((out, skipped))
}

/// A group's generation record as one batch (see the module comment).
pub fn group_batch(group: &str, stored: &StoredGroup, now_ms: i64) -> Vec<u8> {
    let record = NewRecord {
        timestamp: now_ms,
        key: Some(encode_group_key(group)),
        value: Some(encode_group_value(stored, now_ms)),
    };
    record::build_batch(&[record], ProducerFields::none())
}
