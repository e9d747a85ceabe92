//! Raft under a deterministic in-memory cluster: 3 or 5 voters, one `MemDisk` each, a seeded
//! network that drops, delays, reorders and duplicates (every message really encoded and decoded),
//! partitions, crashes (`DropUnsynced` and `Torn`) with re-open, compaction with InstallSnapshot,
//! a client that retries on NotLeader, and ReadIndex reads.
//!
//! The checkers (in `Checker`) record violations instead of panicking, so the negative controls
//! can show that a deliberately broken Raft (`Mutant`) is caught. Each run reports what it
//! compared; the sweep fails if it compared nothing.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::raft::Mutant;
use super::*;
use crate::disk::mem::{CrashMode, MemDisk};
use crate::seeded::Draws;

/// The app every node runs: the map of applied commands by index, which is also its snapshot.
fn encode_state(state: &BTreeMap<u64, Bytes>) -> Bytes {
    let mut out = Vec::new();
    for (index, cmd) in state {
        out.extend_from_slice(&index.to_be_bytes());
        out.extend_from_slice(&(cmd.len() as u32).to_be_bytes());
        out.extend_from_slice(cmd);
    }
    Bytes::from(out)
}

fn decode_state(mut bytes: &[u8]) -> BTreeMap<u64, Bytes> {
    let mut state = BTreeMap::new();
    while !bytes.is_empty() {
        let index = u64::from_be_bytes(bytes[..8].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        state.insert(index, Bytes::copy_from_slice(&bytes[12..12 + len]));
        bytes = &bytes[12 + len..];
    }
    state
}

struct Node {
    id: NodeId,
    disk: MemDisk,
    raft: Option<Raft>,
    /// Applied commands by index (no-ops included as empty commands).
    state: BTreeMap<u64, Bytes>,
    applied: u64,
    /// When a crashed node comes back.
    restart_at_ms: Option<u64>,
}

/// What the checkers saw and what they found wrong.
#[derive(Default, Debug)]
struct Checker {
    leaders: BTreeMap<Term, NodeId>,
    /// The one command each index may ever apply, from whichever node applied it first.
    chosen: BTreeMap<u64, Bytes>,
    /// Commands whose proposer saw them applied at the index `propose` returned.
    acked: BTreeMap<u64, Bytes>,
    applies_compared: u64,
    restores_compared: u64,
    acked_compared: u64,
    reads_checked: u64,
    violations: Vec<String>,
}

impl Checker {
    fn choose(&mut self, node: NodeId, index: u64, cmd: &Bytes) {
        match self.chosen.get(&index) {
            Some(c) if c != cmd => self.violations.push(format!(
                "node {node} applied {cmd:?} at {index} where another node applied {c:?}"
            )),
            Some(_) => {}
            None => {
                self.chosen.insert(index, cmd.clone());
            }
        }
    }
}

struct Proposal {
    node: NodeId,
    index: u64,
    command: Bytes,
}

struct PendingRead {
    node: NodeId,
    token: u64,
    /// The highest index acknowledged to the client before the read started: a linearizable
    /// read must reflect it.
    acked_before: u64,
}

#[derive(Clone, Copy)]
struct Faults {
    drop_percent: u64,
    duplicate_percent: u64,
    delay_ms_max: u64,
}

struct Cluster {
    rng: Draws,
    nodes: Vec<Node>,
    /// Nodes `1..=voters` start as the voters; the others start outside, to join.
    voters: u64,
    /// In flight: (deliver_at_ms, sequence) -> (from, to, encoded message).
    net: BTreeMap<(u64, u64), (NodeId, NodeId, Bytes)>,
    net_seq: u64,
    /// Partition group per node index; messages cross only within a group.
    group: Vec<u8>,
    faults: Faults,
    now_ms: u64,
    mutant: Mutant,
    checker: Checker,
    proposals: Vec<Proposal>,
    reads: Vec<PendingRead>,
    next_token: u64,
    client_target: usize,
    commands_proposed: u64,
    /// Set after healing: the first proposal made after it, and when it reached every node.
    liveness_probe_from: Option<u64>,
    live_at_ms: Option<u64>,
    crashes: u64,
    snapshots_installed: u64,
    /// Prints elections, crashes and role changes (flip to replay a failing seed).
    trace: bool,
    /// During the chaos, the leader also adds the last node as a learner, promotes it and then
    /// removes one of the first voters (see `membership_step`).
    reconfigure: bool,
    /// Membership changes the leader accepted, and refused as in progress or not caught up.
    changes_accepted: u64,
    changes_refused: u64,
}

fn config(id: NodeId, n: u64) -> RaftConfig {
    let mut c = RaftConfig::new(id, (1..=n).map(NodeId).collect(), "raft");
    // Small limits so that batching, chunked snapshots and compaction all happen.
    c.append_entries_max = 8;
    c.append_bytes_max = 512;
    c.snapshot_threshold_entries = 40;
    c.uncommitted_entries_max = 200;
    c
}

impl Cluster {
    fn new(seed: u64, n: u64, mutant: Mutant) -> Cluster {
        Cluster::build(seed, n, n, mutant)
    }

    /// `n` nodes of which the first `voters` start as the quorum.
    fn build(seed: u64, n: u64, voters: u64, mutant: Mutant) -> Cluster {
        let mut rng = Draws::new(seed);
        let faults = Faults {
            drop_percent: rng.below(15),
            duplicate_percent: rng.below(8),
            delay_ms_max: 1 + rng.below(60),
        };
        let mut cluster = Cluster {
            rng,
            nodes: Vec::new(),
            voters,
            net: BTreeMap::new(),
            net_seq: 0,
            group: vec![0; n as usize],
            faults,
            now_ms: 0,
            mutant,
            checker: Checker::default(),
            proposals: Vec::new(),
            reads: Vec::new(),
            next_token: 0,
            client_target: 0,
            commands_proposed: 0,
            liveness_probe_from: None,
            live_at_ms: None,
            crashes: 0,
            snapshots_installed: 0,
            trace: false,
            reconfigure: false,
            changes_accepted: 0,
            changes_refused: 0,
        };
        for i in 1..=n {
            cluster.nodes.push(Node {
                id: NodeId(i),
                disk: MemDisk::new(),
                raft: None,
                state: BTreeMap::new(),
                applied: 0,
                restart_at_ms: None,
            });
        }
        for i in 0..n as usize {
            cluster.start(i);
        }
        cluster
    }

    fn start(&mut self, i: usize) {
        let n = self.voters;
        let seed = self.rng.next_u64();
        let node = &mut self.nodes[i];
        let mut raft =
            Raft::open(&mut node.disk, config(node.id, n), self.now_ms, seed).expect("MemDisk does not fail");
        raft.mutant = self.mutant;
        node.raft = Some(raft);
        node.state.clear();
        node.applied = 0;
        node.restart_at_ms = None;
        self.drain(i);
    }

    fn crash(&mut self, i: usize) {
        let mode = if self.rng.chance(50) {
            CrashMode::DropUnsynced
        } else {
            CrashMode::Torn {
                seed: self.rng.next_u64(),
            }
        };
        let node = &mut self.nodes[i];
        if node.raft.take().is_none() {
            return;
        }
        node.disk.crash(mode);
        if self.trace {
            println!("{} crash node {}", self.now_ms, node.id);
        }
        node.restart_at_ms = Some(self.now_ms + 50 + self.rng.below(1500));
        let id = node.id;
        self.proposals.retain(|p| p.node != id);
        self.reads.retain(|r| r.node != id);
        self.crashes += 1;
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: &Message) {
        let bytes = msg.encode();
        let copies = if self.rng.chance(self.faults.duplicate_percent) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.rng.chance(self.faults.drop_percent) {
                continue;
            }
            let at = self.now_ms + 1 + self.rng.below(self.faults.delay_ms_max);
            self.net_seq += 1;
            self.net.insert((at, self.net_seq), (from, to, bytes.clone()));
        }
    }

    /// Takes every output of node `i` and plays the app and the checkers.
    fn drain(&mut self, i: usize) {
        loop {
            let Some(out) = self.nodes[i].raft.as_mut().and_then(Raft::poll_output) else {
                break;
            };
            let id = self.nodes[i].id;
            match out {
                Output::Send { to, msg } => self.send(id, to, &msg),
                Output::Apply { index, command, .. } => {
                    let node = &mut self.nodes[i];
                    if index.0 != node.applied + 1 {
                        let applied = node.applied;
                        self.checker
                            .violations
                            .push(format!("node {id} applied {index} after {applied}: out of order"));
                    }
                    node.applied = index.0;
                    node.state.insert(index.0, command.clone());
                    self.checker.applies_compared += 1;
                    self.checker.choose(id, index.0, &command);
                    if let Some(pos) = self.proposals.iter().position(|p| p.node == id && p.index == index.0) {
                        let p = self.proposals.swap_remove(pos);
                        if p.command == command {
                            self.checker.acked.insert(index.0, command.clone());
                            let probe_done = self.liveness_probe_from.is_some_and(|from| {
                                std::str::from_utf8(&command)
                                    .ok()
                                    .and_then(|s| s.strip_prefix('c'))
                                    .and_then(|n| n.parse::<u64>().ok())
                                    .is_some_and(|n| n >= from)
                            });
                            if probe_done && self.live_at_ms.is_none() {
                                self.live_at_ms = Some(self.now_ms);
                            }
                        }
                    }
                }
                Output::RestoreSnapshot { index, data, .. } => {
                    let state = decode_state(&data);
                    for (ix, cmd) in &state {
                        self.checker.choose(id, *ix, cmd);
                        self.checker.restores_compared += 1;
                    }
                    if state.keys().next_back().copied().unwrap_or(0) != index.0 {
                        self.checker.violations.push(format!(
                            "node {id}: snapshot at {index} holds state up to another index"
                        ));
                    }
                    let node = &mut self.nodes[i];
                    if index.0 < node.applied {
                        let applied = node.applied;
                        self.checker
                            .violations
                            .push(format!("node {id} restored {index} after applying {applied}"));
                    }
                    node.state = state;
                    node.applied = index.0;
                    self.snapshots_installed += 1;
                }
                Output::ReadReady { token, index } => {
                    if let Some(pos) = self.reads.iter().position(|r| r.node == id && r.token == token) {
                        let r = self.reads.swap_remove(pos);
                        self.checker.reads_checked += 1;
                        if index.0 < r.acked_before {
                            self.checker.violations.push(format!(
                                "node {id}: read at {index} misses the write acknowledged at {}",
                                r.acked_before
                            ));
                        }
                    }
                }
                Output::ReadFailed { token, .. } => self.reads.retain(|r| !(r.node == id && r.token == token)),
                Output::RoleChanged { role, term, leader } => {
                    if self.trace {
                        println!("{} node {id} {role:?} term {term} leader {leader:?}", self.now_ms);
                    }
                    if role == Role::Leader {
                        if let Some(other) = self.checker.leaders.insert(term, id) {
                            if other != id {
                                self.checker
                                    .violations
                                    .push(format!("two leaders in term {term}: {other} and {id}"));
                            }
                        }
                    }
                }
                Output::Failed { error } => self.checker.violations.push(format!("node {id} failed: {error}")),
            }
        }
        // The app compacts when Raft says so, with its state as of what it applied.
        let node = &mut self.nodes[i];
        if let Some(raft) = node.raft.as_mut() {
            if raft.compaction_due() {
                let applied = LogIndex(node.applied);
                raft.compact(&mut node.disk, applied, encode_state(&node.state))
                    .expect("MemDisk does not fail");
            }
        }
    }

    fn client_step(&mut self) {
        let i = self.client_target;
        let id = self.nodes[i].id;
        let Some(raft) = self.nodes[i].raft.as_mut() else {
            self.client_target = self.rng.below(self.nodes.len() as u64) as usize;
            return;
        };
        if self.rng.chance(25) {
            self.next_token += 1;
            let token = self.next_token;
            let acked_before = self.checker.acked.keys().next_back().copied().unwrap_or(0);
            match raft.read_index(token, self.now_ms) {
                Ok(()) => self.reads.push(PendingRead {
                    node: id,
                    token,
                    acked_before,
                }),
                Err(NotLeader { leader_hint }) => self.retarget(leader_hint),
            }
            self.drain(i);
            return;
        }
        let command = Bytes::from(format!("c{}", self.commands_proposed));
        let node = &mut self.nodes[i];
        let raft = node.raft.as_mut().expect("checked above");
        match raft.propose(&mut node.disk, command.clone(), self.now_ms) {
            Ok((_, index)) => {
                self.commands_proposed += 1;
                self.proposals.push(Proposal {
                    node: id,
                    index: index.0,
                    command,
                });
            }
            Err(ProposeError::NotLeader(NotLeader { leader_hint })) => self.retarget(leader_hint),
            Err(ProposeError::Backpressure { .. }) => {}
            Err(e) => self.checker.violations.push(format!("propose failed: {e}")),
        }
        self.drain(i);
    }

    fn retarget(&mut self, hint: Option<NodeId>) {
        self.client_target = match hint {
            Some(NodeId(n)) => n as usize - 1,
            None => self.rng.below(self.nodes.len() as u64) as usize,
        };
    }

    fn nemesis_step(&mut self) {
        let n = self.nodes.len() as u64;
        let leader = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, node)| {
                node.raft
                    .as_ref()
                    .filter(|r| r.role() == Role::Leader)
                    .map(|r| (r.term(), i))
            })
            .max()
            .map(|(_, i)| i);
        match self.rng.below(14) {
            0..=2 => {
                let victim = self.rng.below(n) as usize;
                self.crash(victim);
            }
            10..=11 => {
                // The leader is where acknowledged writes are most at risk.
                if let Some(i) = leader {
                    self.crash(i);
                }
            }
            12..=13 => {
                for g in self.group.iter_mut() {
                    *g = 0;
                }
                if let Some(i) = leader {
                    self.group[i] = 1;
                }
            }
            3..=4 => {
                for g in self.group.iter_mut() {
                    *g = 0;
                }
                let k = 1 + self.rng.below(n / 2 + 1);
                for _ in 0..k {
                    let at = self.rng.below(n) as usize;
                    self.group[at] = 1;
                }
            }
            _ => {
                for g in self.group.iter_mut() {
                    *g = 0;
                }
            }
        }
    }

    /// The next of: add the last node as a learner, promote it, remove one of the first
    /// `voters` (not the leader); nothing once that is done. A change that was cut off shows up
    /// as the old membership again and is retried.
    fn membership_step(&mut self) {
        let Some((_, i)) = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, node)| {
                node.raft
                    .as_ref()
                    .filter(|r| r.role() == Role::Leader)
                    .map(|r| (r.term(), i))
            })
            .max()
        else {
            return;
        };
        let joiner = NodeId(self.nodes.len() as u64);
        let m = self.nodes[i].raft.as_ref().expect("found above").membership().clone();
        let change = if !m.contains(joiner) {
            MembershipChange::AddLearner(joiner)
        } else if m.learners.contains(&joiner) {
            MembershipChange::PromoteLearner(joiner)
        } else if m.voters.len() as u64 > self.voters {
            let leader = self.nodes[i].id;
            let first: Vec<NodeId> = m
                .voters
                .iter()
                .copied()
                .filter(|id| id.0 <= self.voters && *id != leader)
                .collect();
            if first.is_empty() {
                return;
            }
            MembershipChange::Remove(first[self.rng.below(first.len() as u64) as usize])
        } else {
            return;
        };
        let now = self.now_ms;
        let node = &mut self.nodes[i];
        let result = node
            .raft
            .as_mut()
            .expect("found above")
            .change_membership(&mut node.disk, change, now);
        self.drain(i);
        if self.trace {
            println!("{now} node {} {change:?}: {result:?}", i + 1);
        }
        match result {
            Ok(_) => self.changes_accepted += 1,
            Err(MembershipError::InProgress { .. } | MembershipError::NotCaughtUp { .. }) => self.changes_refused += 1,
            Err(e) => self.checker.violations.push(format!("{change:?} failed: {e}")),
        }
    }

    fn heal(&mut self) {
        for g in self.group.iter_mut() {
            *g = 0;
        }
        self.faults = Faults {
            drop_percent: 0,
            duplicate_percent: 0,
            delay_ms_max: self.faults.delay_ms_max.min(10),
        };
        for i in 0..self.nodes.len() {
            if self.nodes[i].raft.is_none() {
                self.start(i);
            }
        }
        self.liveness_probe_from = Some(self.commands_proposed);
    }

    /// Runs `chaos_ms` of faults, heals, then up to `settle_ms` more.
    fn run(&mut self, chaos_ms: u64, settle_ms: u64) {
        let end_ms = chaos_ms + settle_ms;
        let mut next_client_ms = 100;
        let mut next_nemesis_ms = 300 + self.rng.below(700);
        let mut healed = false;
        let mut events = 0u64;
        while self.now_ms < end_ms {
            events += 1;
            if events > 5_000_000 {
                self.checker.violations.push("event bound reached".to_string());
                return;
            }
            if healed && self.live_at_ms.is_some() && self.all_caught_up() {
                return;
            }
            let mut next = end_ms.min(next_client_ms).min(next_nemesis_ms);
            if !healed {
                next = next.min(chaos_ms);
            }
            if let Some(((at, _), _)) = self.net.first_key_value() {
                next = next.min(*at);
            }
            for node in &self.nodes {
                match (&node.raft, node.restart_at_ms) {
                    (Some(r), _) => next = next.min(r.poll_timeout()),
                    (None, Some(at)) if !healed => next = next.min(at),
                    _ => {}
                }
            }
            self.now_ms = self.now_ms.max(next);
            let now = self.now_ms;
            if !healed && now >= chaos_ms {
                healed = true;
                self.heal();
                continue;
            }
            if let Some(entry) = self.net.first_entry() {
                if entry.key().0 <= now {
                    let (from, to, bytes) = entry.remove();
                    let (fi, ti) = (from.0 as usize - 1, to.0 as usize - 1);
                    if self.group[fi] == self.group[ti] {
                        let msg = Message::decode(&bytes).expect("our own encoding decodes");
                        if self.trace
                            && !matches!(
                                msg,
                                Message::AppendEntries { .. } | Message::AppendEntriesResponse { .. }
                            )
                        {
                            println!("{now} {from}->{to} {msg:?}");
                        }
                        let node = &mut self.nodes[ti];
                        if let Some(raft) = node.raft.as_mut() {
                            raft.handle_message(&mut node.disk, from, msg, now);
                            self.drain(ti);
                        }
                    }
                    continue;
                }
            }
            for i in 0..self.nodes.len() {
                let node = &mut self.nodes[i];
                if let Some(raft) = node.raft.as_mut() {
                    if raft.poll_timeout() <= now {
                        raft.handle_timeout(&mut node.disk, now);
                        self.drain(i);
                    }
                } else if node.restart_at_ms.is_some_and(|at| at <= now) && !healed {
                    self.start(i);
                }
            }
            if now >= next_client_ms {
                next_client_ms = now + 10 + self.rng.below(40);
                self.client_step();
            }
            if now >= next_nemesis_ms {
                next_nemesis_ms = now + 200 + self.rng.below(1200);
                if !healed {
                    if self.reconfigure && self.rng.chance(50) {
                        self.membership_step();
                    }
                    self.nemesis_step();
                }
            }
        }
    }

    /// Delivers messages and fires timers until `until_ms` (no client, no nemesis).
    fn advance(&mut self, until_ms: u64) {
        for _ in 0..1_000_000 {
            let mut next = until_ms;
            if let Some(((at, _), _)) = self.net.first_key_value() {
                next = next.min(*at);
            }
            for node in &self.nodes {
                if let Some(r) = &node.raft {
                    next = next.min(r.poll_timeout());
                }
            }
            self.now_ms = self.now_ms.max(next);
            let now = self.now_ms;
            if let Some(entry) = self.net.first_entry() {
                if entry.key().0 <= now {
                    let (from, to, bytes) = entry.remove();
                    let (fi, ti) = (from.0 as usize - 1, to.0 as usize - 1);
                    let node = &mut self.nodes[ti];
                    if let (true, Some(raft)) = (self.group[fi] == self.group[ti], node.raft.as_mut()) {
                        let msg = Message::decode(&bytes).expect("our own encoding decodes");
                        raft.handle_message(&mut node.disk, from, msg, now);
                        self.drain(ti);
                    }
                    continue;
                }
            }
            for i in 0..self.nodes.len() {
                let node = &mut self.nodes[i];
                if let Some(raft) = node.raft.as_mut().filter(|r| r.poll_timeout() <= now) {
                    raft.handle_timeout(&mut node.disk, now);
                    self.drain(i);
                }
            }
            if now >= until_ms {
                return;
            }
        }
        panic!("advance did not reach {until_ms} ms");
    }

    /// A fault-free cluster.
    fn quiet(seed: u64, n: u64) -> Cluster {
        Cluster::quiet_joining(seed, n, n, Mutant::None)
    }

    /// A fault-free cluster of `n` nodes, the first `voters` of them the quorum.
    fn quiet_joining(seed: u64, n: u64, voters: u64, mutant: Mutant) -> Cluster {
        let mut c = Cluster::build(seed, n, voters, mutant);
        c.faults = Faults {
            drop_percent: 0,
            duplicate_percent: 0,
            delay_ms_max: 5,
        };
        c.net.clear();
        c
    }

    fn leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.raft.as_ref().is_some_and(|r| r.role() == Role::Leader))
    }

    fn all_caught_up(&self) -> bool {
        let Some(max) = self.nodes.iter().map(|n| n.applied).max() else {
            return false;
        };
        let probe_index = self.checker.acked.keys().next_back().copied().unwrap_or(0);
        self.nodes
            .iter()
            .all(|n| n.applied >= probe_index && n.applied + 20 >= max)
    }

    /// The final checks once the run is over: every acknowledged command sits at its index on
    /// every node that reached that index, and the healed cluster made progress.
    fn final_checks(&mut self, heal_at_ms: u64, liveness_ms_max: u64) {
        for node in &self.nodes {
            for (index, cmd) in &self.checker.acked {
                if *index > node.applied {
                    continue;
                }
                self.checker.acked_compared += 1;
                if node.state.get(index) != Some(cmd) {
                    self.checker.violations.push(format!(
                        "node {}: acknowledged {cmd:?} at {index} but holds {:?}",
                        node.id,
                        node.state.get(index)
                    ));
                }
            }
        }
        match self.live_at_ms {
            Some(t) if t <= heal_at_ms + liveness_ms_max => {}
            other => self.checker.violations.push(format!(
                "no proposal made after healing at {heal_at_ms} ms committed within {liveness_ms_max} ms (at {other:?})"
            )),
        }
    }
}

