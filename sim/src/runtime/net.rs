//! The simulated network of one run: whole frames between connection ends, with madsim's TCP
//! semantics but none of its byte-stream machinery.
//!
//! Why: every frame through madsim's `TcpStream` was copied into a write buffer, boxed as a
//! `dyn Any` message, sent through a tokio channel after a spin-locked lookup of the link (three
//! hash maps and three hash sets), pulled out by an `async_stream` generator, and copied again
//! into the reader's buffer, twice (header, then body): about a tenth of the CPU of a loaded run
//! (BENCHMARKS.md, "The simulator"). Here a frame is a `Bytes` moved into the peer's queue.
//!
//! What it keeps of madsim 0.2.34's TCP (`madsim::net::{TcpStream, TcpListener}`, `NetSim`), so
//! that runs behave as they did:
//! - `connect` waits madsim's two random delays (each a sleep of under 5 us, so 1 ms: madsim
//!   sleeps at least 1 ms), then is refused at once if the link to the destination is clogged or
//!   nothing listens there. It binds the lowest free port of the node, as madsim does.
//! - Each frame is tested against the link when sent: clogged, or its destination socket gone (a
//!   client's frames go to the server's listening socket, so they stall while the server's node
//!   is down), and it waits; else it arrives after a latency drawn from the run's range with
//!   madsim's generator. Frames arrive in order; the receiver waits for a frame's arrival with
//!   madsim's `sleep_until`, which lasts at least 1 ms, so even frames already due reach the
//!   reader 1 ms apart, as madsim's receiving stream delivered them. A frame sent while its
//!   receiver waits has the sender arm that same timer for the receiver (the receiver is woken
//!   once, at the arrival, instead of at the send to start its sleep). A frame that was sent over
//!   a clogged link is retried by its receiver after 1 ms, then after twice as long each time
//!   (up to 10 s), the latency drawn when the link is found open.
//! - A dropped end ends its peer's stream after the frames in flight (end-of-stream); frames sent
//!   to a dropped end fail (`NetError::Closed`).
//! - Killing a node ([`SimNet::reset_node`], with madsim's kill) closes its sockets: its
//!   listeners stop accepting (connections waiting in their backlog end), connects to it are
//!   refused. Its connection ends live until madsim drops the tasks that own them.
//! - Clogs are one-way and of three kinds, kept apart as madsim keeps them: a node's way in, its
//!   way out, and a link from one node to another. `World::inject` sets them.
//!
//! Dropped: a byte stream. Frames are whole, so a frame announced larger than the receiver's
//! limit is refused when it arrives rather than on its 4-byte header (no partial frames exist
//! here to wait for).
//!
//! Determinism: every draw is madsim's generator's, every wait madsim's clock; the maps are
//! ordered and only looked up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gregor_core::runtime::NetError;
use madsim::rand::distributions::{Distribution, Uniform};
use madsim::rand::{GlobalRng, Rng};
use madsim::time::TimeHandle;

use super::confined::{Confined, ConfinedGuard};
use super::timer::TimerArm;

/// The longest wait between two tests of a clogged link by a receiver (madsim's).
const CLOGGED_RETRY_MAX: Duration = Duration::from_secs(10);
/// The first such retry's wait.
const CLOGGED_RETRY_MIN: Duration = Duration::from_millis(1);

/// A node of the network, by its index in the world.
type Node = u64;

/// The network of one run, shared by the world and every node's runtime.
pub struct SimNet {
    latency: Range<Duration>,
    /// `latency` as a sampler made once: `gen_range` makes the same sampler (a division among
    /// its steps) for every frame, then draws from it as this does.
    draw: Uniform<Duration>,
    inner: Confined<Inner>,
    /// madsim's generator, looked up at the first draw: `madsim::rand::thread_rng()` clones it
    /// (an `Arc`) for every frame's latency otherwise.
    rng: Confined<Option<GlobalRng>>,
}

impl fmt::Debug for SimNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimNet").field("latency", &self.latency).finish()
    }
}

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<IpAddr, Node>,
    clogged_in: BTreeSet<Node>,
    clogged_out: BTreeSet<Node>,
    clogged_links: BTreeSet<(Node, Node)>,
    /// Listening sockets: the backlog and the id of the listener that owns it.
    listeners: BTreeMap<(Node, u16), (u64, Arc<Backlog>)>,
    /// Bound ports of each node (listeners and connecting ends), with their owner's id: a late
    /// drop from before a node's reset must not free a port its next incarnation took.
    ports: BTreeMap<Node, BTreeMap<u16, u64>>,
    next_id: u64,
}

