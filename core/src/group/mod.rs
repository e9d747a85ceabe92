//! The group coordinator of one broker: Kafka's classic consumer group protocol (JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup) and committed offsets (OffsetCommit, OffsetFetch).
//!
//! A quinn-style state machine: requests come in as `handle_*` calls with `now_ms`; time-driven
//! work (session expiry, the rebalance timeout, forgetting KIP-394 pending member ids) is asked
//! for by [`GroupCoordinator::poll_timeout`] and done in [`GroupCoordinator::handle_timeout`].
//! JoinGroup and SyncGroup may have to wait for other members: they answer [`Reply::Parked`]
//! with a ticket, and the driver collects the answer with `take_join`/`take_sync` once another
//! request or a timeout completed it. Every parked request is completed by a bounded event (the
//! rebalance deadline, the leader's sync or the leader's session expiry).
//!
//! Committed offsets live in [`offsets::OffsetStore`]: a commit is acknowledged only after its
//! record is synced to the offsets log. Membership is memory only: after a restart every group
//! is Empty and its members rejoin (their heartbeats get UNKNOWN_MEMBER_ID), as in Kafka after a
//! coordinator move; the offsets are kept.
//!
//! Not here: static membership (KIP-345, `group.instance.id` is accepted and ignored),
//! `group.initial.rebalance.delay.ms`, the pending-sync timeout, group deletion and expiry of
//! old offsets (`offsets.retention.minutes`).

pub mod coordination;
pub mod offsets;
pub mod state;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::ids::LeaderEpoch;
use crate::log::{LogConfig, LogError};
use crate::protocol::api::join_group::{JoinGroupMember, JoinGroupRequest, JoinGroupResponse};
use crate::protocol::api::sync_group::{SyncGroupRequest, SyncGroupResponse};
pub use coordination::{Coordination, OFFSETS_TOPIC};
pub use offsets::{CommitEntry, Committed, OffsetKey, OffsetStore, Replayed, StoredGroup};
pub use state::{Group, GroupState, Member, Store};

/// First JoinGroup version that must be answered MEMBER_ID_REQUIRED (KIP-394).
pub const MEMBER_ID_REQUIRED_MIN: i16 = 4;

/// The longest group id accepted: its offsets records store it with an i16 length.
pub const GROUP_ID_BYTES_MAX: usize = offsets::STRING_BYTES_MAX;

/// Coordinator settings, with Kafka's server.properties names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub session_timeout_ms_min: i32,
    /// `group.max.session.timeout.ms`
    pub session_timeout_ms_max: i32,
    /// `group.max.size`
    pub members_per_group_max: usize,
    /// Groups this coordinator holds at most (a limit on everything).
    pub groups_max: usize,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_bytes_max: usize,
    /// Which groups this broker coordinates and where their offsets live.
    pub coordination: Coordination,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout_ms_min: 6_000,
            session_timeout_ms_max: 1_800_000,
            members_per_group_max: 1_000,
            groups_max: 10_000,
            offset_metadata_bytes_max: 4_096,
            coordination: Coordination::Local,
        }
    }
}

/// A parked request's claim on its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// An answer now, or a ticket for an answer later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<T> {
    Now(T),
    Parked(Ticket),
}

pub struct GroupCoordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    offsets: OffsetStore,
    next_ticket: u64,
    next_join_seq: u64,
    done_joins: BTreeMap<u64, JoinGroupResponse>,
    done_syncs: BTreeMap<u64, SyncGroupResponse>,
    /// Partitioned mode: the `__consumer_offsets` partitions this broker leads and has loaded,
    /// with the leader epoch they were loaded in.
    loaded: BTreeMap<i32, LeaderEpoch>,
    /// Partitioned mode: the last stored generation of each group of the loaded partitions, so
    /// a group forgotten while Empty (or taken over from another coordinator) continues its
    /// generations rather than restarting at 1.
    generations: BTreeMap<String, i32>,
}

fn join_error(code: ErrorCode, member_id: &str) -> JoinGroupResponse {
    JoinGroupResponse {
        throttle_time_ms: 0,
        error_code: code.code(),
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader: String::new(),
        skip_assignment: false,
        member_id: member_id.to_string(),
        members: vec![],
    }
}

