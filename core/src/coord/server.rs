//! One coordinator node: Raft (`crate::consensus`) over the runtime's network and disk, the
//! [`Tree`] it applies committed commands to, and the client RPC ([`super::wire`]).
//!
//! What it owns: the node's tasks (a ticker driving Raft's timers and session expiry, one sender
//! per peer with reconnect and backoff, one task per accepted connection), the requests waiting
//! for their entry to apply or their read index, each session's undelivered watch events, and
//! (on the leader) when each session was last heard from.
//!
//! Contract:
//! - Only the leader serves clients (but for `Local` reads, below); other nodes answer `NotLeader`
//!   with the leader's address.
//! - A write is answered when the entry it proposed applies (the leader remembers index and term
//!   of each proposal; a different term at that index means it was overwritten: `Unknown`, as is
//!   a proposal still pending when leadership is lost or the write timeout passes).
//! - A read with `sync` is served after a read-index round confirms leadership and the tree has
//!   applied that index (linearizable); without, from the leader's applied state.
//! - A [`Request::Local`] read is served by any node from its own applied state (possibly
//!   stale, as ZooKeeper's reads), its watch registered on that node and its events sent with
//!   that node's next response to the session. Its `Sync` asks the leader for its read index
//!   (a [`Request::ReadIndex`] on a fresh connection) and waits to apply it; a node that cannot
//!   get that answer within the request timeout refuses rather than answer stale.
//! - Watch events are queued per session when the change applies and sent, before the answer, in
//!   the next response to that session: a read that sees a change is preceded by its event.
//! - Heartbeats are not replicated: the leader keeps the last-heard time of each session and
//!   proposes `CloseSession` once its timeout passed; a new leader restarts every session's timer
//!   at its election (ZooKeeper does the same), so a session expires only after its owner stopped
//!   reaching a leader for a whole timeout.
//! - Snapshots: when Raft reports compaction due, the tree's snapshot is handed to `compact`.
//! - Peer addresses: a node starts knowing its configured `peers`, and learns more from the
//!   tree's [`COORDINATOR_ADDRS_PATH`] (`/coordinators/<id>` holding `host:port`, written by
//!   `gregor coordinators add` before the node is added): every node applies the same entries, so
//!   the leader can reach a joining node, and the others can point clients at it once it leads.
//!   An address once known is kept for the process's life (a changed one is logged and ignored).
//! - With a cluster secret ([`CoordNodeConfig::secret`]) every accepted connection must pass the
//!   [`super::auth`] handshake before its first request or peer frame is looked at, and then
//!   carries only the frames of the role it proved (a client's requests, or a peer's Raft
//!   messages); this node's own peer connections authenticate the same way. A connection that
//!   fails is logged (the reason, never the secret) and closed. Without a secret the port accepts
//!   anyone, as ZooKeeper does without SASL, and the node warns at startup.
//!
//! Fault model: peers and clients may vanish, stall or send garbage (a frame that does not decode
//! closes its connection); the disk may fail (Raft then reports `Failed` and the node's future
//! ends, to be restarted from disk). Raft tolerates the loss of any message, so peer frames are
//! dropped when a peer's bounded outbox is full or its connection is down.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use super::auth::{self, AuthError, AuthRole, ClusterSecret, HANDSHAKE_MS_MAX};
use super::tree::{Applied, Command, SessionId, Tree, TreeError, WatchEvent, WatchKind, Watches};
use super::wait::{timeout, Mailbox, Slot};
use super::wire::{
    self, FrameKind, LocalRead, Reply, Request, RequestFrame, Response, RpcError, EVENTS_PER_RESPONSE_MAX,
};
use crate::consensus::{
    LogIndex, MembershipChange, MembershipError, NodeId, Output, ProposeError, Raft, RaftConfig, RaftError, Role, Term,
};
use crate::runtime::{Connection, Listener, Runtime};

/// Undelivered watch events kept per session at most (older ones are dropped: a client that
/// never reads again cannot hold the leader's memory).
pub const SESSION_EVENTS_MAX: usize = 10_000;
/// Peer frames queued per peer at most.
pub const PEER_OUTBOX_FRAMES_MAX: usize = 4096;
/// Where the quorum keeps the addresses of nodes that joined after it started: one child per
/// node, named by its id, holding `host:port`.
pub const COORDINATOR_ADDRS_PATH: &str = "/coordinators";
/// Raft calls made in one pump at most (outputs can ask for a sync, which can emit outputs).
const PUMP_ROUNDS_MAX: usize = 64;