impl Inner {
    fn clogged(&self, from: Node, to: Node) -> bool {
        self.clogged_out.contains(&from) || self.clogged_in.contains(&to) || self.clogged_links.contains(&(from, to))
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn release_port(&mut self, node: Node, port: u16, owner: u64) {
        if let Some(ports) = self.ports.get_mut(&node) {
            if ports.get(&port) == Some(&owner) {
                ports.remove(&port);
            }
        }
    }
}

/// What can clog: a node's way in or out, or the link from one node to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clog {
    In(Node),
    Out(Node),
    Link(Node, Node),
}

impl SimNet {
    /// A network whose frames take a latency drawn uniformly from `latency`.
    pub fn new(latency: Range<Duration>) -> Arc<SimNet> {
        Arc::new(SimNet {
            draw: Uniform::new(latency.start, latency.end),
            latency,
            inner: Confined::new(Inner::default()),
            rng: Confined::new(None),
        })
    }

    fn inner(&self) -> ConfinedGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Gives node `node` its address.
    pub fn add_node(&self, node: Node, ip: IpAddr) {
        self.inner().nodes.insert(ip, node);
    }

    /// Clogs (`true`) or unclogs one way in, way out or link.
    pub fn set_clog(&self, clog: Clog, clogged: bool) {
        let mut inner = self.inner();
        let changed = match (clog, clogged) {
            (Clog::In(n), true) => inner.clogged_in.insert(n),
            (Clog::In(n), false) => inner.clogged_in.remove(&n),
            (Clog::Out(n), true) => inner.clogged_out.insert(n),
            (Clog::Out(n), false) => inner.clogged_out.remove(&n),
            (Clog::Link(a, b), true) => inner.clogged_links.insert((a, b)),
            (Clog::Link(a, b), false) => inner.clogged_links.remove(&(a, b)),
        };
        tracing::debug!(target: "net", ?clog, clogged, changed, "link state");
    }

    /// Closes every socket of a killed node: its listeners (the connections waiting in their
    /// backlogs end) and its bound ports.
    pub fn reset_node(&self, node: Node) {
        let backlogs: Vec<Arc<Backlog>> = {
            let mut inner = self.inner();
            inner.ports.remove(&node);
            let keys: Vec<(Node, u16)> = inner
                .listeners
                .range((node, 0)..=(node, u16::MAX))
                .map(|(k, _)| *k)
                .collect();
            keys.iter()
                .filter_map(|k| inner.listeners.remove(k))
                .map(|(_, b)| b)
                .collect()
        };
        for backlog in backlogs {
            backlog.close();
        }
    }

    /// When a frame sent now from `from` to `to` arrives: `None` while the link is clogged or
    /// the destination socket (a listener, for a client's frames) is gone.
    fn arrival(&self, time: &TimeHandle, from: Node, to: Node, socket: Option<(Node, u16)>) -> Option<Instant> {
        self.arrival_from(time.now_instant(), from, to, socket)
    }

    /// [`arrival`](Self::arrival) for a frame sent at virtual time `now`.
    fn arrival_from(&self, now: Instant, from: Node, to: Node, socket: Option<(Node, u16)>) -> Option<Instant> {
        {
            let inner = self.inner();
            if inner.clogged(from, to) || socket.is_some_and(|s| !inner.listeners.contains_key(&s)) {
                return None;
            }
        }
        let mut rng = self.rng.lock();
        let latency = self.draw.sample(rng.get_or_insert_with(madsim::rand::thread_rng));
        Some(now + latency)
    }

    /// The node at `addr`'s IP, as seen from `from` (a loopback address is `from` itself).
    fn resolve(&self, from: Node, addr: &SocketAddr) -> Option<Node> {
        if addr.ip().is_loopback() {
            return Some(from);
        }
        self.inner().nodes.get(&addr.ip()).copied()
    }