#[derive(Default, Debug)]
struct Totals {
    runs: u64,
    failed_runs: Vec<(u64, String)>,
    leaders: u64,
    applies: u64,
    restores: u64,
    acked: u64,
    acked_compared: u64,
    reads: u64,
    crashes: u64,
    snapshots_installed: u64,
}

fn sweep(seeds: std::ops::Range<u64>, n: u64, mutant: Mutant) -> Totals {
    let mut t = Totals::default();
    let (chaos_ms, settle_ms, liveness_ms_max) = (6_000, 8_000, 8_000);
    for seed in seeds {
        let mut c = Cluster::new(seed.wrapping_mul(0x1000_0000_01B3) ^ n, n, mutant);
        c.run(chaos_ms, settle_ms);
        c.final_checks(chaos_ms, liveness_ms_max);
        t.runs += 1;
        t.leaders += c.checker.leaders.len() as u64;
        t.applies += c.checker.applies_compared;
        t.restores += c.checker.restores_compared;
        t.acked += c.checker.acked.len() as u64;
        t.acked_compared += c.checker.acked_compared;
        t.reads += c.checker.reads_checked;
        t.crashes += c.crashes;
        t.snapshots_installed += c.snapshots_installed;
        if let Some(v) = c.checker.violations.first() {
            t.failed_runs.push((seed, v.clone()));
        }
    }
    println!(
        "{n} voters, mutant {mutant:?}: {} runs, {} leaders (terms) checked, {} applies and {} restored entries \
         compared, {} acknowledged commands compared {} times, {} reads checked, {} crashes, {} snapshot \
         restores; {} runs with violations",
        t.runs,
        t.leaders,
        t.applies,
        t.restores,
        t.acked,
        t.acked_compared,
        t.reads,
        t.crashes,
        t.snapshots_installed,
        t.failed_runs.len()
    );
    t
}

