//! The Raft protocol: elections with PreVote and CheckQuorum, log replication with group commit,
//! snapshots and InstallSnapshot, ReadIndex reads, and single-server membership changes (see
//! `membership.rs`: the latest configuration entry in the log rules quorums and elections; the
//! leader allows one uncommitted change, and only after an entry of its own term committed, the
//! dissertation's fix for a change racing a leader change; RequestVote and PreVote from nodes
//! that are not voters here are ignored, so a removed node cannot disrupt the quorum).
//!
//! Durability rules (see `disk.rs`): term and vote are written atomically before any message that
//! depends on them is queued; a follower's appends are synced at the end of the `handle_*` call
//! that made them, before the success it queued leaves (outputs are drained only after the call
//! returns, and a failed sync drops them); the leader counts itself in a quorum only up to its own
//! synced index. One sync per call, however many entries it appended (group commit).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::log_store::LogStore;
use super::membership::{Membership, MembershipChange};
use super::messages::{APPEND_HEADER_BYTES, COMMAND_BYTES_MAX, ENTRIES_PER_MESSAGE_MAX, MESSAGE_BYTES_MAX};
use super::state::{self, HardState, Snapshot};
use super::{
    Entry, LogIndex, MembershipError, Message, NodeId, NotLeader, Output, ProposeError, RaftConfig, RaftError, Role,
    Term,
};
use crate::disk::Disk;
// Election jitter from the caller's seed, without ambient randomness.
use crate::seeded::splitmix64 as next_random;

/// Pending `read_index` requests beyond this are failed at once.
const PENDING_READS_MAX: usize = 65_536;

/// Test-only deliberate bugs, so the cluster checker can prove it catches them.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Mutant {
    #[default]
    None,
    /// A follower acknowledges appends without syncing them.
    AckBeforeSync,
    /// A voter grants every RequestVote of a term, not only the first.
    VoteTwice,
    /// The leader accepts a membership change while another is uncommitted.
    ConcurrentChanges,
    /// The leader promotes a learner it never heard from, if the log is short (the old check).
    PromoteUnheardLearner,
}

/// The leader's view of one follower or learner.
#[derive(Clone, Debug)]
struct Peer {
    /// The next entry to send.
    next_index: LogIndex,
    /// The highest entry known to be durable on the follower and to match our log.
    match_index: LogIndex,
    /// Whether `match_index` was confirmed by the follower in this term.
    match_known: bool,
    /// Heard from it (any response in this term) since the last CheckQuorum.
    heard: bool,
    /// The highest `read_seq` it echoed in this term.
    read_seq_acked: u64,
    /// The byte of our snapshot to send next, while it is behind our compacted prefix.
    snapshot_offset: u64,
}

impl Peer {
    fn new(next_index: LogIndex) -> Peer {
        Peer {
            next_index,
            match_index: LogIndex(0),
            match_known: false,
            heard: false,
            read_seq_acked: 0,
            snapshot_offset: 0,
        }
    }
}

struct PendingRead {
    token: u64,
    seq: u64,
    /// The commit index to serve at; unknown until an entry of this term commits.
    index: Option<LogIndex>,
}

/// A snapshot being received from the leader, chunk by chunk.
struct IncomingSnapshot {
    index: LogIndex,
    term: Term,
    data: Vec<u8>,
}

/// One voter's Raft state machine. See the module docs of `consensus` for the calling contract.
pub struct Raft {
    config: RaftConfig,
    hard: HardState,
    log: LogStore,
    snapshot: Snapshot,
    /// The snapshot as InstallSnapshot streams it (membership, then the app's data).
    snapshot_wire: Bytes,
    /// The membership before any configuration entry (the configured voters).
    bootstrap: Membership,
    /// The configuration entries in the log above the snapshot; the last one rules.
    configs: BTreeMap<LogIndex, Membership>,
    role: Role,
    leader: Option<NodeId>,
    commit_index: LogIndex,
    /// The last index handed out as `Apply` or `RestoreSnapshot`.
    applied_index: LogIndex,
    /// The last index durable on our own disk.
    synced_index: LogIndex,
    /// The index of this leader's no-op: reads wait until it commits.
    term_start_index: LogIndex,
    rng: u64,
    election_deadline_ms: u64,
    heartbeat_deadline_ms: u64,
    check_quorum_deadline_ms: u64,
    /// When we last heard from a current leader (the lease that makes us refuse votes).
    leader_contact_ms: Option<u64>,
    votes: BTreeSet<NodeId>,
    peers: BTreeMap<NodeId, Peer>,
    incoming: Option<IncomingSnapshot>,
    reads: VecDeque<PendingRead>,
    read_seq: u64,
    out: VecDeque<Output>,
    reported: (Role, Term, Option<NodeId>),
    failed: Option<RaftError>,
    #[cfg(test)]
    pub(crate) mutant: Mutant,
}

fn validate(config: &RaftConfig) -> Result<(), RaftError> {
    let bad = |s: &str| Err(RaftError::Config(s.to_string()));
    let unique: BTreeSet<NodeId> = config.voters.iter().copied().collect();
    // A node joining a running quorum is not among its initial voters: it learns its
    // membership from the leader's log.
    if unique.len() != config.voters.len() || unique.is_empty() {
        return bad("voters must be unique and not empty");
    }
    if config.election_timeout_ms_min == 0 || config.election_timeout_ms_min > config.election_timeout_ms_max {
        return bad("election timeout: need 0 < min <= max");
    }
    if config.heartbeat_interval_ms == 0 || config.heartbeat_interval_ms >= config.election_timeout_ms_min {
        return bad("heartbeat interval must be positive and below the election timeout");
    }
    if config.append_entries_max == 0 || config.append_entries_max > ENTRIES_PER_MESSAGE_MAX {
        return bad("append_entries_max out of range");
    }
    if config.append_bytes_max == 0 || config.append_bytes_max > MESSAGE_BYTES_MAX - COMMAND_BYTES_MAX - 4096 {
        return bad("append_bytes_max out of range");
    }
    if config.uncommitted_entries_max == 0 {
        return bad("uncommitted_entries_max must be positive");
    }
    Ok(())
}