fn sync_error(code: ErrorCode) -> SyncGroupResponse {
    SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: code.code(),
        protocol_type: None,
        protocol_name: None,
        assignment: Bytes::new(),
    }
}

impl GroupCoordinator {
    /// Opens the offsets log and rebuilds the committed offsets from it (local mode); in
    /// partitioned mode starts with nothing loaded: offsets come from the replicated partitions
    /// this broker comes to lead ([`GroupCoordinator::load_partition`]).
    pub fn open<D: Disk>(disk: &mut D, config: GroupConfig, log: LogConfig) -> Result<GroupCoordinator, LogError> {
        let offsets = match config.coordination {
            Coordination::Local => OffsetStore::open(disk, log)?,
            Coordination::Partitioned { .. } => OffsetStore::detached(log),
        };
        Ok(GroupCoordinator {
            config,
            groups: BTreeMap::new(),
            offsets,
            next_ticket: 0,
            next_join_seq: 0,
            done_joins: BTreeMap::new(),
            done_syncs: BTreeMap::new(),
            loaded: BTreeMap::new(),
            generations: BTreeMap::new(),
        })
    }

    pub fn coordination(&self) -> Coordination {
        self.config.coordination
    }

    /// The `__consumer_offsets` partition of a group (`None` in local mode).
    pub fn partition_of(&self, group_id: &str) -> Option<i32> {
        match self.config.coordination {
            Coordination::Local => None,
            Coordination::Partitioned { partitions, .. } => {
                Some(coordination::partition_for(group_id, partitions.max(1)))
            }
        }
    }

    /// Whether this broker coordinates `group_id` now: always in local mode; in partitioned
    /// mode only while it leads (and has loaded) the group's offsets partition.
    pub fn check_coordinator(&self, group_id: &str) -> Result<(), ErrorCode> {
        match self.partition_of(group_id) {
            None => Ok(()),
            Some(p) if self.loaded.contains_key(&p) => Ok(()),
            Some(_) => Err(ErrorCode::NotCoordinator),
        }
    }

    /// The offsets partitions loaded, with the leader epoch each was loaded in.
    pub fn loaded_partitions(&self) -> &BTreeMap<i32, LeaderEpoch> {
        &self.loaded
    }

    /// This broker became leader of offsets partition `partition` in `epoch`: takes the
    /// commits replayed from its log (in log order) and serves its groups from now on.
    pub fn load_partition(&mut self, partition: i32, epoch: LeaderEpoch, records: Vec<Replayed>) {
        self.unload_partition(partition);
        for r in records {
            match r {
                Replayed::Commit(key, value) if self.partition_of(&key.0) == Some(partition) => {
                    self.offsets.extend([(key, value)]);
                }
                Replayed::Group(group, stored) if self.partition_of(&group) == Some(partition) => {
                    let g = self.generations.entry(group).or_insert(stored.generation);
                    *g = (*g).max(stored.generation);
                }
                _ => {}
            }
        }
        self.loaded.insert(partition, epoch);
        tracing::info!(target: "groups", partition, epoch = epoch.0, "offsets partition loaded");
    }

    /// This broker no longer leads offsets partition `partition`: its groups and offsets are
    /// dropped (the new leader has them), and requests parked in them are answered
    /// NOT_COORDINATOR so their members look the coordinator up again.
    pub fn unload_partition(&mut self, partition: i32) {
        if self.loaded.remove(&partition).is_none() {
            return;
        }
        let Coordination::Partitioned { partitions, .. } = self.config.coordination else {
            return;
        };
        let ours = |g: &str| coordination::partition_for(g, partitions.max(1)) == partition;
        let gone: Vec<String> = self.groups.keys().filter(|g| ours(g)).cloned().collect();
        let mut done = Completions::default();
        for id in gone {
            let group = self.groups.remove(&id).expect("listed above");
            for m in group.members.values() {
                if let Some(t) = m.join_ticket {
                    done.joins.push((t, join_error(ErrorCode::NotCoordinator, &m.id)));
                }
                if let Some(t) = m.sync_ticket {
                    done.syncs.push((t, sync_error(ErrorCode::NotCoordinator)));
                }
            }
        }
        self.apply(done);
        self.offsets.retain_groups(|g| !ours(g));
        self.generations.retain(|g, _| !ours(g));
        tracing::info!(target: "groups", partition, "offsets partition unloaded");
    }

    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    /// A group's state; a group known only by its committed offsets is Empty.
    pub fn group_state(&self, id: &str) -> Option<GroupState> {
        match self.groups.get(id) {
            Some(g) => Some(g.state),
            None => self.offsets.has_group(id).then_some(GroupState::Empty),
        }
    }