/// `sweep` on three voters plus a joiner that the leader adds, promotes, and then removes one of
/// the first three, amid the same faults. Returns the totals and the runs whose final membership
/// (at the leader) is the joiner and two of the first voters.
fn sweep_reconfiguring(seeds: std::ops::Range<u64>) -> (Totals, u64, u64) {
    let mut t = Totals::default();
    let (mut accepted, mut completed) = (0, 0);
    let (chaos_ms, settle_ms, liveness_ms_max) = (6_000, 8_000, 8_000);
    for seed in seeds {
        let mut c = Cluster::build(seed.wrapping_mul(0x1000_0000_01B3) ^ 0x4a, 4, 3, Mutant::None);
        c.reconfigure = true;
        c.run(chaos_ms, settle_ms);
        c.final_checks(chaos_ms, liveness_ms_max);
        t.runs += 1;
        t.leaders += c.checker.leaders.len() as u64;
        t.applies += c.checker.applies_compared;
        t.restores += c.checker.restores_compared;
        t.acked += c.checker.acked.len() as u64;
        t.acked_compared += c.checker.acked_compared;
        t.reads += c.checker.reads_checked;
        t.crashes += c.crashes;
        accepted += c.changes_accepted;
        if let Some(l) = c.leader() {
            let m = c.raft(l).membership();
            if m.voters.len() == 3
                && m.voters.contains(&NodeId(4))
                && c.raft(l).membership_index() <= c.raft(l).commit_index()
            {
                completed += 1;
            }
        }
        if let Some(v) = c.checker.violations.first() {
            t.failed_runs.push((seed, v.clone()));
        }
    }
    println!(
        "3 voters + joiner, reconfiguring: {} runs, {} leaders (terms) checked, {} applies and {} restored \
         entries compared, {} acknowledged commands compared {} times, {} reads checked, {} crashes; {accepted} \
         changes accepted, {completed} runs ended with the joiner promoted and a first voter removed; {} runs \
         with violations",
        t.runs,
        t.leaders,
        t.applies,
        t.restores,
        t.acked,
        t.acked_compared,
        t.reads,
        t.crashes,
        t.failed_runs.len()
    );
    (t, accepted, completed)
}

