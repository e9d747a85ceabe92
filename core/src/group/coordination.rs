//! Where a group is coordinated: Kafka's rule, the leader of one partition of the replicated
//! internal topic `__consumer_offsets`.
//!
//! Kafka picks that partition as `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`
//! (GroupMetadataManager.partitionFor), with Java's `String.hashCode` over UTF-16 code units and
//! `Utils.abs` mapping `i32::MIN` to 0. Matching it exactly lets a mixed cluster (or a client that
//! computes it) agree on the coordinator.
//!
//! Two modes, chosen per broker by configuration:
//! - [`Coordination::Local`]: every group is coordinated here, its offsets in a local log (a
//!   single broker, `gregor dev`). In a cluster it is the old bug (every broker answers
//!   FindCoordinator with itself), kept as a simulator mutant to show the checker catches it.
//! - [`Coordination::Partitioned`]: a cluster's brokers; a group belongs to the leader of its
//!   offsets partition, and its commits go through that partition's replicated log.

/// The internal topic holding committed offsets in a cluster.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// How this broker coordinates groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coordination {
    /// Every group here, offsets in a local unreplicated log (single-node mode).
    Local,
    /// A group here only while this broker leads its `__consumer_offsets` partition.
    Partitioned {
        /// `offsets.topic.num.partitions` (Kafka's default 50).
        partitions: i32,
        /// `offsets.topic.replication.factor` (Kafka's default 3), capped at the live brokers
        /// when the topic is created.
        replication_factor: i16,
    },
}

impl Coordination {
    /// Kafka's defaults for a cluster.
    pub const fn partitioned_default() -> Coordination {
        Coordination::Partitioned {
            partitions: 50,
            replication_factor: 3,
        }
    }
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// Kafka's `Utils.abs`: `i32::MIN` maps to 0 (not to itself, as `Math.abs` would).
fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The `__consumer_offsets` partition of `group` among `partitions` (at least 1).
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    assert!(partitions >= 1, "the offsets topic has at least one partition");
    kafka_abs(java_string_hash_code(group)) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_code_matches_values_computed_by_hand() {
        // "" -> 0. "a" -> 97. "ab" -> 97*31 + 98 = 3105.
        // "abc" -> 3105*31 + 99 = 96354 (Java: "abc".hashCode() == 96354).
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("ab"), 3105);
        assert_eq!(java_string_hash_code("abc"), 96_354);
        // "app" -> (97*31 + 112)*31 + 112 = 3119*31 + 112 = 96801.
        assert_eq!(java_string_hash_code("app"), 96_801);
        // "hello" -> 99162322 (Java's well-known value), no overflow yet.
        assert_eq!(java_string_hash_code("hello"), 99_162_322);
        // "polygenelubricants" is Java's famous string whose hashCode is Integer.MIN_VALUE.
        assert_eq!(java_string_hash_code("polygenelubricants"), i32::MIN);
        // Wrapping: "hello world" -> 1794106052 (Java's value; the sum overflows on the way).
        assert_eq!(java_string_hash_code("hello world"), 1_794_106_052);
        // UTF-16 code units, not bytes: "é" is one unit, 233.
        assert_eq!(java_string_hash_code("é"), 233);
    }

    #[test]
    fn partition_choice_is_kafkas() {
        assert_eq!(partition_for("abc", 50), 96_354 % 50);
        assert_eq!(partition_for("app", 50), 1);
        assert_eq!(partition_for("app", 4), 1);
        // Utils.abs(Integer.MIN_VALUE) == 0, so partition 0 whatever the count.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("polygenelubricants", 7), 0);
        // A negative hash: "hello world!" wraps below zero; abs first, then modulo.
        let h = java_string_hash_code("hello world!");
        assert!(h < 0, "chosen for a negative hash: {h}");
        assert_eq!(partition_for("hello world!", 50), (-h) % 50);
        for n in 1..60 {
            assert!((0..n).contains(&partition_for("any-group", n)));
        }
    }
}