/// Timers and limits of a coordinator node.
#[derive(Clone, Debug)]
pub struct CoordTiming {
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_interval_ms: u64,
    /// The ticker wakes at least this often (session expiry checks).
    pub tick_ms: u64,
    /// A write not applied within this time is answered `Unknown`; a read `Retry`.
    pub request_timeout_ms: u64,
    /// A session's requested timeout is clamped into this range (ZooKeeper: 2 to 20 ticks).
    pub session_timeout_ms_min: u64,
    pub session_timeout_ms_max: u64,
    /// Snapshot the tree and compact the log every this many entries.
    pub snapshot_every_entries: u64,
    /// Reconnect backoff to a peer.
    pub peer_backoff_ms_min: u64,
    pub peer_backoff_ms_max: u64,
    /// Whether the sessions found when this process first leads are expired at once rather than
    /// given a fresh timeout. Only for a coordinator embedded in its only client's process
    /// (`gregor dev`): there every session it restores belonged to the previous process, and
    /// keeping them alive would hold that process's ephemerals (its controller office) for a
    /// whole session timeout after a restart.
    pub expire_restored_sessions: bool,
}

impl Default for CoordTiming {
    fn default() -> Self {
        CoordTiming {
            election_timeout_ms_min: 300,
            election_timeout_ms_max: 600,
            heartbeat_interval_ms: 75,
            // Raft's own timers wake the ticker when due (`poll_timeout`); the tick bounds only
            // how late a session expires and a new peer's sender starts. ZooKeeper's tickTime
            // is 2,000 ms; 20 ms woke every coordinator 50 times a second for nothing (7.7% of
            // an idle simulated cluster's instructions).
            tick_ms: 100,
            request_timeout_ms: 3000,
            session_timeout_ms_min: 400,
            session_timeout_ms_max: 60_000,
            snapshot_every_entries: 10_000,
            peer_backoff_ms_min: 20,
            peer_backoff_ms_max: 1000,
            expire_restored_sessions: false,
        }
    }
}

/// One coordinator node's settings.
#[derive(Clone, Debug)]
pub struct CoordNodeConfig {
    pub id: NodeId,
    /// Every node that may be a member, with its address (`host:port`), this node included.
    pub peers: Vec<(NodeId, String)>,
    /// The voters the quorum started with when not every peer (some peers join later as
    /// learners, or this node joins a running quorum); `None`: every peer. Once a membership
    /// change is in the log, the log rules.
    pub voters: Option<Vec<NodeId>>,
    /// The address this node listens on for peers and clients.
    pub listen: String,
    /// The directory (relative to the disk root) for Raft's state, log and snapshots.
    pub dir: String,
    pub timing: CoordTiming,
    /// The cluster secret clients and peers must prove they hold (`None`: anyone may connect).
    pub secret: Option<ClusterSecret>,
}

#[derive(Debug, Error)]
pub enum StartError {
    #[error("raft: {0}")]
    Raft(#[from] RaftError),
    #[error("config: {0}")]
    Config(String),
}

type ReadResult = Result<LogIndex, Option<NodeId>>;

struct Node {
    config: CoordNodeConfig,
    raft: Raft,
    tree: Tree,
    watches: Watches,
    /// The last index Raft told us to apply (no-ops included).
    applied: u64,
    role: Role,
    leader: Option<NodeId>,
    writes: BTreeMap<u64, (Term, Slot<Result<Applied, RpcError>>)>,
    reads: BTreeMap<u64, Slot<ReadResult>>,
    next_token: u64,
    events: BTreeMap<SessionId, VecDeque<WatchEvent>>,
    /// Leader only: monotonic ms each live session was last heard from.
    last_heard: BTreeMap<SessionId, u64>,
    /// Sessions whose close the leader proposed and that have not closed yet.
    closing: BTreeSet<SessionId>,
    /// Restored sessions to expire at once (`CoordTiming::expire_restored_sessions`).
    doomed: BTreeSet<SessionId>,
    /// Whether this process has led yet.
    led: bool,
    outboxes: BTreeMap<NodeId, Mailbox<Bytes>>,
    /// Peers whose sender task is not started yet (the ticker starts them).
    unsent_peers: Vec<(String, Mailbox<Bytes>)>,
    failed: Option<RaftError>,
}

impl Node {
    fn addr_of(&self, id: Option<NodeId>) -> Option<String> {
        let id = id?;
        self.config.peers.iter().find(|(p, _)| *p == id).map(|(_, a)| a.clone())
    }

    fn not_leader(&self) -> RpcError {
        RpcError::NotLeader {
            leader: self.addr_of(self.leader.filter(|l| *l != self.config.id)),
        }
    }

    /// Drains Raft's outputs, running its due timeouts (a pending group-commit sync shows as a
    /// due timeout), until it has nothing more to say.
    fn pump<D: crate::disk::Disk>(&mut self, disk: &mut D, now_ms: u64) {
        for _ in 0..PUMP_ROUNDS_MAX {
            while let Some(out) = self.raft.poll_output() {
                self.output(disk, out, now_ms);
            }
            if self.failed.is_some() || self.raft.poll_timeout() > now_ms {
                break;
            }
            self.raft.handle_timeout(disk, now_ms);
        }
        if self.failed.is_none() && self.raft.compaction_due() && self.applied > 0 {
            let snapshot = Bytes::from(self.tree.snapshot());
            if let Err(e) = self.raft.compact(disk, LogIndex(self.applied), snapshot) {
                tracing::warn!(node = self.config.id.0, error = %e, "coordinator: compaction refused");
            }
        }
    }