fn assert_clean(t: &Totals) {
    for (seed, v) in t.failed_runs.iter().take(5) {
        println!("seed {seed}: {v}");
    }
    assert!(
        t.failed_runs.is_empty(),
        "{} runs violated a property",
        t.failed_runs.len()
    );
    assert!(
        t.leaders > 0 && t.applies > 0 && t.acked_compared > 0 && t.reads > 0,
        "the checkers compared nothing: {t:?}"
    );
}

#[test]
fn three_voters_stay_safe_and_live_under_faults() {
    let t = sweep(0..300, 3, Mutant::None);
    assert_clean(&t);
    assert!(
        t.crashes > 0 && t.snapshots_installed > 0,
        "no crash or snapshot exercised: {t:?}"
    );
}

#[test]
fn three_voters_stay_safe_and_live_while_a_node_joins_and_another_leaves_under_faults() {
    let (t, accepted, completed) = sweep_reconfiguring(0..150);
    assert_clean(&t);
    assert!(
        accepted > 0 && completed > 0,
        "no membership change was exercised: {t:?}"
    );
}

#[test]
fn five_voters_stay_safe_and_live_under_faults() {
    let t = sweep(0..200, 5, Mutant::None);
    assert_clean(&t);
}

#[test]
fn negative_control_ack_before_sync_is_caught() {
    let t = sweep(0..150, 3, Mutant::AckBeforeSync);
    assert!(
        !t.failed_runs.is_empty(),
        "acknowledging unsynced entries went unnoticed: {t:?}"
    );
    println!("caught, first: seed {} {}", t.failed_runs[0].0, t.failed_runs[0].1);
}