    pub fn offsets(&self) -> &OffsetStore {
        &self.offsets
    }

    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// JoinGroup. `nonce` (from the runtime's seeded RNG) makes new member ids unique across
    /// restarts.
    pub fn handle_join(
        &mut self,
        req: &JoinGroupRequest,
        version: i16,
        client_id: &str,
        nonce: u64,
        now_ms: i64,
    ) -> Reply<JoinGroupResponse> {
        if req.group_id.is_empty() || req.group_id.len() > GROUP_ID_BYTES_MAX {
            return Reply::Now(join_error(ErrorCode::InvalidGroupId, &req.member_id));
        }
        if let Err(code) = self.check_coordinator(&req.group_id) {
            return Reply::Now(join_error(code, &req.member_id));
        }
        if req.session_timeout_ms < self.config.session_timeout_ms_min
            || req.session_timeout_ms > self.config.session_timeout_ms_max
        {
            return Reply::Now(join_error(ErrorCode::InvalidSessionTimeout, &req.member_id));
        }
        if !self.groups.contains_key(&req.group_id) {
            if !req.member_id.is_empty() {
                return Reply::Now(join_error(ErrorCode::UnknownMemberId, &req.member_id));
            }
            if self.groups.len() >= self.config.groups_max {
                return Reply::Now(join_error(ErrorCode::CoordinatorNotAvailable, ""));
            }
            let mut group = Group::new(&req.group_id);
            // Partitioned mode: continue from the last stored generation.
            group.generation = self.generations.get(&req.group_id).copied().unwrap_or(0);
            self.groups.insert(req.group_id.clone(), group);
        }
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.clone(), p.metadata.clone()))
            .collect();
        // v0–v2 have no rebalance timeout: it is the session timeout.
        let rebalance_timeout_ms = if req.rebalance_timeout_ms > 0 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        };
        let members_max = self.config.members_per_group_max;
        let group = self.groups.get_mut(&req.group_id).expect("inserted above");
        if !group.accepts(&req.member_id, &req.protocol_type, &protocols) {
            return Reply::Now(join_error(ErrorCode::InconsistentGroupProtocol, &req.member_id));
        }
        let mut member_id = req.member_id.clone();
        if member_id.is_empty() {
            if group.members.len() + group.pending_members.len() >= members_max {
                return Reply::Now(join_error(ErrorCode::GroupMaxSizeReached, ""));
            }
            let prefix = if client_id.is_empty() { "consumer" } else { client_id };
            member_id = format!("{prefix}-{nonce:016x}-{}", self.next_join_seq);
            if version >= MEMBER_ID_REQUIRED_MIN {
                self.next_join_seq += 1;
                group.pending_members.insert(
                    member_id.clone(),
                    now_ms.saturating_add(i64::from(req.session_timeout_ms)),
                );
                return Reply::Now(join_error(ErrorCode::MemberIdRequired, &member_id));
            }
        } else if !group.members.contains_key(&member_id) && group.pending_members.remove(&member_id).is_none() {
            return Reply::Now(join_error(ErrorCode::UnknownMemberId, &member_id));
        }
        let ticket = self.next_ticket + 1;
        let group = self.groups.get_mut(&req.group_id).expect("present");
        let is_new = !group.members.contains_key(&member_id);
        let mut changed = is_new;
        if let Some(m) = group.members.get_mut(&member_id) {
            changed = m.protocols != protocols;
            m.protocols = protocols;
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = rebalance_timeout_ms;
            m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(req.session_timeout_ms));
        } else {
            self.next_join_seq += 1;
            group.members.insert(
                member_id.clone(),
                Member {
                    id: member_id.clone(),
                    group_instance_id: req.group_instance_id.clone(),
                    client_id: client_id.to_string(),
                    client_host: String::new(),
                    session_timeout_ms: req.session_timeout_ms,
                    rebalance_timeout_ms,
                    protocol_type: req.protocol_type.clone(),
                    protocols,
                    assignment: Bytes::new(),
                    heartbeat_deadline_ms: now_ms.saturating_add(i64::from(req.session_timeout_ms)),
                    join_seq: self.next_join_seq,
                    join_ticket: None,
                    sync_ticket: None,
                },
            );
        }
        let is_leader = group.leader.as_deref() == Some(member_id.as_str());
        // A member rejoining with nothing new gets the current generation back, as in Kafka: any
        // member while the leader computes assignments, a follower once they are handed out (a
        // leader rejoining a Stable group asks for a new assignment).
        let same_generation = match group.state {
            GroupState::CompletingRebalance => !changed,
            GroupState::Stable => !changed && !is_leader,
            _ => false,
        };
        if same_generation {
            return Reply::Now(join_response(group, &member_id));
        }
        // Previous joins of this member (a retry) are superseded.
        let mut done = Completions::default();
        if let Some(old) = group.members.get_mut(&member_id).and_then(|m| m.join_ticket.take()) {
            done.joins
                .push((old, join_error(ErrorCode::RebalanceInProgress, &member_id)));
        }
        group.members.get_mut(&member_id).expect("present").join_ticket = Some(ticket);
        if group.state != GroupState::PreparingRebalance {
            prepare_rebalance(group, now_ms, &mut done);
        }
        if group.all_joined() {
            complete_join(group, now_ms, &mut done);
        }
        self.next_ticket = ticket;
        self.apply(done);
        match self.done_joins.remove(&ticket) {
            Some(response) => Reply::Now(response),
            None => Reply::Parked(Ticket(ticket)),
        }
    }

    fn apply(&mut self, done: Completions) {
        self.done_joins.extend(done.joins);
        self.done_syncs.extend(done.syncs);
    }

    /// Records where a member connected from, for DescribeGroups (the driver knows the peer;
    /// the join itself does not). Unknown groups or members are ignored.
    pub fn set_client_host(&mut self, group_id: &str, member_id: &str, host: &str) {
        if let Some(m) = self.groups.get_mut(group_id).and_then(|g| g.members.get_mut(member_id)) {
            m.client_host = host.to_string();
        }
    }

    /// Every live group, in id order, and every group known only by its committed offsets
    /// (Empty), for ListGroups: (id, state, protocol type).
    pub fn list_groups(&self) -> Vec<(String, GroupState, String)> {
        let mut out: BTreeMap<String, (GroupState, String)> = self
            .offsets
            .group_ids()
            .into_iter()
            .map(|id| (id, (GroupState::Empty, String::new())))
            .collect();
        for (id, g) in &self.groups {
            out.insert(id.clone(), (g.state, g.protocol_type.clone().unwrap_or_default()));
        }
        out.into_iter().map(|(id, (state, ty))| (id, state, ty)).collect()
    }

    /// The answer to a parked JoinGroup, once there is one.
    pub fn take_join(&mut self, ticket: Ticket) -> Option<JoinGroupResponse> {
        self.done_joins.remove(&ticket.0)
    }

    /// The answer to a parked SyncGroup, once there is one.
    pub fn take_sync(&mut self, ticket: Ticket) -> Option<SyncGroupResponse> {
        self.done_syncs.remove(&ticket.0)
    }

    /// Checks a request naming (group, generation, member): the member must be in the group at
    /// that generation.
    fn check_member(&self, group_id: &str, generation: i32, member_id: &str) -> Result<&Group, ErrorCode> {
        let group = self.groups.get(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        if !group.members.contains_key(member_id) {
            return Err(ErrorCode::UnknownMemberId);
        }
        if generation != group.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(group)
    }

    pub fn handle_sync(&mut self, req: &SyncGroupRequest, now_ms: i64) -> Reply<SyncGroupResponse> {
        if let Err(code) = self.check_coordinator(&req.group_id) {
            return Reply::Now(sync_error(code));
        }
        let group = match self.check_member(&req.group_id, req.generation_id, &req.member_id) {
            Ok(g) => g,
            Err(code) => return Reply::Now(sync_error(code)),
        };
        let mismatch = |asked: &Option<String>, ours: &Option<String>| asked.is_some() && asked != ours;
        if mismatch(&req.protocol_type, &group.protocol_type) || mismatch(&req.protocol_name, &group.protocol_name) {
            return Reply::Now(sync_error(ErrorCode::InconsistentGroupProtocol));
        }
        let ticket = self.ticket();
        let group = self.groups.get_mut(&req.group_id).expect("checked");
        let member = group.members.get_mut(&req.member_id).expect("checked");
        member.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(member.session_timeout_ms));
        match group.state {
            GroupState::Empty | GroupState::Dead => Reply::Now(sync_error(ErrorCode::UnknownMemberId)),
            GroupState::PreparingRebalance => Reply::Now(sync_error(ErrorCode::RebalanceInProgress)),
            GroupState::Stable => Reply::Now(sync_response(group, &req.member_id)),
            GroupState::CompletingRebalance => {
                if let Some(old) = member.sync_ticket.replace(ticket) {
                    self.done_syncs.insert(old, sync_error(ErrorCode::RebalanceInProgress));
                }
                let partitioned = self.partition_of(&req.group_id).is_some();
                let group = self.groups.get_mut(&req.group_id).expect("checked");
                if group.leader.as_deref() == Some(req.member_id.as_str()) && group.store == Store::Idle {
                    let given: BTreeMap<&str, &Bytes> = req
                        .assignments
                        .iter()
                        .map(|a| (a.member_id.as_str(), &a.assignment))
                        .collect();
                    for m in group.members.values_mut() {
                        m.assignment = given.get(m.id.as_str()).map(|b| (*b).clone()).unwrap_or_default();
                    }
                    if partitioned {
                        // Kafka: the group's generation is stored (replicated) before any member
                        // learns its assignment; see `take_store` and `finish_store`.
                        group.store = Store::Wanted;
                    } else {
                        let mut done = Completions::default();
                        stabilize(group, &mut done);
                        self.apply(done);
                    }
                }
                match self.done_syncs.remove(&ticket) {
                    Some(response) => Reply::Now(response),
                    None => Reply::Parked(Ticket(ticket)),
                }
            }
        }
    }

    pub fn handle_heartbeat(&mut self, group_id: &str, generation: i32, member_id: &str, now_ms: i64) -> ErrorCode {
        if let Err(code) = self.check_coordinator(group_id) {
            return code;
        }
        if let Err(code) = self.check_member(group_id, generation, member_id) {
            return code;
        }
        let group = self.groups.get_mut(group_id).expect("checked");
        let member = group.members.get_mut(member_id).expect("checked");
        member.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(member.session_timeout_ms));
        match group.state {
            GroupState::PreparingRebalance => ErrorCode::RebalanceInProgress,
            GroupState::Empty | GroupState::Dead => ErrorCode::UnknownMemberId,
            GroupState::CompletingRebalance | GroupState::Stable => ErrorCode::None,
        }
    }

    /// LeaveGroup (all versions: v0–v2 name one member): an error per member, in order.
    pub fn handle_leave(&mut self, group_id: &str, member_ids: &[String], now_ms: i64) -> Vec<ErrorCode> {
        if let Err(code) = self.check_coordinator(group_id) {
            return vec![code; member_ids.len()];
        }
        let Some(group) = self.groups.get_mut(group_id) else {
            return vec![ErrorCode::UnknownMemberId; member_ids.len()];
        };
        let mut done = Completions::default();
        let results = member_ids
            .iter()
            .map(|id| {
                if group.pending_members.remove(id).is_some() {
                    return ErrorCode::None;
                }
                if remove_member(group, id, now_ms, &mut done) {
                    ErrorCode::None
                } else {
                    ErrorCode::UnknownMemberId
                }
            })
            .collect();
        self.apply(done);
        results
    }

    /// OffsetCommit for one group in local mode: an error per entry, in order. Checked by
    /// [`GroupCoordinator::prepare_commit`]; accepted entries are synced to the offsets log
    /// before this returns `None` for them.
    pub fn handle_commit<D: Disk>(
        &mut self,
        disk: &mut D,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        entries: Vec<CommitEntry>,
        now_ms: i64,
    ) -> Vec<ErrorCode> {
        let (mut results, accepted) = self.prepare_commit(group_id, generation_id, member_id, entries, now_ms);
        if let Err(e) = self.offsets.append(disk, group_id, &accepted, now_ms) {
            tracing::warn!(group = group_id, error = %e, "offset commit not persisted");
            let code = match e {
                // Kafka's answer to a commit too large for one batch: retrying cannot help.
                LogError::Batch(_) | LogError::LargerThanSegment { .. } => ErrorCode::InvalidCommitOffsetSize,
                // Retriable: the client retries, and a later append may succeed.
                _ => ErrorCode::CoordinatorNotAvailable,
            };
            for r in results.iter_mut().filter(|r| **r == ErrorCode::None) {
                *r = code;
            }
        }
        results
    }

    /// Checks an OffsetCommit as Kafka does: this broker must coordinate the group; a commit
    /// from outside any generation (`generation_id < 0`, empty member id) is allowed while the
    /// group is Empty; otherwise the member and generation must be current. Returns an error
    /// per entry (`None` for the accepted ones) and the accepted entries, which the caller
    /// makes durable before applying them ([`GroupCoordinator::apply_commit`]). A refused
    /// commit changes nothing.
    pub fn prepare_commit(
        &mut self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        entries: Vec<CommitEntry>,
        now_ms: i64,
    ) -> (Vec<ErrorCode>, Vec<CommitEntry>) {
        let n = entries.len();
        // The offsets record stores names with an i16 length; a compact string off the wire
        // can be longer.
        let verdict = if group_id.is_empty() || group_id.len() > GROUP_ID_BYTES_MAX {
            Err(ErrorCode::InvalidGroupId)
        } else if let Err(code) = self.check_coordinator(group_id) {
            Err(code)
        } else {
            match self.groups.get(group_id) {
                None if generation_id < 0 => Ok(()),
                None => Err(ErrorCode::IllegalGeneration),
                Some(g) if generation_id < 0 && g.state == GroupState::Empty => Ok(()),
                Some(g) if g.state == GroupState::CompletingRebalance && g.members.contains_key(member_id) => {
                    Err(ErrorCode::RebalanceInProgress)
                }
                Some(_) => self.check_member(group_id, generation_id, member_id).map(|_| ()),
            }
        };
        if let Err(code) = verdict {
            if matches!(code, ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration) {
                tracing::info!(target: "groups", group = group_id, generation = generation_id, commit_refused = ?code, "offset commit refused: the group is rebalancing or moved on");
            }
            return (vec![code; n], Vec::new());
        }
        if let Some(m) = self.groups.get_mut(group_id).and_then(|g| g.members.get_mut(member_id)) {
            m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
        }
        let limit = self.config.offset_metadata_bytes_max.min(offsets::STRING_BYTES_MAX);
        let results: Vec<ErrorCode> = entries
            .iter()
            .map(|e| {
                if e.committed.metadata.len() > limit {
                    ErrorCode::OffsetMetadataTooLarge
                } else {
                    ErrorCode::None
                }
            })
            .collect();
        let accepted: Vec<CommitEntry> = entries
            .into_iter()
            .zip(&results)
            .filter(|(_, r)| **r == ErrorCode::None)
            .map(|(e, _)| e)
            .collect();
        (results, accepted)
    }

    /// Partitioned mode: commits whose records the offsets partition `partition` holds below
    /// its high watermark since leader epoch `epoch`. Applied only if that partition is still
    /// loaded in that epoch (otherwise the partition's next leader replays them from its log).
    pub fn apply_commit(&mut self, partition: i32, epoch: LeaderEpoch, group_id: &str, entries: &[CommitEntry]) {
        if self.loaded.get(&partition) == Some(&epoch) {
            self.offsets.apply(group_id, entries);
        }
    }

    /// Partitioned mode: the generation record a group's leader SyncGroup asked to store, if
    /// one is wanted and not yet under way (it is then under way: call
    /// [`GroupCoordinator::finish_store`] with the outcome).
    pub fn take_store(&mut self, group_id: &str) -> Option<StoredGroup> {
        let group = self.groups.get_mut(group_id)?;
        if group.store != Store::Wanted || group.state != GroupState::CompletingRebalance {
            return None;
        }
        group.store = Store::InFlight;
        Some(StoredGroup {
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            generation: group.generation,
            protocol: group.protocol_name.clone(),
            leader: group.leader.clone(),
        })
    }

    /// Partitioned mode: how storing `generation` of a group ended. Stored: the group is Stable
    /// and its members get their assignments. Failed: their SyncGroups get `code` (the
    /// coordinator moved or the ISR is short; they find the coordinator and rejoin) and the
    /// group rebalances, as Kafka does. A store overtaken by a rebalance changes nothing.
    pub fn finish_store(&mut self, group_id: &str, generation: i32, code: ErrorCode, now_ms: i64) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.generation != generation
            || group.store != Store::InFlight
            || group.state != GroupState::CompletingRebalance
        {
            return;
        }
        let mut done = Completions::default();
        if code == ErrorCode::None {
            let g = self.generations.entry(group_id.to_string()).or_insert(generation);
            *g = (*g).max(generation);
            stabilize(group, &mut done);
        } else {
            tracing::info!(
                group = group_id,
                generation,
                ?code,
                "group generation not stored; rebalancing"
            );
            for m in group.members.values_mut() {
                if let Some(t) = m.sync_ticket.take() {
                    done.syncs.push((t, sync_error(code)));
                }
            }
            prepare_rebalance(group, now_ms, &mut done);
        }
        self.apply(done);
    }

    /// A committed offset.
    pub fn committed(&self, group_id: &str, topic: &str, partition: i32) -> Option<&Committed> {
        self.offsets.get(group_id, topic, partition)
    }

    /// When [`GroupCoordinator::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<i64> {
        self.groups
            .values()
            .flat_map(|g| {
                let members = g
                    .members
                    .values()
                    .filter(|m| !keeps_alive(g, m))
                    .map(|m| m.heartbeat_deadline_ms);
                g.pending_members
                    .values()
                    .copied()
                    .chain(members)
                    .chain(g.rebalance_deadline_ms)
            })
            .min()
    }

    /// Expires members whose session timed out and pending member ids never used, and ends
    /// rebalances whose timeout passed (members that did not rejoin are removed).
    pub fn handle_timeout(&mut self, now_ms: i64) {
        let mut done = Completions::default();
        for group in self.groups.values_mut() {
            group.pending_members.retain(|_, deadline| *deadline > now_ms);
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| !keeps_alive(group, m) && m.heartbeat_deadline_ms <= now_ms)
                .map(|m| m.id.clone())
                .collect();
            for id in expired {
                tracing::info!(group = %group.id, member = %id, "session timed out");
                remove_member(group, &id, now_ms, &mut done);
            }
            if group.state == GroupState::PreparingRebalance && group.all_joined() {
                // The last member it waited for was a pending id that never joined.
                complete_join(group, now_ms, &mut done);
            }
            if group.state == GroupState::PreparingRebalance && group.rebalance_deadline_ms.is_some_and(|d| d <= now_ms)
            {
                let late: Vec<String> = group
                    .members
                    .values()
                    .filter(|m| m.join_ticket.is_none())
                    .map(|m| m.id.clone())
                    .collect();
                for id in late {
                    group.members.remove(&id);
                }
                group.pending_members.clear();
                complete_join(group, now_ms, &mut done);
            }
        }
        // A group with no members is forgotten (its offsets stay in the offsets store), so
        // `groups_max` bounds live groups, not every group id ever used.
        self.groups
            .retain(|_, g| !(g.state == GroupState::Empty && g.members.is_empty() && g.pending_members.is_empty()));
        self.apply(done);
    }
}