    fn output<D: crate::disk::Disk>(&mut self, _disk: &mut D, out: Output, now_ms: u64) {
        match out {
            Output::Send { to, msg } => {
                if let Some(outbox) = self.outboxes.get(&to) {
                    outbox.push(Bytes::from(wire::encode_peer(self.config.id, &msg)));
                }
            }
            Output::Apply { index, term, command } => self.apply(index, term, &command, now_ms),
            Output::RestoreSnapshot { index, data, .. } => match Tree::restore(&data) {
                Ok(tree) => {
                    self.tree = tree;
                    self.applied = index.0;
                    self.learn_peers();
                    if self.role == Role::Leader {
                        self.restart_session_timers(now_ms);
                    }
                }
                Err(e) => {
                    tracing::error!(node = self.config.id.0, error = %e, "coordinator: snapshot does not decode");
                    self.failed = Some(RaftError::Corrupt {
                        path: "snapshot".into(),
                        detail: e.to_string(),
                    });
                }
            },
            Output::ReadReady { token, index } => {
                if let Some(slot) = self.reads.remove(&token) {
                    slot.fill(Ok(index));
                }
            }
            Output::ReadFailed { token, leader_hint } => {
                if let Some(slot) = self.reads.remove(&token) {
                    slot.fill(Err(leader_hint));
                }
            }
            Output::RoleChanged { role, term, leader } => {
                tracing::info!(
                    node = self.config.id.0,
                    ?role,
                    term = term.0,
                    ?leader,
                    "coordinator: role changed"
                );
                let was_leader = self.role == Role::Leader;
                self.role = role;
                self.leader = leader;
                if role == Role::Leader && !was_leader {
                    self.restart_session_timers(now_ms);
                } else if role != Role::Leader {
                    self.last_heard.clear();
                    self.closing.clear();
                    // A proposal may still commit under the next leader, or not: unknown.
                    for (_, (_, slot)) in std::mem::take(&mut self.writes) {
                        slot.fill(Err(RpcError::Unknown));
                    }
                }
            }
            Output::Failed { error } => {
                tracing::error!(node = self.config.id.0, error = %error, "coordinator: raft failed; stopping");
                self.failed = Some(error);
            }
        }
    }

    fn restart_session_timers(&mut self, now_ms: u64) {
        self.last_heard = self.tree.sessions().keys().map(|s| (*s, now_ms)).collect();
        self.closing.clear();
        if self.config.timing.expire_restored_sessions && !self.led {
            self.doomed = self.tree.sessions().keys().copied().collect();
        }
        self.led = true;
    }

    fn apply(&mut self, index: LogIndex, term: Term, command: &[u8], now_ms: u64) {
        self.applied = self.applied.max(index.0);
        let mut result = None;
        if !command.is_empty() && index.0 > self.tree.last_applied() {
            match Command::decode(command) {
                Ok(cmd) => {
                    let mut changes = Vec::new();
                    let applied = self.tree.apply(index.0, &cmd, &mut changes);
                    if changes.iter().any(|c| is_addr_path(&c.path)) {
                        self.learn_peers();
                    }
                    for (session, event) in self.watches.fire(&changes) {
                        let queue = self.events.entry(session).or_default();
                        if queue.len() >= SESSION_EVENTS_MAX {
                            queue.pop_front();
                        }
                        queue.push_back(event);
                    }
                    match (&cmd, &applied) {
                        (Command::CreateSession { .. }, Applied::SessionCreated(s)) if self.role == Role::Leader => {
                            self.last_heard.insert(*s, now_ms);
                        }
                        (Command::CloseSession { session }, _) => {
                            self.last_heard.remove(session);
                            self.closing.remove(session);
                            self.doomed.remove(session);
                            self.watches.remove_session(*session);
                            self.events.remove(session);
                        }
                        _ => {}
                    }
                    result = Some(applied);
                }
                Err(e) => {
                    // Only this code proposes commands, so this is a version from the future
                    // or damage Raft's CRCs missed: skip it on every replica alike.
                    tracing::error!(node = self.config.id.0, index = index.0, error = %e, "coordinator: command does not decode; skipped");
                }
            }
        }
        // Answer the proposer, if it waits here and the entry is its own.
        let stale: Vec<u64> = self.writes.range(..=index.0).map(|(i, _)| *i).collect();
        for i in stale {
            let (proposed_term, slot) = self.writes.remove(&i).expect("listed above");
            match (&result, i == index.0 && proposed_term == term) {
                (Some(applied), true) => slot.fill(Ok(applied.clone())),
                _ => slot.fill(Err(RpcError::Unknown)),
            }
        }
    }