#[test]
fn negative_control_double_vote_is_caught() {
    let t = sweep(0..150, 3, Mutant::VoteTwice);
    assert!(
        !t.failed_runs.is_empty(),
        "granting two votes per term went unnoticed: {t:?}"
    );
    println!("caught, first: seed {} {}", t.failed_runs[0].0, t.failed_runs[0].1);
}

#[test]
fn single_voter_elects_itself_and_commits() {
    let mut disk = MemDisk::new();
    let config = RaftConfig::new(NodeId(1), vec![NodeId(1)], "raft");
    let mut raft = Raft::open(&mut disk, config, 0, 7).unwrap();
    raft.handle_timeout(&mut disk, raft.poll_timeout());
    assert_eq!(raft.role(), Role::Leader);
    let (_, index) = raft.propose(&mut disk, Bytes::from_static(b"x"), 1).unwrap();
    assert_eq!(raft.poll_timeout(), 0, "a sync is pending");
    raft.handle_timeout(&mut disk, 1);
    raft.read_index(9, 1).unwrap();
    let mut applied = Vec::new();
    let mut ready = Vec::new();
    while let Some(o) = raft.poll_output() {
        match o {
            Output::Apply { index, command, .. } => applied.push((index, command)),
            Output::ReadReady { token, index } => ready.push((token, index)),
            _ => {}
        }
    }
    assert_eq!(applied.last(), Some(&(index, Bytes::from_static(b"x"))));
    assert_eq!(ready, vec![(9, index)]);
    // Restart: the committed entries come back (commit is relearned by the new term's no-op).
    let config = RaftConfig::new(NodeId(1), vec![NodeId(1)], "raft");
    disk.crash(CrashMode::DropUnsynced);
    let mut raft = Raft::open(&mut disk, config, 10, 8).unwrap();
    raft.handle_timeout(&mut disk, raft.poll_timeout());
    let mut replayed = BTreeSet::new();
    while let Some(o) = raft.poll_output() {
        if let Output::Apply { command, .. } = o {
            replayed.insert(command);
        }
    }
    assert!(replayed.contains(&Bytes::from_static(b"x")));
}

#[test]
fn partitioned_follower_does_not_disrupt_the_leader() {
    let mut compared = 0;
    for seed in 0..20 {
        let mut c = Cluster::quiet(seed, 3);
        c.advance(2_000);
        let leader = c.leader().expect("a quiet cluster elects a leader");
        let term = c.nodes[leader].raft.as_ref().unwrap().term();
        let follower = (leader + 1) % 3;
        c.group[follower] = 1;
        c.advance(6_000);
        c.group[follower] = 0;
        c.advance(8_000);
        // PreVote: the isolated follower never raised its term, so rejoining deposes nobody.
        let raft = c.nodes[leader].raft.as_ref().unwrap();
        assert_eq!((raft.role(), raft.term()), (Role::Leader, term), "seed {seed}");
        assert_eq!(c.nodes[follower].raft.as_ref().unwrap().term(), term, "seed {seed}");
        compared += 1;
    }
    println!("{compared} partition-and-rejoin runs kept their leader and term");
}

#[test]
fn isolated_leader_steps_down_and_refuses_reads() {
    let mut compared = 0;
    for seed in 0..20 {
        let mut c = Cluster::quiet(seed, 3);
        c.advance(2_000);
        let old = c.leader().expect("a quiet cluster elects a leader");
        c.group[old] = 1;
        c.advance(4_000);
        // CheckQuorum: it stopped leading within about an election timeout...
        let raft = c.nodes[old].raft.as_mut().unwrap();
        assert_ne!(raft.role(), Role::Leader, "seed {seed}");
        // ...so it neither serves reads nor takes writes, while the majority elected another.
        assert!(raft.read_index(1, 4_000).is_err(), "seed {seed}");
        let node = &mut c.nodes[old];
        let raft = node.raft.as_mut().unwrap();
        assert!(raft.propose(&mut node.disk, Bytes::from_static(b"x"), 4_000).is_err());
        let new = c.leader().expect("the majority elects a new leader");
        assert_ne!(new, old, "seed {seed}");
        compared += 1;
    }
    println!("{compared} isolated leaders stepped down");
}

#[test]
fn lagging_follower_catches_up_through_install_snapshot() {
    let mut c = Cluster::quiet(5, 3);
    c.advance(2_000);
    let leader = c.leader().expect("a leader");
    let lagger = (leader + 1) % 3;
    c.group[lagger] = 1;
    for k in 0..200 {
        let node = &mut c.nodes[leader];
        let raft = node.raft.as_mut().unwrap();
        raft.propose(&mut node.disk, Bytes::from(format!("w{k}")), c.now_ms)
            .unwrap();
        c.drain(leader);
        let t = c.now_ms + 5;
        c.advance(t);
    }
    assert!(
        c.nodes[leader].raft.as_ref().unwrap().snapshot_index() > LogIndex(0),
        "the leader compacted"
    );
    c.group[lagger] = 0;
    let t = c.now_ms + 3_000;
    c.advance(t);
    assert!(c.snapshots_installed > 0, "no snapshot was installed");
    assert_eq!(c.nodes[lagger].state, c.nodes[leader].state);
    assert!(c.checker.violations.is_empty(), "{:?}", c.checker.violations);
    println!(
        "lagger restored {} snapshots and holds {} entries",
        c.snapshots_installed,
        c.nodes[lagger].state.len()
    );
}

// ----- membership changes -----

impl Cluster {
    fn raft(&self, i: usize) -> &Raft {
        self.nodes[i].raft.as_ref().expect("the node runs")
    }

    fn settle(&mut self, ms: u64) {
        let t = self.now_ms + ms;
        self.advance(t);
    }

    /// Proposes a membership change at node `i`.
    fn change(&mut self, i: usize, change: MembershipChange) -> Result<LogIndex, MembershipError> {
        let now = self.now_ms;
        let node = &mut self.nodes[i];
        let result = node
            .raft
            .as_mut()
            .expect("the node runs")
            .change_membership(&mut node.disk, change, now);
        self.drain(i);
        result
    }

    /// Proposes `text` at node `i`, followed by the checkers like the client's proposals.
    fn write(&mut self, i: usize, text: &str) -> Result<LogIndex, ProposeError> {
        let now = self.now_ms;
        let id = self.nodes[i].id;
        let command = Bytes::from(text.to_string());
        let node = &mut self.nodes[i];
        let result = node
            .raft
            .as_mut()
            .expect("the node runs")
            .propose(&mut node.disk, command.clone(), now);
        if let Ok((_, index)) = result {
            self.proposals.push(Proposal {
                node: id,
                index: index.0,
                command,
            });
        }
        self.drain(i);
        result.map(|(_, index)| index)
    }

    /// Writes `count` commands at node `i`, letting each commit.
    fn write_many(&mut self, i: usize, prefix: &str, count: u64) {
        for k in 0..count {
            self.write(i, &format!("{prefix}{k}")).expect("the leader takes writes");
            self.settle(5);
        }
    }

    fn voters(&self, i: usize) -> Vec<u64> {
        self.raft(i).membership().voters.iter().map(|id| id.0).collect()
    }

    fn heal_partition(&mut self) {
        for g in self.group.iter_mut() {
            *g = 0;
        }
    }
}

fn ids(ids: &[u64]) -> BTreeSet<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

