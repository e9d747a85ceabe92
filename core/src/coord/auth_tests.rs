//! The coordinator's cluster-secret handshake end to end in one thread: a real coordinator node
//! (`start_coordinator`, Raft on a `MemDisk`) and real `CoordClient`s over an in-memory network,
//! driven by a small round-robin executor whose clock advances 1 ms per round.
//!
//! What is shown: with the secret a client opens a session and writes; with a wrong secret or
//! none it opens no session (and a raw request is refused, unanswered); a Raft frame is handled
//! only on a connection that proved the secret as a peer (seen by the node's answer to a forged
//! AppendEntries reaching a fake peer); without a secret on either side everything works as
//! before, and a client that insists on a secret refuses a coordinator without one.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::auth::{self, AuthRole, ClusterSecret};
use super::client::{CoordClient, CoordClientConfig, CoordError};
use super::server::{start_coordinator, CoordNodeConfig, CoordTiming};
use super::tree::{CreateMode, SessionId};
use super::wire::{self, Request, RequestFrame};
use crate::consensus::{LogIndex, Message, NodeId, Term};
use crate::disk::mem::MemDisk;
use crate::runtime::{Connection, Listener, NetError, Runtime};

#[derive(Default)]
struct Pipe {
    frames: VecDeque<Bytes>,
    writer_gone: bool,
    reader_gone: bool,
}

struct MemConn {
    rx: Rc<RefCell<Pipe>>,
    tx: Rc<RefCell<Pipe>>,
    peer: String,
}

impl Drop for MemConn {
    fn drop(&mut self) {
        self.tx.borrow_mut().writer_gone = true;
        self.rx.borrow_mut().reader_gone = true;
    }
}