impl Raft {
    /// Recovers the node from `config.dir` (empty on first start) and emits `RestoreSnapshot`
    /// when a snapshot exists. `seed` drives election jitter only.
    pub fn open<D: Disk>(disk: &mut D, config: RaftConfig, now_ms: u64, seed: u64) -> Result<Raft, RaftError> {
        validate(&config)?;
        let hard = state::load_hard_state(disk, &config.dir)?;
        let snapshot = state::load_snapshot(disk, &config.dir)?.unwrap_or_default();
        let log = LogStore::open(disk, &config.dir, snapshot.index, snapshot.term)?;
        let bootstrap = Membership::voters_only(config.voters.iter().copied());
        let mut raft = Raft {
            hard,
            log,
            role: Role::Follower,
            leader: None,
            commit_index: snapshot.index,
            applied_index: snapshot.index,
            synced_index: LogIndex(0),
            term_start_index: LogIndex(u64::MAX),
            rng: seed ^ config.id.0.wrapping_mul(0x2545_F491_4F6C_DD1D),
            election_deadline_ms: now_ms,
            heartbeat_deadline_ms: u64::MAX,
            check_quorum_deadline_ms: u64::MAX,
            leader_contact_ms: None,
            votes: BTreeSet::new(),
            peers: BTreeMap::new(),
            incoming: None,
            reads: VecDeque::new(),
            read_seq: 0,
            out: VecDeque::new(),
            reported: (Role::Follower, hard.term, None),
            failed: None,
            snapshot_wire: state::payload(snapshot.membership.as_ref(), &snapshot.data),
            snapshot,
            bootstrap,
            configs: BTreeMap::new(),
            config,
            #[cfg(test)]
            mutant: Mutant::None,
        };
        // Whatever the cache holds is made durable before we count it as ours.
        raft.synced_index = raft.log.last_index();
        if raft.snapshot.index > LogIndex(0) {
            raft.out.push_back(Output::RestoreSnapshot {
                index: raft.snapshot.index,
                term: raft.snapshot.term,
                data: raft.snapshot.data.clone(),
            });
        }
        raft.rebuild_configs();
        let id = raft.config.id;
        let alone = raft.membership().voters.len() == 1 && raft.membership().is_voter(id);
        if !alone {
            raft.reset_election_deadline(now_ms);
        }
        Ok(raft)
    }

    // ----- getters -----

