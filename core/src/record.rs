//! Kafka RecordBatch v2 ("magic 2"), the unit the log stores, validated and read in place.
//!
//! The log keeps batches byte-for-byte as producers sent them, so a fetch can be served straight
//! from the file. The broker rewrites only `baseOffset` and `partitionLeaderEpoch`, the two
//! header fields CRC32C does not cover. Layout (big-endian):
//!
//! ```text
//! 0  baseOffset i64          8  batchLength i32        12 partitionLeaderEpoch i32
//! 16 magic i8                17 crc u32 (CRC32C of bytes 21..end)
//! 21 attributes i16          23 lastOffsetDelta i32    27 baseTimestamp i64
//! 35 maxTimestamp i64        43 producerId i64         51 producerEpoch i16
//! 53 baseSequence i32        57 recordCount i32        61 records...
//! ```
//!
//! Everything here is untrusted input: every length is checked before it is used and nothing
//! panics on any byte string (see the proptest at the bottom).

use thiserror::Error;

use crate::ids::{LeaderEpoch, Offset};

/// Bytes before the records.
pub const HEADER_BYTES: usize = 61;
/// `baseOffset` and `batchLength`: the part of the header outside `batchLength`.
pub const LOG_OVERHEAD: usize = 12;
const MAGIC_V2: i8 = 2;
const CRC_START: usize = 21;
const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;

/// Why a batch was refused. Nothing is appended when any batch of a record set is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("record set of {len} bytes is too short for a batch header ({HEADER_BYTES} bytes)")]
    TooShort { len: usize },
    #[error("batch length {batch_length} is invalid or overruns the {available} bytes available")]
    BadLength { batch_length: i64, available: usize },
    #[error("unsupported magic {0}: only RecordBatch v2 (magic 2) is accepted")]
    BadMagic(i8),
    #[error("CRC32C mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("batch header is inconsistent: {0}")]
    Inconsistent(&'static str),
    #[error("batch of {size} bytes exceeds the limit of {max} bytes (max.message.bytes)")]
    TooLarge { size: usize, max: usize },
    #[error("empty record set")]
    Empty,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The header of one batch, read from at least [`HEADER_BYTES`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: Offset,
    /// `batchLength`: bytes after the length field. The whole batch is this + [`LOG_OVERHEAD`].
    pub batch_length: i32,
    pub partition_leader_epoch: LeaderEpoch,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses the fixed header. Checks only that enough bytes are there; see [`validate_batch`].
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < HEADER_BYTES {
            return Err(BatchError::TooShort { len: b.len() });
        }
        Ok(BatchHeader {
            base_offset: Offset(be_i64(b, 0)),
            batch_length: be_i32(b, 8),
            partition_leader_epoch: LeaderEpoch(be_i32(b, 12)),
            magic: b[16] as i8,
            crc: be_u32(b, 17),
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        })
    }

    /// Bytes of the whole batch, length fields included.
    pub fn total_bytes(&self) -> usize {
        self.batch_length.max(0) as usize + LOG_OVERHEAD
    }

    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(i64::from(self.last_offset_delta))
    }

    /// The offset after this batch.
    pub fn next_offset(&self) -> Offset {
        self.last_offset().plus(1)
    }

    pub fn compression(&self) -> i16 {
        self.attributes & COMPRESSION_MASK
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_LOG_APPEND != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL != 0
    }
}

/// Validates the batch at the start of `b` and returns its header. Checks magic, a length that
/// fits in `b`, header consistency and CRC32C. `b` may hold further batches after this one.
pub fn validate_batch(b: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(b)?;
    validate_parsed(&header, b)?;
    Ok(header)
}