/// Answers completed by a transition, to be handed to their tickets.
#[derive(Default)]
struct Completions {
    joins: Vec<(u64, JoinGroupResponse)>,
    syncs: Vec<(u64, SyncGroupResponse)>,
}

/// A member waiting on the group (in a parked join or sync) is not expired meanwhile: the
/// rebalance deadline or the leader's expiry bounds the wait.
fn keeps_alive(group: &Group, m: &Member) -> bool {
    match group.state {
        GroupState::PreparingRebalance => m.join_ticket.is_some(),
        GroupState::CompletingRebalance => m.sync_ticket.is_some(),
        _ => false,
    }
}

fn join_response(group: &Group, member_id: &str) -> JoinGroupResponse {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let leader = group.leader.clone().unwrap_or_default();
    let members = if leader == member_id {
        let mut ms: Vec<&Member> = group.members.values().collect();
        ms.sort_by_key(|m| m.join_seq);
        ms.into_iter()
            .map(|m| JoinGroupMember {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(&protocol),
            })
            .collect()
    } else {
        vec![]
    };
    JoinGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        generation_id: group.generation,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        leader,
        skip_assignment: false,
        member_id: member_id.to_string(),
        members,
    }
}

fn sync_response(group: &Group, member_id: &str) -> SyncGroupResponse {
    SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        assignment: group
            .members
            .get(member_id)
            .map(|m| m.assignment.clone())
            .unwrap_or_default(),
    }
}