    /// Binds a listener of node `node` at `addr` (its own IP, a loopback or unspecified one).
    pub(crate) fn listen(self: &Arc<Self>, node: Node, addr: &str) -> Result<NetListener, NetError> {
        let parsed = parse(addr)?;
        let mut inner = self.inner();
        let own = inner.nodes.get(&parsed.ip()) == Some(&node);
        if !(own || parsed.ip().is_unspecified() || parsed.ip().is_loopback()) {
            return Err(NetError::Io(format!("{addr}: invalid address: not this node's")));
        }
        let port = parsed.port();
        if port == 0 || inner.ports.get(&node).is_some_and(|p| p.contains_key(&port)) {
            return Err(NetError::Io(format!("{addr}: address already in use")));
        }
        let id = inner.id();
        let backlog = Arc::new(Backlog::default());
        inner.ports.entry(node).or_default().insert(port, id);
        inner.listeners.insert((node, port), (id, backlog.clone()));
        Ok(NetListener {
            net: self.clone(),
            node,
            port,
            id,
            backlog,
        })
    }

    /// Opens a connection from node `node` to `addr`, as madsim's `TcpStream::connect` does.
    pub(crate) async fn connect(self: &Arc<Self>, time: &TimeHandle, node: Node, addr: &str) -> Result<End, NetError> {
        let parsed = parse(addr)?;
        for _ in 0..2 {
            let delay = Duration::from_micros(madsim::rand::thread_rng().gen_range(0..5));
            time.sleep(delay).await;
        }
        let refused = || NetError::Refused(addr.to_string());
        let server = self.resolve(node, &parsed).ok_or_else(refused)?;
        let socket = (server, parsed.port());
        if self.arrival(time, node, server, Some(socket)).is_none() {
            return Err(refused());
        }
        let (client_end, server_end) = {
            let mut inner = self.inner();
            let backlog = inner
                .listeners
                .get(&socket)
                .map(|(_, b)| b.clone())
                .ok_or_else(refused)?;
            let id = inner.id();
            let ports = inner.ports.entry(node).or_default();
            let port = (1..=u16::MAX)
                .find(|p| !ports.contains_key(p))
                .ok_or_else(|| NetError::Io(format!("{addr}: no free ephemeral port")))?;
            ports.insert(port, id);
            let ip = inner
                .nodes
                .iter()
                .find(|&(_, &n)| n == node)
                .map(|(ip, _)| *ip)
                .ok_or_else(|| NetError::Io(format!("node {node} has no address")))?;
            let to_server = Arc::new(Pipe::default());
            let to_client = Arc::new(Pipe::default());
            let client_end = End {
                net: self.clone(),
                timers: TimerArm::new(time),
                me: node,
                peer: server,
                out: to_server.clone(),
                incoming: to_client.clone(),
                out_socket: Some(socket),
                in_socket: None,
                bound: Some((port, id)),
            };
            let server_end = End {
                net: self.clone(),
                timers: TimerArm::new(time),
                me: server,
                peer: node,
                out: to_client,
                incoming: to_server,
                out_socket: None,
                in_socket: Some(socket),
                bound: None,
            };
            (client_end, (server_end, SocketAddr::new(ip, port), backlog))
        };
        let (server_end, from, backlog) = server_end;
        backlog.push(server_end, from);
        Ok(client_end)
    }
}

fn parse(addr: &str) -> Result<SocketAddr, NetError> {
    addr.parse()
        .map_err(|_| NetError::Io(format!("{addr}: could not resolve to any addresses")))
}

/// Connections a listener has not accepted yet.
#[derive(Default)]
pub(crate) struct Backlog {
    state: Confined<BacklogState>,
}

#[derive(Default)]
struct BacklogState {
    waiting: VecDeque<(End, SocketAddr)>,
    waker: Option<Waker>,
    closed: bool,
}

