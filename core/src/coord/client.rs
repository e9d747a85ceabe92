//! `CoordClient`: a session with the coordinator quorum, as brokers and the controller use it.
//!
//! What it owns: a connection to the current leader (found by following `NotLeader` hints at
//! once and trying each address in turn, passing over, and not following hints to, one that
//! just failed: a dead leader's followers name it until they elect another), the session and its
//! heartbeat task, and the watch events delivered with responses, in order, for
//! [`CoordClient::next_watch_event`].
//!
//! Contract:
//! - Every op is retried with backoff while nothing can have happened (no connection, `NotLeader`,
//!   `Retry`, a read that timed out). A write whose request may have reached a leader but whose
//!   answer did not come back returns [`CoordError::Unknown`]: it may or may not apply, and the
//!   caller must read to find out. The client never guesses.
//! - [`CoordError::SessionExpired`] is final for this client: its ephemerals are gone (or will be
//!   once the leader notices); the caller opens a new client and re-creates what it owned. The
//!   client also declares its session expired on its own when no heartbeat succeeded for a whole
//!   session timeout, so it never acts as a live owner longer than the quorum believes it is one.
//! - Watch events of one session arrive in the order the changes applied, and before the answer
//!   of any read issued after the change (ZooKeeper's guarantee). Watches live on the leader that
//!   registered them: after the client changes server it delivers [`WatchEvent`]s no more for the
//!   old registrations, and callers re-read (as on ZooKeeper's `Disconnected`) — see
//!   [`CoordClient::server_changes`].
//! - Reads go to the leader unless the caller picks a server with the `*_at` calls (ZooKeeper's
//!   follower reads: possibly stale, `sync_at` first to catch that server up). Brokers and the
//!   controller use the leader path only.
//!
//! Fault model: servers crash, stall and are partitioned; every request has a timeout; frames
//! that do not decode close the connection and count as a lost answer.

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use super::auth::{self, AuthRole, ClusterSecret};
use super::tree::{CreateMode, Op, OpResult, SessionId, Stat, TreeError, WatchEvent};
use super::wait::{timeout, Doorbell, Mailbox};
use super::wire::{LocalRead, Reply, Request, RequestFrame, Response, RpcError};
use crate::runtime::{Connection, Runtime};

/// Watch events buffered for the caller at most (older ones are dropped).
pub const CLIENT_EVENTS_MAX: usize = 10_000;

#[derive(Clone, Debug)]
pub struct CoordClientConfig {
    /// Every coordinator's address (`host:port`).
    pub servers: Vec<String>,
    pub session_timeout_ms: u64,
    /// One request's time limit (connect, send and answer).
    pub request_timeout_ms: u64,
    pub backoff_ms_min: u64,
    pub backoff_ms_max: u64,
    /// Attempts per op before [`CoordError::Unavailable`].
    pub attempts_max: u32,
    /// The cluster secret each connection proves (and checks the coordinator holds) before its
    /// first request; `None` for a coordinator without one. A handshake that fails is logged
    /// and counts as a connection that could not be opened.
    pub secret: Option<ClusterSecret>,
}