/// The leader's assignments are in (and stored, in partitioned mode): Stable, and every parked
/// SyncGroup gets its member's assignment.
fn stabilize(group: &mut Group, done: &mut Completions) {
    group.state = GroupState::Stable;
    group.store = Store::Idle;
    let ids: Vec<String> = group.members.keys().cloned().collect();
    for id in ids {
        let response = sync_response(group, &id);
        if let Some(t) = group.members.get_mut(&id).and_then(|m| m.sync_ticket.take()) {
            done.syncs.push((t, response));
        }
    }
}

/// Starts a rebalance: parked syncs of the old generation are told REBALANCE_IN_PROGRESS.
fn prepare_rebalance(group: &mut Group, now_ms: i64, done: &mut Completions) {
    group.store = Store::Idle;
    for m in group.members.values_mut() {
        m.assignment = Bytes::new();
        if let Some(t) = m.sync_ticket.take() {
            done.syncs.push((t, sync_error(ErrorCode::RebalanceInProgress)));
        }
    }
    group.state = GroupState::PreparingRebalance;
    group.rebalance_deadline_ms = Some(now_ms.saturating_add(i64::from(group.rebalance_timeout_ms())));
}

/// Ends the join phase: a new generation, a protocol, a leader; every parked join answered.
fn complete_join(group: &mut Group, now_ms: i64, done: &mut Completions) {
    group.rebalance_deadline_ms = None;
    group.generation = group.generation.wrapping_add(1);
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.protocol_name = None;
        group.protocol_type = None;
        group.leader = None;
        return;
    }
    group.protocol_name = group.select_protocol();
    group.protocol_type = group.members.values().next().map(|m| m.protocol_type.clone());
    if !group.leader.as_ref().is_some_and(|l| group.members.contains_key(l)) {
        group.leader = group.members.values().min_by_key(|m| m.join_seq).map(|m| m.id.clone());
    }
    group.state = GroupState::CompletingRebalance;
    let ids: Vec<String> = group.members.keys().cloned().collect();
    for id in ids {
        let response = join_response(group, &id);
        let m = group.members.get_mut(&id).expect("listed above");
        m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
        if let Some(t) = m.join_ticket.take() {
            done.joins.push((t, response));
        }
    }
}

/// Removes a member (left, or its session expired) and rebalances the rest. Its parked
/// requests are answered UNKNOWN_MEMBER_ID. `false` when there was no such member.
fn remove_member(group: &mut Group, id: &str, now_ms: i64, done: &mut Completions) -> bool {
    let Some(m) = group.members.remove(id) else {
        return false;
    };
    if let Some(t) = m.join_ticket {
        done.joins.push((t, join_error(ErrorCode::UnknownMemberId, id)));
    }
    if let Some(t) = m.sync_ticket {
        done.syncs.push((t, sync_error(ErrorCode::UnknownMemberId)));
    }
    if group.leader.as_deref() == Some(id) {
        group.leader = None;
    }
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance => prepare_rebalance(group, now_ms, done),
        _ => {}
    }
    if group.state == GroupState::PreparingRebalance && group.all_joined() {
        complete_join(group, now_ms, done);
    }
    true
}

#[cfg(test)]
mod tests;
