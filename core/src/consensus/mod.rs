//! Raft consensus for the coordinator quorum: a pure state machine that agrees on a log of opaque
//! commands among a set of voters, changed one node at a time ([`Raft::change_membership`]), and
//! persists itself through [`Disk`].
//!
//! # Contract
//!
//! Quinn-style: inputs are calls carrying `now_ms` (a monotonic clock in milliseconds), outputs
//! are values the caller drains with [`Raft::poll_output`] after every call. The caller sends each
//! [`Output::Send`] (any transport; loss, delay, duplication and reordering are tolerated), applies
//! each [`Output::Apply`] to its state machine in order, and calls [`Raft::handle_timeout`] once
//! `now_ms >= poll_timeout()`. A `poll_timeout()` that is already due means "a group-commit sync is
//! pending": call `handle_timeout` to sync and count the leader's own entries.
//!
//! Entries with an empty command are the leader's no-ops (appended at election); they are
//! delivered as `Apply` too so that the applied index advances through them; apps ignore them.
//!
//! # Fault model
//!
//! Messages may be lost, duplicated, delayed and reordered; nodes crash and lose what the disk
//! model (`disk.rs`) lets them lose; a torn log tail is cut at recovery. Byzantine nodes are out of
//! scope. A failed disk operation makes the node inert ([`Output::Failed`]): the driver must drop
//! it and re-open from disk (fsyncgate: the cache can no longer be trusted).
//!
//! Files: `messages` (wire format), `log_store` (the entry log file), `state` (term+vote and
//! snapshot files), `membership` (voters and learners, and their configuration entries), `raft`
//! (the protocol), `tests` (the cluster harness and its checkers).

mod log_store;
mod membership;
mod messages;
mod raft;
mod state;

#[cfg(test)]
mod tests;

use std::fmt;

use bytes::Bytes;
use thiserror::Error;

use crate::disk::DiskError;

pub use membership::{Membership, MembershipChange, CONFIG_MAGIC, MEMBERS_MAX};
pub use messages::{
    DecodeError, Entry, Message, COMMAND_BYTES_MAX, ENTRIES_PER_MESSAGE_MAX, MESSAGE_BYTES_MAX, VERSION,
};
pub use raft::Raft;

/// A voter's id, unique within the quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u64);

/// A Raft term (election epoch). Never mixed up with a partition `LeaderEpoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Term(pub u64);

/// A position in the consensus log (1-based; 0 means "before the first entry").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogIndex(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for LogIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One node's Raft settings. Build with [`RaftConfig::new`] and override fields as needed, so
/// that fields added later do not break callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftConfig {
    pub id: NodeId,
    /// The voters the quorum started with (this node among them unless it joins a running
    /// quorum). Only until the first configuration entry: from then on the log's membership rules.
    pub voters: Vec<NodeId>,
    /// The directory (relative to the disk root) holding `state`, `log` and `snapshot`.
    pub dir: String,
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_interval_ms: u64,
    /// Entries in one AppendEntries (at most [`ENTRIES_PER_MESSAGE_MAX`]).
    pub append_entries_max: usize,
    /// Command bytes in one AppendEntries, and the chunk size of InstallSnapshot (at least one entry
    /// is always sent; at most [`MESSAGE_BYTES_MAX`] minus headers).
    pub append_bytes_max: usize,
    /// [`Raft::compaction_due`] turns true when this many entries follow the last snapshot.
    pub snapshot_threshold_entries: u64,
    /// A snapshot received from a leader larger than this is refused.
    pub snapshot_bytes_max: u64,
    /// Proposals beyond this many uncommitted entries are refused (back-pressure when a quorum
    /// is slow or gone).
    pub uncommitted_entries_max: u64,
}

impl RaftConfig {
    /// The defaults: elections after 300-600 ms of silence, heartbeats every 75 ms.
    pub fn new(id: NodeId, voters: Vec<NodeId>, dir: impl Into<String>) -> RaftConfig {
        RaftConfig {
            id,
            voters,
            dir: dir.into(),
            election_timeout_ms_min: 300,
            election_timeout_ms_max: 600,
            heartbeat_interval_ms: 75,
            append_entries_max: 256,
            append_bytes_max: 1 << 20,
            snapshot_threshold_entries: 10_000,
            snapshot_bytes_max: 1 << 30,
            uncommitted_entries_max: 10_000,
        }
    }
}

/// What a node currently is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    /// Asking for pre-votes (no term change yet), so a partitioned node cannot disrupt the quorum.
    PreCandidate,
    Candidate,
    Leader,
}

/// A request only the leader can serve was sent to another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("not the leader (leader hint: {leader_hint:?})")]
pub struct NotLeader {
    pub leader_hint: Option<NodeId>,
}

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProposeError {
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    #[error("command of {bytes} bytes exceeds the limit of {max} bytes")]
    CommandTooLarge { bytes: usize, max: usize },
    #[error("{uncommitted} entries are not committed yet (limit {max}): retry later")]
    Backpressure { uncommitted: u64, max: u64 },
    #[error("commands starting with the configuration prefix are Raft's own")]
    ReservedPrefix,
    #[error("the node failed and must be re-opened: {0}")]
    Failed(RaftError),
}

/// Why a membership change was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MembershipError {
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    #[error("a change is in progress or this leader's term has no committed entry yet (index {index}): retry later")]
    InProgress { index: LogIndex },
    #[error("learner {id} is not caught up (holds {match_index}, commit index {commit_index}): retry later")]
    NotCaughtUp {
        id: NodeId,
        match_index: LogIndex,
        commit_index: LogIndex,
    },
    #[error("{0}")]
    Refused(String),
    #[error("the node failed and must be re-opened: {0}")]
    Failed(RaftError),
}

/// An operating error that stops the node.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RaftError {
    #[error("disk: {0}")]
    Disk(#[from] DiskError),
    #[error("corrupt {path}: {detail}")]
    Corrupt { path: String, detail: String },
    #[error("invalid config: {0}")]
    Config(String),
    #[error("compaction refused: {0}")]
    Compaction(String),
}

/// What the caller must do next; drained by [`Raft::poll_output`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Send {
        to: NodeId,
        msg: Message,
    },
    /// A committed entry, in index order, exactly once per process lifetime after the snapshot it
    /// restored. An empty command is a no-op.
    Apply {
        index: LogIndex,
        term: Term,
        command: Bytes,
    },
    /// Replace the app state with this snapshot (at open, and after InstallSnapshot).
    RestoreSnapshot {
        index: LogIndex,
        term: Term,
        data: Bytes,
    },
    /// `read_index` confirmed: serve the read once the app has applied `index`.
    ReadReady {
        token: u64,
        index: LogIndex,
    },
    ReadFailed {
        token: u64,
        leader_hint: Option<NodeId>,
    },
    RoleChanged {
        role: Role,
        term: Term,
        leader: Option<NodeId>,
    },
    /// A disk operation failed: the node is inert; drop it and re-open from disk.
    Failed {
        error: RaftError,
    },
}