impl Backlog {
    fn state(&self) -> ConfinedGuard<'_, BacklogState> {
        self.state.lock()
    }

    /// Queues a new connection's server end; a closed backlog drops it (outside the lock: the
    /// drop ends the client's stream), as a dying server resets the connection.
    fn push(&self, end: End, from: SocketAddr) {
        let (refused, waker) = {
            let mut state = self.state();
            if state.closed {
                (Some(end), None)
            } else {
                state.waiting.push_back((end, from));
                (None, state.waker.take())
            }
        };
        drop(refused);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn close(&self) {
        let (waiting, waker) = {
            let mut state = self.state();
            state.closed = true;
            (std::mem::take(&mut state.waiting), state.waker.take())
        };
        drop(waiting);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A bound listening socket; closes when dropped.
pub(crate) struct NetListener {
    net: Arc<SimNet>,
    node: Node,
    port: u16,
    id: u64,
    backlog: Arc<Backlog>,
}

impl fmt::Debug for NetListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetListener")
            .field("node", &self.node)
            .field("port", &self.port)
            .finish()
    }
}

impl NetListener {
    /// The next connection and the address it came from; an error once the node was reset.
    pub(crate) async fn accept(&self) -> Result<(End, SocketAddr), NetError> {
        std::future::poll_fn(|cx| {
            let mut state = self.backlog.state();
            if let Some(next) = state.waiting.pop_front() {
                return Poll::Ready(Ok(next));
            }
            if state.closed {
                return Poll::Ready(Err(NetError::Io("listener closed: its node was reset".to_string())));
            }
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl Drop for NetListener {
    fn drop(&mut self) {
        {
            let mut inner = self.net.inner();
            if inner
                .listeners
                .get(&(self.node, self.port))
                .is_some_and(|(id, _)| *id == self.id)
            {
                inner.listeners.remove(&(self.node, self.port));
            }
            inner.release_port(self.node, self.port, self.id);
        }
        self.backlog.close();
    }
}

/// One direction of a connection: frames in order, each with its arrival (`None`: sent over a
/// clogged link, to be retried by the receiver).
#[derive(Default)]
struct Pipe {
    state: Confined<PipeState>,
}

#[derive(Default)]
struct PipeState {
    frames: VecDeque<(Option<Instant>, Bytes)>,
    /// The receiver's, while it waits for a frame.
    waker: Option<Waker>,
    /// The front frame was sent while the receiver waited, and its sender armed the receiver's
    /// wake-up for the frame's arrival (see [`End::send`]): the receiver takes it when woken.
    announced: bool,
    sender_gone: bool,
    receiver_gone: bool,
}

impl Pipe {
    fn state(&self) -> ConfinedGuard<'_, PipeState> {
        self.state.lock()
    }
}

/// One end of a connection.
pub(crate) struct End {
    net: Arc<SimNet>,
    /// madsim's clock, and the `Sleep` that arms a waiting receiver's wake-up (see `send`).
    timers: TimerArm,
    me: Node,
    peer: Node,
    out: Arc<Pipe>,
    incoming: Arc<Pipe>,
    /// The socket this end's frames go to when it is a listener's (the client end's).
    out_socket: Option<(Node, u16)>,
    /// The listener whose socket receives the frames coming to this end (the server end's).
    in_socket: Option<(Node, u16)>,
    /// The port this end bound, with its owner id (the client end's).
    bound: Option<(u16, u64)>,
}

impl fmt::Debug for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("End")
            .field("me", &self.me)
            .field("peer", &self.peer)
            .finish()
    }
}

impl End {
    /// Queues `frame` for the peer; `NetError::Closed` if the peer's end is gone.
    pub(crate) fn send(&self, frame: Bytes) -> Result<(), NetError> {
        let now = self.timers.now();
        let arrival = self.net.arrival_from(now, self.me, self.peer, self.out_socket);
        let waker = {
            let mut state = self.out.state();
            if state.receiver_gone {
                return Err(NetError::Closed);
            }
            state.frames.push_back((arrival, frame));
            let waker = state.waker.take();
            if waker.is_some() && arrival.is_some() {
                // A waiting receiver has no frame before this one: it is the front.
                state.announced = true;
            }
            waker
        };
        match (waker, arrival) {
            // The receiver waits for this frame: wake it when the frame arrives rather than now,
            // when it would only start a sleep until then (one task poll a frame instead of two).
            // The timer's deadline is the one the receiver's own `sleep_until(at)` would have had:
            // at least 1 ms away.
            (Some(waker), Some(at)) => {
                if self.timers.arm(TimerArm::deadline_at(now, at), &waker).is_ready() {
                    waker.wake();
                }
            }
            (Some(waker), None) => waker.wake(),
            (None, _) => {}
        }
        Ok(())
    }

