//! Newtypes for the numbers that must never be mixed up: log offsets, leader epochs, broker and
//! partition ids. One word, one meaning: an `Offset` is a position in a partition log, never a
//! consensus index or a byte position.

use std::fmt;

/// A record's position in a partition log (Kafka's int64 offset). Non-negative in a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    /// The offset `n` records further on (saturating: offsets read from damaged bytes must not
    /// overflow before a check refuses them).
    pub fn plus(self, n: i64) -> Offset {
        Offset(self.0.saturating_add(n))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A partition's leader epoch (KIP-101): bumped by the controller at every leader change and
/// stamped into every batch the leader appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LeaderEpoch(pub i32);

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A broker's id (`broker.id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BrokerId(pub i32);

/// A partition's index within its topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PartitionId(pub i32);

/// An idempotent producer's id (KIP-98), handed out by InitProducerId; `-1` in a batch means
/// "no producer". Unique for the broker's lifetime, across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProducerId(pub i64);

/// The epoch of a producer id: a batch with an older epoch than the partition has seen is a
/// zombie's and is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProducerEpoch(pub i16);