    /// Adds every node named under [`COORDINATOR_ADDRS_PATH`] that this node does not know yet
    /// to its peers (a sender task starts at the next tick). Entries that do not parse are
    /// logged and skipped: the tree is written by clients.
    fn learn_peers(&mut self) {
        let Ok(children) = self.tree.children(COORDINATOR_ADDRS_PATH) else {
            return;
        };
        for name in children {
            let path = format!("{COORDINATOR_ADDRS_PATH}/{name}");
            let parsed = match (name.parse::<u64>(), self.tree.get(&path)) {
                (Ok(id), Ok((data, _))) if id > 0 => match String::from_utf8(data) {
                    Ok(addr) if is_host_port(&addr) => Some((NodeId(id), addr)),
                    _ => None,
                },
                _ => None,
            };
            let Some((id, addr)) = parsed else {
                tracing::warn!(node = self.config.id.0, %path, "coordinator: not an id=host:port entry; ignored");
                continue;
            };
            match self.config.peers.iter().find(|(p, _)| *p == id) {
                Some((_, known)) if *known == addr => {}
                Some((_, known)) => {
                    tracing::warn!(node = self.config.id.0, peer = id.0, %known, %addr,
                        "coordinator: a known peer's address changed in the tree; keeping the one in use until restart");
                }
                None => {
                    tracing::info!(node = self.config.id.0, peer = id.0, %addr, "coordinator: learned a peer's address");
                    let outbox = Mailbox::new(PEER_OUTBOX_FRAMES_MAX);
                    self.outboxes.insert(id, outbox.clone());
                    self.unsent_peers.push((addr.clone(), outbox));
                    self.config.peers.push((id, addr));
                }
            }
        }
    }

    /// Leader only: proposes the close of every session not heard from for its timeout.
    fn expire_sessions<D: crate::disk::Disk>(&mut self, disk: &mut D, now_ms: u64) {
        if self.role != Role::Leader {
            return;
        }
        let mut due = Vec::new();
        for (session, info) in self.tree.sessions() {
            let heard = *self.last_heard.entry(*session).or_insert(now_ms);
            let timed_out = now_ms.saturating_sub(heard) > info.timeout_ms || self.doomed.contains(session);
            if timed_out && !self.closing.contains(session) {
                due.push(*session);
            }
        }
        for session in due {
            let command = Bytes::from(Command::CloseSession { session }.encode());
            match self.raft.propose(disk, command, now_ms) {
                Ok(_) => {
                    if self.doomed.contains(&session) {
                        tracing::info!(
                            node = self.config.id.0,
                            session = session.0,
                            "coordinator: session of a previous process closed"
                        );
                    } else {
                        tracing::info!(
                            node = self.config.id.0,
                            session = session.0,
                            "coordinator: session expired"
                        );
                    }
                    self.closing.insert(session);
                }
                Err(e) => {
                    tracing::debug!(node = self.config.id.0, error = %e, "coordinator: close of an expired session not proposed");
                    break;
                }
            }
        }
    }

    /// Answers a read from this node's applied tree, registering its watch.
    fn read(&mut self, session: SessionId, read: LocalRead) -> Result<Reply, RpcError> {
        match read {
            LocalRead::Get { path, watch } => {
                let (data, stat) = self.tree.get(&path).map_err(RpcError::Tree)?;
                if watch {
                    self.watches.add(session, &path, WatchKind::Data);
                }
                Ok(Reply::Data(data, stat))
            }
            LocalRead::Exists { path, watch } => {
                let stat = self.tree.exists(&path).map_err(RpcError::Tree)?;
                if watch {
                    self.watches.add(session, &path, WatchKind::Data);
                }
                Ok(Reply::Stat(stat))
            }
            LocalRead::Children { path, watch } => {
                let names = self.tree.children(&path).map_err(RpcError::Tree)?;
                if watch {
                    self.watches.add(session, &path, WatchKind::Children);
                }
                Ok(Reply::Children(names))
            }
            LocalRead::Sync => Err(RpcError::Tree(TreeError::BadArguments)),
        }
    }