#[test]
fn learner_joins_without_voting_then_promoted_it_counts_in_the_quorum() {
    let mut compared = 0;
    for seed in 0..8 {
        let mut c = Cluster::quiet_joining(seed, 4, 3, Mutant::None);
        c.settle(2_000);
        let l = c.leader().expect("a quiet cluster elects a leader");
        // Past the compaction threshold: the learner gets a snapshot first.
        c.write_many(l, "a", 60);
        assert!(
            c.raft(l).snapshot_index() > LogIndex(0),
            "seed {seed}: the leader compacted"
        );
        let added = c.change(l, MembershipChange::AddLearner(NodeId(4))).unwrap();
        assert!(
            matches!(
                c.change(l, MembershipChange::PromoteLearner(NodeId(4))),
                Err(MembershipError::InProgress { .. })
            ),
            "seed {seed}: a second change while one is uncommitted was accepted"
        );
        c.settle(1_000);
        assert!(c.raft(l).commit_index() >= added, "seed {seed}");
        let learner = c.raft(3);
        assert_eq!(learner.membership().learners, ids(&[4]), "seed {seed}");
        assert_eq!((learner.role(), learner.term()), (Role::Follower, c.raft(l).term()));
        assert_eq!(
            c.nodes[3].state, c.nodes[l].state,
            "seed {seed}: the learner holds the log"
        );
        // A learner counts in no quorum: with it and one voter cut off, two of three commit.
        let (x, y) = ((l + 1) % 3, (l + 2) % 3);
        c.group[x] = 1;
        c.group[3] = 1;
        let w = c.write(l, "as-learner").unwrap();
        c.settle(200);
        assert!(
            c.raft(l).commit_index() >= w,
            "seed {seed}: two of three voters did not commit"
        );
        c.heal_partition();
        c.settle(1_000);
        let promoted = c.change(l, MembershipChange::PromoteLearner(NodeId(4))).unwrap();
        c.settle(1_000);
        assert!(c.raft(l).commit_index() >= promoted, "seed {seed}");
        for i in 0..4 {
            assert_eq!(c.voters(i), vec![1, 2, 3, 4], "seed {seed}: node {}", i + 1);
            assert_eq!(c.raft(i).membership().quorum(), 3);
        }
        // Now it counts: the same cut leaves two of four, which commit nothing...
        c.group[x] = 1;
        c.group[3] = 1;
        let w = c.write(l, "as-voter").unwrap();
        c.settle(1_000);
        assert!(
            c.raft(l).commit_index() < w,
            "seed {seed}: two of four voters committed"
        );
        assert!(c.raft(y).commit_index() < w, "seed {seed}");
        // ...until the promoted node is back: three of four elect and commit.
        c.group[3] = 0;
        c.settle(3_000);
        let l2 = c.leader().expect("three of four voters elect a leader");
        let w2 = c.write(l2, "after").unwrap();
        c.settle(500);
        assert!(c.raft(l2).commit_index() >= w2, "seed {seed}");
        assert!(
            c.checker.violations.is_empty(),
            "seed {seed}: {:?}",
            c.checker.violations
        );
        compared += 1;
    }
    println!("{compared} runs: a learner joined, was refused a second concurrent change, and counted once promoted");
}

#[test]
fn removed_follower_leaves_and_does_not_disrupt_and_restarts_keep_the_change() {
    let mut compared = 0;
    for seed in 0..8 {
        let mut c = Cluster::quiet(seed, 3);
        c.settle(2_000);
        let l = c.leader().expect("a leader");
        let f = (l + 1) % 3;
        let keep = (l + 2) % 3;
        let removed = c.change(l, MembershipChange::Remove(c.nodes[f].id)).unwrap();
        c.settle(1_000);
        assert!(c.raft(l).commit_index() >= removed, "seed {seed}");
        let expect: Vec<u64> = [l, keep]
            .iter()
            .map(|i| *i as u64 + 1)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(c.voters(l), expect, "seed {seed}");
        assert_eq!(c.voters(keep), expect, "seed {seed}");
        let term = c.raft(l).term();
        // The removed node hears nothing more; it campaigns, and nobody listens.
        c.settle(5_000);
        assert_eq!(
            (c.raft(l).role(), c.raft(l).term()),
            (Role::Leader, term),
            "seed {seed}"
        );
        // Past the compaction threshold, so the change lives in the snapshot, not the log.
        c.write_many(l, "b", 60);
        assert!(
            c.raft(keep).snapshot_index() > removed,
            "seed {seed}: compacted past the change"
        );
        c.crash(keep);
        c.start(keep);
        assert_eq!(c.voters(keep), expect, "seed {seed}: the restart forgot the change");
        c.settle(2_000);
        let l2 = c.leader().expect("a leader");
        assert_ne!(l2, f, "seed {seed}: the removed node leads");
        let w = c.write(l2, "after").unwrap();
        c.settle(500);
        assert!(c.raft(l2).commit_index() >= w, "seed {seed}");
        assert!(
            c.checker.violations.is_empty(),
            "seed {seed}: {:?}",
            c.checker.violations
        );
        compared += 1;
    }
    println!("{compared} runs: a removed follower never disturbed the leader; restarts kept the change");
}

#[test]
fn removed_leader_steps_down_once_the_change_commits() {
    let mut compared = 0;
    for seed in 0..8 {
        let mut c = Cluster::quiet(seed, 3);
        c.settle(2_000);
        let l = c.leader().expect("a leader");
        c.write_many(l, "c", 5);
        let removed = c.change(l, MembershipChange::Remove(c.nodes[l].id)).unwrap();
        // Until the change commits it still leads, without counting itself.
        assert_eq!(c.raft(l).role(), Role::Leader);
        c.settle(3_000);
        assert_ne!(
            c.raft(l).role(),
            Role::Leader,
            "seed {seed}: the removed leader still leads"
        );
        let l2 = c.leader().expect("the remaining voters elect a leader");
        assert_ne!(l2, l);
        assert!(c.raft(l2).commit_index() >= removed, "seed {seed}");
        assert!(!c.raft(l2).membership().contains(c.nodes[l].id), "seed {seed}");
        let w = c.write(l2, "after").unwrap();
        c.settle(5_000);
        assert!(c.raft(l2).commit_index() >= w, "seed {seed}");
        assert!(!c.raft(l).membership().is_voter(c.nodes[l].id), "seed {seed}");
        assert_eq!(
            c.leader(),
            Some(l2),
            "seed {seed}: the removed node disrupted the new leader"
        );
        assert!(
            c.checker.violations.is_empty(),
            "seed {seed}: {:?}",
            c.checker.violations
        );
        compared += 1;
    }
    println!("{compared} runs: a leader removed itself, stepped down, and the rest carried on");
}