    pub fn id(&self) -> NodeId {
        self.config.id
    }
    pub fn role(&self) -> Role {
        self.role
    }
    pub fn term(&self) -> Term {
        self.hard.term
    }
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }
    pub fn commit_index(&self) -> LogIndex {
        self.commit_index
    }
    /// The last index handed out as `Apply` or `RestoreSnapshot`.
    pub fn applied_index(&self) -> LogIndex {
        self.applied_index
    }
    pub fn last_log_index(&self) -> LogIndex {
        self.log.last_index()
    }
    /// The index of the last stored snapshot (0 when none).
    pub fn snapshot_index(&self) -> LogIndex {
        self.log.snapshot_index()
    }
    /// True once `snapshot_threshold_entries` applied entries follow the last snapshot: the app
    /// should call [`Raft::compact`] with its state as of `applied_index()`.
    pub fn compaction_due(&self) -> bool {
        self.applied_index.0 - self.log.snapshot_index().0 >= self.config.snapshot_threshold_entries
    }
    /// The membership this node uses: the latest configuration entry in its log, committed or
    /// not, else the snapshot's, else the configured voters.
    pub fn membership(&self) -> &Membership {
        self.configs
            .values()
            .next_back()
            .or(self.snapshot.membership.as_ref())
            .unwrap_or(&self.bootstrap)
    }
    /// The index of the configuration entry in force (0 when it comes from a snapshot or the
    /// configured voters: committed either way).
    pub fn membership_index(&self) -> LogIndex {
        self.configs.keys().next_back().copied().unwrap_or_default()
    }
    /// The highest index `id` is known to hold (leader only; `None` elsewhere or for non-members).
    pub fn match_index_of(&self, id: NodeId) -> Option<LogIndex> {
        if id == self.config.id {
            return (self.role == Role::Leader).then_some(self.synced_index);
        }
        self.peers.get(&id).map(|p| p.match_index)
    }
    /// The error that made this node inert, if any.
    pub fn failed(&self) -> Option<&RaftError> {
        self.failed.as_ref()
    }

    // ----- inputs -----

    /// Appends `command` if this node leads; it is committed once a quorum (the leader after its
    /// own sync, at the next `handle_*` call) holds it durably, and then comes out as `Apply` at
    /// the returned index, unless a new leader overwrote it (then that index applies something
    /// else, which the proposer detects by comparing).
    pub fn propose<D: Disk>(
        &mut self,
        disk: &mut D,
        command: Bytes,
        _now_ms: u64,
    ) -> Result<(Term, LogIndex), ProposeError> {
        if let Some(e) = &self.failed {
            return Err(ProposeError::Failed(e.clone()));
        }
        if self.role != Role::Leader {
            return Err(NotLeader {
                leader_hint: self.leader,
            }
            .into());
        }
        if Membership::is_config(&command) {
            return Err(ProposeError::ReservedPrefix);
        }
        let max = COMMAND_BYTES_MAX.min(self.config.append_bytes_max);
        if command.len() > max {
            return Err(ProposeError::CommandTooLarge {
                bytes: command.len(),
                max,
            });
        }
        let uncommitted = self.log.last_index().0 - self.commit_index.0;
        if uncommitted >= self.config.uncommitted_entries_max {
            return Err(ProposeError::Backpressure {
                uncommitted,
                max: self.config.uncommitted_entries_max,
            });
        }
        let index = LogIndex(self.log.last_index().0.saturating_add(1));
        let entry = Entry {
            term: self.hard.term,
            index,
            command,
        };
        if let Err(e) = self.log.append(disk, entry) {
            self.fail(e.clone());
            return Err(ProposeError::Failed(e));
        }
        let caught_up: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.next_index == index)
            .map(|(id, _)| *id)
            .collect();
        for id in caught_up {
            self.send_append(id);
        }
        Ok((self.hard.term, index))
    }

    /// Appends a configuration entry making one single-server `change`, if this node leads, no
    /// other change is uncommitted, an entry of this term committed, and (for a promotion) the
    /// learner acknowledged an append or snapshot in this term and is within `append_entries_max`
    /// entries of the commit index. The new membership rules from now on; the change is done when
    /// the returned index commits (watch `commit_index`). A leader that removed itself steps down
    /// then.
    pub fn change_membership<D: Disk>(
        &mut self,
        disk: &mut D,
        change: MembershipChange,
        _now_ms: u64,
    ) -> Result<LogIndex, MembershipError> {
        if let Some(e) = &self.failed {
            return Err(MembershipError::Failed(e.clone()));
        }
        if self.role != Role::Leader {
            return Err(NotLeader {
                leader_hint: self.leader,
            }
            .into());
        }
        #[cfg(test)]
        let concurrent = self.mutant == Mutant::ConcurrentChanges;
        #[cfg(not(test))]
        let concurrent = false;
        if !concurrent && (self.membership_index() > self.commit_index || !self.own_term_committed()) {
            return Err(MembershipError::InProgress {
                index: self.membership_index().max(self.term_start_index),
            });
        }
        let next = self.membership().apply(change).map_err(MembershipError::Refused)?;
        if let MembershipChange::PromoteLearner(id) = change {
            // Only an acknowledgement in this term tells us the learner holds anything: without
            // one, a short log would pass the lag test below for a learner that is unreachable,
            // and promoting it would cost the quorum a voter's worth of fault tolerance.
            let (known, matched) = self
                .peers
                .get(&id)
                .map_or((false, LogIndex(0)), |p| (p.match_known, p.match_index));
            #[cfg(test)]
            let known = known || self.mutant == Mutant::PromoteUnheardLearner;
            let lagging = matched.0.saturating_add(self.config.append_entries_max as u64) < self.commit_index.0;
            if !known || lagging {
                return Err(MembershipError::NotCaughtUp {
                    id,
                    match_index: matched,
                    commit_index: self.commit_index,
                });
            }
        }
        let index = LogIndex(self.log.last_index().0.saturating_add(1));
        let entry = Entry {
            term: self.hard.term,
            index,
            command: Bytes::from(next.encode()),
        };
        if let Err(e) = self.log.append(disk, entry) {
            self.fail(e.clone());
            return Err(MembershipError::Failed(e));
        }
        self.configs.insert(index, next);
        self.sync_peers();
        let ids: Vec<NodeId> = self.peers.keys().copied().collect();
        for id in ids {
            self.send_append(id);
        }
        Ok(index)
    }

    /// Starts a linearizable read: `ReadReady { token, index }` once a quorum confirmed this
    /// node still leads (after the request), or `ReadFailed` if it loses leadership first.
    pub fn read_index(&mut self, token: u64, _now_ms: u64) -> Result<(), NotLeader> {
        if self.role != Role::Leader || self.failed.is_some() {
            return Err(NotLeader {
                leader_hint: self.leader.filter(|l| *l != self.config.id),
            });
        }
        if self.reads.len() >= PENDING_READS_MAX {
            self.out.push_back(Output::ReadFailed {
                token,
                leader_hint: Some(self.config.id),
            });
            return Ok(());
        }
        self.read_seq += 1;
        let index = self.own_term_committed().then_some(self.commit_index);
        self.reads.push_back(PendingRead {
            token,
            seq: self.read_seq,
            index,
        });
        let peers: Vec<NodeId> = self.peers.keys().copied().collect();
        for id in peers {
            self.send_append(id);
        }
        self.confirm_reads();
        Ok(())
    }

    pub fn handle_message<D: Disk>(&mut self, disk: &mut D, from: NodeId, msg: Message, now_ms: u64) {
        if self.failed.is_some() || from == self.config.id {
            return;
        }
        // Vote requests count only from voters of our membership: a removed node (or one that
        // never joined) cannot raise our term. Losing them is safe, like losing any message.
        let asks_vote = matches!(msg, Message::PreVote { .. } | Message::RequestVote { .. });
        if asks_vote && !self.membership().is_voter(from) {
            return;
        }
        if let Err(e) = self.step(disk, from, msg, now_ms) {
            self.fail(e);
        }
        #[cfg(test)]
        if self.mutant == Mutant::AckBeforeSync && self.role != Role::Leader {
            // The mutant answers now and syncs only at its next timeout.
            self.finish_without_sync();
            return;
        }
        self.finish(disk);
    }

    pub fn handle_timeout<D: Disk>(&mut self, disk: &mut D, now_ms: u64) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.tick(disk, now_ms) {
            self.fail(e);
        }
        self.finish(disk);
    }

    /// The next monotonic deadline at which to call `handle_timeout`; one already past means a
    /// sync is pending.
    pub fn poll_timeout(&self) -> u64 {
        if self.failed.is_some() {
            return u64::MAX;
        }
        #[cfg(test)]
        let lazy = self.mutant == Mutant::AckBeforeSync && self.role != Role::Leader;
        #[cfg(not(test))]
        let lazy = false;
        if self.log.is_dirty() && !lazy {
            return 0;
        }
        match self.role {
            Role::Leader => self.heartbeat_deadline_ms.min(self.check_quorum_deadline_ms),
            _ => self.election_deadline_ms,
        }
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Stores `snapshot`, the app's state after applying every entry up to `index`, and forgets
    /// the log up to it. `index` must have been applied.
    pub fn compact<D: Disk>(&mut self, disk: &mut D, index: LogIndex, snapshot: Bytes) -> Result<(), RaftError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if index > self.applied_index {
            return Err(RaftError::Compaction(format!(
                "index {index} is not applied yet (applied {})",
                self.applied_index
            )));
        }
        if index <= self.log.snapshot_index() {
            return Ok(());
        }
        let term = self
            .log
            .term_at(index)
            .expect("applied entries above the snapshot are in the log");
        let membership = self
            .configs
            .range(..=index)
            .next_back()
            .map(|(_, m)| m.clone())
            .or_else(|| self.snapshot.membership.clone());
        let snap = Snapshot {
            index,
            term,
            membership,
            data: snapshot,
        };
        let result =
            state::store_snapshot(disk, &self.config.dir, &snap).and_then(|()| self.log.compact(disk, index, term));
        if let Err(e) = result {
            self.fail(e.clone());
            return Err(e);
        }
        self.snapshot_wire = state::payload(snap.membership.as_ref(), &snap.data);
        self.snapshot = snap;
        self.synced_index = self.log.last_index();
        self.rebuild_configs();
        Ok(())
    }

    // ----- internals -----

    /// Whether the voters among `ids` (this node counted when `me` and a voter) make a quorum.
    fn is_quorum<'a>(&self, ids: impl Iterator<Item = &'a NodeId>) -> bool {
        let m = self.membership();
        ids.filter(|id| m.is_voter(**id)).count() >= m.quorum()
    }

    /// The highest value at least a quorum of voters reached, given each voter's value.
    fn quorum_value(&self, value_of: impl Fn(NodeId) -> u64) -> u64 {
        let m = self.membership();
        let mut values: Vec<u64> = m.voters.iter().map(|id| value_of(*id)).collect();
        values.sort_unstable_by(|a, b| b.cmp(a));
        values.get(m.quorum() - 1).copied().unwrap_or(0)
    }

    /// Re-reads the configuration entries above the snapshot from the log (at open and after
    /// the snapshot changed).
    fn rebuild_configs(&mut self) {
        self.configs.clear();
        let mut index = LogIndex(self.log.snapshot_index().0.saturating_add(1));
        while let Some(e) = self.log.get(index) {
            if Membership::is_config(&e.command) {
                match Membership::decode(&e.command) {
                    Ok(m) => {
                        self.configs.insert(index, m);
                    }
                    Err(err) => tracing::error!(index = index.0, error = %err, "raft: configuration entry ignored"),
                }
            }
            index = LogIndex(index.0 + 1);
        }
    }

    /// Leader: replicate to every member but us, and to nobody else.
    fn sync_peers(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let members: BTreeSet<NodeId> = self.membership().members().filter(|id| *id != self.config.id).collect();
        self.peers.retain(|id, _| members.contains(id));
        let next_index = LogIndex(self.log.last_index().0.saturating_add(1));
        for id in members {
            self.peers.entry(id).or_insert_with(|| Peer::new(next_index));
        }
    }

    fn own_term_committed(&self) -> bool {
        self.role == Role::Leader && self.commit_index >= self.term_start_index
    }

    fn reset_election_deadline(&mut self, now_ms: u64) {
        let span = self.config.election_timeout_ms_max - self.config.election_timeout_ms_min + 1;
        self.election_deadline_ms = now_ms + self.config.election_timeout_ms_min + next_random(&mut self.rng) % span;
    }

    fn send(&mut self, to: NodeId, msg: Message) {
        self.out.push_back(Output::Send { to, msg });
    }

    fn fail(&mut self, error: RaftError) {
        // Anything queued may depend on writes whose durability is now unknown.
        self.out.retain(|o| !matches!(o, Output::Send { .. }));
        self.out.push_back(Output::Failed { error: error.clone() });
        self.failed = Some(error);
    }

    fn persist_hard_state<D: Disk>(&mut self, disk: &mut D) -> Result<(), RaftError> {
        state::store_hard_state(disk, &self.config.dir, self.hard)
    }

    /// Ends every `handle_*` call: one sync, then commit, apply, reads and role news.
    fn finish<D: Disk>(&mut self, disk: &mut D) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.log.sync(disk) {
            self.fail(e);
            return;
        }
        self.synced_index = self.log.last_index();
        self.finish_without_sync();
    }

    fn finish_without_sync(&mut self) {
        if self.role == Role::Leader {
            self.advance_leader_commit();
            if !self.membership().is_voter(self.config.id) && self.membership_index() <= self.commit_index {
                // Our own removal committed: the new voters elect a leader among themselves.
                self.role = Role::Follower;
                self.leader = None;
                self.votes.clear();
                self.peers.clear();
                self.fail_reads();
            }
        }
        self.apply_committed();
        self.confirm_reads();
        let now = (self.role, self.hard.term, self.leader);
        if now != self.reported {
            self.reported = now;
            self.out.push_back(Output::RoleChanged {
                role: now.0,
                term: now.1,
                leader: now.2,
            });
        }
    }

    fn advance_leader_commit(&mut self) {
        let me = self.config.id;
        let candidate = LogIndex(self.quorum_value(|id| {
            if id == me {
                self.synced_index.0
            } else {
                self.peers.get(&id).map_or(0, |p| p.match_index.0)
            }
        }));
        if candidate > self.commit_index && self.log.term_at(candidate) == Some(self.hard.term) {
            self.commit_index = candidate;
            if self.own_term_committed() {
                let commit = self.commit_index;
                for r in self.reads.iter_mut().filter(|r| r.index.is_none()) {
                    r.index = Some(commit);
                }
            }
        }
    }

    fn apply_committed(&mut self) {
        while self.applied_index < self.commit_index {
            let index = LogIndex(self.applied_index.0.saturating_add(1));
            let entry = self
                .log
                .get(index)
                .expect("committed entries above the snapshot are in the log");
            // Configuration entries are Raft's own: the app sees a no-op.
            let command = if Membership::is_config(&entry.command) {
                Bytes::new()
            } else {
                entry.command.clone()
            };
            self.out.push_back(Output::Apply {
                index,
                term: entry.term,
                command,
            });
            self.applied_index = index;
        }
    }

    fn confirm_reads(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let me = self.config.id;
        let confirmed = self.quorum_value(|id| {
            if id == me {
                u64::MAX
            } else {
                self.peers.get(&id).map_or(0, |p| p.read_seq_acked)
            }
        });
        while let Some(r) = self.reads.front() {
            match r.index {
                Some(index) if r.seq <= confirmed => {
                    self.out.push_back(Output::ReadReady { token: r.token, index });
                    self.reads.pop_front();
                }
                _ => break,
            }
        }
    }

    fn fail_reads(&mut self) {
        let hint = self.leader.filter(|l| *l != self.config.id);
        while let Some(r) = self.reads.pop_front() {
            self.out.push_back(Output::ReadFailed {
                token: r.token,
                leader_hint: hint,
            });
        }
    }

    /// Steps down to follower; adopts `term` (clearing the vote) when it is newer.
    fn become_follower<D: Disk>(
        &mut self,
        disk: &mut D,
        term: Term,
        leader: Option<NodeId>,
        now_ms: u64,
    ) -> Result<(), RaftError> {
        let was_leader = self.role == Role::Leader;
        if term > self.hard.term {
            self.hard = HardState { term, voted_for: None };
            self.persist_hard_state(disk)?;
        }
        if self.role != Role::Follower || self.leader != leader {
            self.reset_election_deadline(now_ms);
        }
        self.role = Role::Follower;
        self.leader = leader;
        self.votes.clear();
        if was_leader {
            self.peers.clear();
            self.fail_reads();
        }
        Ok(())
    }

    fn tick<D: Disk>(&mut self, disk: &mut D, now_ms: u64) -> Result<(), RaftError> {
        if self.role == Role::Leader {
            if now_ms >= self.check_quorum_deadline_ms {
                let me = self.config.id;
                let heard: Vec<NodeId> = self
                    .peers
                    .iter()
                    .filter(|(_, p)| p.heard)
                    .map(|(id, _)| *id)
                    .chain([me])
                    .collect();
                if !self.is_quorum(heard.iter()) {
                    // CheckQuorum: a leader cut off from a quorum stops serving.
                    return self.become_follower(disk, self.hard.term, None, now_ms);
                }
                for p in self.peers.values_mut() {
                    p.heard = false;
                }
                self.check_quorum_deadline_ms = now_ms + self.config.election_timeout_ms_min;
            }
            if now_ms >= self.heartbeat_deadline_ms {
                self.heartbeat_deadline_ms = now_ms + self.config.heartbeat_interval_ms;
                let ids: Vec<NodeId> = self.peers.keys().copied().collect();
                for id in ids {
                    let peer = self.peers.get_mut(&id).expect("listed above");
                    if peer.match_known && peer.next_index > LogIndex(peer.match_index.0.saturating_add(1)) {
                        // Retransmit what was sent but not acknowledged (it may have been lost).
                        peer.next_index = LogIndex(peer.match_index.0.saturating_add(1));
                    }
                    self.send_append(id);
                }
            }
            return Ok(());
        }
        if now_ms >= self.election_deadline_ms {
            if self.membership().is_voter(self.config.id) {
                self.start_pre_vote(disk, now_ms)?;
            } else {
                // Learners and removed nodes never campaign.
                self.reset_election_deadline(now_ms);
            }
        }
        Ok(())
    }

    fn start_pre_vote<D: Disk>(&mut self, disk: &mut D, now_ms: u64) -> Result<(), RaftError> {
        self.role = Role::PreCandidate;
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.config.id);
        self.reset_election_deadline(now_ms);
        if self.is_quorum(self.votes.iter()) {
            return self.start_election(disk, now_ms);
        }
        let msg = Message::PreVote {
            term: Term(self.hard.term.0.saturating_add(1)),
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
        };
        let voters: Vec<NodeId> = self.membership().voters.iter().copied().collect();
        for id in voters {
            if id != self.config.id {
                self.send(id, msg.clone());
            }
        }
        Ok(())
    }

    fn start_election<D: Disk>(&mut self, disk: &mut D, now_ms: u64) -> Result<(), RaftError> {
        self.hard = HardState {
            term: Term(self.hard.term.0.saturating_add(1)),
            voted_for: Some(self.config.id),
        };
        self.persist_hard_state(disk)?;
        self.role = Role::Candidate;
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.config.id);
        self.reset_election_deadline(now_ms);
        if self.is_quorum(self.votes.iter()) {
            return self.become_leader(disk, now_ms);
        }
        let msg = Message::RequestVote {
            term: self.hard.term,
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
        };
        let voters: Vec<NodeId> = self.membership().voters.iter().copied().collect();
        for id in voters {
            if id != self.config.id {
                self.send(id, msg.clone());
            }
        }
        Ok(())
    }

    fn become_leader<D: Disk>(&mut self, disk: &mut D, now_ms: u64) -> Result<(), RaftError> {
        self.role = Role::Leader;
        self.leader = Some(self.config.id);
        self.votes.clear();
        let next_index = LogIndex(self.log.last_index().0.saturating_add(1));
        self.peers.clear();
        self.sync_peers();
        self.heartbeat_deadline_ms = now_ms + self.config.heartbeat_interval_ms;
        self.check_quorum_deadline_ms = now_ms + self.config.election_timeout_ms_min;
        // The no-op commits everything before it and lets reads start (Raft §8).
        self.term_start_index = next_index;
        self.log.append(
            disk,
            Entry {
                term: self.hard.term,
                index: next_index,
                command: Bytes::new(),
            },
        )?;
        let ids: Vec<NodeId> = self.peers.keys().copied().collect();
        for id in ids {
            self.send_append(id);
        }
        Ok(())
    }

    /// Sends `id` the entries from its `next_index` (or a snapshot chunk when they are
    /// compacted away), advancing `next_index` optimistically.
    fn send_append(&mut self, id: NodeId) {
        let Some(peer) = self.peers.get(&id) else { return };
        let next = peer.next_index;
        if next <= self.log.snapshot_index() {
            let offset = peer.snapshot_offset.min(self.snapshot_wire.len() as u64);
            let start = usize::try_from(offset).expect("bounded by the snapshot's length");
            let end = (start + self.config.append_bytes_max).min(self.snapshot_wire.len());
            let msg = Message::InstallSnapshot {
                term: self.hard.term,
                last_index: self.snapshot.index,
                last_term: self.snapshot.term,
                offset,
                data: self.snapshot_wire.slice(start..end),
                done: end == self.snapshot_wire.len(),
                read_seq: self.read_seq,
            };
            self.send(id, msg);
            return;
        }
        let prev = LogIndex(next.0 - 1);
        let prev_term = self
            .log
            .term_at(prev)
            .expect("entries at and above the snapshot are known");
        let entries = self.log.slice(
            next,
            self.config.append_entries_max,
            self.config.append_bytes_max.saturating_sub(APPEND_HEADER_BYTES),
        );
        if let Some(last) = entries.last() {
            let peer = self.peers.get_mut(&id).expect("looked up above");
            peer.next_index = LogIndex(last.index.0.saturating_add(1));
        }
        let msg = Message::AppendEntries {
            term: self.hard.term,
            prev_log_index: prev,
            prev_log_term: prev_term,
            entries,
            leader_commit: self.commit_index,
            read_seq: self.read_seq,
        };
        self.send(id, msg);
    }

    fn log_up_to_date(&self, last_log_index: LogIndex, last_log_term: Term) -> bool {
        (last_log_term, last_log_index) >= (self.log.last_term(), self.log.last_index())
    }

    /// Whether we heard from a live leader recently enough to refuse to help elect another.
    fn in_lease(&self, now_ms: u64) -> bool {
        self.role == Role::Leader
            || (self.leader.is_some()
                && self
                    .leader_contact_ms
                    .is_some_and(|t| now_ms < t + self.config.election_timeout_ms_min))
    }

    fn step<D: Disk>(&mut self, disk: &mut D, from: NodeId, msg: Message, now_ms: u64) -> Result<(), RaftError> {
        let term = msg.term();
        match msg {
            Message::PreVote {
                term,
                last_log_index,
                last_log_term,
            } => {
                let granted = term > self.hard.term
                    && !self.in_lease(now_ms)
                    && self.log_up_to_date(last_log_index, last_log_term);
                let term = if granted { term } else { self.hard.term };
                self.send(from, Message::PreVoteResponse { term, granted });
                return Ok(());
            }
            Message::PreVoteResponse { term, granted } => {
                if granted {
                    if self.role == Role::PreCandidate && Some(term.0) == self.hard.term.0.checked_add(1) {
                        self.votes.insert(from);
                        if self.is_quorum(self.votes.iter()) {
                            self.start_election(disk, now_ms)?;
                        }
                    }
                } else if term > self.hard.term {
                    self.become_follower(disk, term, None, now_ms)?;
                }
                return Ok(());
            }
            _ => {}
        }
        if term > self.hard.term {
            match &msg {
                Message::RequestVote { .. } if self.in_lease(now_ms) => return Ok(()),
                Message::AppendEntries { .. } | Message::InstallSnapshot { .. } => {
                    self.become_follower(disk, term, Some(from), now_ms)?
                }
                _ => self.become_follower(disk, term, None, now_ms)?,
            }
        }
        match msg {
            Message::PreVote { .. } | Message::PreVoteResponse { .. } => Ok(()),
            Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
            } => self.on_request_vote(disk, from, term, last_log_index, last_log_term, now_ms),
            Message::RequestVoteResponse { term, granted } => {
                if granted && term == self.hard.term && self.role == Role::Candidate {
                    self.votes.insert(from);
                    if self.is_quorum(self.votes.iter()) {
                        self.become_leader(disk, now_ms)?;
                    }
                }
                Ok(())
            }
            Message::AppendEntries {
                term,
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                read_seq,
            } => {
                if term < self.hard.term {
                    let msg = Message::AppendEntriesResponse {
                        term: self.hard.term,
                        success: false,
                        index: LogIndex(0),
                        read_seq,
                    };
                    self.send(from, msg);
                    return Ok(());
                }
                if !self.accept_leader(disk, from, now_ms)? {
                    return Ok(());
                }
                let (success, index) = self.on_append(disk, prev_log_index, prev_log_term, entries, leader_commit)?;
                let msg = Message::AppendEntriesResponse {
                    term: self.hard.term,
                    success,
                    index,
                    read_seq,
                };
                self.send(from, msg);
                Ok(())
            }
            Message::AppendEntriesResponse {
                term,
                success,
                index,
                read_seq,
            } => {
                if term == self.hard.term && self.role == Role::Leader {
                    self.on_append_response(from, success, index, read_seq);
                }
                Ok(())
            }
            Message::InstallSnapshot {
                term,
                last_index,
                last_term,
                offset,
                data,
                done,
                read_seq,
            } => {
                if term < self.hard.term {
                    let msg = Message::InstallSnapshotResponse {
                        term: self.hard.term,
                        last_index,
                        next_offset: 0,
                        done: false,
                        read_seq,
                    };
                    self.send(from, msg);
                    return Ok(());
                }
                if !self.accept_leader(disk, from, now_ms)? {
                    return Ok(());
                }
                let (next_offset, done) = self.on_snapshot_chunk(disk, last_index, last_term, offset, &data, done)?;
                let msg = Message::InstallSnapshotResponse {
                    term: self.hard.term,
                    last_index,
                    next_offset,
                    done,
                    read_seq,
                };
                self.send(from, msg);
                Ok(())
            }
            Message::InstallSnapshotResponse {
                term,
                last_index,
                next_offset,
                done,
                read_seq,
            } => {
                if term == self.hard.term && self.role == Role::Leader {
                    self.on_snapshot_response(from, last_index, next_offset, done, read_seq);
                }
                Ok(())
            }
        }
    }

    fn on_request_vote<D: Disk>(
        &mut self,
        disk: &mut D,
        from: NodeId,
        term: Term,
        last_log_index: LogIndex,
        last_log_term: Term,
        now_ms: u64,
    ) -> Result<(), RaftError> {
        if term < self.hard.term {
            let msg = Message::RequestVoteResponse {
                term: self.hard.term,
                granted: false,
            };
            self.send(from, msg);
            return Ok(());
        }
        #[cfg(test)]
        let vote_twice = self.mutant == Mutant::VoteTwice;
        #[cfg(not(test))]
        let vote_twice = false;
        let free = vote_twice || self.hard.voted_for.is_none() || self.hard.voted_for == Some(from);
        let granted = free && self.role != Role::Leader && self.log_up_to_date(last_log_index, last_log_term);
        if granted {
            if self.hard.voted_for != Some(from) {
                self.hard.voted_for = Some(from);
                self.persist_hard_state(disk)?;
            }
            self.reset_election_deadline(now_ms);
        }
        let msg = Message::RequestVoteResponse {
            term: self.hard.term,
            granted,
        };
        self.send(from, msg);
        Ok(())
    }

    /// A leader of our term spoke: follow it. False if we lead this term ourselves (impossible
    /// with election safety; such a message is dropped).
    fn accept_leader<D: Disk>(&mut self, disk: &mut D, from: NodeId, now_ms: u64) -> Result<bool, RaftError> {
        if self.role == Role::Leader {
            return Ok(false);
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            self.become_follower(disk, self.hard.term, Some(from), now_ms)?;
        }
        self.leader_contact_ms = Some(now_ms);
        self.reset_election_deadline(now_ms);
        Ok(true)
    }

    /// The follower's side of AppendEntries: `(success, index)` as in the response.
    fn on_append<D: Disk>(
        &mut self,
        disk: &mut D,
        prev_log_index: LogIndex,
        prev_log_term: Term,
        entries: Vec<Entry>,
        leader_commit: LogIndex,
    ) -> Result<(bool, LogIndex), RaftError> {
        let last = self.log.last_index();
        if prev_log_index > last {
            return Ok((false, LogIndex(last.0.saturating_add(1))));
        }
        let snapshot_index = self.log.snapshot_index();
        if prev_log_index >= snapshot_index {
            match self.log.term_at(prev_log_index) {
                Some(t) if t == prev_log_term => {}
                _ => {
                    let floor = LogIndex(self.commit_index.0.saturating_add(1));
                    let hint = self.log.first_index_of_term_run(prev_log_index, floor).max(floor);
                    return Ok((false, hint));
                }
            }
        }
        // Entries at or below our snapshot are committed and identical: skip them.
        let mut last_new = prev_log_index;
        for entry in entries {
            last_new = entry.index;
            if entry.index <= snapshot_index {
                continue;
            }
            match self.log.term_at(entry.index) {
                Some(t) if t == entry.term => continue,
                Some(_) => {
                    if entry.index <= self.commit_index {
                        // Only a broken leader overwrites committed entries: refuse, keep ours.
                        tracing::error!(index = entry.index.0, "leader tried to overwrite a committed entry");
                        return Ok((false, LogIndex(self.commit_index.0.saturating_add(1))));
                    }
                    self.log.truncate_from(disk, entry.index)?;
                    self.synced_index = self.synced_index.min(LogIndex(entry.index.0 - 1));
                    // A cut configuration entry no longer rules: the one before it does again.
                    self.configs.split_off(&entry.index);
                }
                None => {}
            }
            if Membership::is_config(&entry.command) {
                match Membership::decode(&entry.command) {
                    Ok(m) => {
                        self.configs.insert(entry.index, m);
                    }
                    Err(err) => {
                        tracing::error!(index = entry.index.0, error = %err, "raft: configuration entry ignored")
                    }
                }
            }
            self.log.append(disk, entry)?;
        }
        let last_new = last_new.max(snapshot_index);
        let commit = leader_commit.min(last_new);
        if commit > self.commit_index {
            self.commit_index = commit;
        }
        Ok((true, last_new))
    }

    fn on_append_response(&mut self, from: NodeId, success: bool, index: LogIndex, read_seq: u64) {
        let last = self.log.last_index();
        let Some(peer) = self.peers.get_mut(&from) else { return };
        peer.heard = true;
        peer.read_seq_acked = peer.read_seq_acked.max(read_seq);
        if success {
            if index > last {
                return; // Not from this term's log: ignore.
            }
            peer.match_known = true;
            if index > peer.match_index {
                peer.match_index = index;
            }
            if peer.next_index <= peer.match_index {
                peer.next_index = LogIndex(peer.match_index.0.saturating_add(1));
            }
            if peer.next_index <= last {
                self.send_append(from);
            }
        } else {
            let next = index
                .max(LogIndex(peer.match_index.0.saturating_add(1)))
                .min(LogIndex(last.0.saturating_add(1)));
            if next < peer.next_index || !peer.match_known {
                peer.next_index = next.max(LogIndex(1));
                peer.snapshot_offset = 0;
                self.send_append(from);
            }
        }
        self.advance_leader_commit();
    }

    fn on_snapshot_chunk<D: Disk>(
        &mut self,
        disk: &mut D,
        last_index: LogIndex,
        last_term: Term,
        offset: u64,
        data: &[u8],
        done: bool,
    ) -> Result<(u64, bool), RaftError> {
        if last_index <= self.commit_index {
            // Everything it covers is committed here already.
            self.incoming = None;
            return Ok((offset.saturating_add(data.len() as u64), true));
        }
        if offset == 0 {
            self.incoming = Some(IncomingSnapshot {
                index: last_index,
                term: last_term,
                data: Vec::new(),
            });
        }
        let Some(inc) = self
            .incoming
            .as_mut()
            .filter(|i| i.index == last_index && i.term == last_term)
        else {
            return Ok((0, false));
        };
        if offset != inc.data.len() as u64 {
            return Ok((inc.data.len() as u64, false));
        }
        if inc.data.len() as u64 + data.len() as u64 > self.config.snapshot_bytes_max {
            self.incoming = None;
            return Ok((0, false));
        }
        inc.data.extend_from_slice(data);
        let next_offset = inc.data.len() as u64;
        if !done {
            return Ok((next_offset, false));
        }
        let inc = self.incoming.take().expect("checked above");
        let (membership, data) = match state::split_payload(&inc.data) {
            Ok(split) => split,
            Err(err) => {
                tracing::error!(error = %err, "raft: received snapshot refused");
                return Ok((0, false));
            }
        };
        let snap = Snapshot {
            index: inc.index,
            term: inc.term,
            membership,
            data,
        };
        state::store_snapshot(disk, &self.config.dir, &snap)?;
        self.log.compact(disk, snap.index, snap.term)?;
        self.snapshot_wire = Bytes::from(inc.data);
        self.synced_index = self.log.last_index();
        self.commit_index = snap.index;
        self.applied_index = snap.index;
        self.out.push_back(Output::RestoreSnapshot {
            index: snap.index,
            term: snap.term,
            data: snap.data.clone(),
        });
        self.snapshot = snap;
        self.rebuild_configs();
        Ok((next_offset, true))
    }

    fn on_snapshot_response(&mut self, from: NodeId, last_index: LogIndex, next_offset: u64, done: bool, seq: u64) {
        let snapshot_index = self.snapshot.index;
        let Some(peer) = self.peers.get_mut(&from) else { return };
        peer.heard = true;
        peer.read_seq_acked = peer.read_seq_acked.max(seq);
        if last_index != snapshot_index {
            return; // About an older snapshot of ours: the next heartbeat restarts.
        }
        if done {
            peer.match_known = true;
            peer.match_index = peer.match_index.max(last_index);
            peer.next_index = LogIndex(peer.match_index.0.saturating_add(1));
            peer.snapshot_offset = 0;
        } else if next_offset > peer.snapshot_offset {
            peer.snapshot_offset = next_offset;
        } else {
            // No progress (a refused or reordered chunk): let the next heartbeat retry, so that
            // a refusal cannot become an endless ping-pong.
            peer.snapshot_offset = next_offset;
            return;
        }
        self.send_append(from);
        self.advance_leader_commit();
    }
}