impl CoordClientConfig {
    pub fn new(servers: Vec<String>) -> Self {
        CoordClientConfig {
            servers,
            session_timeout_ms: 6000,
            request_timeout_ms: 2000,
            backoff_ms_min: 20,
            backoff_ms_max: 500,
            attempts_max: 30,
            secret: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CoordError {
    #[error("{0}")]
    Tree(TreeError),
    #[error("multi op {index} failed: {error}")]
    MultiFailed { index: u32, error: TreeError },
    #[error("session expired")]
    SessionExpired,
    #[error("outcome unknown: the write may or may not have applied")]
    Unknown,
    #[error("no coordinator leader reachable")]
    Unavailable,
    #[error("client closed")]
    Closed,
}

/// Idle connections a client keeps (see `Inner::idle`).
const IDLE_CONNS_MAX: usize = 4;

struct Inner<R: Runtime> {
    config: CoordClientConfig,
    /// Idle connections, each beside the server it goes to. A call takes one to the server it
    /// asks (dropping those to any other server) and puts it back after an answer. Calls
    /// overlap: the heartbeat task pings while the session's owner waits for an answer. With a
    /// single slot the later call opened a connection of its own, and whichever answer came
    /// last dropped the other's: under load a broker's client reconnected every few seconds,
    /// and each new connection counted in `connections_opened` as a server that may have
    /// restarted, so the cluster task re-read the whole tree.
    idle: Vec<(String, R::Conn)>,
    leader_hint: Option<String>,
    /// The server that answered the last request as leader: the next request goes there first
    /// (as ZooKeeper's client stays with its server) instead of to `servers[next_server]`,
    /// which may be a follower answering `NotLeader` (a wasted connection, round trip and
    /// backoff per request). Cleared when that server fails or stops leading.
    leader: Option<String>,
    next_server: usize,
    session: SessionId,
    expired: bool,
    closed: bool,
    /// Monotonic ms of the last answer from a leader.
    last_ok_ms: u64,
    next_request_id: u64,
    /// The address served by the last answering leader, and how often it changed.
    server: Option<String>,
    server_changes: u64,
    /// How many connections answered a first request (see [`CoordClient::connections_opened`]).
    connections_opened: u64,
    /// The connection of the last [`CoordClient::get_at`]-style call, kept for the next one.
    local_conn: Option<(String, R::Conn)>,
    /// Rung for what an owner waiting between its calls should look at (see
    /// [`CoordClient::activity`]).
    activity: Doorbell,
}

impl<R: Runtime> Inner<R> {
    /// Keeps a connection that answered for the next call to `addr`.
    fn put_back(&mut self, addr: String, conn: R::Conn) {
        if self.idle.len() < IDLE_CONNS_MAX {
            self.idle.push((addr, conn));
        }
    }
}

/// A session with the coordinator. Cheap to share by reference; single-threaded.
pub struct CoordClient<R: Runtime> {
    rt: R,
    inner: Rc<RefCell<Inner<R>>>,
    events: Mailbox<WatchEvent>,
}

impl<R: Runtime> Drop for CoordClient<R> {
    fn drop(&mut self) {
        // Stops the heartbeat task (it holds only a weak reference).
        self.inner.borrow_mut().closed = true;
    }
}

enum Kind {
    /// May be sent again after an unanswered attempt (reads, pings, session creation: a lost
    /// CreateSession leaves an orphan session that expires).
    Idempotent,
    /// Unknown once sent and unanswered.
    Write,
}

async fn call<R: Runtime>(
    rt: &R,
    inner: &Rc<RefCell<Inner<R>>>,
    events: &Mailbox<WatchEvent>,
    request: Request,
    kind: Kind,
) -> Result<Reply, CoordError> {
    let (attempts, request_timeout_ms, backoff_min, backoff_max, secret) = {
        let i = inner.borrow();
        // A heartbeat that waits longer than a third of the session timeout for a dead leader
        // would let the session lapse before the next server is tried (ZooKeeper's client
        // likewise divides the session timeout among the servers).
        let request_timeout_ms = match request {
            Request::Ping => i
                .config
                .request_timeout_ms
                .min((i.config.session_timeout_ms / 3).max(1)),
            _ => i.config.request_timeout_ms,
        };
        (
            i.config.attempts_max.max(1),
            request_timeout_ms,
            i.config.backoff_ms_min.max(1),
            i.config.backoff_ms_max.max(1),
            i.config.secret.clone(),
        )
    };
    let mut backoff = backoff_min;
    // The servers this call failed to reach, and when. One that failed within the longest
    // backoff is passed over while another is left, and a hint naming it is not followed: right
    // after a leader dies its followers still name it until they elect another, and chasing
    // their stale hints back to the dead node (and backing off after each) could outlast a
    // heartbeating client's session although a new leader was elected in half a second.
    let mut unreachable: Vec<(String, u64)> = Vec::new();
    let mut followed_at_once = false;
    let recently_failed = |unreachable: &[(String, u64)], addr: &str| {
        let now = rt.monotonic_ms();
        unreachable
            .iter()
            .any(|(a, at)| a == addr && now.saturating_sub(*at) < backoff_max)
    };
    for _ in 0..attempts {
        let (addr, conn, frame) = {
            let mut i = inner.borrow_mut();
            if i.closed {
                return Err(CoordError::Closed);
            }
            let is_create = matches!(request, Request::CreateSession { .. });
            if !is_create {
                let silent_ms = rt.monotonic_ms().saturating_sub(i.last_ok_ms);
                if i.expired || silent_ms > i.config.session_timeout_ms {
                    // Rung once, when the expiry is first found (after the borrow ends).
                    let bell = (!i.expired).then(|| i.activity.clone());
                    i.expired = true;
                    drop(i);
                    if let Some(bell) = bell {
                        bell.ring();
                    }
                    return Err(CoordError::SessionExpired);
                }
            }
            let addr = match i.leader_hint.take().or_else(|| i.leader.clone()) {
                Some(a) => a,
                None => {
                    let n = i.config.servers.len().max(1);
                    let pick = (0..n)
                        .map(|k| (i.next_server + k) % n)
                        .find(|&k| {
                            i.config
                                .servers
                                .get(k)
                                .is_some_and(|a| !recently_failed(&unreachable, a))
                        })
                        .unwrap_or(i.next_server % n);
                    i.next_server = pick;
                    i.config.servers.get(pick).cloned().unwrap_or_default()
                }
            };
            i.idle.retain(|(a, _)| *a == addr);
            let conn = i.idle.pop().map(|(_, c)| c);
            i.next_request_id += 1;
            let frame = RequestFrame {
                request_id: i.next_request_id,
                session: i.session,
                request: request.clone(),
            };
            (addr, conn, frame)
        };
        let sent = std::cell::Cell::new(false);
        let fresh = conn.is_none();
        let exchange = exchange(rt, conn, &addr, secret.as_ref(), &frame, &sent);
        let outcome = timeout(rt, request_timeout_ms, exchange).await;
        let (conn, response) = match outcome {
            Some(Ok(x)) => x,
            _ => {
                {
                    let mut i = inner.borrow_mut();
                    if i.leader.as_deref() == Some(addr.as_str()) {
                        i.leader = None;
                    }
                    if sent.get() && matches!(kind, Kind::Write) {
                        return Err(CoordError::Unknown);
                    }
                    i.next_server += 1;
                }
                unreachable.retain(|(a, _)| *a != addr);
                unreachable.push((addr.clone(), rt.monotonic_ms()));
                rt.sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(backoff_max);
                continue;
            }
        };
        let any_events = !response.events.is_empty();
        for event in response.events {
            events.push(event);
        }
        let mut notice = any_events || fresh;
        let answer = {
            let mut i = inner.borrow_mut();
            i.connections_opened += u64::from(fresh);
            match response.result {
                Err(RpcError::NotLeader { leader }) => {
                    if i.leader.as_deref() == Some(addr.as_str()) {
                        i.leader = None;
                    }
                    match leader {
                        Some(l) if l != addr && !recently_failed(&unreachable, &l) => i.leader_hint = Some(l),
                        _ => i.next_server += 1,
                    }
                    None
                }
                Err(RpcError::Retry) => {
                    i.put_back(addr, conn);
                    None
                }
                other => {
                    i.last_ok_ms = rt.monotonic_ms();
                    if i.server.as_deref() != Some(addr.as_str()) {
                        i.server_changes += u64::from(i.server.is_some());
                        i.server = Some(addr.clone());
                    }
                    i.leader = Some(addr.clone());
                    i.put_back(addr, conn);
                    Some(match other {
                        Ok(reply) => Ok(reply),
                        Err(RpcError::Tree(TreeError::SessionExpired)) => {
                            notice |= !i.expired;
                            i.expired = true;
                            Err(CoordError::SessionExpired)
                        }
                        Err(RpcError::Tree(e)) => Err(CoordError::Tree(e)),
                        Err(RpcError::MultiFailed { index, error }) => Err(CoordError::MultiFailed { index, error }),
                        // Not leader and retry were matched above; unknown stays unknown.
                        Err(RpcError::Unknown | RpcError::NotLeader { .. } | RpcError::Retry) => {
                            Err(CoordError::Unknown)
                        }
                    })
                }
            }
        };
        if notice {
            let bell = inner.borrow().activity.clone();
            bell.ring();
        }
        if let Some(answer) = answer {
            return answer;
        }
        // A server named the leader: follow it at once, as Kafka's clients follow a
        // NOT_LEADER's new leader; a pause here was time a heartbeat's session could not spare.
        // Every other attempt at most, so two servers naming each other still back off.
        let hinted = inner.borrow().leader_hint.is_some();
        if hinted && !followed_at_once {
            followed_at_once = true;
            continue;
        }
        followed_at_once = false;
        // Nothing happened (not the leader, or refused before acting): try again after a pause.
        rt.sleep(Duration::from_millis(backoff)).await;
        backoff = (backoff * 2).min(backoff_max);
    }
    Err(CoordError::Unavailable)
}

/// One request and its response on `conn` (or a new, authenticated connection to `addr`);
/// `sent` tells whether the request may have left. `Err` on any failure.
pub(super) async fn exchange<R: Runtime>(
    rt: &R,
    conn: Option<R::Conn>,
    addr: &str,
    secret: Option<&ClusterSecret>,
    frame: &RequestFrame,
    sent: &std::cell::Cell<bool>,
) -> Result<(R::Conn, Response), ()> {
    let mut conn = match conn {
        Some(c) => c,
        None => {
            let mut c = rt.connect(addr).await.map_err(|_| ())?;
            if let Some(secret) = secret {
                if let Err(e) = auth::authenticate_to(rt, &mut c, secret, AuthRole::Client).await {
                    tracing::warn!(coordinator = %addr, error = %e, "coordinator client: authentication failed");
                    return Err(());
                }
            }
            c
        }
    };
    sent.set(true);
    conn.send(Bytes::from(frame.encode())).await.map_err(|_| ())?;
    let bytes = conn.recv().await.map_err(|_| ())?.ok_or(())?;
    if let Some(reason) = auth::refusal_reason(&bytes) {
        tracing::warn!(coordinator = %addr, %reason, "coordinator client: refused");
        return Err(());
    }
    let response = Response::decode(&bytes).map_err(|_| ())?;
    if response.request_id != frame.request_id {
        return Err(());
    }
    Ok((conn, response))
}

fn unexpected(reply: Reply) -> CoordError {
    tracing::error!(?reply, "coordinator client: reply does not match the request");
    CoordError::Unknown
}

impl<R: Runtime> CoordClient<R> {
    /// Finds the leader, opens a session and starts heartbeating it every third of its timeout.
    pub async fn connect(rt: R, config: CoordClientConfig) -> Result<CoordClient<R>, CoordError> {
        let session_timeout_ms = config.session_timeout_ms;
        let inner = Rc::new(RefCell::new(Inner {
            config,
            idle: Vec::new(),
            leader_hint: None,
            leader: None,
            next_server: 0,
            session: SessionId(0),
            expired: false,
            closed: false,
            last_ok_ms: rt.monotonic_ms(),
            next_request_id: 0,
            server: None,
            server_changes: 0,
            connections_opened: 0,
            local_conn: None,
            activity: Doorbell::default(),
        }));
        let events = Mailbox::new(CLIENT_EVENTS_MAX);
        let request = Request::CreateSession {
            timeout_ms: session_timeout_ms,
        };
        let session = match call(&rt, &inner, &events, request, Kind::Idempotent).await? {
            Reply::Session(s) => s,
            other => return Err(unexpected(other)),
        };
        {
            let mut i = inner.borrow_mut();
            i.session = session;
            i.last_ok_ms = rt.monotonic_ms();
        }
        rt.spawn(heartbeat(
            rt.clone(),
            Rc::downgrade(&inner),
            events.clone(),
            (session_timeout_ms / 3).max(1),
        ));
        Ok(CoordClient { rt, inner, events })
    }

    pub fn session(&self) -> SessionId {
        self.inner.borrow().session
    }

    /// Rung for the changes an owner that waits between its calls should look at: watch
    /// events received, a new connection answering
    /// ([`connections_opened`](Self::connections_opened)), the session found expired. Any call
    /// may bring them, the heartbeat's included.
    pub fn activity(&self) -> Doorbell {
        self.inner.borrow().activity.clone()
    }

    /// Whether the session is known to be expired (then every op fails with `SessionExpired`).
    pub fn is_expired(&self) -> bool {
        self.inner.borrow().expired
    }

    /// The address of the leader that answered last (`None` before any answer).
    pub fn server(&self) -> Option<String> {
        self.inner.borrow().server.clone()
    }

    /// How many times the answering leader changed (watches registered before are gone).
    pub fn server_changes(&self) -> u64 {
        self.inner.borrow().server_changes
    }

    /// How many new connections have answered so far. A server that restarted lost the watches
    /// this session registered there, even at the same address (which `server_changes` does not
    /// count): a caller relying on watches re-reads when this moves.
    pub fn connections_opened(&self) -> u64 {
        self.inner.borrow().connections_opened
    }

    async fn call(&self, request: Request, kind: Kind) -> Result<Reply, CoordError> {
        call(&self.rt, &self.inner, &self.events, request, kind).await
    }

    pub async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String, CoordError> {
        let op = Op::Create {
            path: path.into(),
            data: data.to_vec(),
            mode,
        };
        match self.call(Request::Write(op), Kind::Write).await? {
            Reply::Op(OpResult::Created { path }) => Ok(path),
            other => Err(unexpected(other)),
        }
    }

    pub async fn set_data(&self, path: &str, data: &[u8], expected_version: Option<i32>) -> Result<Stat, CoordError> {
        let op = Op::SetData {
            path: path.into(),
            data: data.to_vec(),
            expected_version,
        };
        match self.call(Request::Write(op), Kind::Write).await? {
            Reply::Op(OpResult::SetData { stat }) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    pub async fn delete(&self, path: &str, expected_version: Option<i32>) -> Result<(), CoordError> {
        let op = Op::Delete {
            path: path.into(),
            expected_version,
        };
        match self.call(Request::Write(op), Kind::Write).await? {
            Reply::Op(OpResult::Deleted) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Applies every op or none (`MultiFailed` names the first that failed).
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<OpResult>, CoordError> {
        match self.call(Request::Multi(ops), Kind::Write).await? {
            Reply::Multi(results) => Ok(results),
            other => Err(unexpected(other)),
        }
    }

    /// The node's data and stat. `watch` sets a one-shot data watch (when the node exists);
    /// `sync` makes the read linearizable.
    pub async fn get(&self, path: &str, watch: bool, sync: bool) -> Result<(Vec<u8>, Stat), CoordError> {
        let request = Request::Get {
            path: path.into(),
            watch,
            sync,
        };
        match self.call(request, Kind::Idempotent).await? {
            Reply::Data(data, stat) => Ok((data, stat)),
            other => Err(unexpected(other)),
        }
    }

    /// The node's stat if it exists; `watch` fires on its creation, change or deletion.
    pub async fn exists(&self, path: &str, watch: bool, sync: bool) -> Result<Option<Stat>, CoordError> {
        let request = Request::Exists {
            path: path.into(),
            watch,
            sync,
        };
        match self.call(request, Kind::Idempotent).await? {
            Reply::Stat(stat) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    pub async fn children(&self, path: &str, watch: bool, sync: bool) -> Result<Vec<String>, CoordError> {
        let request = Request::Children {
            path: path.into(),
            watch,
            sync,
        };
        match self.call(request, Kind::Idempotent).await? {
            Reply::Children(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    /// The quorum's voters and learners; with a change, once it committed. A change whose answer
    /// was lost is unknown: read the membership to see whether it happened.
    pub async fn membership(
        &self,
        change: Option<crate::consensus::MembershipChange>,
    ) -> Result<(Vec<crate::consensus::NodeId>, Vec<crate::consensus::NodeId>), CoordError> {
        let kind = if change.is_some() {
            Kind::Write
        } else {
            Kind::Idempotent
        };
        match self.call(Request::Membership(change), kind).await? {
            Reply::Membership { voters, learners } => Ok((voters, learners)),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until the leader has applied everything committed before the call.
    pub async fn sync(&self) -> Result<(), CoordError> {
        match self.call(Request::Sync, Kind::Idempotent).await? {
            Reply::Synced => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// ZooKeeper's read from one chosen server: `server` (leader or not) answers from its own
    /// applied state, so the answer may be stale (never ahead of the quorum); call
    /// [`CoordClient::sync_at`] first to read at least what was committed before the sync.
    /// A watch registers on that server; its event comes with that server's next answer to this
    /// session (a later `*_at` call). One attempt, no retry: [`CoordError::Unavailable`] when the
    /// server cannot answer (unreachable, or not caught up to this session's creation).
    pub async fn get_at(&self, server: &str, path: &str, watch: bool) -> Result<(Vec<u8>, Stat), CoordError> {
        let read = LocalRead::Get {
            path: path.into(),
            watch,
        };
        match self.call_at(server, read).await? {
            Reply::Data(data, stat) => Ok((data, stat)),
            other => Err(unexpected(other)),
        }
    }

    /// As [`CoordClient::get_at`], for a node's stat.
    pub async fn exists_at(&self, server: &str, path: &str, watch: bool) -> Result<Option<Stat>, CoordError> {
        let read = LocalRead::Exists {
            path: path.into(),
            watch,
        };
        match self.call_at(server, read).await? {
            Reply::Stat(stat) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    /// As [`CoordClient::get_at`], for a node's children.
    pub async fn children_at(&self, server: &str, path: &str, watch: bool) -> Result<Vec<String>, CoordError> {
        let read = LocalRead::Children {
            path: path.into(),
            watch,
        };
        match self.call_at(server, read).await? {
            Reply::Children(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    /// ZooKeeper's `sync` on `server`: answered once it has applied everything the leader had
    /// committed when the server asked it, so the next `*_at` read on it sees at least that.
    /// [`CoordError::Unavailable`] when the server cannot reach the leader in time: it then
    /// does not claim to be caught up.
    pub async fn sync_at(&self, server: &str) -> Result<(), CoordError> {
        match self.call_at(server, LocalRead::Sync).await? {
            Reply::Synced => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// One [`Request::Local`] exchange with `server`, bounded by the request timeout.
    async fn call_at(&self, server: &str, read: LocalRead) -> Result<Reply, CoordError> {
        let (conn, frame, request_timeout_ms, secret) = {
            let mut i = self.inner.borrow_mut();
            if i.closed {
                return Err(CoordError::Closed);
            }
            if i.expired {
                return Err(CoordError::SessionExpired);
            }
            let conn = match i.local_conn.take() {
                Some((a, c)) if a == server => Some(c),
                _ => None,
            };
            i.next_request_id += 1;
            let frame = RequestFrame {
                request_id: i.next_request_id,
                session: i.session,
                request: Request::Local(read),
            };
            (conn, frame, i.config.request_timeout_ms, i.config.secret.clone())
        };
        let sent = std::cell::Cell::new(false);
        let exchanged = exchange(&self.rt, conn, server, secret.as_ref(), &frame, &sent);
        let Some(Ok((conn, response))) = timeout(&self.rt, request_timeout_ms, exchanged).await else {
            return Err(CoordError::Unavailable);
        };
        for event in response.events {
            self.events.push(event);
        }
        self.inner.borrow_mut().local_conn = Some((server.to_string(), conn));
        match response.result {
            Ok(reply) => Ok(reply),
            Err(RpcError::Tree(e)) => Err(CoordError::Tree(e)),
            Err(RpcError::MultiFailed { index, error }) => Err(CoordError::MultiFailed { index, error }),
            Err(RpcError::NotLeader { .. } | RpcError::Retry | RpcError::Unknown) => Err(CoordError::Unavailable),
        }
    }

    /// The next watch event, in order (events arrive with responses and heartbeats).
    pub async fn next_watch_event(&self) -> WatchEvent {
        self.events.recv().await
    }

    /// A watch event already delivered, without waiting.
    pub fn try_next_watch_event(&self) -> Option<WatchEvent> {
        self.events.try_recv()
    }

    /// Heartbeats the session now. Watch events come only with answers (the server never sends
    /// unasked), so this is also the cheapest way to collect the ones that fired.
    pub async fn ping(&self) -> Result<(), CoordError> {
        self.call(Request::Ping, Kind::Idempotent).await.map(|_| ())
    }

    /// Closes the session (its ephemerals are deleted) and stops heartbeating.
    pub async fn close(&self) -> Result<(), CoordError> {
        let result = self.call(Request::CloseSession, Kind::Write).await;
        self.inner.borrow_mut().closed = true;
        result.map(|_| ())
    }
}

async fn heartbeat<R: Runtime>(rt: R, inner: Weak<RefCell<Inner<R>>>, events: Mailbox<WatchEvent>, interval_ms: u64) {
    loop {
        rt.sleep(Duration::from_millis(interval_ms)).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        {
            let i = inner.borrow();
            if i.closed || i.expired {
                return;
            }
        }
        let pinged = call(&rt, &inner, &events, Request::Ping, Kind::Idempotent).await;
        if let Err(CoordError::SessionExpired | CoordError::Closed) = pinged {
            return;
        }
    }
}
