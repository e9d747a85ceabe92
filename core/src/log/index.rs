//! Sparse per-segment indexes: offset → file position, and timestamp → offset.
//!
//! Each entry on disk is 20 bytes: key i64, value i64, CRC32C of those 16 bytes, so a torn or
//! flipped entry is detected rather than trusted. The log also checks every entry it loads
//! against the segment (ordering, bounds, and that the last offset entry points at a batch with
//! that base offset) and rebuilds the index from the segment when anything disagrees. Indexes
//! are a cache: the segment file is the truth.

pub const ENTRY_BYTES: usize = 20;

/// One index entry. Offset index: `key` = a batch's base offset, `value` = its file position.
/// Time index: `key` = the largest timestamp so far, `value` = the base offset of its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: i64,
    pub value: i64,
}

pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for e in entries {
        let start = out.len();
        out.extend_from_slice(&e.key.to_be_bytes());
        out.extend_from_slice(&e.value.to_be_bytes());
        let crc = crate::crc::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    out
}

/// Parses an index file; `None` if its length or any entry's checksum is wrong, or keys are not
/// strictly increasing.
pub fn decode(bytes: &[u8]) -> Option<Vec<Entry>> {
    if !bytes.len().is_multiple_of(ENTRY_BYTES) {
        return None;
    }
    let mut out: Vec<Entry> = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
    for chunk in bytes.chunks_exact(ENTRY_BYTES) {
        let crc = u32::from_be_bytes(chunk[16..20].try_into().expect("4 bytes"));
        if crate::crc::crc32c(&chunk[..16]) != crc {
            return None;
        }
        let entry = Entry {
            key: i64::from_be_bytes(chunk[0..8].try_into().expect("8 bytes")),
            value: i64::from_be_bytes(chunk[8..16].try_into().expect("8 bytes")),
        };
        if out.last().is_some_and(|last| last.key >= entry.key) {
            return None;
        }
        out.push(entry);
    }
    Some(out)
}

/// The last entry whose key is at most `key` (strictly below, when `strict`).
pub fn floor(entries: &[Entry], key: i64, strict: bool) -> Option<Entry> {
    let n = entries.partition_point(|e| if strict { e.key < key } else { e.key <= key });
    n.checked_sub(1).map(|i| entries[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_detected() {
        let entries = vec![Entry { key: 3, value: 0 }, Entry { key: 9, value: 4100 }];
        let mut bytes = encode(&entries);
        assert_eq!(decode(&bytes), Some(entries.clone()));
        assert_eq!(floor(&entries, 9, false), Some(entries[1]));
        assert_eq!(floor(&entries, 9, true), Some(entries[0]));
        assert_eq!(floor(&entries, 2, false), None);
        bytes[10] ^= 4;
        assert_eq!(decode(&bytes), None, "flipped bit accepted");
        assert_eq!(decode(&encode(&entries)[..25]), None, "torn entry accepted");
        let unordered = encode(&[entries[1], entries[0]]);
        assert_eq!(decode(&unordered), None, "unordered keys accepted");
    }
}