/// [`validate_batch`] for a batch whose header the caller parsed already (`header` is
/// `BatchHeader::parse(b)`'s): the same checks, without reading the header again.
pub fn validate_parsed(header: &BatchHeader, b: &[u8]) -> Result<(), BatchError> {
    if header.magic != MAGIC_V2 {
        return Err(BatchError::BadMagic(header.magic));
    }
    let min_length = (HEADER_BYTES - LOG_OVERHEAD) as i32;
    if header.batch_length < min_length || header.total_bytes() > b.len() {
        return Err(BatchError::BadLength {
            batch_length: i64::from(header.batch_length),
            available: b.len(),
        });
    }
    if header.last_offset_delta < 0 || header.record_count < 0 {
        return Err(BatchError::Inconsistent("negative lastOffsetDelta or record count"));
    }
    if header.record_count > 0 && header.last_offset_delta < header.record_count - 1 {
        return Err(BatchError::Inconsistent(
            "lastOffsetDelta smaller than the record count allows",
        ));
    }
    let computed = crate::crc::crc32c(&b[CRC_START..header.total_bytes()]);
    if computed != header.crc {
        return Err(BatchError::BadCrc {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Validates a whole record set (one or more batches back to back, nothing else) as a producer
/// sent it. Returns the headers in order. Producer batches must have `lastOffsetDelta ==
/// recordCount - 1` and at least one record.
pub fn validate_record_set(b: &[u8], batch_bytes_max: usize) -> Result<Vec<BatchHeader>, BatchError> {
    if b.is_empty() {
        return Err(BatchError::Empty);
    }
    // Room for one: a client sends one batch per partition (Kafka's own do).
    let mut headers = Vec::with_capacity(1);
    let mut at = 0;
    while at < b.len() {
        let header = validate_batch(&b[at..])?;
        if header.total_bytes() > batch_bytes_max {
            return Err(BatchError::TooLarge {
                size: header.total_bytes(),
                max: batch_bytes_max,
            });
        }
        if header.record_count < 1 || header.last_offset_delta != header.record_count - 1 {
            return Err(BatchError::Inconsistent(
                "a produced batch needs recordCount = lastOffsetDelta + 1 >= 1",
            ));
        }
        at += header.total_bytes();
        headers.push(header);
    }
    Ok(headers)
}

/// Overwrites `baseOffset` and `partitionLeaderEpoch` (outside the CRC) of the batch at `b`.
pub fn set_offset_and_epoch(b: &mut [u8], base_offset: Offset, epoch: LeaderEpoch) {
    assert!(b.len() >= HEADER_BYTES, "caller validated the batch first");
    b[0..8].copy_from_slice(&base_offset.0.to_be_bytes());
    b[12..16].copy_from_slice(&epoch.0.to_be_bytes());
}

/// One record of an uncompressed batch, as far as the log needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: Offset,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// A zigzag-encoded varlong's value.
fn unzigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

// Inlined where records are read (a call each cost more than the one-byte case it usually is).
#[inline(always)]
fn read_varlong(b: &[u8], at: &mut usize) -> Option<i64> {
    // One byte below 0x80 is the whole varint (small deltas and lengths).
    if let Some(&byte) = b.get(*at) {
        if byte < 0x80 {
            *at += 1;
            return Some(unzigzag(u64::from(byte)));
        }
    }
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(unzigzag(raw));
        }
    }
    None
}

#[inline(always)]
fn read_bytes<'a>(b: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = read_varlong(b, at)?;
    if len < 0 {
        return Some(None);
    }
    let end = at.checked_add(usize::try_from(len).ok()?)?;
    let slice = b.get(*at..end)?;
    *at = end;
    Some(Some(slice))
}

/// The fewest bytes a record takes: its length, attributes, timestamp and offset deltas, key and
/// value lengths and header count, one byte each at the least.
pub const MIN_RECORD_BYTES: usize = 7;

/// The records of a validated, uncompressed batch. `None` for a compressed batch or when the
/// record bytes are malformed (the CRC matched, so the producer wrote them that way).
pub fn records(batch: &[u8]) -> Option<Vec<RecordView<'_>>> {
    let header = BatchHeader::parse(batch).ok()?;
    // Sized by the header's count, bounded by what the body can hold (a record takes at least
    // MIN_RECORD_BYTES): the count and the header's length are the sender's word, the bytes
    // at hand are not.
    let count = usize::try_from(header.record_count).unwrap_or(0);
    let body_bytes = header.total_bytes().min(batch.len()).saturating_sub(HEADER_BYTES);
    let mut out = Vec::with_capacity(count.min(body_bytes / MIN_RECORD_BYTES));
    for_each_record(&header, batch, |r| out.push(r))?;
    Some(out)
}

