//! What a simulated workload did, as the checker needs it: every send with its outcome, every
//! record a consumer polled, every offset commit, every record processed, every group assignment, and a final full read
//! of each partition after the faults healed.
//!
//! Values are unique per run (`producer << 32 | sequence`), so a value names exactly one send.

use std::collections::BTreeMap;

/// A record's value: which producer sent it and its sequence number in that producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Value(pub u64);

impl Value {
    pub fn new(producer: u32, seq: u32) -> Value {
        Value(u64::from(producer) << 32 | u64::from(seq))
    }
    pub fn producer(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn seq(self) -> u32 {
        self.0 as u32
    }
    /// The bytes a workload writes as the record value.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }
    pub fn from_bytes(b: &[u8]) -> Option<Value> {
        Some(Value(u64::from_be_bytes(b.try_into().ok()?)))
    }
}

/// A partition of one of the scenario's topics: the topic by its place in the scenario's list
/// (the order of its `[[topic]]` tables), then the partition's index. The history's names for
/// the topics print it ([`History::partition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub topic: u16,
    pub index: i32,
}

impl Partition {
    /// Partition `index` of the scenario's first (or only) topic.
    pub const fn of_first(index: i32) -> Partition {
        Partition { topic: 0, index }
    }
}

/// A partition as findings name it: its index alone in a run of one topic (every scenario
/// before there could be several), else Kafka's `topic-index`.
#[derive(Clone, Copy, Debug)]
pub struct PartitionName<'a> {
    topics: &'a [String],
    partition: Partition,
}

impl std::fmt::Display for PartitionName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let Partition { topic, index } = self.partition;
        match self.topics.get(usize::from(topic)) {
            Some(name) if self.topics.len() > 1 => write!(f, "{name}-{index}"),
            _ if topic == 0 => write!(f, "{index}"),
            _ => write!(f, "#{topic}-{index}"),
        }
    }
}

/// How a send ended, as the producer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// The broker acknowledged the record at this offset.
    Acked { offset: i64 },
    /// A definite error: the record was not written.
    Failed,
    /// Timed out, or its producer died while the application waited: it may or may not have
    /// been written.
    Unknown,
    /// An asynchronous send the application had already been told was made (`send()` returned),
    /// still in the producer's buffer when the process died: never sent, never acknowledged.
    Abandoned,
    /// acks=0: written to the leader's connection, no answer expected. Kafka's producer counts
    /// it a successful send, so the application does too; the checker holds it to the same
    /// standard as an acknowledged record, offset unknown.
    SentUnacknowledged,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Send {
    pub producer: u32,
    pub partition: Partition,
    pub value: Value,
    pub outcome: SendOutcome,
    /// Virtual ms when the outcome was known.
    pub at_ms: u64,
}

/// One record delivered to a consumer by a poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Poll {
    pub consumer: u32,
    /// Changes whenever the consumer's position may legitimately jump: a restart, a rebalance,
    /// a seek. Ordering checks (`poll-skip`, `nonmonotonic-poll`) apply within one session.
    pub session: u32,
    pub partition: Partition,
    pub offset: i64,
    pub value: Value,
    pub at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub consumer: u32,
    pub group: String,
    pub partition: Partition,
    /// The next offset to read, as Kafka commits it.
    pub offset: i64,
    pub at_ms: u64,
}

/// A record an application finished processing (at-least-once checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    pub consumer: u32,
    pub value: Value,
}

/// A group member's assignment in one generation, as the member saw it after SyncGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub consumer: u32,
    pub group: String,
    pub member: String,
    pub generation: i32,
    pub partitions: Vec<Partition>,
    pub at_ms: u64,
    /// The consumer's poll session that starts with this assignment: every poll of that session
    /// ([`Poll::session`]) returned records under it.
    pub session: u32,
}

/// A partition read in full after the heal phase, from its log start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinalRead {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// (offset, value) in offset order.
    pub records: Vec<(i64, Value)>,
}

/// Everything the checker reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub sends: Vec<Send>,
    pub polls: Vec<Poll>,
    pub commits: Vec<Commit>,
    pub processed: Vec<Processed>,
    /// Group assignments, one per member per generation it joined.
    pub assignments: Vec<Assignment>,
    /// Filled by the final read; a partition missing here was not read.
    pub final_reads: BTreeMap<Partition, FinalRead>,
    /// The workload records what it processed: an acked record below a group's final committed
    /// offset that was never processed is lost processing (`acked-never-processed`).
    pub tracks_processing: bool,
    /// Consumers ran until caught up after the heal: an acked record no consumer ever polled is
    /// `unseen` even if it is still in the log.
    pub consumers_drained: bool,
    /// Replicated clusters: brokers seen acting as a partition's leader, sampled through the run.
    pub leaders: Vec<crate::checker::leaders::LeaderObservation>,
    /// Replicated clusters: brokers seen acting as controller, sampled through the run.
    pub controllers: Vec<crate::checker::leaders::ControllerObservation>,
    /// Replicated clusters: every replica's log and high watermark at the end of the run.
    pub replicas: Vec<crate::checker::replicas::PartitionReplicas>,
    /// Elastic scenarios: the final placement of the topic over the target brokers.
    pub balance: Option<crate::checker::balance::BalanceObservation>,
    /// `[acl]` scenarios: revocation windows and every replica's records.
    pub acl: Option<crate::checker::acl::AclObservation>,
    /// `[quorum]` scenarios: the probe's coordinator writes and the membership changes.
    pub quorum: Option<crate::checker::coordinator::QuorumObservation>,
    /// The scenario's topics' names, in [`Partition::topic`] order: what findings call them.
    pub topics: Vec<String>,
}

impl History {
    /// `p` as findings name it.
    pub fn partition(&self, p: Partition) -> PartitionName<'_> {
        PartitionName {
            topics: &self.topics,
            partition: p,
        }
    }

    /// An empty history with room for `records` sends, polls and processings.
    pub fn with_room_for(records: usize) -> History {
        History {
            sends: Vec::with_capacity(records),
            polls: Vec::with_capacity(records),
            processed: Vec::with_capacity(records),
            ..History::default()
        }
    }
}