    fn take_events(&mut self, session: SessionId) -> Vec<WatchEvent> {
        match self.events.get_mut(&session) {
            Some(queue) => {
                let n = queue.len().min(EVENTS_PER_RESPONSE_MAX);
                queue.drain(..n).collect()
            }
            None => Vec::new(),
        }
    }
}

type Shared = Rc<RefCell<Node>>;

fn is_addr_path(path: &str) -> bool {
    path.strip_prefix(COORDINATOR_ADDRS_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `host:port` with a non-empty host, a port 1..=65535, and a bounded length.
pub fn is_host_port(addr: &str) -> bool {
    addr.len() <= wire::ADDR_BYTES_MAX
        && addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
}

/// Opens the node's Raft state from disk and returns the future that runs the node: it listens,
/// connects to its peers and serves until Raft fails (then it returns, to be restarted).
pub fn start_coordinator<R: Runtime>(rt: R, config: CoordNodeConfig) -> Result<impl Future<Output = ()>, StartError> {
    start(rt, config, None)
}

/// As [`start_coordinator`], but serves on `listener`, bound by the caller: `gregor dev` binds an
/// OS-chosen loopback port and hands its address to the broker in the same process, so the node
/// needs no port users see. `config.listen` is then only what peers would be told.
pub fn start_coordinator_on<R: Runtime>(
    rt: R,
    config: CoordNodeConfig,
    listener: R::Listener,
) -> Result<impl Future<Output = ()>, StartError> {
    start(rt, config, Some(listener))
}

fn start<R: Runtime>(
    rt: R,
    config: CoordNodeConfig,
    listener: Option<R::Listener>,
) -> Result<impl Future<Output = ()>, StartError> {
    if !config.peers.iter().any(|(id, _)| *id == config.id) {
        return Err(StartError::Config(format!(
            "peers do not include this node {}",
            config.id.0
        )));
    }
    if config.secret.is_none() {
        tracing::warn!(
            node = config.id.0,
            addr = %config.listen,
            "coordinator: no cluster secret configured: any process that reaches this port can open a session, register as a broker and write coordinator state"
        );
    }
    let voters: Vec<NodeId> = match &config.voters {
        Some(v) => v.clone(),
        None => config.peers.iter().map(|(id, _)| *id).collect(),
    };
    let mut raft_config = RaftConfig::new(config.id, voters, config.dir.clone());
    raft_config.election_timeout_ms_min = config.timing.election_timeout_ms_min;
    raft_config.election_timeout_ms_max = config.timing.election_timeout_ms_max;
    raft_config.heartbeat_interval_ms = config.timing.heartbeat_interval_ms;
    raft_config.snapshot_threshold_entries = config.timing.snapshot_every_entries;
    let now = rt.monotonic_ms();
    let seed = rt.random_u64();
    let raft = rt.with_disk(|disk| Raft::open(disk, raft_config, now, seed))?;
    let outboxes: BTreeMap<NodeId, Mailbox<Bytes>> = config
        .peers
        .iter()
        .filter(|(id, _)| *id != config.id)
        .map(|(id, _)| (*id, Mailbox::new(PEER_OUTBOX_FRAMES_MAX)))
        .collect();
    let unsent_peers = config
        .peers
        .iter()
        .filter_map(|(id, addr)| outboxes.get(id).map(|m| (addr.clone(), m.clone())))
        .collect();
    let node = Rc::new(RefCell::new(Node {
        config,
        raft,
        tree: Tree::new(),
        watches: Watches::default(),
        applied: 0,
        role: Role::Follower,
        leader: None,
        writes: BTreeMap::new(),
        reads: BTreeMap::new(),
        next_token: 1,
        events: BTreeMap::new(),
        last_heard: BTreeMap::new(),
        closing: BTreeSet::new(),
        doomed: BTreeSet::new(),
        led: false,
        outboxes,
        unsent_peers,
        failed: None,
    }));
    // Outputs of open (RestoreSnapshot, Apply of the durable committed prefix) first.
    rt.with_disk(|disk| node.borrow_mut().pump(disk, now));
    Ok(run(rt, node, listener))
}

async fn run<R: Runtime>(rt: R, node: Shared, bound: Option<R::Listener>) {
    let (listen, tick_ms, backoff, secret) = {
        let n = node.borrow();
        let t = &n.config.timing;
        (
            n.config.listen.clone(),
            t.tick_ms.max(1),
            (t.peer_backoff_ms_min.max(1), t.peer_backoff_ms_max.max(1)),
            n.config.secret.clone(),
        )
    };
    let listened = match bound {
        Some(listener) => Ok(listener),
        None => rt.listen(&listen).await,
    };
    let listener = match listened {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(addr = %listen, error = %e, "coordinator: cannot listen");
            return;
        }
    };
    let start_senders = |n: &mut Node| {
        for (addr, outbox) in std::mem::take(&mut n.unsent_peers) {
            rt.spawn(peer_sender(rt.clone(), addr, outbox, backoff, secret.clone()));
        }
    };
    start_senders(&mut node.borrow_mut());
    rt.spawn(acceptor(rt.clone(), node.clone(), listener, secret.clone()));
    // The ticker: peers' senders, Raft's timers and session expiry, until Raft fails.
    loop {
        let wait_ms = {
            let mut n = node.borrow_mut();
            start_senders(&mut n);
            let now = rt.monotonic_ms();
            rt.with_disk(|disk| {
                n.pump(disk, now);
                n.expire_sessions(disk, now);
                n.pump(disk, now);
            });
            if let Some(e) = &n.failed {
                tracing::error!(node = n.config.id.0, error = %e, "coordinator: node stops");
                return;
            }
            n.raft.poll_timeout().saturating_sub(now).clamp(1, tick_ms)
        };
        rt.sleep(Duration::from_millis(wait_ms)).await;
    }
}

/// Sends one peer's outbox over a connection it re-opens with backoff; frames queued while the
/// peer is unreachable are dropped when the outbox fills (Raft resends what matters). With a
/// `secret`, each connection first authenticates as a peer; a failure is logged once per streak.
async fn peer_sender<R: Runtime>(
    rt: R,
    addr: String,
    outbox: Mailbox<Bytes>,
    (backoff_min, backoff_max): (u64, u64),
    secret: Option<ClusterSecret>,
) {
    let mut backoff = backoff_min;
    let mut auth_failed = false;
    loop {
        let connected = match rt.connect(&addr).await {
            Ok(mut c) => match &secret {
                None => Ok(c),
                Some(secret) => {
                    match timeout(
                        &rt,
                        HANDSHAKE_MS_MAX,
                        auth::authenticate_to(&rt, &mut c, secret, AuthRole::Peer),
                    )
                    .await
                    {
                        Some(Ok(())) => Ok(c),
                        Some(Err(e)) => Err(Some(e)),
                        None => Err(Some(AuthError::TimedOut)),
                    }
                }
            },
            Err(_) => Err(None),
        };
        let mut conn = match connected {
            Ok(c) => c,
            Err(why) => {
                if let Some(e) = why {
                    if !auth_failed {
                        tracing::warn!(peer = %addr, error = %e, "coordinator: cannot authenticate to a peer; retrying");
                    }
                    auth_failed = true;
                }
                rt.sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(backoff_max);
                continue;
            }
        };
        auth_failed = false;
        backoff = backoff_min;
        loop {
            let frame = outbox.recv().await;
            if conn.send(frame).await.is_err() {
                break;
            }
        }
    }
}

async fn acceptor<R: Runtime>(rt: R, node: Shared, mut listener: R::Listener, secret: Option<ClusterSecret>) {
    loop {
        match listener.accept().await {
            Ok(conn) => rt.spawn(serve_connection(rt.clone(), node.clone(), conn, secret.clone())),
            Err(e) => {
                tracing::warn!(error = %e, "coordinator: accept failed");
                rt.sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The role a connection may act in: what it proved, or anything on a port without a secret.
async fn admit<R: Runtime>(
    rt: &R,
    conn: &mut R::Conn,
    secret: Option<&ClusterSecret>,
) -> Result<(Option<AuthRole>, Option<Bytes>), AuthError> {
    let first = match conn.recv().await {
        Ok(Some(f)) => f,
        Ok(None) => return Err(AuthError::Closed),
        Err(e) => return Err(AuthError::Net(e)),
    };
    if secret.is_none() && !auth::is_auth_frame(&first) {
        // An unauthenticated port: the first frame is served as today.
        return Ok((None, Some(first)));
    }
    let role = auth::authenticate_from(rt, conn, secret, &first).await?;
    Ok((Some(role), None))
}

async fn serve_connection<R: Runtime>(rt: R, node: Shared, mut conn: R::Conn, secret: Option<ClusterSecret>) {
    let admitted = match &secret {
        None => admit(&rt, &mut conn, None).await,
        // Bounded: a connection that never finishes the handshake holds nothing for long.
        Some(s) => timeout(&rt, HANDSHAKE_MS_MAX, admit(&rt, &mut conn, Some(s)))
            .await
            .unwrap_or(Err(AuthError::TimedOut)),
    };
    let (role, mut pending) = match admitted {
        Ok(x) => x,
        Err(AuthError::Closed | AuthError::Net(_)) => return,
        Err(e) => {
            tracing::warn!(
                node = node.borrow().config.id.0,
                from = %conn.peer(),
                error = %e,
                "coordinator: connection failed authentication; closed, nothing it sent applied"
            );
            return;
        }
    };
    let may = |wanted: AuthRole| role.is_none() || role == Some(wanted);
    loop {
        let frame = match pending.take() {
            Some(f) => f,
            None => match conn.recv().await {
                Ok(Some(f)) => f,
                Ok(None) | Err(_) => return,
            },
        };
        if node.borrow().failed.is_some() {
            return;
        }
        match frame.first().copied() {
            Some(t) if t == FrameKind::Peer as u8 && may(AuthRole::Peer) => {
                let Ok((from, msg)) = wire::decode_peer(&frame) else {
                    return;
                };
                let mut n = node.borrow_mut();
                let now = rt.monotonic_ms();
                rt.with_disk(|disk| {
                    n.raft.handle_message(disk, from, msg, now);
                    n.pump(disk, now);
                });
            }
            Some(t) if t == FrameKind::Request as u8 && may(AuthRole::Client) => {
                let Ok(request) = RequestFrame::decode(&frame) else {
                    return;
                };
                let response = handle_request(&rt, &node, request).await;
                if conn.send(Bytes::from(response.encode())).await.is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}

async fn handle_request<R: Runtime>(rt: &R, node: &Shared, frame: RequestFrame) -> Response {
    let session = frame.session;
    let result = answer(rt, node, session, frame.request).await;
    let events = node.borrow_mut().take_events(session);
    Response {
        request_id: frame.request_id,
        events,
        result,
    }
}

async fn answer<R: Runtime>(rt: &R, node: &Shared, session: SessionId, request: Request) -> Result<Reply, RpcError> {
    if let Request::Local(read) = request {
        return local_read(rt, node, session, read).await;
    }
    let now = rt.monotonic_ms();
    {
        let mut n = node.borrow_mut();
        if n.role != Role::Leader {
            return Err(n.not_leader());
        }
        let needs_session = !matches!(request, Request::CreateSession { .. } | Request::ReadIndex);
        if needs_session {
            if !n.tree.session_live(session) {
                return Err(RpcError::Tree(TreeError::SessionExpired));
            }
            if !n.closing.contains(&session) {
                n.last_heard.insert(session, now);
            }
        }
    }
    match request {
        Request::CreateSession { timeout_ms } => {
            let t = node.borrow().config.timing.clone();
            let timeout_ms = timeout_ms.clamp(t.session_timeout_ms_min, t.session_timeout_ms_max);
            match write(rt, node, Command::CreateSession { timeout_ms }).await? {
                Applied::SessionCreated(s) => Ok(Reply::Session(s)),
                _ => Err(RpcError::Unknown),
            }
        }
        Request::CloseSession => {
            write(rt, node, Command::CloseSession { session }).await?;
            Ok(Reply::Closed)
        }
        Request::Ping => Ok(Reply::Pong),
        Request::Write(op) => match write(rt, node, Command::Op { session, op }).await? {
            Applied::Op(Ok(r)) => Ok(Reply::Op(r)),
            Applied::Op(Err(e)) => Err(RpcError::Tree(e)),
            _ => Err(RpcError::Unknown),
        },
        Request::Multi(ops) => match write(rt, node, Command::Multi { session, ops }).await? {
            Applied::Multi(Ok(rs)) => Ok(Reply::Multi(rs)),
            Applied::Multi(Err((index, error))) => Err(RpcError::MultiFailed {
                index: u32::try_from(index).expect("multi ops are bounded"),
                error,
            }),
            _ => Err(RpcError::Unknown),
        },
        Request::Sync => {
            read_barrier(rt, node).await?;
            Ok(Reply::Synced)
        }
        Request::Membership(change) => membership(rt, node, change).await,
        Request::Get { path, watch, sync } => {
            leader_read(rt, node, session, LocalRead::Get { path, watch }, sync).await
        }
        Request::Exists { path, watch, sync } => {
            leader_read(rt, node, session, LocalRead::Exists { path, watch }, sync).await
        }
        Request::Children { path, watch, sync } => {
            leader_read(rt, node, session, LocalRead::Children { path, watch }, sync).await
        }
        Request::ReadIndex => Ok(Reply::ReadIndex(read_barrier(rt, node).await?.0)),
        // Answered before the leader check above.
        Request::Local(_) => Err(RpcError::Retry),
    }
}

/// A read on the leader; with `sync`, after a read-index round (linearizable).
async fn leader_read<R: Runtime>(
    rt: &R,
    node: &Shared,
    session: SessionId,
    read: LocalRead,
    sync: bool,
) -> Result<Reply, RpcError> {
    if sync {
        read_barrier(rt, node).await?;
    }
    node.borrow_mut().read(session, read)
}

/// [`Request::Local`]: served by any node from its applied state. A node that has not applied
/// the session's creation cannot tell it from an expired one, so it refuses (`Retry`) rather
/// than expire a live session; the leader path (pings) decides expiry.
async fn local_read<R: Runtime>(rt: &R, node: &Shared, session: SessionId, read: LocalRead) -> Result<Reply, RpcError> {
    if !node.borrow().tree.session_live(session) {
        return Err(RpcError::Retry);
    }
    if read == LocalRead::Sync {
        catch_up(rt, node).await?;
        return Ok(Reply::Synced);
    }
    node.borrow_mut().read(session, read)
}

/// ZooKeeper's `sync` on any node: waits until this node has applied the leader's commit index
/// as of now (asked of the leader, which confirms it still leads first). Refused (`Retry`) when
/// the leader is unknown or cannot answer within the request timeout, so a node cut off from
/// the quorum never reports itself caught up.
async fn catch_up<R: Runtime>(rt: &R, node: &Shared) -> Result<(), RpcError> {
    if node.borrow().role == Role::Leader {
        return read_barrier(rt, node).await.map(|_| ());
    }
    let (leader, secret, timeout_ms) = {
        let n = node.borrow();
        let leader = n.addr_of(n.leader.filter(|l| *l != n.config.id));
        (leader, n.config.secret.clone(), n.config.timing.request_timeout_ms)
    };
    let leader = leader.ok_or(RpcError::Retry)?;
    let deadline = rt.monotonic_ms() + timeout_ms;
    let index = match timeout(rt, timeout_ms, ask_read_index(rt, &leader, secret.as_ref())).await {
        Some(Some(index)) => index,
        _ => return Err(RpcError::Retry),
    };
    wait_applied(rt, node, index, deadline).await
}

/// One [`Request::ReadIndex`] exchange with the leader at `addr` on a fresh connection (a sync
/// is rare; its cost is the leader's read-index round anyway). `None` on any failure.
async fn ask_read_index<R: Runtime>(rt: &R, addr: &str, secret: Option<&ClusterSecret>) -> Option<LogIndex> {
    let frame = RequestFrame {
        request_id: 1,
        session: SessionId(0),
        request: Request::ReadIndex,
    };
    let sent = std::cell::Cell::new(false);
    match super::client::exchange(rt, None, addr, secret, &frame, &sent)
        .await
        .ok()?
        .1
        .result
    {
        Ok(Reply::ReadIndex(index)) => Some(LogIndex(index)),
        _ => None,
    }
}

/// Proposes a membership change (if any) and waits until it committed; answers the membership.
async fn membership<R: Runtime>(rt: &R, node: &Shared, change: Option<MembershipChange>) -> Result<Reply, RpcError> {
    let start = rt.monotonic_ms();
    let (index, tick_ms, timeout_ms) = {
        let mut n = node.borrow_mut();
        let index = match change {
            None => None,
            Some(change) => {
                let proposed = rt.with_disk(|disk| {
                    let r = n.raft.change_membership(disk, change, start);
                    n.pump(disk, start);
                    r
                });
                match proposed {
                    Ok(index) => Some(index),
                    Err(MembershipError::NotLeader(_)) => return Err(n.not_leader()),
                    Err(MembershipError::Refused(_)) => return Err(RpcError::Tree(TreeError::BadArguments)),
                    Err(MembershipError::InProgress { .. } | MembershipError::NotCaughtUp { .. }) => {
                        return Err(RpcError::Retry)
                    }
                    Err(MembershipError::Failed(_)) => return Err(RpcError::Retry),
                }
            }
        };
        let t = &n.config.timing;
        (index, t.tick_ms.max(1), t.request_timeout_ms)
    };
    // Bounded: one wait per tick until the request times out.
    for _ in 0..=timeout_ms / tick_ms {
        {
            let n = node.borrow();
            if index.is_none_or(|i| n.raft.commit_index() >= i) {
                let m = n.raft.membership();
                return Ok(Reply::Membership {
                    voters: m.voters.iter().copied().collect(),
                    learners: m.learners.iter().copied().collect(),
                });
            }
            if n.role != Role::Leader || rt.monotonic_ms() >= start + timeout_ms {
                return Err(RpcError::Unknown);
            }
        }
        rt.sleep(Duration::from_millis(tick_ms)).await;
    }
    Err(RpcError::Unknown)
}

/// Proposes `command` and waits for it to apply.
async fn write<R: Runtime>(rt: &R, node: &Shared, command: Command) -> Result<Applied, RpcError> {
    let slot = Slot::default();
    let timeout_ms = {
        let mut n = node.borrow_mut();
        let now = rt.monotonic_ms();
        let proposed = rt.with_disk(|disk| {
            let r = n.raft.propose(disk, Bytes::from(command.encode()), now);
            if let Ok((term, index)) = r {
                n.writes.insert(index.0, (term, slot.clone()));
            }
            n.pump(disk, now);
            r
        });
        match proposed {
            Ok(_) => {}
            Err(ProposeError::NotLeader(_)) => return Err(n.not_leader()),
            Err(ProposeError::CommandTooLarge { .. } | ProposeError::ReservedPrefix) => {
                return Err(RpcError::Tree(TreeError::BadArguments))
            }
            Err(ProposeError::Backpressure { .. }) => return Err(RpcError::Retry),
            Err(ProposeError::Failed(_)) => return Err(RpcError::Retry),
        }
        n.config.timing.request_timeout_ms
    };
    match timeout(rt, timeout_ms, slot.wait()).await {
        Some(r) => r,
        None => Err(RpcError::Unknown),
    }
}

/// Waits until a read-index round confirmed leadership and the tree applied that index; returns
/// the index.
async fn read_barrier<R: Runtime>(rt: &R, node: &Shared) -> Result<LogIndex, RpcError> {
    let slot = Slot::default();
    let timeout_ms = {
        let mut n = node.borrow_mut();
        let token = n.next_token;
        n.next_token += 1;
        n.reads.insert(token, slot.clone());
        let now = rt.monotonic_ms();
        if n.raft.read_index(token, now).is_err() {
            n.reads.remove(&token);
            return Err(n.not_leader());
        }
        rt.with_disk(|disk| n.pump(disk, now));
        n.config.timing.request_timeout_ms
    };
    let deadline = rt.monotonic_ms() + timeout_ms;
    let index = match timeout(rt, timeout_ms, slot.wait()).await {
        Some(Ok(index)) => index,
        Some(Err(_)) => return Err(node.borrow().not_leader()),
        None => return Err(RpcError::Retry),
    };
    // Usually applied already: the leader applies as it commits.
    wait_applied(rt, node, index, deadline).await?;
    Ok(index)
}

/// Waits (until `deadline`, then `Retry`) for this node to apply `index`.
async fn wait_applied<R: Runtime>(rt: &R, node: &Shared, index: LogIndex, deadline: u64) -> Result<(), RpcError> {
    while node.borrow().applied < index.0 {
        if rt.monotonic_ms() >= deadline {
            return Err(RpcError::Retry);
        }
        rt.sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}