/// Hands each record of a validated, uncompressed batch whose header is `header` to `f`, in
/// order, without collecting them (a consumer builds its own records from the views). `None`
/// for a compressed batch or when the record bytes are malformed, after `f` has seen the
/// records before the malformed one: a caller that must not keep part of a batch undoes them.
pub fn for_each_record<'a>(header: &BatchHeader, batch: &'a [u8], mut f: impl FnMut(RecordView<'a>)) -> Option<()> {
    if header.compression() != 0 {
        return None;
    }
    let body = batch.get(HEADER_BYTES..header.total_bytes())?;
    let mut at = 0;
    for _ in 0..header.record_count {
        let length = read_varlong(body, &mut at)?;
        let end = at.checked_add(usize::try_from(length).ok()?)?;
        let rec = body.get(at..end)?;
        let mut r = 0;
        let _attributes = *rec.get(r)?;
        r += 1;
        let timestamp_delta = read_varlong(rec, &mut r)?;
        let offset_delta = read_varlong(rec, &mut r)?;
        let key = read_bytes(rec, &mut r)?;
        let value = read_bytes(rec, &mut r)?;
        f(RecordView {
            offset: header.base_offset.plus(offset_delta),
            timestamp: header.base_timestamp.wrapping_add(timestamp_delta),
            key,
            value,
        });
        at = end;
    }
    Some(())
}

/// `v` as a zigzag varlong, as [`write_varlong`] writes it: the bytes, and how many of them
/// (for a record's length prefix, written in place after the record).
fn varlong_bytes(v: i64) -> ([u8; 10], usize) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = [0u8; 10];
    let mut n = 0;
    loop {
        let byte = (raw & 0x7f) as u8;
        raw >>= 7;
        if raw == 0 {
            out[n] = byte;
            return (out, n + 1);
        }
        out[n] = byte | 0x80;
        n += 1;
    }
}

/// Pushed a byte at a time: an `extend_from_slice` of `varlong_bytes` called `memcpy` for every
/// varint (+2.6% instructions on a batched seed).
fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (raw & 0x7f) as u8;
        raw >>= 7;
        if raw == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Bytes a record may take in a batch beyond its key and value: attributes, timestamp and
/// offset deltas, the key and value lengths, the header count and the record's length prefix,
/// each a varint at its widest. An upper bound, so a batch never outgrows `batch.size` by more
/// than one record.
pub const RECORD_OVERHEAD_BYTES_MAX: usize = 1 + 10 + 5 + 5 + 5 + 5 + 5;

/// A record's size in a batch, at most.
pub fn record_bytes(record: &NewRecord) -> usize {
    RECORD_OVERHEAD_BYTES_MAX + record.key.as_ref().map_or(0, Vec::len) + record.value.as_ref().map_or(0, Vec::len)
}