#[test]
fn changes_with_a_partitioned_minority_commit_on_the_majority_side_only() {
    let mut compared = 0;
    for seed in 0..8 {
        let mut c = Cluster::quiet(seed, 5);
        c.settle(2_000);
        let l = c.leader().expect("a leader");
        // The leader is cut off with one follower: removing a node of the majority side would
        // leave four voters, of which it reaches two, so the change never commits and is cut.
        let (f, m) = ((l + 1) % 5, (l + 2) % 5);
        c.group[l] = 1;
        c.group[f] = 1;
        let lost = c.change(l, MembershipChange::Remove(c.nodes[m].id)).unwrap();
        assert_eq!(c.voters(l).len(), 4, "the latest entry rules at once, committed or not");
        c.settle(3_000);
        assert!(c.raft(l).commit_index() < lost, "seed {seed}: two of four committed");
        let l2 = c.leader().expect("the majority side elects a leader");
        assert!(![l, f].contains(&l2), "seed {seed}");
        let w = c.write(l2, "majority").unwrap();
        c.settle(500);
        c.heal_partition();
        c.settle(3_000);
        for i in 0..5 {
            assert_eq!(
                c.voters(i),
                vec![1, 2, 3, 4, 5],
                "seed {seed}: node {} kept the cut change",
                i + 1
            );
        }
        // A minority of followers is cut off: removing one of it commits with the majority.
        let l = c.leader().expect("a leader");
        assert!(c.raft(l).commit_index() >= w, "seed {seed}");
        let term = c.raft(l).term();
        let (a, b) = ((l + 1) % 5, (l + 2) % 5);
        c.group[a] = 1;
        c.group[b] = 1;
        let removed = c.change(l, MembershipChange::Remove(c.nodes[a].id)).unwrap();
        c.settle(1_000);
        assert!(c.raft(l).commit_index() >= removed, "seed {seed}");
        c.heal_partition();
        c.settle(3_000);
        assert_eq!(
            (c.raft(l).role(), c.raft(l).term()),
            (Role::Leader, term),
            "seed {seed}"
        );
        let four = c.voters(l);
        assert_eq!(four.len(), 4);
        assert_eq!(
            c.voters(b),
            four,
            "seed {seed}: the minority node did not learn the change"
        );
        let w = c.write(l, "after").unwrap();
        c.settle(500);
        assert!(c.raft(l).commit_index() >= w, "seed {seed}");
        assert!(
            c.checker.violations.is_empty(),
            "seed {seed}: {:?}",
            c.checker.violations
        );
        compared += 1;
    }
    println!("{compared} runs: a minority leader's change was cut; a change with a cut-off minority committed");
}

/// Two learners, 4 and 5, caught up; the leader is cut off with them from voters 2 of 3 and
/// promotes both. Returns whether the second promotion was accepted and the violations seen.
fn promote_two_at_once(seed: u64, mutant: Mutant) -> (bool, Vec<String>) {
    let mut c = Cluster::quiet_joining(seed, 5, 3, mutant);
    c.settle(2_000);
    let l = c.leader().expect("a leader");
    for id in [4, 5] {
        c.change(l, MembershipChange::AddLearner(NodeId(id))).unwrap();
        c.settle(1_000);
    }
    c.write_many(l, "d", 5);
    for i in 0..3 {
        if i != l {
            c.group[i] = 1;
        }
    }
    c.change(l, MembershipChange::PromoteLearner(NodeId(4))).unwrap();
    let second = c.change(l, MembershipChange::PromoteLearner(NodeId(5))).is_ok();
    let _ = c.write(l, "x");
    c.settle(3_000);
    if let Some(m) = (0..3).find(|i| *i != l && c.raft(*i).role() == Role::Leader) {
        let _ = c.write(m, "y");
    }
    c.settle(2_000);
    c.heal_partition();
    c.settle(5_000);
    (second, c.checker.violations)
}

#[test]
fn one_change_at_a_time_keeps_a_cut_off_leader_from_committing() {
    let mut compared = 0;
    for seed in 0..8 {
        let (second, violations) = promote_two_at_once(seed, Mutant::None);
        assert!(!second, "seed {seed}: a second uncommitted change was accepted");
        assert!(violations.is_empty(), "seed {seed}: {violations:?}");
        compared += 1;
    }
    println!("{compared} runs: the second promotion was refused and both sides stayed consistent");
}

#[test]
fn negative_control_two_uncommitted_changes_are_caught() {
    let caught: Vec<(u64, String)> = (0..8)
        .filter_map(|seed| {
            let (second, violations) = promote_two_at_once(seed, Mutant::ConcurrentChanges);
            assert!(second, "seed {seed}: the mutant refused the second change");
            violations.first().map(|v| (seed, v.clone()))
        })
        .collect();
    assert!(!caught.is_empty(), "two uncommitted changes at once went unnoticed");
    println!(
        "caught in {} of 8 runs, first: seed {} {}",
        caught.len(),
        caught[0].0,
        caught[0].1
    );
}

/// Node 4 is cut off from the start, added as a learner while the log is short (within
/// `append_entries_max` of the commit index), then promoted: returns the refused or accepted
/// promotion, and whether a promotion after healing and catching up committed on every node.
fn promote_unheard_learner(seed: u64, mutant: Mutant) -> (Result<LogIndex, MembershipError>, bool) {
    let mut c = Cluster::quiet_joining(seed, 4, 3, mutant);
    c.group[3] = 1;
    c.settle(2_000);
    let l = c.leader().expect("three connected voters elect a leader");
    c.write_many(l, "s", 2);
    let added = c.change(l, MembershipChange::AddLearner(NodeId(4))).unwrap();
    c.settle(500);
    let leader = c.raft(l);
    assert!(
        leader.commit_index() >= added,
        "seed {seed}: adding a learner needs no ack from it"
    );
    assert!(
        leader.commit_index().0 < config(NodeId(1), 3).append_entries_max as u64,
        "seed {seed}: the log is short, so the lag test alone would pass"
    );
    assert_eq!(leader.match_index_of(NodeId(4)), Some(LogIndex(0)), "seed {seed}");
    let cut_off = c.change(l, MembershipChange::PromoteLearner(NodeId(4)));
    if cut_off.is_ok() {
        return (cut_off, false);
    }
    c.heal_partition();
    c.settle(1_000);
    let promoted = c.change(l, MembershipChange::PromoteLearner(NodeId(4)));
    c.settle(1_000);
    let committed = promoted
        .as_ref()
        .is_ok_and(|index| (0..4).all(|i| c.raft(i).commit_index() >= *index && c.voters(i) == vec![1, 2, 3, 4]));
    assert!(
        c.checker.violations.is_empty(),
        "seed {seed}: {:?}",
        c.checker.violations
    );
    (cut_off, committed)
}

#[test]
fn learner_never_heard_from_is_not_promoted_until_it_catches_up() {
    let mut compared = 0;
    for seed in 0..8 {
        let (cut_off, committed) = promote_unheard_learner(seed, Mutant::None);
        assert!(
            matches!(cut_off, Err(MembershipError::NotCaughtUp { id: NodeId(4), .. })),
            "seed {seed}: a learner that never acknowledged anything: {cut_off:?}"
        );
        assert!(committed, "seed {seed}: the healed, caught-up learner was not promoted");
        compared += 1;
    }
    println!("{compared} runs: an unheard learner was refused (NotCaughtUp), then promoted once healed and caught up");
}

#[test]
fn negative_control_promoting_an_unheard_learner_is_caught() {
    let caught = (0..8)
        .filter(|seed| promote_unheard_learner(*seed, Mutant::PromoteUnheardLearner).0.is_ok())
        .count();
    assert_eq!(caught, 8, "the old check refused an unheard learner");
    println!("the old check promoted the unheard learner in {caught} of 8 runs; the test above refuses it");
}

