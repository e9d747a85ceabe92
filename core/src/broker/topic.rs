//! Topic names, topic ids and the per-partition `partition.metadata` file.
//!
//! Names follow Kafka's rule (1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`), which
//! also keeps them safe as directory names. A partition's directory is `{topic}-{partition}`;
//! its `partition.metadata` records the topic id so a restarted broker keeps stable ids.

use std::fmt;

/// A topic's id (a UUID on the wire). Never all zero: zero means "no id" in Kafka.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// Builds an id from two random words (the caller draws them from its seeded stream).
    pub fn from_random(hi: u64, lo: u64) -> TopicId {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        if b == [0; 16] {
            b[15] = 1;
        }
        TopicId(b)
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Option<TopicId> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        (b != [0; 16]).then_some(TopicId(b))
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({})", self.to_hex())
    }
}

/// Kafka's topic-name rule; `Err` says what is wrong.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err(format!("topic name must be 1 to 249 characters, got {}", name.len()));
    }
    if name == "." || name == ".." {
        return Err("topic name cannot be '.' or '..'".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name contains {c:?}: only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// The directory of a partition.
pub fn partition_dir(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// Splits a partition directory name into topic and partition (`None` if it is not one).
pub fn parse_partition_dir(dir: &str) -> Option<(String, i32)> {
    let (topic, partition) = dir.rsplit_once('-')?;
    let partition: i32 = partition.parse().ok()?;
    if partition < 0 || validate_name(topic).is_err() || partition.to_string() != dir[topic.len() + 1..] {
        return None;
    }
    Some((topic.to_string(), partition))
}

pub const METADATA_FILE: &str = "partition.metadata";

pub fn encode_metadata(id: TopicId) -> Vec<u8> {
    format!("version: 0\ntopic_id: {}\n", id.to_hex()).into_bytes()
}

pub fn decode_metadata(bytes: &[u8]) -> Option<TopicId> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "version: 0" {
        return None;
    }
    TopicId::from_hex(lines.next()?.strip_prefix("topic_id: ")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_dirs_and_ids() {
        assert!(validate_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "ä", &"x".repeat(250)] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_partition_dir("my-topic-12"), Some(("my-topic".into(), 12)));
        assert_eq!(
            parse_partition_dir("t--1"),
            Some(("t-".into(), 1)),
            "topic names may end in '-'"
        );
        for bad in ["nodash", "t-", "t-x", "t-01", "t-+1", "a b-1"] {
            assert_eq!(parse_partition_dir(bad), None, "{bad:?} parsed");
        }
        let id = TopicId::from_random(7, 9);
        assert_eq!(decode_metadata(&encode_metadata(id)), Some(id));
        assert_ne!(TopicId::from_random(0, 0).0, [0; 16]);
        assert_eq!(decode_metadata(b"version: 0\ntopic_id: zz\n"), None);
    }
}