/// A record to build a batch from (producers and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRecord {
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Producer identity fields of a batch (idempotence); `none()` for a plain producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerFields {
    pub fn none() -> Self {
        ProducerFields {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// Encodes an uncompressed RecordBatch v2 with base offset 0, as a producer would send it.
pub fn build_batch(records: &[NewRecord], producer: ProducerFields) -> Vec<u8> {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let base_timestamp = records[0].timestamp;
    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(base_timestamp);
    // One allocation for the batch (the header's length is patched in after the records), and
    // one scratch buffer for a record's body, whose length prefix goes before it.
    let mut b = Vec::with_capacity(HEADER_BYTES + records.iter().map(record_bytes).sum::<usize>());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&[0; 4]); // batch length, filled below
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(MAGIC_V2 as u8);
    b.extend_from_slice(&[0; 4]); // crc, filled below
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&((records.len() - 1) as i32).to_be_bytes());
    b.extend_from_slice(&base_timestamp.to_be_bytes());
    b.extend_from_slice(&max_timestamp.to_be_bytes());
    b.extend_from_slice(&producer.producer_id.to_be_bytes());
    b.extend_from_slice(&producer.producer_epoch.to_be_bytes());
    b.extend_from_slice(&producer.base_sequence.to_be_bytes());
    b.extend_from_slice(&(records.len() as i32).to_be_bytes());
    debug_assert_eq!(b.len(), HEADER_BYTES);
    // Each record straight into the batch behind a one-byte length prefix, patched once the
    // record is written (a body under 64 bytes, the usual case, has a one-byte varint length);
    // a longer body moves up to make room for the longer prefix. A scratch vector per batch for
    // the body, then copied, cost an allocation a batch.
    for (i, r) in records.iter().enumerate() {
        let prefix_at = b.len();
        b.push(0); // length, patched below
        b.push(0u8); // attributes
        write_varlong(&mut b, r.timestamp - base_timestamp);
        write_varlong(&mut b, i as i64);
        for field in [&r.key, &r.value] {
            match field {
                None => write_varlong(&mut b, -1),
                Some(bytes) => {
                    write_varlong(&mut b, bytes.len() as i64);
                    b.extend_from_slice(bytes);
                }
            }
        }
        write_varlong(&mut b, 0); // no headers
        let body = (b.len() - prefix_at - 1) as i64;
        if body < 64 {
            // The varint of a length under 64: the length doubled (zigzag), in one byte.
            b[prefix_at] = (body << 1) as u8;
        } else {
            let (prefix, n) = varlong_bytes(body);
            b.splice(prefix_at..prefix_at + 1, prefix[..n].iter().copied());
        }
    }
    let batch_length = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crate::crc::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Records whose bodies straddle the one-byte length prefix (63 and 64 bytes and around)
    /// and far past it read back as built.
    #[test]
    fn records_longer_than_a_one_byte_length_read_back() {
        let mut compared = 0;
        for value_len in (50..80).chain([200, 8_000, 20_000]) {
            let recs: Vec<NewRecord> = (0..3)
                .map(|i| NewRecord {
                    timestamp: 5 + i,
                    key: (i == 1).then(|| b"key".to_vec()),
                    value: Some(vec![i as u8 + 7; value_len]),
                })
                .collect();
            let batch = build_batch(&recs, ProducerFields::none());
            validate_batch(&batch).expect("a built batch validates");
            let read = records(&batch).expect("an uncompressed batch reads");
            assert_eq!(read.len(), 3);
            for (r, want) in read.iter().zip(&recs) {
                assert_eq!(r.key, want.key.as_deref(), "value length {value_len}");
                assert_eq!(r.value, want.value.as_deref(), "value length {value_len}");
                compared += 1;
            }
        }
        assert_eq!(compared, 33 * 3);
    }

    fn sample(n: usize) -> Vec<u8> {
        let recs: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_000 + i as i64,
                key: (i % 2 == 0).then(|| format!("k{i}").into_bytes()),
                value: Some(vec![i as u8; i * 3]),
            })
            .collect();
        build_batch(&recs, ProducerFields::none())
    }

    #[test]
    fn built_batch_validates_and_reads_back() {
        let b = sample(5);
        let h = validate_batch(&b).expect("valid");
        assert_eq!((h.record_count, h.last_offset_delta, h.max_timestamp), (5, 4, 1_004));
        let recs = records(&b).expect("uncompressed");
        assert_eq!(recs.len(), 5);
        assert_eq!(recs[3].offset, Offset(3));
        assert_eq!(recs[3].timestamp, 1_003);
        assert_eq!(recs[3].key, None);
        assert_eq!(recs[4].value, Some(&[4u8; 12][..]));
    }

    #[test]
    fn offset_and_epoch_rewrite_keeps_crc_valid() {
        let mut b = sample(3);
        set_offset_and_epoch(&mut b, Offset(1234), LeaderEpoch(7));
        let h = validate_batch(&b).expect("still valid");
        assert_eq!(
            (h.base_offset, h.partition_leader_epoch),
            (Offset(1234), LeaderEpoch(7))
        );
    }

    #[test]
    fn bad_inputs_get_typed_errors() {
        let good = sample(2);
        let mut crc = good.clone();
        let last = crc.len() - 1;
        crc[last] ^= 1;
        assert!(matches!(validate_batch(&crc), Err(BatchError::BadCrc { .. })));
        let mut magic = good.clone();
        magic[16] = 1;
        assert_eq!(validate_batch(&magic), Err(BatchError::BadMagic(1)));
        assert!(matches!(
            validate_batch(&good[..good.len() - 1]),
            Err(BatchError::BadLength { .. })
        ));
        assert!(matches!(
            validate_batch(&good[..10]),
            Err(BatchError::TooShort { len: 10 })
        ));
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0; 5]);
        assert!(matches!(
            validate_record_set(&trailing, 1 << 20),
            Err(BatchError::TooShort { len: 5 })
        ));
        assert!(matches!(
            validate_record_set(&good, 10),
            Err(BatchError::TooLarge { max: 10, .. })
        ));
        assert_eq!(validate_record_set(&[], 100), Err(BatchError::Empty));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = validate_record_set(&bytes, 1 << 20);
            let _ = records(&bytes);
        }

        #[test]
        fn any_single_bit_flip_in_a_batch_is_caught(n in 1usize..6, pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut b = sample(n);
            // Bytes 0..8 and 12..16 are outside the CRC by design; flips there are the broker's.
            let covered: Vec<usize> = (8..12).chain(16..b.len()).collect();
            let at = covered[pos.index(covered.len())];
            b[at] ^= 1 << bit;
            prop_assert!(validate_record_set(&b, 1 << 20).is_err());
        }
    }
}