mod fuzz {
    //! Arbitrary (even Byzantine) messages never panic a node, and its own invariants hold.

    use proptest::prelude::*;

    use super::*;

    fn num() -> impl Strategy<Value = u64> {
        prop_oneof![8 => 0u64..8, 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1)]
    }

    fn message() -> impl Strategy<Value = Message> {
        prop_oneof![
            (num(), num(), num()).prop_map(|(t, i, lt)| Message::PreVote {
                term: Term(t),
                last_log_index: LogIndex(i),
                last_log_term: Term(lt),
            }),
            (num(), any::<bool>()).prop_map(|(t, granted)| Message::PreVoteResponse { term: Term(t), granted }),
            (num(), num(), num()).prop_map(|(t, i, lt)| Message::RequestVote {
                term: Term(t),
                last_log_index: LogIndex(i),
                last_log_term: Term(lt),
            }),
            (num(), any::<bool>()).prop_map(|(t, granted)| Message::RequestVoteResponse { term: Term(t), granted }),
            (num(), 0u64..10, num(), proptest::collection::vec(0u64..8, 0..4), num()).prop_map(
                |(t, prev, pt, terms, commit)| Message::AppendEntries {
                    term: Term(t),
                    prev_log_index: LogIndex(prev),
                    prev_log_term: Term(pt),
                    entries: terms
                        .iter()
                        .enumerate()
                        .map(|(k, et)| Entry {
                            term: Term((*et).min(t)),
                            index: LogIndex(prev + 1 + k as u64),
                            command: Bytes::from(vec![k as u8]),
                        })
                        .collect(),
                    leader_commit: LogIndex(commit),
                    read_seq: 0,
                }
            ),
            (num(), any::<bool>(), num(), num()).prop_map(|(t, success, i, s)| Message::AppendEntriesResponse {
                term: Term(t),
                success,
                index: LogIndex(i),
                read_seq: s,
            }),
            (num(), num(), num(), num(), any::<bool>()).prop_map(|(t, i, lt, offset, done)| {
                Message::InstallSnapshot {
                    term: Term(t),
                    last_index: LogIndex(i),
                    last_term: Term(lt),
                    offset,
                    data: Bytes::new(),
                    done,
                    read_seq: 0,
                }
            }),
            (num(), num(), num(), any::<bool>()).prop_map(|(t, i, o, done)| Message::InstallSnapshotResponse {
                term: Term(t),
                last_index: LogIndex(i),
                next_offset: o,
                done,
                read_seq: 0,
            }),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_messages_never_panic_a_node(
            steps in proptest::collection::vec((1u64..=3, message(), 0u64..200), 1..60)
        ) {
            let mut disk = MemDisk::new();
            let mut raft = Raft::open(&mut disk, config(NodeId(1), 3), 0, 1).unwrap();
            let mut now = 0;
            let mut applied = 0;
            for (from, msg, dt) in steps {
                now += dt;
                raft.handle_message(&mut disk, NodeId(from), msg.clone(), now);
                if raft.poll_timeout() <= now {
                    raft.handle_timeout(&mut disk, now);
                }
                if raft.role() == Role::Leader {
                    let _ = raft.propose(&mut disk, Bytes::from_static(b"p"), now);
                    let _ = raft.read_index(now, now);
                }
                while let Some(out) = raft.poll_output() {
                    match out {
                        Output::Apply { index, .. } => {
                            prop_assert_eq!(index.0, applied + 1);
                            applied = index.0;
                        }
                        Output::RestoreSnapshot { index, .. } => applied = index.0,
                        Output::Send { msg, .. } => {
                            prop_assert_eq!(Message::decode(&msg.encode()), Ok(msg));
                        }
                        _ => {}
                    }
                }
                prop_assert!(raft.commit_index() <= raft.last_log_index().max(raft.snapshot_index()));
                prop_assert!(raft.applied_index() <= raft.commit_index());
            }
        }
    }
}

/// A `MemDisk` whose syncs of the log file can be made to fail (model rule 5).
struct FlakyDisk {
    inner: MemDisk,
    fail_sync: bool,
}

impl crate::disk::Disk for FlakyDisk {
    fn create(&mut self, path: &str) -> Result<(), crate::disk::DiskError> {
        self.inner.create(path)
    }
    fn len(&self, path: &str) -> Result<u64, crate::disk::DiskError> {
        self.inner.len(path)
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, crate::disk::DiskError> {
        self.inner.append(path, data)
    }
    fn read_at(&self, path: &str, pos: u64, buf: &mut [u8]) -> Result<(), crate::disk::DiskError> {
        self.inner.read_at(path, pos, buf)
    }
    fn sync(&mut self, path: &str) -> Result<(), crate::disk::DiskError> {
        if self.fail_sync && path.ends_with("/log") {
            return Err(crate::disk::DiskError::Io {
                path: path.to_string(),
                detail: "EIO".to_string(),
            });
        }
        self.inner.sync(path)
    }
    fn truncate(&mut self, path: &str, len: u64) -> Result<(), crate::disk::DiskError> {
        self.inner.truncate(path, len)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), crate::disk::DiskError> {
        self.inner.rename(from, to)
    }
    fn remove(&mut self, path: &str) -> Result<(), crate::disk::DiskError> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, crate::disk::DiskError> {
        self.inner.list(dir)
    }
    fn exists(&self, path: &str) -> bool {
        self.inner.exists(path)
    }
}

#[test]
fn a_failed_sync_makes_the_node_inert_and_withholds_its_acknowledgement() {
    // A follower whose sync fails must not acknowledge the entries it could not make durable.
    let mut disk = FlakyDisk {
        inner: MemDisk::new(),
        fail_sync: false,
    };
    let mut raft = Raft::open(&mut disk, config(NodeId(2), 3), 0, 3).unwrap();
    disk.fail_sync = true;
    let append = Message::AppendEntries {
        term: Term(1),
        prev_log_index: LogIndex(0),
        prev_log_term: Term(0),
        entries: vec![Entry {
            term: Term(1),
            index: LogIndex(1),
            command: Bytes::from_static(b"a"),
        }],
        leader_commit: LogIndex(0),
        read_seq: 0,
    };
    raft.handle_message(&mut disk, NodeId(1), append, 10);
    let outputs: Vec<Output> = std::iter::from_fn(|| raft.poll_output()).collect();
    assert!(
        !outputs.iter().any(|o| matches!(o, Output::Send { .. })),
        "acknowledged after a failed sync: {outputs:?}"
    );
    assert!(
        outputs.iter().any(|o| matches!(o, Output::Failed { .. })),
        "{outputs:?}"
    );
    assert!(raft.failed().is_some());
    assert_eq!(raft.poll_timeout(), u64::MAX, "an inert node wants no timers");
    // Re-opening from disk (after the crash the driver must treat this as) works again.
    disk.fail_sync = false;
    disk.inner.crash(CrashMode::DropUnsynced);
    let raft = Raft::open(&mut disk, config(NodeId(2), 3), 20, 3).unwrap();
    assert_eq!(raft.term(), Term(1), "the term was persisted before the append");
    assert_eq!(raft.last_log_index(), LogIndex(0), "the unsynced entry is gone");
}