    /// The next frame, once it arrived; `None` at end-of-stream. Cancel-safe: a frame leaves the
    /// queue only when returned.
    pub(crate) fn recv(&self) -> Recv<'_> {
        Recv {
            end: self,
            stage: RecvStage::Front,
        }
    }

    /// The front of the incoming queue: a frame taken (it was announced and has arrived), the
    /// arrival of a frame not taken yet (`None`: over a clogged link), or end-of-stream; pending,
    /// with the receiver's waker kept, while the queue is empty.
    fn poll_front(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Option<Instant>>>> {
        let mut state = self.incoming.state();
        match state.frames.front() {
            // Woken at its arrival by the sender (see `send`).
            Some(&(Some(at), _)) if state.announced && self.timers.now() >= at => {
                state.announced = false;
                Poll::Ready(state.frames.pop_front().map(|(_, frame)| Ok(frame)))
            }
            Some(&(arrival, _)) => Poll::Ready(Some(Err(arrival))),
            None if state.sender_gone => Poll::Ready(None),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// [`End::recv`]'s future, written out by hand: it was an `async fn` around a `poll_fn` inside
/// `SimConnection::recv`'s own, and each of a seed's ~100,000 frames went through all three
/// state machines twice (its receiver always waits first). The stages and the timers are the
/// ones the `async fn` had, in the same order: a sleep's timer is armed with the deadline
/// `TimeHandle::sleep`/`sleep_until` would have given, at every poll that finds it pending, as
/// madsim's `Sleep` does (so madsim's heap sees the same pushes and runs stay identical).
pub(crate) struct Recv<'a> {
    end: &'a End,
    stage: RecvStage,
}

enum RecvStage {
    /// Looking at the front of the queue.
    Front,
    /// Sleeping until this deadline (a frame's arrival, at least 1 ms away), then taking the
    /// front frame.
    Arrival(Instant),
    /// Over a clogged link: sleeping until this deadline, then asking the network again; the
    /// next sleep is twice as long (up to `CLOGGED_RETRY_MAX`).
    Clogged { deadline: Instant, backoff: Duration },
}

impl Future for Recv<'_> {
    type Output = Option<Bytes>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let end = self.end;
        loop {
            match self.stage {
                RecvStage::Front => {
                    let arrival = match ready!(end.poll_front(cx)) {
                        None => return Poll::Ready(None),
                        Some(Ok(frame)) => return Poll::Ready(Some(frame)),
                        Some(Err(arrival)) => arrival,
                    };
                    let now = end.timers.now();
                    self.stage = match arrival {
                        Some(at) => RecvStage::Arrival(TimerArm::deadline_at(now, at)),
                        None => RecvStage::Clogged {
                            deadline: TimerArm::deadline_after(now, CLOGGED_RETRY_MIN),
                            backoff: CLOGGED_RETRY_MIN,
                        },
                    };
                }
                RecvStage::Arrival(deadline) => {
                    ready!(end.timers.arm(deadline, cx.waker()));
                    let mut state = end.incoming.state();
                    if let Some((_, frame)) = state.frames.pop_front() {
                        state.announced = false;
                        return Poll::Ready(Some(frame));
                    }
                    self.stage = RecvStage::Front;
                }
                RecvStage::Clogged { deadline, backoff } => {
                    ready!(end.timers.arm(deadline, cx.waker()));
                    let backoff = (backoff * 2).min(CLOGGED_RETRY_MAX);
                    let now = end.timers.now();
                    self.stage = match end.net.arrival(end.timers.time(), end.peer, end.me, end.in_socket) {
                        Some(at) => {
                            if let Some(first) = end.incoming.state().frames.front_mut() {
                                first.0 = Some(at);
                            }
                            RecvStage::Arrival(TimerArm::deadline_at(now, at))
                        }
                        None => RecvStage::Clogged {
                            deadline: TimerArm::deadline_after(now, backoff),
                            backoff,
                        },
                    };
                }
            }
        }
    }
}

impl Drop for End {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.out.state();
            state.sender_gone = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        {
            let mut state = self.incoming.state();
            state.receiver_gone = true;
            state.frames.clear();
            state.waker = None;
        }
        if let Some((port, id)) = self.bound {
            self.net.inner().release_port(self.me, port, id);
        }
    }
}