impl Connection for MemConn {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        let mut tx = self.tx.borrow_mut();
        if tx.reader_gone {
            return Err(NetError::Closed);
        }
        tx.frames.push_back(frame);
        Ok(())
    }
    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        poll_fn(|_| {
            let mut rx = self.rx.borrow_mut();
            match rx.frames.pop_front() {
                Some(f) => Poll::Ready(Ok(Some(f))),
                None if rx.writer_gone => Poll::Ready(Ok(None)),
                None => Poll::Pending,
            }
        })
        .await
    }
    fn peer(&self) -> String {
        self.peer.clone()
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

#[derive(Default)]
struct Net {
    now_ms: u64,
    accepts: BTreeMap<String, Rc<RefCell<VecDeque<MemConn>>>>,
    spawned: Vec<Task>,
}

struct MemListener(Rc<RefCell<VecDeque<MemConn>>>);

impl Listener for MemListener {
    type Conn = MemConn;
    async fn accept(&mut self) -> Result<MemConn, NetError> {
        poll_fn(|_| match self.0.borrow_mut().pop_front() {
            Some(c) => Poll::Ready(Ok(c)),
            None => Poll::Pending,
        })
        .await
    }
}

/// One node's view of the shared in-memory world.
#[derive(Clone)]
struct MemRt {
    net: Rc<RefCell<Net>>,
    disk: Rc<RefCell<MemDisk>>,
    rng: Rc<RefCell<u64>>,
    name: &'static str,
}

impl MemRt {
    fn new(net: &Rc<RefCell<Net>>, name: &'static str, seed: u64) -> MemRt {
        MemRt {
            net: net.clone(),
            disk: Rc::new(RefCell::new(MemDisk::new())),
            rng: Rc::new(RefCell::new(seed)),
            name,
        }
    }
}

impl Runtime for MemRt {
    type Disk = MemDisk;
    type Conn = MemConn;
    type Listener = MemListener;

    fn now_ms(&self) -> i64 {
        i64::try_from(self.net.borrow().now_ms).expect("test clock is small")
    }
    fn monotonic_ms(&self) -> u64 {
        self.net.borrow().now_ms
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        let net = self.net.clone();
        let deadline = net.borrow().now_ms + u64::try_from(duration.as_millis()).expect("short sleeps");
        poll_fn(move |_| {
            if net.borrow().now_ms >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.net.borrow_mut().spawned.push(Box::pin(task));
    }
    async fn connect(&self, addr: &str) -> Result<MemConn, NetError> {
        let queue = self.net.borrow().accepts.get(addr).cloned();
        let Some(queue) = queue else {
            return Err(NetError::Refused(addr.to_string()));
        };
        let (a, b) = (
            Rc::new(RefCell::new(Pipe::default())),
            Rc::new(RefCell::new(Pipe::default())),
        );
        queue.borrow_mut().push_back(MemConn {
            rx: a.clone(),
            tx: b.clone(),
            peer: self.name.to_string(),
        });
        Ok(MemConn {
            rx: b,
            tx: a,
            peer: addr.to_string(),
        })
    }
    async fn listen(&self, addr: &str) -> Result<MemListener, NetError> {
        let queue = Rc::new(RefCell::new(VecDeque::new()));
        self.net.borrow_mut().accepts.insert(addr.to_string(), queue.clone());
        Ok(MemListener(queue))
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.disk.borrow_mut())
    }
    fn random_u64(&self) -> u64 {
        // Distinct, well-mixed nonces per node.
        crate::seeded::splitmix64(&mut self.rng.borrow_mut())
    }
}

/// Polls `main` and every spawned task round-robin, 1 ms of clock per round, for at most
/// `rounds_max` rounds; `None` when `main` did not finish by then.
fn run<T>(net: &Rc<RefCell<Net>>, main: impl Future<Output = T>, rounds_max: u64) -> Option<T> {
    let mut main = Box::pin(main);
    let mut tasks: Vec<Task> = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..rounds_max {
        for _ in 0..4 {
            if let Poll::Ready(v) = main.as_mut().poll(&mut cx) {
                return Some(v);
            }
            let spawned = std::mem::take(&mut net.borrow_mut().spawned);
            tasks.extend(spawned);
            tasks.retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        }
        net.borrow_mut().now_ms += 1;
    }
    None
}

fn secret(fill: u8) -> ClusterSecret {
    ClusterSecret::new(&[fill; 32]).expect("32 bytes is a valid secret")
}

/// Starts coordinator `id` of the voters `peers` on its own runtime (its tasks run in `run`).
fn start_node(net: &Rc<RefCell<Net>>, id: u64, peers: &[(u64, &str)], secret: Option<ClusterSecret>) {
    let peers: Vec<(NodeId, String)> = peers.iter().map(|(i, a)| (NodeId(*i), a.to_string())).collect();
    let listen = peers.iter().find(|(i, _)| i.0 == id).expect("listed").1.clone();
    let rt = MemRt::new(net, "coordinator", 1000 + id);
    let config = CoordNodeConfig {
        id: NodeId(id),
        peers,
        listen,
        dir: "coord".into(),
        timing: CoordTiming::default(),
        secret,
        voters: None,
    };
    let node = start_coordinator(rt.clone(), config).expect("the node starts");
    rt.spawn(node);
}

fn client_config(secret: Option<ClusterSecret>) -> CoordClientConfig {
    let mut c = CoordClientConfig::new(vec!["c1".into()]);
    c.attempts_max = 5;
    c.secret = secret;
    c
}

/// A one-node coordinator with `node_secret`; what a client with `client_secret` gets from
/// opening a session and creating `/brokers`.
fn session_and_write(
    node_secret: Option<ClusterSecret>,
    client_secret: Option<ClusterSecret>,
) -> Result<(), CoordError> {
    let net = Rc::new(RefCell::new(Net::default()));
    start_node(&net, 1, &[(1, "c1")], node_secret);
    let rt = MemRt::new(&net, "client", 7);
    let main = async move {
        // Let the one-node quorum elect itself first.
        rt.sleep(Duration::from_millis(1_000)).await;
        let client = CoordClient::connect(rt.clone(), client_config(client_secret)).await?;
        client.create("/brokers", b"", CreateMode::Persistent).await?;
        let stat = client.exists("/brokers", false, true).await?;
        assert!(stat.is_some(), "a write answered Ok is readable");
        Ok(())
    };
    run(&net, main, 60_000).expect("the client finishes within 60 s of test time")
}

#[test]
fn a_client_proving_the_cluster_secret_opens_a_session_and_writes() {
    let got = session_and_write(Some(secret(1)), Some(secret(1)));
    println!("same secret: {got:?}");
    assert_eq!(got, Ok(()));
}

#[test]
fn a_client_with_a_wrong_secret_or_none_opens_no_session() {
    let wrong = session_and_write(Some(secret(1)), Some(secret(2)));
    let none = session_and_write(Some(secret(1)), None);
    println!("wrong secret: {wrong:?}; no secret: {none:?}");
    assert_eq!(wrong, Err(CoordError::Unavailable));
    assert_eq!(none, Err(CoordError::Unavailable));
}

#[test]
fn without_a_secret_anywhere_the_port_serves_as_before_and_a_client_wanting_one_refuses_it() {
    let open = session_and_write(None, None);
    let insisting = session_and_write(None, Some(secret(1)));
    println!("no secrets: {open:?}; client with a secret, coordinator without: {insisting:?}");
    assert_eq!(open, Ok(()));
    assert_eq!(insisting, Err(CoordError::Unavailable));
}

#[test]
fn an_unauthenticated_request_is_refused_unanswered_and_the_connection_closed() {
    let net = Rc::new(RefCell::new(Net::default()));
    start_node(&net, 1, &[(1, "c1")], Some(secret(1)));
    let rt = MemRt::new(&net, "raw", 9);
    let main = async move {
        rt.sleep(Duration::from_millis(1_000)).await;
        let mut conn = rt.connect("c1").await.expect("the node listens");
        let request = RequestFrame {
            request_id: 1,
            session: SessionId(0),
            request: Request::CreateSession { timeout_ms: 6_000 },
        };
        conn.send(Bytes::from(request.encode())).await.expect("sent");
        let answer = conn.recv().await.expect("no network error").expect("a refusal");
        let after = conn.recv().await.expect("no network error");
        (auth::refusal_reason(&answer), after)
    };
    let (reason, after) = run(&net, main, 10_000).expect("answered within 10 s of test time");
    println!("refusal: {reason:?}; then: {after:?}");
    assert!(reason.is_some_and(|r| r.contains("requires the cluster secret")));
    assert_eq!(after, None, "closed after the refusal");
}

/// How the raw connection that forges a Raft frame presents itself.
#[derive(Clone, Copy, Debug)]
enum Forger {
    Unauthenticated,
    WrongSecret,
    /// Ignores the coordinator's proof and sends a made-up one of its own.
    ForgedProof,
    SecretAsClient,
    SecretAsPeer,
}

/// Node 1 of a three-voter quorum (only it runs, so it never leads); the test plays node 2 at
/// `c2`, accepting node 1's peer connections (with the secret). A forger connects to node 1 and
/// sends an AppendEntries "from node 2" in term 50; returns whether node 1 answered it (an
/// AppendEntriesResponse of term 50 reaching `c2`), i.e. whether the frame was handled.
fn forged_append_handled(forger: Forger) -> bool {
    const TERM: Term = Term(50);
    let net = Rc::new(RefCell::new(Net::default()));
    let peers = [(1, "c1"), (2, "c2"), (3, "c3")];
    let fake = MemRt::new(&net, "fake-node-2", 77);
    let seen: Rc<RefCell<Vec<Message>>> = Rc::default();
    let (fake_rt, seen_in) = (fake.clone(), seen.clone());
    let main = async move {
        let mut listener = fake_rt.listen("c2").await.expect("listens");
        start_node(&fake_rt.net, 1, &peers, Some(secret(1)));
        // The fake node 2: takes node 1's connections and records the Raft messages on them.
        let (rt2, seen2) = (fake_rt.clone(), seen_in.clone());
        fake_rt.spawn(async move {
            for _ in 0..100 {
                let Ok(mut conn) = listener.accept().await else { return };
                let seen3 = seen2.clone();
                let rt3 = rt2.clone();
                rt2.spawn(async move {
                    let Ok(Some(hello)) = conn.recv().await else { return };
                    if auth::authenticate_from(&rt3, &mut conn, Some(&secret(1)), &hello).await != Ok(AuthRole::Peer) {
                        return;
                    }
                    while let Ok(Some(frame)) = conn.recv().await {
                        if let Ok((_, msg)) = wire::decode_peer(&frame) {
                            seen3.borrow_mut().push(msg);
                        }
                    }
                });
            }
        });
        let rt = MemRt::new(&fake_rt.net, "forger", 5);
        rt.sleep(Duration::from_millis(100)).await;
        let mut conn = rt.connect("c1").await.expect("node 1 listens");
        let proven = match forger {
            Forger::Unauthenticated => "none attempted".to_string(),
            Forger::WrongSecret => format!(
                "{:?}",
                auth::authenticate_to(&rt, &mut conn, &secret(2), AuthRole::Peer).await
            ),
            Forger::ForgedProof => {
                let _ = conn.send(auth::hello_frame(AuthRole::Peer, [3; 16])).await;
                let _challenge = conn.recv().await;
                let _ = conn.send(auth::proof_frame(&[0xAB; 32])).await;
                let verdict = conn.recv().await.ok().flatten();
                format!("verdict {:?}", verdict.as_deref().and_then(auth::refusal_reason))
            }
            Forger::SecretAsClient => format!(
                "{:?}",
                auth::authenticate_to(&rt, &mut conn, &secret(1), AuthRole::Client).await
            ),
            Forger::SecretAsPeer => format!(
                "{:?}",
                auth::authenticate_to(&rt, &mut conn, &secret(1), AuthRole::Peer).await
            ),
        };
        println!("{forger:?}: handshake {proven}");
        let append = Message::AppendEntries {
            term: TERM,
            prev_log_index: LogIndex(0),
            prev_log_term: Term(0),
            entries: Vec::new(),
            leader_commit: LogIndex(0),
            read_seq: 0,
        };
        let _ = conn.send(Bytes::from(wire::encode_peer(NodeId(2), &append))).await;
        // Node 1 answers at once if it handles the frame; give it ample time.
        rt.sleep(Duration::from_millis(2_000)).await;
    };
    run(&net, main, 10_000).expect("the scenario ends within 10 s of test time");
    let seen = seen.borrow();
    let answered = seen
        .iter()
        .any(|m| matches!(m, Message::AppendEntriesResponse { term, .. } if *term == TERM));
    println!(
        "{forger:?}: node 1 sent {} Raft messages to node 2; answered the forged append: {answered}",
        seen.len()
    );
    assert!(
        !seen.is_empty(),
        "node 1 reached the fake node 2 at all (else this compares nothing)"
    );
    answered
}

#[test]
fn a_raft_frame_is_handled_only_from_a_peer_proving_the_secret() {
    let forgers = [
        Forger::Unauthenticated,
        Forger::WrongSecret,
        Forger::ForgedProof,
        Forger::SecretAsClient,
        Forger::SecretAsPeer,
    ];
    let handled: Vec<(Forger, bool)> = forgers.iter().map(|f| (*f, forged_append_handled(*f))).collect();
    println!("forged AppendEntries handled: {handled:?}");
    let want: Vec<(Forger, bool)> = forgers
        .iter()
        .map(|f| (*f, matches!(f, Forger::SecretAsPeer)))
        .collect();
    assert_eq!(
        format!("{handled:?}"),
        format!("{want:?}"),
        "only a peer proving the secret is heard"
    );
}

#[test]
fn a_secret_too_short_is_refused_and_debug_never_shows_it() {
    assert!(ClusterSecret::new(b"short").is_err());
    let s = ClusterSecret::new(b"0123456789abcdef-the-secret").expect("long enough");
    let shown = format!("{s:?}");
    println!("{shown}");
    assert!(!shown.contains("the-secret"));
}
