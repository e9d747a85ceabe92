//! One consumer group's membership state (Kafka's classic protocol): its state, generation,
//! chosen protocol, leader and members. Pure data plus the rules that need only the group;
//! the transitions driven by requests and time live in [`super::GroupCoordinator`].

use std::collections::BTreeMap;

use bytes::Bytes;

/// Kafka's group states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    /// No members; may still hold committed offsets.
    Empty,
    /// Waiting for every known member to (re)join, up to the rebalance timeout.
    PreparingRebalance,
    /// Joined; waiting for the leader's SyncGroup with the assignments.
    CompletingRebalance,
    /// Assignments handed out; members heartbeat.
    Stable,
    /// Removed (Gregor drops a group rather than keep it Dead; kept for Kafka's vocabulary).
    Dead,
}

#[derive(Clone, Debug)]
pub struct Member {
    pub id: String,
    pub group_instance_id: Option<String>,
    /// The `client.id` of its JoinGroup, and where it connected from (DescribeGroups).
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// The member is expired when `now` passes this without a heartbeat.
    pub heartbeat_deadline_ms: i64,
    /// Join order: the first joiner leads.
    pub join_seq: u64,
    /// A JoinGroup parked until the rebalance completes.
    pub join_ticket: Option<u64>,
    /// A SyncGroup parked until the leader's assignments arrive.
    pub sync_ticket: Option<u64>,
}

impl Member {
    pub fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(n, _)| n == protocol)
    }

    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet joined, and when each
    /// is forgotten.
    pub pending_members: BTreeMap<String, i64>,
    /// When a PreparingRebalance gives up on members that have not rejoined.
    pub rebalance_deadline_ms: Option<i64>,
    /// Partitioned mode: the leader's assignments are in, and the generation is being stored
    /// in the offsets partition; SyncGroup answers wait for it.
    pub store: Store,
}

/// Where storing a group's generation stands (partitioned mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Idle,
    /// Asked for; the driver has not started the append yet.
    Wanted,
    /// Appended; waiting for the high watermark.
    InFlight,
}

impl Group {
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            rebalance_deadline_ms: None,
            store: Store::Idle,
        }
    }

    /// Whether a joining member with these protocols can be part of this group: the same
    /// protocol type, and at least one protocol every member (it included) supports.
    pub fn accepts(&self, member_id: &str, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        let others: Vec<&Member> = self.members.values().filter(|m| m.id != member_id).collect();
        if others.is_empty() {
            return !protocols.is_empty();
        }
        if others.iter().any(|m| m.protocol_type != protocol_type) {
            return false;
        }
        protocols
            .iter()
            .any(|(name, _)| others.iter().all(|m| m.supports(name)))
    }

    /// Kafka's choice: among protocols every member supports, each member votes for the first
    /// in its own preference order; most votes wins (ties: the earliest in the leader's order).
    pub fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().min_by_key(|m| m.join_seq)?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.supports(n)))
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                *votes.entry(n).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        candidates.into_iter().find(|n| votes.get(n) == Some(&best)).cloned()
    }

    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.members.values().map(|m| m.rebalance_timeout_ms).max().unwrap_or(0)
    }

    pub fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.join_ticket.is_some())
    }
}
